"""Target scoring (local and over HTTP), rewards, the Frank-Wolfe penalty, metrics."""

from __future__ import annotations

import pytest
import torch

from icml25.elicitation import (
    HFTargetModel,
    InvestigatorMixture,
    OpenAICompatTarget,
    RubricReward,
    StringReward,
)
from icml25.elicitation.metrics import distinct_n, pairwise_jaccard, trigger_coverage
from icml25.elicitation.rewards import PenalizedReward


def test_hf_target_logprob_is_the_manual_sum_and_batching_does_not_change_it(tiny, tok):
    t = HFTargetModel(tiny, tok, use_chat_template=True, add_eos=True, batch_size=3)
    xs = ["w1 w2 w3 w4 w5 w6 w7 w8", "w3 w4", "w9 w28 w9 w28 w1 w2 w3 w4", "w5"]
    ys = ["p0 p1 p0 p1", "w4 w3", "p2", "w5 w5 w5"]
    batched = t.logprob(xs, ys)
    single = torch.stack(
        [
            HFTargetModel(tiny, tok, use_chat_template=True, add_eos=True, batch_size=1).logprob(
                [x], [y]
            )[0]
            for x, y in zip(xs, ys)
        ]
    )
    assert torch.allclose(batched, single, atol=1e-5)
    assert batched.dtype == torch.float32 and batched.device.type == "cpu"
    text = tok.apply_chat_template(
        [{"role": "user", "content": xs[0]}], add_generation_prompt=True, tokenize=False
    )
    p_ids = tok(text, add_special_tokens=False)["input_ids"]
    r_ids = tok(ys[0], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([p_ids + r_ids])
    with torch.no_grad():
        lsm = torch.log_softmax(tiny(input_ids=ids).logits[0].float(), -1)
    manual = sum(lsm[len(p_ids) - 1 + i, r].item() for i, r in enumerate(r_ids))
    assert batched[0].item() == pytest.approx(manual, abs=1e-4)
    assert t.logprob(xs[:1], ys[:1], normalize="mean")[0].item() == pytest.approx(
        manual / len(r_ids), abs=1e-5
    )


def test_openai_compatible_target_scores_like_the_local_model(tiny, tok):
    from icml25.llm import CallableChat, ChatServer, HFChat

    local = HFTargetModel(tiny, tok, use_chat_template=False)
    with ChatServer(HFChat(tiny, tok)) as server:
        remote = OpenAICompatTarget(server.url, "m")
        got = remote.logprob(["w1 w2 w3"], ["p0 p1"])
    want = local.logprob(["w1 w2 w3"], ["p0 p1"])
    assert got.shape == (1,) and got[0].item() == pytest.approx(want[0].item(), abs=1e-3)
    with ChatServer(CallableChat(lambda m, **kw: "hi")) as server:  # no scoring: clear error
        with pytest.raises(NotImplementedError, match="rubric|echo|log-probs"):
            OpenAICompatTarget(server.url, "m").logprob(["a "], ["b"])


def test_penalized_reward(inv, world):
    base = StringReward(HFTargetModel(inv.model, inv.tokenizer, use_chat_template=True))
    xs = ["w1 w2 w3 w4 w5 w6 w7 w8", "w3 w4 w5 w6 w7 w8 w9 w10"]
    bs = world.behaviors[:2]
    mix = InvestigatorMixture([inv])
    assert torch.equal(PenalizedReward(base, mix, lam=0.0)(xs, bs), base(xs, bs))
    assert torch.equal(PenalizedReward(base, None, lam=1.0)(xs, bs), base(xs, bs))
    with torch.no_grad():
        q = inv.logprob(bs, xs)
    pen = PenalizedReward(base, mix, lam=0.5, warn_ratio=1e9)(xs, bs)
    assert torch.allclose(pen, base(xs, bs) - 0.5 * q, atol=1e-4)
    likely = int(torch.argmax(q))  # the prompt more likely under q̄ loses more reward
    assert (base(xs, bs) - pen)[likely] >= (base(xs, bs) - pen)[1 - likely]
    same = [world.behaviors[0]] * 2
    with pytest.warns(UserWarning, match="in 1 of 1 behaviours"):
        PenalizedReward(lambda x, b: torch.tensor([0.0, 0.001]), mix, lam=10.0)(xs, same)
    with pytest.warns(UserWarning, match="swamps the reward"):  # a reward with no spread at all
        PenalizedReward(lambda x, b: torch.zeros(len(x)), mix, lam=1.0)(xs, same)
    with pytest.raises(ValueError, match="lam"):
        PenalizedReward(base, mix, lam=-1.0)


def test_rubric_reward_averages_the_judge():
    class Fixed:
        def generate(self, prompts, max_new_tokens, greedy=True):
            return ["false claim" if "lie" in p else "true" for p in prompts]

    r = RubricReward(Fixed(), lambda rub, ps, ys: [1.0 if "false" in y else 0.0 for y in ys])
    assert r(["please lie", "be honest"], ["states a falsehood"] * 2).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="scores in"):
        RubricReward(Fixed(), lambda rub, ps, ys: [2.0] * len(ys))(["a"], ["r"])


