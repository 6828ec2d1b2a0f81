"""LapSum operators against brute-force references and the planned properties (tests 1-6)."""

from __future__ import annotations

import mpmath
import pytest
import torch

from icml25.lapsum import (
    lapsum,
    lapsum_inverse,
    soft_permutation_matrix,
    soft_rank,
    soft_sort,
    soft_topk,
)
from icml25.lapsum.functional import laplace_cdf, permutation_cross_entropy

# every test here runs on the torch path and on the compiled kernels (conftest.py)
pytestmark = pytest.mark.usefixtures("lapsum_path")

D = torch.float64


def bisect(x: torch.Tensor, w: float, alpha: float, iters: int = 200) -> float:
    """LapSum^{-1} by plain bisection in double precision (well-conditioned cases only)."""
    lo = float(x.min()) - 60 * alpha - 1
    hi = float(x.max()) + 60 * alpha + 1
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if float(laplace_cdf((mid - x) / alpha).sum()) < w:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def newton_distance(x: torch.Tensor, t: float, w: float, alpha: float) -> float:
    """``|G(t) - w| / G'(t)`` in high-precision arithmetic: the distance from t to the true root.

    With a tiny alpha and an integer target, LapSum is flat to e^{-gap/alpha} between centres:
    double-precision bisection cannot find the root there, but enough digits can judge a candidate.
    """
    spread = float(x.max() - x.min()) / alpha if x.numel() > 1 else 0.0
    mp = mpmath.mp
    mp.dps = int(40 + min(spread, 6000) / 2.3)
    a, tt = mp.mpf(alpha), mp.mpf(t)
    g = dg = mp.mpf(0)
    for xi in x.tolist():
        u = (tt - mp.mpf(xi)) / a
        g += mp.exp(u) / 2 if u <= 0 else 1 - mp.exp(-u) / 2
        dg += mp.exp(-abs(u)) / (2 * a)
    return float(abs(g - mp.mpf(w)) / dg)


@pytest.mark.parametrize("n", [1, 2, 7, 100])
@pytest.mark.parametrize("alpha", [1e-3, 0.1, 1.0, 100.0])
def test_inverse_matches_bisection(n, alpha):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, dtype=D, generator=g)
    integers = [1.0, 2.0, n / 2, n - 1.0] if n > 7 else [float(i) for i in range(1, n)]
    ws = sorted(w for w in {1e-6, 0.3, 0.5, *integers, n - 1e-6} if 0 < w < n)
    t = lapsum_inverse(x, torch.tensor(ws, dtype=D), alpha)
    for w, tv in zip(ws, t.tolist()):
        assert newton_distance(x, tv, w, alpha) <= 1e-8 * (1 + abs(tv)), (w, tv)
        if alpha >= 0.1:  # well conditioned: an independent bisection agrees too
            ref = bisect(x, w, alpha)
            assert abs(tv - ref) <= 1e-8 * (1 + abs(ref)), (w, tv, ref)
    back = lapsum(x, t, alpha)
    torch.testing.assert_close(back, torch.tensor(ws, dtype=D), atol=1e-9 * n, rtol=0)


def test_e_zero_underflow_regression():
    x = torch.arange(10, dtype=D, requires_grad=True)
    p = soft_topk(x, 3, 1e-3)
    expected = torch.tensor([0.0] * 7 + [1.0] * 3, dtype=D)
    torch.testing.assert_close(p, expected, atol=1e-9, rtol=0)
    (p * torch.randn(10, dtype=D)).sum().backward()
    assert torch.isfinite(x.grad).all()
    lp = soft_topk(x.detach(), 3, 1e-3, log=True)
    assert torch.isfinite(lp).all()


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-9), (torch.float32, 1e-5)])
def test_topk_properties(dtype, tol):
    g = torch.Generator().manual_seed(0)
    n = 200
    x = torch.randn(4, n, generator=g).to(dtype)
    for k in (0.5, 1.0, 17.25, 199.0):
        for alpha in (0.01, 1.0, 10.0):
            p = soft_topk(x, k, alpha)
            assert (p.sum(-1) - k).abs().max() <= tol * n
            assert ((p >= 0) & (p <= 1)).all()
            if alpha >= 1.0:  # with small alpha, 1 - 1e-300 rounds to 1: that is rounding
                assert ((p > 0) & (p < 1)).all()
    x = x.double()
    p = soft_topk(x, 10, 0.5)
    order = x.argsort(-1)
    assert (p.gather(-1, order).diff(dim=-1) > 0).all()  # order preserving
    small = soft_topk(x, n - 10, 0.5, largest=False)
    torch.testing.assert_close(p, 1 - small)  # largest(k) = 1 - smallest(n - k)
    torch.testing.assert_close(soft_topk(x + 3.7, 10, 0.5), p)  # shift invariance
    torch.testing.assert_close(soft_topk(2.5 * x, 10, 1.25), p)  # scale covariance


