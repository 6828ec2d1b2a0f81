"""TPO's loop, prompts and cost accounting with a scripted backend (paper 16, tests 1-5, 11)."""

from __future__ import annotations

import math
import random

import pytest

from icml25.llm import CallableReward, ScriptedChat
from icml25.tpo import PromptSet, TPOConfig, best_of_n, tpo_optimize
from icml25.tpo.prompts import extract_tagged, short_value

P = PromptSet.default()


class Policy:
    """A scripted policy: answers each role from the parsed prompt; update outputs carry the tags."""

    def __init__(self, drop_every: int = 0):
        self.k = 0
        self.drop_every = drop_every

    def __call__(self, messages, *, n, sample_index=0, **kw):
        role = P.detect_role(list(messages))
        self.k += 1
        if role == "generate":
            return f"answer {self.k}"
        if role == "loss":
            return "critique: chosen is better"
        if role == "gradient":
            return "gradient: be more specific"
        if self.drop_every and sample_index % self.drop_every == 0:
            return "no tags here"
        return f"{P.start_tag} revised {self.k} {P.end_tag}"


def length_reward():
    return CallableReward(lambda q, r: float(len(r)))


def test_call_sequence_roles_sampling_args_and_cost():
    chat = ScriptedChat(Policy())
    cfg = TPOConfig(width=3, depth=2)
    res = tpo_optimize("What is TPO?", chat, length_reward(), cfg)
    roles = [P.detect_role(list(c["messages"])) for c in chat.calls]
    assert roles == ["generate", "loss", "gradient", "update", "loss", "gradient", "update"]
    assert res.n_policy_calls == 1 + 3 * cfg.depth
    assert res.n_reward_calls == cfg.width * (cfg.depth + 1) == len(res.cache)
    for c, role in zip(chat.calls, roles):
        sampling = role in ("generate", "update")
        assert c["n"] == (cfg.width if sampling else 1)
        assert c["temperature"] == 0.7
        assert c["top_p"] == (0.95 if sampling else 0.99)
        assert c["max_tokens"] == (2048 if sampling else 4096)
        # official: only generation and the update are seeded (loss and gradient get none)
        assert c["seed"] == (7 if sampling else None)
    # the loss system prompt holds the current rejected text; gradient/update hold the full chosen
    # text in <LM_INPUT> and its short form in <VARIABLE>
    it = res.iterations[0]
    loss_call, grad_call, upd_call = chat.calls[1:4]
    assert it.rejected in loss_call["messages"][0]["content"]
    for call in (grad_call, upd_call):
        user = call["messages"][-1]["content"]
        assert f"<LM_INPUT> {it.chosen} </LM_INPUT>" in user
        assert f"<VARIABLE> {short_value(it.chosen)} </VARIABLE>" in user
    upd = upd_call["messages"][-1]["content"]
    order = [
        upd.index(t)
        for t in (
            "<ROLE>",
            "<VARIABLE>",
            "<CONTEXT>",
            "<CONVERSATION>",
            "<FEEDBACK>",
            "<CONSTRAINTS>",
        )
    ]
    assert order == sorted(order)
    assert "Constraint 1: <only generate a chosen response>" in upd
    assert "Constraint 2: <do NOT generate a rejected response>" in upd
    assert res.best_reward == max(e.reward for e in res.cache)


def test_dropped_outputs_are_counted_and_zero_parsed_continues():
    chat = ScriptedChat(Policy(drop_every=2))
    res = tpo_optimize("q", chat, length_reward(), TPOConfig(width=4, depth=1))
    assert res.iterations[0].n_dropped == 2 and res.iterations[0].n_parsed == 2
    assert res.n_reward_calls == 4 + 2
    none = ScriptedChat(Policy(drop_every=1))
    with pytest.warns(UserWarning, match="IMPROVED_VARIABLE"):
        res2 = tpo_optimize("q", none, length_reward(), TPOConfig(width=3, depth=2))
    assert [i.n_parsed for i in res2.iterations] == [0, 0] and len(res2.cache) == 3


def test_cache_selection_is_global_with_ties_to_the_earliest():
    rewards = iter([1.0, 3.0, 3.0, 0.5, 0.5, 9.0, 2.0, 0.1, 0.1])
    reward = CallableReward(lambda q, r: next(rewards))
    chat = ScriptedChat(Policy())
    res = tpo_optimize("q", chat, reward, TPOConfig(width=3, depth=2))
    first = res.iterations[0]
    # initial rewards 1, 3, 3: chosen = first 3 (answer 2), rejected = the 1 (answer 1)
    assert first.chosen == res.cache[1].text and first.rejected == res.cache[0].text
    second = res.iterations[1]
    # after iteration 0 (0.5, 0.5, 9): chosen = the 9, rejected = the first 0.5 (earliest tie)
    assert second.chosen == res.cache[5].text and second.rejected == res.cache[3].text
    assert res.best_response == res.cache[5].text and res.best_reward == 9.0


