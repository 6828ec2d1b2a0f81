"""The shared sequence log-probs and sigmoid-DPO loss (icml25.preference)."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.preference import (
    dpo_loss,
    sequence_logprob,
    shift_for_causal_lm,
    token_logprobs,
)


def test_token_and_sequence_logprobs_against_a_loop():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 7, (2, 5), generator=g)
    labels[0, :2] = -100
    lp = token_logprobs(logits, labels)
    for b in range(2):
        for t in range(5):
            want = (
                0.0
                if labels[b, t] < 0
                else float(torch.log_softmax(logits[b, t].double(), -1)[labels[b, t]])
            )
            assert float(lp[b, t]) == pytest.approx(want, abs=1e-6)
    seq = sequence_logprob(logits, labels)
    assert torch.allclose(seq, lp.sum(-1))
    avg = sequence_logprob(logits, labels, average=True)
    assert float(avg[0]) == pytest.approx(float(lp[0].sum()) / 3, rel=1e-6)
    assert lp.dtype == torch.float64  # float64 stays float64
    bf = token_logprobs(logits.to(torch.bfloat16), labels)
    assert bf.dtype == torch.float32 and torch.allclose(bf.double(), lp, atol=0.05)
    a, b = shift_for_causal_lm(logits, labels)
    assert a.shape == (2, 4, 7) and torch.equal(b, labels[:, 1:])


def test_dpo_loss_is_the_sigmoid_dpo_formula():
    g = torch.Generator().manual_seed(1)
    pw, pl, rw, rl = (torch.randn(6, generator=g, dtype=torch.float64) * 5 for _ in range(4))
    for beta, eps in ((0.1, 0.0), (0.5, 0.0), (0.1, 0.2)):
        out = dpo_loss(pw, pl, rw, rl, beta, label_smoothing=eps)
        want = 0.0
        for i in range(6):
            h = float((pw[i] - rw[i]) - (pl[i] - rl[i]))
            s = lambda z: math.log(1 / (1 + math.exp(-z)))  # noqa: E731
            want += -(1 - eps) * s(beta * h) - eps * s(-beta * h)
        assert float(out.loss) == pytest.approx(want / 6, abs=1e-6)
        assert torch.allclose(out.chosen_rewards, (beta * (pw - rw)).float())
    # the gradient reaches the policy only
    pw2 = pw.clone().requires_grad_(True)
    rw2 = rw.clone().requires_grad_(True)
    dpo_loss(pw2, pl, rw2, rl).loss.backward()
    assert pw2.grad is not None and rw2.grad is None


def test_bad_input_names_the_value():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="beta must be a finite number > 0"):
        dpo_loss(x, x, x, x, beta=0)
    with pytest.raises(ValueError, match="one non-empty"):
        dpo_loss(x, x[:2], x, x)
    with pytest.raises(TypeError, match="policy_chosen must be a tensor"):
        dpo_loss([0.0], x, x, x)
    with pytest.raises(ValueError, match=r"label 9 is outside the vocabulary 0..6"):
        token_logprobs(torch.zeros(1, 2, 7), torch.tensor([[1, 9]]))
    with pytest.raises(ValueError, match=r"labels must be \(B, T\)"):
        token_logprobs(torch.zeros(1, 2, 7), torch.tensor([1, 2]))


def test_dpo_losses_refuse_a_bad_beta_and_reach_their_limit_at_minus_inf():
    """Issue 49: beta as a string or infinity was accepted, and a rejected log-prob of -inf gave
    a NaN loss (0 * -inf) where the loss is 0; numpy betas are the numbers they hold."""
    import numpy as np

    from icml25.preference import dpo_losses

    w, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.5])
    rejected = torch.tensor([float("-inf"), -3.0])
    losses, u = dpo_losses(w, rejected, ref, ref, 0.1)
    assert losses[0].item() == 0.0 and torch.isfinite(losses).all()
    same, _ = dpo_losses(w, rejected, ref, ref, np.float32(0.1))
    assert torch.allclose(same, losses)
    for bad in ("0.1", float("inf"), None, True, 0.0):
        with pytest.raises(ValueError, match="beta must be"):
            dpo_losses(w, rejected, ref, ref, bad)
    with pytest.raises(ValueError, match=r"label_smoothing must be a finite number in \[0, 0.5\)"):
        dpo_losses(w, rejected, ref, ref, 0.1, label_smoothing=0.5)


def test_dpo_losses_refuses_an_undefined_margin_naming_the_pair():
    # issue 49: -inf log-probs on both sides gave a NaN loss silently ((-inf) - (-inf))
    from icml25.preference import dpo_losses

    inf = float("inf")
    z = torch.zeros(2)
    with pytest.raises(ValueError, match="margin of pair 1 is undefined"):
        dpo_losses(torch.tensor([0.0, -inf]), torch.tensor([0.0, -inf]), z, z)
    with pytest.raises(ValueError, match="margin of pair 0 is undefined"):
        dpo_losses(z, z, torch.tensor([-inf, 0.0]), torch.tensor([-inf, 0.0]))
    # a NaN input is not refused here: it propagates to the loops' non-finite checks
    assert torch.isnan(dpo_losses(torch.tensor([0.0, float("nan")]), z, z, z)[0][1])
    losses, u = dpo_losses(z, torch.tensor([0.0, -inf]), z, z)  # one side: the limit
    assert losses[1] == 0 and u[1] == inf and torch.isfinite(losses).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_an_all_minus_inf_row_at_an_unlabelled_position_sends_no_nan_back(dtype):
    # before: the row's log-softmax was NaN, hidden from the value by the mask but not from the
    # backward (NaN in every logit of that row, and through .sum() in every parameter)
    z = torch.tensor([[[1.0, 2.0, 3.0], [-math.inf] * 3, [0.5, -math.inf, 0.0]]], dtype=dtype)
    z.requires_grad_(True)
    labels = torch.tensor([[2, -100, 0]])
    lp = sequence_logprob(z, labels)
    lp.sum().backward()
    ref = torch.log_softmax(torch.tensor([[1.0, 2.0, 3.0], [0.5, -math.inf, 0.0]]).double(), -1)
    assert float(lp) == pytest.approx(float(ref[0, 2] + ref[1, 0]), rel=1e-2)
    assert bool(torch.isfinite(z.grad).all()) and bool((z.grad[0, 1] == 0).all())