def test_topk_ties_and_limits():
    tied = torch.full((6,), 2.0, dtype=D)
    torch.testing.assert_close(soft_topk(tied, 2, 0.3), torch.full((6,), 2 / 6, dtype=D))
    x = torch.tensor([0.0, 5.0, 1.0, 3.0, 2.0], dtype=D)
    hard = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0], dtype=D)
    torch.testing.assert_close(soft_topk(x, 2, 1e-4), hard, atol=1e-12, rtol=0)
    torch.testing.assert_close(
        soft_topk(x, 2, 1e6), torch.full((5,), 0.4, dtype=D), atol=1e-5, rtol=0
    )
    p = soft_topk(torch.tensor([1.0, 1.0, 0.0], dtype=D), 1.0, 0.5)
    assert p[0] == p[1]


def test_rank_reference_and_properties():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(30, dtype=D, generator=g)
    r = soft_rank(x, 0.4)
    ref = torch.stack(
        [sum(laplace_cdf((x[i] - x[j]) / 0.4) for j in range(30) if j != i) for i in range(30)]
    )
    torch.testing.assert_close(r, ref, atol=1e-10, rtol=0)
    assert abs(float(r.sum()) - 30 * 29 / 2) < 1e-9
    torch.testing.assert_close(soft_rank(x, 1e-5), x.argsort().argsort().to(D), atol=1e-9, rtol=0)
    torch.testing.assert_close(soft_rank(x, 0.4, one_based=True), r + 1)
    torch.testing.assert_close(soft_rank(x, 0.4, descending=True), 29 - r)
    ties = soft_rank(torch.tensor([0.0, 1.0, 1.0, 1.0, 5.0], dtype=D), 1e-6)
    torch.testing.assert_close(ties, torch.tensor([0.0, 2.0, 2.0, 2.0, 4.0], dtype=D))
    torch.testing.assert_close(
        soft_rank(x, 1e6), torch.full((30,), 14.5, dtype=D), atol=1e-4, rtol=0
    )


def test_sort_reference_and_properties():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(12, dtype=D, generator=g)
    s = soft_sort(x, 0.3)
    ref = torch.tensor([bisect(x, pos + 0.5, 0.3, iters=80) for pos in range(12)], dtype=D)
    torch.testing.assert_close(s, ref, atol=1e-8, rtol=0)
    assert (s.diff() > 0).all()
    torch.testing.assert_close(soft_sort(x, 1e-6), x.sort().values, atol=1e-5, rtol=0)
    torch.testing.assert_close(soft_sort(x, 0.3, descending=True), -soft_sort(-x, 0.3))
    # All-equal input: n Lap(t - c) = l + 1/2 puts the soft values symmetrically around c (they
    # equal c only as alpha -> 0; docs/lapsum.md records this against the planned wording).
    tied = soft_sort(torch.full((4,), 1.5, dtype=D), 0.2)
    torch.testing.assert_close(tied + tied.flip(0), torch.full((4,), 3.0, dtype=D))
    torch.testing.assert_close(
        soft_sort(torch.full((4,), 1.5, dtype=D), 1e-9), torch.full((4,), 1.5, dtype=D)
    )


def test_permutation_matrix_and_cross_entropy():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 8, dtype=D, generator=g)
    P = soft_permutation_matrix(x, 0.5)
    torch.testing.assert_close(P.sum(-1), torch.ones(3, 8, dtype=D), atol=1e-12, rtol=0)
    torch.testing.assert_close(P.sum(-2), torch.ones(3, 8, dtype=D), atol=1e-12, rtol=0)
    assert (P > 0).all()
    hard = torch.nn.functional.one_hot(x.argsort(-1).argsort(-1), 8).to(D)
    torch.testing.assert_close(soft_permutation_matrix(x, 1e-5), hard, atol=1e-9, rtol=0)
    target = torch.stack([torch.randperm(8, generator=g) for _ in range(3)])
    target[0] = x[0].argsort().argsort()  # includes the first and the last position
    ref = -P.gather(-1, target[..., None])[..., 0].log().sum(-1)
    got = permutation_cross_entropy(x, target, 0.5, reduction="none")
    torch.testing.assert_close(got, ref, atol=1e-10, rtol=0)
    torch.testing.assert_close(permutation_cross_entropy(x, target, 0.5), ref.mean())
    torch.testing.assert_close(
        permutation_cross_entropy(x, target, 0.5, reduction="sum"), ref.sum()
    )


def test_n_equals_one():
    x = torch.tensor([[0.7]], dtype=D)
    torch.testing.assert_close(soft_topk(x, 0.3), torch.tensor([[0.3]], dtype=D))
    torch.testing.assert_close(soft_rank(x), torch.zeros(1, 1, dtype=D))
    torch.testing.assert_close(soft_sort(x), x)
    torch.testing.assert_close(soft_permutation_matrix(x), torch.ones(1, 1, 1, dtype=D))
    assert float(permutation_cross_entropy(x, torch.zeros(1, 1, dtype=torch.long))) == 0.0