def test_revision_mode_has_no_rejected_and_a_fixed_loss_prompt():
    chat = ScriptedChat(Policy())
    res = tpo_optimize("q", chat, length_reward(), TPOConfig(width=2, depth=2, mode="revision"))
    loss_prompts = [
        c["messages"][0]["content"]
        for c in chat.calls
        if P.detect_role(list(c["messages"])) == "loss"
    ]
    assert len(loss_prompts) == 2 and loss_prompts[0] == loss_prompts[1]
    assert all("<REJECTED_RESPONSE>" not in p for p in loss_prompts)
    assert all(i.rejected is None for i in res.iterations)
    upd = [c for c in chat.calls if P.detect_role(list(c["messages"])) == "update"][0]
    assert "Constraint 1: <only generate a model response>" in upd["messages"][-1]["content"]
    bon_chat = ScriptedChat(Policy())
    bon = best_of_n("q", bon_chat, length_reward(), 6)
    assert len(bon_chat.calls) == 1 and bon_chat.calls[0]["n"] == 6 and len(bon.cache) == 6
    d0 = ScriptedChat(Policy())
    assert tpo_optimize("q", d0, length_reward(), TPOConfig(depth=0)).n_policy_calls == 1


def test_edge_cases_nan_rewards_single_sample_and_bad_config():
    vals = iter([float("nan"), 1.0, 2.0, float("inf")])
    res = tpo_optimize(
        "q",
        ScriptedChat(Policy()),
        CallableReward(lambda q, r: next(vals)),
        TPOConfig(width=2, depth=1),
    )
    assert res.cache[0].reward == -math.inf and res.best_reward == 2.0  # NaN never chosen
    with pytest.raises(ValueError, match="reward model returned nan"):
        tpo_optimize(
            "q",
            ScriptedChat(Policy()),
            CallableReward(lambda q, r: float("nan")),
            TPOConfig(width=2, depth=1, nan_policy="raise"),
        )
    one = tpo_optimize("q", ScriptedChat(Policy()), length_reward(), TPOConfig(width=1, depth=1))
    assert one.iterations[0].same_pair and one.iterations[0].chosen == one.iterations[0].rejected
    for bad, match in (
        (dict(width=0), "width"),
        (dict(depth=-1), "depth"),
        (dict(mode="beam"), "mode"),
    ):
        with pytest.raises(ValueError, match=match):
            tpo_optimize("q", ScriptedChat(Policy()), length_reward(), TPOConfig(**bad))
    with pytest.raises(ValueError, match="query"):
        tpo_optimize("   ", ScriptedChat(Policy()), length_reward())

    class Short:
        def chat(self, messages, **kw):
            return ["only one"]

    with pytest.raises(RuntimeError, match="completions for n=3"):
        tpo_optimize("q", Short(), length_reward(), TPOConfig(width=3))


def test_config_choices_are_typed_as_the_values_they_accept():
    """The ``Literal`` types of the string choices list exactly what ``validate`` accepts."""
    import re
    from typing import get_args, get_type_hints

    hints = get_type_hints(TPOConfig)
    for name in ("mode", "seed_policy", "pair_selection", "nan_policy"):
        choices = get_args(hints[name])
        assert choices and getattr(TPOConfig(), name) in choices
        for choice in choices:
            assert getattr(TPOConfig(**{name: choice}), name) == choice
        with pytest.raises(ValueError, match=re.escape(f"{name} must be one of {choices},")):
            TPOConfig(**{name: "other"})


def test_extract_tagged_and_short_value():
    s, e = "<A>", "</A>"
    assert extract_tagged("x <A>  hi there \n</A> y", s, e) == "hi there"
    assert extract_tagged("no start </A>", s, e) is None
    assert extract_tagged("<A> no end", s, e) is None
    assert extract_tagged("<A>first</A><A>second</A>", s, e) == "first"
    words = " ".join(str(i) for i in range(20))
    assert short_value(words) == words
    long = " ".join(str(i) for i in range(25))
    assert short_value(long) == "0 1 2 3 4 5 6 7 8 9 (...) 15 16 17 18 19 20 21 22 23 24"
    double = "a  b " + " ".join("x" * 19)
    assert short_value(double).startswith("a  b")  # empty pieces count, as in TextGrad


def test_prompts_round_trip_on_awkward_text():
    rng = random.Random(0)
    alphabet = "abc {} {query} {rejected} ünï 字 \n\t$%"
    for _ in range(30):
        q, c, r, crit, grad = (
            "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(5)
        )
        for rej in (r, None):
            loss = P.parse_loss(P.loss_messages(q, c, rej))
            assert loss == {"query": q, "chosen": c, "rejected": rej}
            g = P.parse_gradient(P.gradient_messages(q, c, rej, crit))
            assert (g["query"], g["chosen"], g["critique"], g["rejected"]) == (q, c, crit, rej)
            u = P.parse_update(P.update_messages(q, c, rej, crit, grad))
            assert (u["query"], u["chosen"], u["critique"], u["gradient"], u["rejected"]) == (
                q,
                c,
                crit,
                grad,
                rej,
            )
            assert P.detect_role(P.update_messages(q, c, rej, crit, grad)) == "update"
            assert P.detect_role(P.gradient_messages(q, c, rej, crit)) == "gradient"
            assert P.detect_role(P.loss_messages(q, c, rej)) == "loss"
        assert P.detect_role(P.generation_messages(q)) == "generate"
