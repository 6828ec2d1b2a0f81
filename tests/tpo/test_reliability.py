"""tpo_batch keeps every other query when one fails, writes strict JSON, and resumes with or
without retrying the failures; the reward model's tokenizer truncates chosen/rejected texts by
default; PromptSet.from_official reads a checkout of the official repository."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from icml25.llm import BatchFailed, CallableChat, CallableReward, ItemError, ScriptedChat
from icml25.tpo import PromptSet, TPOConfig, tpo_batch, tpo_optimize

P = PromptSet.default()


def policy(messages, *, n=1, sample_index=0, **kw):
    role = P.detect_role(list(messages))
    if role == "generate":
        q = messages[-1]["content"]
        if "poison" in q:
            raise ValueError("HTTP 400: context length exceeded")
        return f"draft for {q} #{sample_index}"
    if role in ("loss", "gradient"):
        return "make it longer"
    chosen = P.parse_update(list(messages))["chosen"]
    return f"{P.start_tag}{chosen} and more{P.end_tag}"


def test_one_failing_query_loses_nothing_else_and_resumes(tmp_path):
    calls: list[str] = []

    def counting(messages, **kw):
        if P.detect_role(list(messages)) == "generate":
            calls.append(messages[-1]["content"])
        return policy(messages, **kw)

    qs = ["q0", "q1 poison", "q2", "q3"]
    out = tmp_path / "r.jsonl"
    reward = CallableReward(lambda q, r: float(len(r)))
    cfg = TPOConfig(width=2, depth=1)
    with pytest.raises(BatchFailed, match="1 failed") as err:
        tpo_batch(qs, CallableChat(counting), reward, cfg, num_threads=2, out_path=out)
    assert [r is None for r in err.value.results] == [False, True, False, False]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["index"] for r in rows if "result" in r) == [0, 2, 3]
    (bad,) = [r for r in rows if "error" in r]
    assert bad["index"] == 1 and bad["query"] == "q1 poison"
    assert bad["error"] == {"type": "ValueError", "message": "HTTP 400: context length exceeded"}
    calls.clear()
    res = tpo_batch(qs, CallableChat(counting), reward, cfg, out_path=out, errors="return")
    assert calls == []  # done rows skipped, the error row not retried
    assert isinstance(res[1], ItemError) and res[1].error_type == "ValueError"
    assert res[0].best_response.endswith("and more")
    tpo_batch(
        qs, CallableChat(counting), reward, cfg, out_path=out, errors="return", retry_errors=True
    )
    assert calls == ["q1 poison"]  # only the failure is retried


def test_results_file_is_strict_json_when_every_reward_is_nan(tmp_path):
    out = tmp_path / "r.jsonl"
    nan = CallableReward(lambda q, r: float("nan"))
    (res,) = tpo_batch(["q"], CallableChat(policy), nan, TPOConfig(width=2, depth=1), out_path=out)
    assert res.best_reward == -math.inf
    line = out.read_text().splitlines()[0]
    rec = json.loads(line, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert rec["result"]["best_reward"] is None
    (again,) = tpo_batch(
        ["q"], CallableChat(policy), nan, TPOConfig(width=2, depth=1), out_path=out
    )
    assert again.best_reward == -math.inf and all(e.reward == -math.inf for e in again.cache)


class TruncatingReward(CallableReward):
    """A reward model with a tokenizer: ``truncate`` keeps the first n words."""

    def truncate(self, text: str, n_tokens: int) -> str:
        return " ".join(text.split(" ")[:n_tokens])


def test_chosen_and_rejected_are_truncated_by_the_reward_models_tokenizer_by_default():
    long = " ".join(f"w{i}" for i in range(30))
    chat = ScriptedChat(
        [long, "short one", "critique", "advice", f"{P.start_tag}new{P.end_tag}", "x"]
    )
    reward = TruncatingReward(lambda q, r: float(len(r)))
    res = tpo_optimize("q", chat, reward, TPOConfig(width=2, depth=1, truncate_tokens=5))
    assert res.iterations[0].chosen == "w0 w1 w2 w3 w4"  # cut to 5 "tokens"
    loss_user = chat.calls[1]["messages"][-1]["content"]
    assert loss_user == "w0 w1 w2 w3 w4"
    assert res.best_response == long  # the output itself is never truncated
    chat2 = ScriptedChat([long, "short one", "c", "a", f"{P.start_tag}new{P.end_tag}", "x"])
    off = tpo_optimize("q", chat2, reward, TPOConfig(width=2, depth=1, truncate_tokens=None))
    assert off.iterations[0].chosen == long


def _mirror_checkout(root):
    """A tree with the official repository's layout and constant shapes (our own strings)."""
    tg = root / "textgrad-main" / "textgrad"
    for sub in ("autograd", "optimizer", "engine"):
        (tg / sub).mkdir(parents=True)
    (root / "tpo_utils.py").write_text(
        textwrap.dedent(
            '''
            EVALUATION_SYS_TEMPLATE = """Judge it.
            Q: {query}
            Worse: {rejected_response}
            Next comes the better one."""
            EVALUATION_SYS_TEMPLATE_REVISION = """Judge it.
            Q: {query}
            Next comes the answer."""

            def run_test_time_training_tpo(query, tpo_mode="tpo"):
                response_role = ("role R" if tpo_mode == "revision" else "role T")
                constraints = (["Only R."] if tpo_mode == "revision" else ["Only T.", "Not W."])
            '''
        )
    )
    (tg / "autograd" / "llm_backward_prompts.py").write_text(
        textwrap.dedent(
            """
            GLOSS = "<ROLE> tags."
            BACKWARD_SYSTEM_PROMPT = (f"You give feedback. {GLOSS}")
            CONVERSATION_TEMPLATE = (
                "<LM_SYSTEM_PROMPT> {system_prompt} </LM_SYSTEM_PROMPT>\\n\\n"
                "<LM_INPUT> {prompt} </LM_INPUT>\\n\\n"
                "<LM_OUTPUT> {response_value} </LM_OUTPUT>\\n\\n"
            )
            CONVERSATION_START_INSTRUCTION_BASE = "Role <ROLE> {variable_desc} </ROLE>. {conversation}"
            OBJECTIVE_INSTRUCTION_BASE = "Objective.\\n"
            EVALUATE_VARIABLE_INSTRUCTION = "Span <VARIABLE> {variable_short} </VARIABLE> of {variable_desc}."
            """
        )
    )
    (tg / "optimizer" / "optimizer_prompts.py").write_text(
        textwrap.dedent(
            """
            OPTIMIZER_SYSTEM_PROMPT = (f"Improve; answer in {{new_variable_start_tag}}x{{new_variable_end_tag}}.")
            GRADIENT_TEMPLATE = "<CONVERSATION>{context}</CONVERSATION> {response_desc} <FEEDBACK>{feedback}</FEEDBACK>"
            TGD_PROMPT_PREFIX = "<ROLE>{variable_desc}</ROLE> <VARIABLE> {variable_short} </VARIABLE> {variable_grad}"
            CONSTRAINT_PROMPT_ADDITION = "<CONSTRAINTS>{constraint_text}</CONSTRAINTS>"
            TGD_PROMPT_SUFFIX = " Use {new_variable_start_tag}...{new_variable_end_tag}."
            """
        )
    )
    (tg / "defaults.py").write_text('VARIABLE_OUTPUT_DEFAULT_ROLE = "the output"\n')
    (tg / "engine" / "openai.py").write_text(
        'class Other:\n    DEFAULT_SYSTEM_PROMPT = "no"\n\n'
        'class VllmServer:\n    DEFAULT_SYSTEM_PROMPT = "Be a smart assistant."\n'
    )


