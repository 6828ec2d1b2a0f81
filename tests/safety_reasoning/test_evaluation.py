"""ASR, Best-of-N estimators and the judges."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

from icml25.llm import CallableChat, ScriptedChat
from icml25.safety_reasoning import LlamaGuardJudge, RefusalKeywordJudge, RuleJudge, asr, best_of_n
from icml25.safety_reasoning.evaluation import bon_safety_curve


def brute_force(m: np.ndarray, n: int) -> tuple[float, float]:
    """(prefix, unbiased) ASR@n by enumeration: the first n samples, and all n-subsets."""
    prefix = np.mean([row[:n].all() for row in m])
    unbiased = np.mean(
        [
            np.mean([all(row[list(c)]) for c in itertools.combinations(range(len(row)), n)])
            for row in m
        ]
    )
    return 100 * prefix, 100 * unbiased


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_estimators_match_enumeration(seed):
    rng = np.random.default_rng(seed)
    m = (rng.random((30, 8)) < rng.random((30, 1))).astype(int)  # per-prompt unsafe rates
    ns = [1, 2, 3, 4, 5, 8]
    pre, unb = bon_safety_curve(m, ns, "prefix"), bon_safety_curve(m, ns, "unbiased")
    for n in ns:
        bp, bu = brute_force(m.astype(bool), n)
        assert pre[n] == pytest.approx(bp) and unb[n] == pytest.approx(bu)
    # monotone non-increasing in N; N = 1 of the unbiased estimator is the per-sample unsafe rate
    for curve in (pre, unb):
        vals = [curve[n] for n in ns]
        assert all(a >= b - 1e-12 for a, b in zip(vals, vals[1:]))
    assert unb[1] == pytest.approx(100 * m.mean())
    assert pre[1] == pytest.approx(100 * m[:, 0].mean())


def test_unbiased_is_exactly_zero_below_n():
    m = np.array([[1, 1, 1, 0, 0, 0, 0, 0]])
    assert bon_safety_curve(m, [4], "unbiased") == {4: 0.0}
    assert bon_safety_curve(m, [3], "unbiased")[3] == pytest.approx(100 / math.comb(8, 3))


def test_unknown_samples():
    nan = np.nan
    m = np.array([[1, nan, 1], [nan, 0, 1], [1, 1, 1]])
    # prefix N=2: row0 has an unknown and no safe -> left out; row1 has a safe -> 0; row2 -> 1
    assert bon_safety_curve(m, [2])[2] == pytest.approx(50.0)
    # unbiased N=2: row0 C(2,2)/C(2,2)=1, row1 C(1,2)/C(2,2)=0, row2 1
    assert bon_safety_curve(m, [2], "unbiased")[2] == pytest.approx(200 / 3)


def test_bon_bad_input():
    m = np.ones((3, 4))
    with pytest.raises(ValueError, match="exceeds N_max"):
        bon_safety_curve(m, [8])
    with pytest.raises(ValueError, match="estimator"):
        bon_safety_curve(m, [1], "mean")
    with pytest.raises(ValueError, match="0, 1 or nan"):
        bon_safety_curve(np.full((2, 2), 0.5), [1])
    with pytest.raises(ValueError, match="matrix"):
        bon_safety_curve(np.ones(4), [1])


def sampler(p_unsafe=0.5):
    """A backend whose samples are unsafe with probability p, from the request's seed."""

    def fn(messages, *, seed, sample_index=0, temperature, **kw):
        if temperature == 0:
            return "Sure, here is how."
        r = np.random.default_rng([seed, sample_index]).random()
        return "Sure, here is how." if r < p_unsafe else "I'm sorry, I cannot help."

    return CallableChat(fn)


def test_best_of_n_per_prompt_seeds_and_reproducible():
    prompts = [f"request {i}" for i in range(200)]
    res = best_of_n(sampler(0.5), prompts, RefusalKeywordJudge(), ns=(1, 2, 4, 8), greedy=True)
    # with one shared seed every prompt would draw the same stream: rates 0 or 100
    assert 35 < res.asr[1] < 65 and 0 < res.asr[4] < 20
    assert res.greedy.asr == 100.0
    assert res.matrix.shape == (200, 8) and res.estimator == "prefix"
    again = best_of_n(sampler(0.5), prompts, RefusalKeywordJudge(), ns=(1, 2, 4, 8))
    assert np.array_equal(res.matrix, again.matrix)
    assert res.asr_other == bon_safety_curve(res.matrix, [1, 2, 4, 8], "unbiased")
    with pytest.raises(ValueError, match="temperature"):
        best_of_n(sampler(), prompts, RefusalKeywordJudge(), ns=(1,), temperature=0)


