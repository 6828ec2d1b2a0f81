"""The losses against explicit per-example formulas, gradients, identities and bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from icml25.fpo import dpo_loss, fpo_loss, simpo_loss, tdpo_loss
from icml25.fpo.forward import pool_response_codes
from icml25.fpo.logps import sequential_kl_from_logits
from icml25.fpo.losses import feature_discrepancy, pool_codes


def _sig(x: float) -> float:
    return -math.log(1 / (1 + math.exp(-x)))


def _ref_discrepancy(p, r, k, mode, w=None):
    """Eq. 10 with Python sets: (1/k) Σ_{i in I_k} w_i (p_i - r_i)^2."""
    p, r = p.tolist(), r.tolist()
    top_p = set(sorted(range(len(p)), key=lambda i: -p[i])[:k])
    top_r = set(sorted(range(len(r)), key=lambda i: -r[i])[:k])
    idx = top_p | top_r if mode == "union" else top_p
    w = [1.0] * len(p) if w is None else w.tolist()
    return sum(w[i] * (p[i] - r[i]) ** 2 for i in idx) / k


def _inputs(B=5, m=40, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)

    def sparse():  # distinct values so top-k has no ties
        x = torch.rand(B, m, generator=g, dtype=dtype) * (torch.rand(B, m, generator=g) < 0.5)
        return x + torch.arange(m, dtype=dtype) * 1e-6

    means = [-torch.rand(B, generator=g, dtype=dtype) * 3 for _ in range(4)]
    return means, [sparse() for _ in range(4)]


@pytest.mark.parametrize("mode", ["union", "policy"])
@pytest.mark.parametrize("sg", [True, False])
def test_fpo_loss_matches_per_example_formula(mode, sg):
    (aw, al, rw, rl), (cw, cl, qw, ql) = _inputs()
    beta, alpha, k = 0.1, 0.5, 7
    out = fpo_loss(
        aw,
        al,
        rw,
        rl,
        cw,
        cl,
        qw,
        ql,
        beta=beta,
        alpha=alpha,
        k=k,
        index_mode=mode,
        stop_grad_chosen=sg,
    )
    want = []
    for b in range(5):
        dw = _ref_discrepancy(cw[b], qw[b], k, mode)
        dl = _ref_discrepancy(cl[b], ql[b], k, mode)
        u = beta * float(aw[b]) - beta * float(al[b]) - (beta * float(rw[b]) - beta * float(rl[b]))
        u -= alpha * (beta * dl - beta * dw)
        want.append(_sig(u))
        assert float(out.d_w[b]) == pytest.approx(dw, rel=1e-12)
        assert float(out.d_l[b]) == pytest.approx(dl, rel=1e-12)
    assert out.losses.tolist() == pytest.approx(want, rel=1e-12)
    assert float(out.loss) == pytest.approx(sum(want) / 5, rel=1e-12)
    assert torch.allclose(out.reward_w, beta * (aw - rw))


def test_union_divides_by_k_even_when_larger():
    p = torch.tensor([[3.0, 2.0, 0.0, 0.0]])
    r = torch.tensor([[0.0, 0.0, 5.0, 4.0]])
    # union of {0,1} and {2,3} = all four; divided by k = 2, not 4
    assert float(feature_discrepancy(p, r, 2, "union")) == pytest.approx((9 + 4 + 25 + 16) / 2)
    assert float(feature_discrepancy(p, r, 2, "policy")) == pytest.approx((9 + 4) / 2)


def test_feature_weights_multiply_squared_differences():
    (_, _, _, _), (cw, _, qw, _) = _inputs()
    w = torch.rand(40, dtype=torch.float64)
    got = feature_discrepancy(cw, qw, 6, "union", w)
    assert got.tolist() == pytest.approx(
        [_ref_discrepancy(cw[b], qw[b], 6, "union", w) for b in range(5)], rel=1e-12
    )


@pytest.mark.parametrize("mode", ["mean", "sum", "padded_mean"])
def test_pool_codes_modes_and_masked_token_pooling(mode):
    g = torch.Generator().manual_seed(1)
    codes = torch.rand(3, 6, 10, generator=g, dtype=torch.float64)
    mask = torch.tensor([[0, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]]).bool()
    got = pool_codes(codes, mask, mode)
    for b in range(3):
        s = sum(codes[b, t] for t in range(6) if mask[b, t])
        div = {"mean": int(mask[b].sum()), "sum": 1, "padded_mean": 6}[mode]
        assert torch.allclose(got[b], s / div)
    # the response-only path (what training uses) pools the same numbers
    flat = codes[mask]
    assert torch.allclose(pool_response_codes(flat, mask, mode), got)


def test_gradcheck_and_stop_gradient():
    (aw, al, rw, rl), (cw, cl, qw, ql) = _inputs(B=3, m=12)
    aw, al, cl = (x.clone().requires_grad_() for x in (aw, al, cl))

    def f(aw_, al_, cl_):
        return fpo_loss(aw_, al_, rw, rl, cw, cl_, qw, ql, k=4).loss

    assert torch.autograd.gradcheck(f, (aw, al, cl))
    cw_ = cw.clone().requires_grad_()
    fpo_loss(aw, al, rw, rl, cw_, cl, qw, ql, k=4, stop_grad_chosen=True).loss.backward()
    assert cw_.grad is None or float(cw_.grad.abs().sum()) == 0.0
    cw2 = cw.clone().requires_grad_()
    fpo_loss(aw, al, rw, rl, cw2, cl, qw, ql, k=4, stop_grad_chosen=False).loss.backward()
    assert float(cw2.grad.abs().sum()) > 0
    assert torch.autograd.gradcheck(
        lambda c: fpo_loss(aw, al, rw, rl, c, cl, qw, ql, k=4, stop_grad_chosen=False).loss, (cw2,)
    )


def test_alpha_zero_is_length_normalised_dpo_and_simpo():
    (aw, al, rw, rl), (cw, cl, qw, ql) = _inputs()
    beta = 0.1
    out = fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, beta=beta, alpha=0.0, k=8)
    want = -F.logsigmoid(beta * ((aw - rw) - (al - rl)))
    assert torch.allclose(out.losses, want)
    # reference averages with β(A_ref(w) - A_ref(l)) = γ: FPO(α=0) is SimPO with margin γ
    gamma = 0.5
    rw2 = torch.full_like(aw, gamma / beta)
    rl2 = torch.zeros_like(aw)
    simpo = simpo_loss(aw, al, beta=beta, gamma=gamma)
    assert torch.allclose(
        fpo_loss(aw, al, rw2, rl2, cw, cl, qw, ql, beta=beta, alpha=0, k=8).losses, simpo[1]
    )


def test_dpo_simpo_tdpo_closed_forms():
    g = torch.Generator().manual_seed(3)
    pw, pl, rw, rl, kw, kl = (
        torch.rand(4, generator=g, dtype=torch.float64) * -5 for _ in range(6)
    )
    kw, kl = -kw, -kl
    loss, losses, u = dpo_loss(pw, pl, rw, rl, beta=0.1)
    assert torch.allclose(u, 0.1 * ((pw - rw) - (pl - rl)))
    assert torch.allclose(losses, -F.logsigmoid(u)) and torch.isclose(loss, losses.mean())
    _, sl, su = simpo_loss(pw, pl)  # Table 5: β = 2, γ = 0.5
    assert torch.allclose(su, 2 * pw - 2 * pl - 0.5) and torch.allclose(sl, -F.logsigmoid(su))
    dpo_u = 0.1 * ((pw - rw) - (pl - rl))
    _, _, u1 = tdpo_loss(pw, pl, rw, rl, kw, kl, beta=0.1, version=1)
    assert torch.allclose(u1, dpo_u - 0.1 * (kl - kw))
    _, l2, u2 = tdpo_loss(pw, pl, rw, rl, kw, kl, beta=0.1, alpha=0.5, version=2)
    assert torch.allclose(u2, dpo_u - 0.5 * (0.1 * kl - 0.1 * kw))
    # TDPO-2 stops the gradient of the chosen-side KL, TDPO-1 does not
    kw_, pw_ = kw.clone().requires_grad_(), pw.clone().requires_grad_()
    tdpo_loss(pw_, pl, rw, rl, kw_, kl, version=2)[0].backward()
    assert kw_.grad is None or float(kw_.grad.abs().sum()) == 0
    kw1 = kw.clone().requires_grad_()
    tdpo_loss(pw, pl, rw, rl, kw1, kl, version=1)[0].backward()
    assert float(kw1.grad.abs().sum()) > 0


def test_sequential_kl_brute_force_and_zero_for_copy():
    g = torch.Generator().manual_seed(4)
    a = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    b = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    labels = torch.tensor([[-100, -100, 3, 4, 1], [-100, 2, 2, -100, -100]])
    got = sequential_kl_from_logits(a, b, labels)
    for r in range(2):
        want = 0.0
        for t in range(4):  # logits t score label t + 1
            if labels[r, t + 1] == -100:
                continue
            p_ref, p = b[r, t].softmax(-1), a[r, t].softmax(-1)
            want += float((p_ref * (p_ref.log() - p.log())).sum())
        assert float(got[r]) == pytest.approx(want, rel=1e-10)
    assert torch.allclose(
        sequential_kl_from_logits(a, a.clone(), labels),
        torch.zeros(2, dtype=torch.float64),
        atol=1e-12,
    )


def test_bad_inputs_raise_clear_errors():
    (aw, al, rw, rl), (cw, cl, qw, ql) = _inputs()
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, k=0)
    with pytest.warns(UserWarning, match="k=99 exceeds the number of SAE features m=40"):
        out = fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, k=99)
    assert torch.isfinite(out.loss)
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0, got -0.1"):
        fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, alpha=-0.1)
    with pytest.raises(ValueError, match="beta must be a finite number > 0, got 0"):
        fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, beta=0)
    with pytest.raises(ValueError, match="index_mode must be one of"):
        fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, index_mode="both")
    with pytest.raises(ValueError, match="differ in shape"):
        feature_discrepancy(cw, qw[:, :10], 3)
    with pytest.raises(ValueError, match="pool mode must be one of"):
        pool_codes(torch.zeros(1, 2, 3), torch.ones(1, 2), "max")
    with pytest.raises(ValueError, match="example 1 has no response token"):
        pool_codes(torch.zeros(2, 2, 3), torch.tensor([[1, 0], [0, 0]]))
    with pytest.raises(FloatingPointError, match="pol_mean_w holds NaN"):
        fpo_loss(aw * float("nan"), al, rw, rl, cw, cl, qw, ql)
    with pytest.raises(ValueError, match=r"version must be an integer in \[1, 2\], got 3"):
        tdpo_loss(aw, al, rw, rl, aw, al, version=3)
    with pytest.raises(TypeError, match="pol_mean_w must be a tensor"):
        simpo_loss([1.0], al)


def test_batch_of_one_and_float32_follow_inputs():
    (aw, al, rw, rl), (cw, cl, qw, ql) = _inputs(B=1, dtype=torch.float32)
    out = fpo_loss(aw, al, rw, rl, cw, cl, qw, ql, k=3)
    assert out.losses.shape == (1,) and out.loss.dtype == torch.float32


def test_sequential_kl_with_tokens_the_reference_masks_out():
    # before: NaN (F.kl_div's 0 * -inf) where the true KL is finite
    ninf = float("-inf")
    pol = torch.tensor([[[0.0, 1.0, 2.0], [0.5, 0.0, -1.0], [0.0, 0.0, 0.0]]], requires_grad=True)
    ref = torch.tensor([[[0.0, ninf, 2.0], [ninf, 0.0, ninf], [0.0, 0.0, 0.0]]])
    labels = torch.tensor([[0, 1, 2]])
    kl = sequential_kl_from_logits(pol, ref, labels)
    kl.sum().backward()
    lp, lr = (
        torch.log_softmax(pol.detach()[:, :-1].double(), -1),
        torch.log_softmax(ref[:, :-1].double(), -1),
    )
    want = sum(
        float(lr[0, t, v].exp() * (lr[0, t, v] - lp[0, t, v]))
        for t in range(2)
        for v in range(3)
        if lr[0, t, v] > ninf
    )
    assert float(kl) == pytest.approx(want, rel=1e-6)
    assert bool(torch.isfinite(pol.grad).all())