def test_from_official_reads_a_checkout_without_running_it(tmp_path):
    _mirror_checkout(tmp_path)
    p = PromptSet.from_official(tmp_path)
    assert p.generation_system == "Be a smart assistant."
    assert p.constraints_tpo == ("Only T.", "Not W.") and p.constraints_revision == ("Only R.",)
    assert p.role_tpo == "role T" and p.role_revision == "role R"
    assert p.backward_system == "You give feedback. <ROLE> tags."
    assert p.optimizer_system == f"Improve; answer in {p.start_tag}x{p.end_tag}."
    q, chosen, rej = "a {query} with braces", "the chosen", "the rejected"
    loss = p.loss_messages(q, chosen, rej)
    assert loss[0]["content"] == f"Judge it.\nQ: {q}\nWorse: {rej}\nNext comes the better one."
    assert p.detect_role(loss) == "loss" and p.parse_loss(loss)["rejected"] == rej
    assert p.parse_loss(p.loss_messages(q, chosen, None))["rejected"] is None
    grad = p.gradient_messages(q, chosen, rej, "crit")
    assert p.detect_role(grad) == "gradient" and p.parse_gradient(grad)["critique"] == "crit"
    upd = p.update_messages(q, chosen, rej, "crit", "do X")
    assert p.detect_role(upd) == "update"
    assert (
        "<CONSTRAINTS>Constraint 1: Only T.\nConstraint 2: Not W.</CONSTRAINTS>"
        in upd[1]["content"]
    )
    assert p.parse_update(upd)["gradient"] == "do X"
    (tmp_path / "tpo_utils.py").unlink()
    with pytest.raises(FileNotFoundError, match="missing .*tpo_utils.py"):
        PromptSet.from_official(tmp_path)


def test_from_official_on_a_real_checkout_matches_textgrad(tmp_path):
    """Runs where ICML25_TPO_CHECKOUT points at a checkout of yafuly/TPO and textgrad is
    installed: the official prompts are TextGrad's plus TPO's loss, roles and constraints."""
    import os

    root = os.environ.get("ICML25_TPO_CHECKOUT")
    if not root:
        pytest.skip("set ICML25_TPO_CHECKOUT to a checkout of yafuly/TPO")
    pytest.importorskip("textgrad")
    official = PromptSet.from_official(root)
    tg = PromptSet.from_textgrad(loss_template=official.loss_template)
    for name in ("backward_system", "optimizer_system", "response_desc", "textgrad"):
        assert getattr(official, name) == getattr(tg, name)


def test_wrong_roles_and_bad_config_fields_name_what_is_expected():
    reward = CallableReward(lambda q, r: 0.0)
    with pytest.raises(TypeError, match="wrap a function in icml25.llm.CallableChat"):
        tpo_optimize("q", lambda m, **k: "x", reward)
    with pytest.raises(TypeError, match="wrap a function in icml25.llm.CallableReward"):
        tpo_optimize("q", CallableChat(policy), lambda q, r: 0.0)
    for field, value in (
        ("max_tokens_response", 0),
        ("max_tokens_feedback", -5),
        ("truncate_tokens", 0),
        ("top_p", 1.5),
        ("temperature", -1.0),
    ):
        with pytest.raises(ValueError, match=f"TPOConfig.{field} must be"):
            TPOConfig(**{field: value}).validate()