def test_metrics():
    assert trigger_coverage([[0, 0, 0, 1], [2, 2], []], threshold=0.2) == pytest.approx(
        (2 + 1 + 0) / 3
    )
    assert trigger_coverage([[0] * 99 + [1]], threshold=0.05) == 1
    assert distinct_n(["a b a b", "a b"], 2) == pytest.approx(2 / 4)
    assert pairwise_jaccard(["a b", "a b", "c d"]) == pytest.approx((1 + 0 + 0) / 3)
    with pytest.raises(ValueError, match="threshold"):
        trigger_coverage([[0]], threshold=0)


def test_trigger_detection_at_every_position(world):
    (a, b) = world.triggers[1][2]
    filler = [w for w in world.words if all(w not in t for ts in world.triggers for t in ts)]
    for pos in range(world.prompt_len - 1):
        words = filler[: world.prompt_len]
        words[pos : pos + 2] = [a, b]
        assert world.occurrences(words) == [(1, 2)], pos
        assert world.counts(words)[1] == 1 and world.credited_trigger(" ".join(words), 1) == 2
    rep = [a, b, a, b, a, b] + filler[:2]
    assert world.counts(rep)[1] == 3


def test_openai_target_scores_and_generates_the_same_rendered_text(tiny, tok):
    from icml25.llm import ChatServer, HFChat

    one = tok.apply_chat_template(
        [{"role": "user", "content": "XQX"}], add_generation_prompt=True, tokenize=False
    )
    template = one.replace("XQX", "{prompt}")
    local = HFTargetModel(tiny, tok, use_chat_template=True)
    with ChatServer(HFChat(tiny, tok)) as server:
        remote = OpenAICompatTarget(server.url, "m", chat_template=template)
        got = remote.logprob(["w1 w2 w3"], ["p0 p1"])
        sent = []
        remote.chat._post = lambda route, body: (
            sent.append((route, body)) or {"choices": [{"text": " p0 p1"}]}
        )
        assert remote.generate(["w1 w2 w3"], 4) == ["p0 p1"]
    assert got[0].item() == pytest.approx(
        local.logprob(["w1 w2 w3"], ["p0 p1"])[0].item(), abs=1e-3
    )
    assert sent[0][0] == "completions" and sent[0][1]["prompt"] == remote.render("w1 w2 w3")
    with pytest.raises(ValueError, match="prompt"):
        OpenAICompatTarget(server.url, "m", chat_template="no slot")


def test_target_input_checks(tiny, tok):
    with pytest.warns(UserWarning, match="use_chat_template was not given"):
        HFTargetModel(tiny, tok)
    t = HFTargetModel(tiny, tok, use_chat_template=False)
    with pytest.raises(ValueError, match="more than the model's 32 positions"):
        t.logprob(["w1 " * 40], ["p0"])
    with pytest.raises(ValueError, match="more than the model's 32 positions"):
        t.generate(["w1 " * 20], max_new_tokens=20)
    with pytest.raises(ValueError, match="temperature"):
        t.generate(["w1"], 2, greedy=False, temperature=0)
    import numpy as np

    assert len(t.generate(["w1"], np.int64(2))) == 1
