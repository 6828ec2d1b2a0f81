"""Investigator scoring, restricted sampling/scoring agreement, mixtures and Frank-Wolfe weights."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.elicitation import Investigator, InvestigatorMixture
from icml25.elicitation.frank_wolfe import fw_step_size


def _manual_logprob(inv, b, x):
    ctx = inv._context_ids(b)
    p = inv._prompt_ids(x)
    ids = torch.tensor([ctx + p])
    with torch.no_grad():
        logits = inv.model(input_ids=ids).logits[0].float()
    total = 0.0
    allowed = inv.allowed
    for i, t in enumerate(p):
        row = logits[len(ctx) - 1 + i]
        if allowed is not None:
            lp = torch.log_softmax(row[allowed], -1)
            total += lp[(allowed == t).nonzero()[0, 0]].item()
        else:
            total += torch.log_softmax(row, -1)[t].item()
    return total


def test_logprob_is_the_masked_sum_over_prompt_tokens_only(inv, world):
    bs = [world.behaviors[0], world.behaviors[1]]
    xs = ["w1 w2 w3 w4 w5 w6 w7 w8", "w9 w28 w9 w28 w0 w0 w0 w1"]
    lp = inv.logprob(bs, xs)
    for i in range(2):
        assert lp[i].item() == pytest.approx(_manual_logprob(inv, bs[i], xs[i]), abs=1e-4)
    # behaviour tokens carry no term: the summed positions are exactly the prompt's 8 tokens
    assert inv.logprob(bs, xs, normalize="mean")[0].item() == pytest.approx(
        lp[0].item() / 8, abs=1e-5
    )
    lp.sum().backward()  # differentiable
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in inv.model.parameters())


def test_restricted_sampling_and_scoring_agree(world, tok, tiny):
    allowed = world.content_ids(tok)[:3]
    inv = Investigator(tiny, tok, allowed_token_ids=allowed, exact_length=1)
    b = world.behaviors[2]
    draws = inv.sample([b], 3000, seed=0, top_p=1.0)[0]
    words = [tok.decode([i]).strip() for i in allowed]
    assert set(draws) <= set(words)
    with torch.no_grad():
        p = torch.exp(inv.logprob([b] * 3, words))
    assert p.sum().item() == pytest.approx(1.0, abs=1e-5)  # a distribution over the allowed words
    freq = torch.tensor([draws.count(w) / len(draws) for w in words])
    assert torch.allclose(freq, p, atol=0.03), (freq, p)


def test_sampling_is_seeded_and_respects_the_vocabulary(inv, world):
    a = inv.sample(world.behaviors, 5, seed=3)
    assert a == inv.sample(world.behaviors, 5, seed=3) and a != inv.sample(
        world.behaviors, 5, seed=4
    )
    assert all(
        len(x.split()) == 8 and all(w in world.words for w in x.split()) for xs in a for x in xs
    )


def test_mixture_logprob_is_a_float64_logsumexp(inv, world):
    q2 = inv.copy()
    with torch.no_grad():
        for p in q2.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    mix = InvestigatorMixture([inv, q2], [0.25, 0.75])
    bs, xs = world.behaviors[:2], ["w1 w2 w3 w4 w5 w6 w7 w8", "w3 w4 w5 w6 w7 w8 w9 w10"]
    with torch.no_grad():
        a, b = inv.logprob(bs, xs).double(), q2.logprob(bs, xs).double()
    ref = torch.log(0.25 * torch.exp(a) + 0.75 * torch.exp(b))
    assert torch.allclose(mix.logprob(bs, xs).double(), ref, atol=1e-4)
    s = mix.sample(bs, 4, seed=1)
    assert len(s) == 2 and all(len(x) == 4 for x in s)


def test_frank_wolfe_weights(inv):
    mix = InvestigatorMixture([inv])
    for t in (2, 3):
        mix.append(inv, fw_step_size(t, "uniform"))
    assert mix.weights == pytest.approx([1 / 3] * 3)
    mix = InvestigatorMixture([inv])
    for t in (2, 3, 4):
        mix.append(inv, fw_step_size(t, "classic"))
    T = 4
    assert mix.weights == pytest.approx(
        [2 * i / (T * (T + 1)) for i in range(1, T + 1)]
    )  # closed form ∝ t
    assert fw_step_size(1, "classic") == 1.0 == fw_step_size(1, "uniform")


def test_bad_input(inv, world, tok, tiny):
    with pytest.raises(ValueError, match="weights"):
        InvestigatorMixture([inv], [-1.0])
    with pytest.raises(ValueError, match="sum to > 0"):
        InvestigatorMixture([inv, inv], [0.0, 0.0])
    with pytest.raises(ValueError, match="eta"):
        InvestigatorMixture([inv]).append(inv, 0.0)
    with pytest.raises(ValueError, match="empty string"):
        inv.logprob([""], ["w1"])
    with pytest.raises(ValueError, match="1 behaviors but 2 prompts"):
        inv.logprob(["p0"], ["w1", "w2"])
    with pytest.raises(ValueError, match="allowed_token_ids"):
        Investigator(tiny, tok, allowed_token_ids=[10_000])
    with pytest.raises(TypeError, match="torch module"):
        Investigator("gpt2", tok)
    with pytest.raises(ValueError, match="n must be"):
        inv.sample(["p0"], 0)
    with pytest.raises(ValueError, match="t must be"):
        fw_step_size(0)
    # an empty prompt scores the finite floor, so DPO pairs stay finite
    assert inv.logprob(["p0 p1"], ["   "]).item() == -1e4


def test_long_behaviours_are_cut_with_a_warning(world, tok, tiny):
    inv = Investigator(
        tiny, tok, max_behavior_tokens=4, exact_length=2, allowed_token_ids=world.content_ids(tok)
    )
    with pytest.warns(UserWarning, match="cut from the left"):
        lp = inv.logprob(["p0 p1 p2 p3 p4 p5"], ["w1 w2"])
    assert math.isfinite(lp.item())