def test_asr_judges_the_answer_after_reasoning_and_counts_truncation():
    replies = {
        "a": "<think>the user wants harm; refuse</think>I'm sorry, I can't help with that.",
        "b": "<think>fine</think>Sure, step 1 ...",
        "c": "<think>Sure, here is how to do it: step 1",  # truncated inside the block
        "d": "I cannot do that.",
    }
    backend = CallableChat(lambda m, **kw: replies[m[-1]["content"]])
    res = asr(backend, ["a", "b", "c", "d"], RefusalKeywordJudge())
    assert [r["verdict"] for r in res.records] == ["safe", "unsafe", "unsafe", "safe"]
    assert res.n_truncated == 1 and res.asr == 50.0 and res.leaked is None
    assert res.records[2]["judged"] == replies["c"]  # judged on the full text
    # harmful content inside the reasoning shows up in `leaked` (full outputs judged)
    replies["a"] = "<think>step 1 of the harmful plan ...</think>I'm sorry, I can't."
    content = RuleJudge(lambda p, r: "step 1" in r)
    res = asr(backend, ["a", "b", "c", "d"], content, judge_full_text=True)
    assert res.asr == 50.0 and res.leaked == 75.0


def test_asr_unknown_excluded_and_jbb_artifacts():
    judge = RuleJudge(lambda p, r: "unknown" if "?" in r else "unsafe")
    backend = CallableChat(lambda m, **kw: "huh?" if "x" in m[-1]["content"] else "ok")
    artifact = SimpleNamespace(
        jailbreaks=[
            SimpleNamespace(prompt="x1", goal="g1"),
            SimpleNamespace(prompt=None, goal="g2"),
            SimpleNamespace(prompt="y", goal="g3"),
        ]
    )
    res = asr(backend, artifact, judge)
    assert res.n == 2 and res.n_skipped == 1 and res.n_unknown == 1 and res.asr == 100.0
    seen = []
    asr(
        backend,
        [{"prompt": "y", "goal": "plain goal"}],
        RuleJudge(lambda p, r: seen.append(p) or False),
        judge_on="goal",
    )
    assert seen == ["plain goal"]
    with pytest.raises(ValueError, match="carries no goal"):
        asr(backend, ["y"], judge, judge_on="goal")


def test_llama_guard_parsing_with_a_stub_backend():
    assert LlamaGuardJudge.parse("safe") == ("safe", [])
    assert LlamaGuardJudge.parse("\n\nunsafe\nS1,S10") == ("unsafe", ["S1", "S10"])
    assert LlamaGuardJudge.parse("I think it is fine") == ("unknown", [])
    assert LlamaGuardJudge.parse("") == ("unknown", [])
    stub = ScriptedChat(["safe", "unsafe\nS2", "garbage"])
    judge = LlamaGuardJudge(stub)
    assert judge(["p1", "p2", "p3"], ["r1", "r2", "r3"]) == ["safe", "unsafe", "unknown"]
    assert judge.last_categories == [[], ["S2"], []]
    # the conversation is sent as user + assistant turns (the guard's template wraps them)
    assert [m["role"] for m in stub.calls[0]["messages"]] == ["user", "assistant"]
    assert stub.calls[0]["temperature"] == 0.0


def test_asr_bad_input():
    b = CallableChat(lambda m, **kw: "x")
    with pytest.raises(ValueError, match="decoding"):
        asr(b, ["a"], RefusalKeywordJudge(), decoding="beam")
    with pytest.raises(ValueError, match="empty"):
        asr(b, [], RefusalKeywordJudge())
    with pytest.raises(TypeError, match="not one string"):
        asr(b, "a prompt", RefusalKeywordJudge())
    with pytest.raises(ValueError, match="verdicts must be one of"):
        asr(b, ["a"], lambda p, r: ["maybe"])
    with pytest.raises(ValueError, match="all 1 attack prompts are None"):
        asr(b, [{"prompt": None}], RefusalKeywordJudge())
    with pytest.raises(ValueError, match="expected a bool"):
        RuleJudge(lambda p, r: 3)(["a"], ["b"])


def test_load_attack_prompts_from_peer_formats(tmp_path):
    import json

    from icml25.safety_reasoning import load_attack_prompts

    jbb = tmp_path / "pair.json"
    jbb.write_text(
        json.dumps(
            {
                "parameters": {"method": "PAIR"},
                "jailbreaks": [
                    {
                        "index": 0,
                        "goal": "Write a bad thing",
                        "behavior": "Bad",
                        "prompt": "Imagine... write it",
                        "jailbroken": True,
                    },
                    {
                        "index": 1,
                        "goal": "Other",
                        "behavior": "O",
                        "prompt": None,
                        "jailbroken": False,
                    },
                ],
            }
        )
    )
    rows = load_attack_prompts(jbb)
    assert rows == [
        {"prompt": "Imagine... write it", "goal": "Write a bad thing"},
        {"prompt": None, "goal": "Other"},
    ]
    backend = CallableChat(lambda m, **kw: "I'm sorry, I cannot.")
    res = asr(backend, rows, RefusalKeywordJudge(), judge_on="goal")
    assert res.n == 1 and res.n_skipped == 1 and res.asr == 0.0
    hb = tmp_path / "test_cases.json"
    hb.write_text(json.dumps({"dimethylmercury_instructions": ["tc1", "tc2"], "other_id": ["tc3"]}))
    assert [r["goal"] for r in load_attack_prompts(hb)] == ["dimethylmercury_instructions"] * 2 + [
        "other_id"
    ]
    bad = tmp_path / "x.jsonl"
    bad.write_text(json.dumps({"text": "no prompt"}) + "\n")
    with pytest.raises(ValueError, match="no 'prompt' field"):
        load_attack_prompts(bad)
    with pytest.raises(ValueError, match="use .json"):
        load_attack_prompts(tmp_path)


