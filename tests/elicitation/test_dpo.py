"""dpo_loss against its closed form and finite differences; preference-pair sampling."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.elicitation.dpo import dpo_loss, sample_preference_pairs


def test_dpo_loss_closed_form_and_zero_margin():
    pc, pr = torch.tensor([-3.0, -5.0]), torch.tensor([-4.0, -4.5])
    rc, rr = torch.tensor([-3.5, -5.0]), torch.tensor([-3.8, -4.0])
    loss, info = dpo_loss(pc, pr, rc, rr, beta=0.5)
    h = ((pc - rc) - (pr - rr)) * 0.5  # [0.35, 0.25]
    expected = -torch.log(torch.sigmoid(h)).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert info["reward_accuracy"] == 1.0 and info["margin"] == pytest.approx(
        h.mean().item(), rel=1e-6
    )
    z = torch.zeros(3)
    assert dpo_loss(z, z, z, z)[0].item() == pytest.approx(math.log(2), rel=1e-7)


def test_dpo_loss_gradient_matches_finite_differences():
    pc = torch.tensor([-2.0, -1.0, -3.0], dtype=torch.float64, requires_grad=True)
    pr = torch.tensor([-2.5, -0.5, -3.5], dtype=torch.float64, requires_grad=True)
    rc, rr = (
        torch.tensor([-2.2, -1.1, -2.9], dtype=torch.float64),
        torch.tensor([-2.4, -0.7, -3.1], dtype=torch.float64),
    )
    assert torch.autograd.gradcheck(
        lambda a, b: dpo_loss(a, b, rc, rr, beta=0.3)[0].double(), (pc, pr)
    )


def test_preference_pairs():
    bs = ["b1", "b2", "b3"]
    cands = [["a", "b", "c", "d"], ["x", "x", "y", "z"], ["u", "v", "w", "t"]]
    scores = [[1.0, 4.0, 2.0, 3.0], [5.0, 5.0, 1.0, 0.0], [1.0, 1.02, 1.01, 1.0]]
    pairs, without = sample_preference_pairs(
        bs, cands, scores, pairs_per_behavior=2, min_gap=0.5, seed=0
    )
    assert all(
        p.score_chosen > p.score_rejected and p.score_chosen - p.score_rejected >= 0.5
        for p in pairs
    )
    by_b = {b: [(p.chosen, p.rejected) for p in pairs if p.behavior == b] for b in bs}
    assert by_b["b1"] == [("b", "a"), ("d", "c")]
    assert by_b["b2"] == [("x", "z")]  # duplicates dropped: 3 distinct candidates give 1 pair
    assert by_b["b3"] == [] and without == 1  # gaps below min_gap
    again, _ = sample_preference_pairs(bs, cands, scores, pairs_per_behavior=2, min_gap=0.5, seed=0)
    assert again == pairs
    with pytest.raises(ValueError, match="as many candidate"):
        sample_preference_pairs(bs, cands[:2], scores, min_gap=0.1)
    with pytest.raises(ValueError, match="nan"):
        sample_preference_pairs(["b"], [["a", "b"]], [[float("nan"), 1.0]])
    with pytest.raises(ValueError, match="pairs_per_behavior"):
        sample_preference_pairs(bs, cands, scores, pairs_per_behavior=0)