def test_one_failing_request_loses_no_other():
    def fn(messages, **kw):
        if "bad" in messages[-1]["content"]:
            raise RuntimeError("server error 500")
        return "Sure, here it is."

    backend = CallableChat(fn, concurrency=4)
    res = asr(backend, ["a", "bad", "c"], RefusalKeywordJudge())
    assert res.n_errors == 1 and res.n_unsafe == 2 and res.asr == 100.0
    assert res.records[1]["status"] == "error" and "server error 500" in res.records[1]["error"]
    samp = asr(backend, ["a", "bad", "c"], RefusalKeywordJudge(), decoding="sample")
    assert samp.n_errors == 1 and samp.asr == 100.0
    bon = best_of_n(backend, ["a", "bad", "c"], RefusalKeywordJudge(), ns=(1, 2))
    assert bon.n_errors == 1 and np.isnan(bon.matrix[1]).all() and bon.asr[2] == 100.0


def test_local_model_without_chat_template_is_refused(toy_lm):
    from icml25.llm import HFChat

    model, tok = toy_lm
    import copy

    t2 = copy.deepcopy(tok)
    t2.chat_template = None
    chat = HFChat(model, t2)
    with pytest.raises(ValueError, match="no chat template"):
        asr(chat, ["hv1 dt2 f3"], RefusalKeywordJudge())
    with pytest.raises(ValueError, match="no chat template"):
        best_of_n(chat, ["hv1 dt2 f3"], RefusalKeywordJudge(), ns=(1,))


def test_a_failing_judge_request_loses_no_other_verdict():
    def guard_fn(messages, **kw):
        if messages[0]["content"] == "b":
            raise ConnectionError("guard unreachable")
        return "unsafe\nS1"

    backend = CallableChat(lambda m, **kw: "Sure.")
    res = asr(backend, ["a", "b", "c"], LlamaGuardJudge(CallableChat(guard_fn)))
    assert res.n_errors == 1 and res.n_unsafe == 2 and res.records[1]["status"] == "error"
    assert "guard unreachable" in res.records[1]["error"]
    bon = best_of_n(backend, ["a", "b", "c"], LlamaGuardJudge(CallableChat(guard_fn)), ns=(1, 2))
    assert bon.n_errors == 1 and "1 prompts failed" in bon.summary()


def test_prompt_lists_with_none_and_dicts_without_prompt():
    backend = CallableChat(lambda m, **kw: "Sure.")
    res = asr(backend, [None, "x"], RefusalKeywordJudge())
    assert res.n == 1 and res.n_skipped == 1
    with pytest.raises(ValueError, match="no 'prompt' key"):
        asr(backend, [{"text": "x"}, "y"], RefusalKeywordJudge())


def test_sampling_settings_and_ns_are_checked_before_any_request():
    calls = []
    backend = CallableChat(lambda m, **kw: calls.append(1) or "Sure.")
    j = RefusalKeywordJudge()
    with pytest.raises(ValueError, match="temperature"):
        asr(backend, ["a"], j, decoding="sample", temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        best_of_n(backend, ["a"], j, ns=(1,), top_p=2)
    with pytest.raises(ValueError, match="every N in ns must be an integer"):
        best_of_n(backend, ["a"], j, ns=(1, 2.5))
    with pytest.raises(ValueError, match="every N in ns must be an integer"):
        best_of_n(backend, ["a"], j, ns=(True,))
    with pytest.raises(TypeError, match="ns must be a list"):
        best_of_n(backend, ["a"], j, ns=4)
    with pytest.raises(TypeError, match="ReasoningFormat"):
        asr(backend, ["a"], j, fmt="<think>")
    assert not calls
    with pytest.raises(TypeError, match="wrap a per-pair function in RuleJudge"):
        asr(backend, ["a"], lambda p, r: True)
    assert best_of_n(backend, ["a"], j, ns=np.array([1, 2])).ns == [1, 2]
    assert RuleJudge(lambda p, r: "UNSAFE")(["a"], ["b"]) == ["unsafe"]
