"""Issue 49: spearman_corr on constant rows, numpy scalars, and random rows against scipy."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from icml25.lapsum import soft_rank, soft_sort, soft_topk, spearman_corr

# every test here runs on the torch path and on the compiled kernels (conftest.py)
pytestmark = pytest.mark.usefixtures("lapsum_path")


def test_spearman_of_a_constant_row_is_nan_as_scipy():
    pred = torch.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]], requires_grad=True)
    target = torch.tensor([[3.0, 1.0, 2.0], [1.0, 2.0, 3.0]])
    rho = spearman_corr(pred, target, alpha=1e-3)
    assert math.isnan(float(rho[0]))  # before: 0
    assert float(rho[1]) == pytest.approx(1.0)
    assert math.isnan(spearmanr([1.0, 1.0, 1.0], [3.0, 1.0, 2.0]).statistic)
    rho[1].backward()
    assert bool(torch.isfinite(pred.grad).all())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(-5, 5), min_size=3, max_size=8).flatmap(
        lambda a: st.tuples(st.just(a), st.permutations(list(range(len(a)))))
    ),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_spearman_with_tiny_alpha_equals_scipy(data, dtype):
    a, b = data
    pred = torch.tensor(a, dtype=dtype) + 1e-2 * torch.arange(len(a), dtype=dtype)  # no ties
    target = torch.tensor(b, dtype=dtype)
    expected = spearmanr(pred.double().numpy(), target.double().numpy()).statistic
    got = float(spearman_corr(pred, target, alpha=1e-4))
    assert got == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("alpha", [np.float64(0.5), 0.5, torch.tensor(0.5)])
def test_numpy_and_python_scalars_are_accepted(alpha):
    x = torch.tensor([3.0, 1.0, 2.0])
    assert torch.allclose(soft_rank(x, alpha), soft_rank(x, 0.5))


@pytest.mark.parametrize("alpha", [math.nan, True])
def test_bad_alpha_is_refused_naming_it(alpha):
    with pytest.raises((TypeError, ValueError), match="alpha"):
        soft_rank(torch.tensor([3.0, 1.0, 2.0]), alpha)


# -- brute-force definitions in float64 (paper Eq. 1-3) -------------------------------------
def _F(z: float) -> float:
    """The Laplace CDF."""
    return 0.5 * math.exp(z) if z < 0 else 1 - 0.5 * math.exp(-z)


def _solve(f, target: float, lo: float, hi: float) -> float:
    """``t`` with ``f(t) = target`` for an increasing ``f``, by bisection to round-off."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return 0.5 * (lo + hi)


def _rank(x, a):
    return [sum(_F((xi - xj) / a) for j, xj in enumerate(x) if j != i) for i, xi in enumerate(x)]


def _topk(x, k, a):
    span = (min(x) - 60 * a - 1, max(x) + 60 * a + 1)
    t = _solve(lambda t: -sum(_F((xi - t) / a) for xi in x), -k, *span)
    return [_F((xi - t) / a) for xi in x]


def _sort(x, a):
    span = (min(x) - 60 * a - 1, max(x) + 60 * a + 1)
    return [
        _solve(lambda t: sum(_F((t - xi) / a) for xi in x), l + 0.5, *span) for l in range(len(x))
    ]


rows = st.lists(st.floats(-5, 5, width=32), min_size=1, max_size=7)
alphas = st.floats(0.05, 5.0)


@settings(max_examples=40, deadline=None)
@given(x=rows, a=alphas)
def test_soft_rank_and_sort_equal_the_brute_force_definitions(x, a):
    t = torch.tensor(x, dtype=torch.float64)
    assert soft_rank(t, a).tolist() == pytest.approx(_rank(x, a), rel=1e-9, abs=1e-9)
    assert float(soft_rank(t, a).sum()) == pytest.approx(len(x) * (len(x) - 1) / 2)
    assert soft_sort(t, a).tolist() == pytest.approx(_sort(x, a), rel=1e-8, abs=1e-8)


@settings(max_examples=40, deadline=None)
@given(x=rows.filter(lambda v: len(v) >= 2), a=alphas, frac=st.floats(0.05, 0.95))
def test_soft_topk_equals_the_brute_force_definition(x, a, frac):
    k = frac * len(x)
    p = soft_topk(torch.tensor(x, dtype=torch.float64), k, a)
    assert p.tolist() == pytest.approx(_topk(x, k, a), rel=1e-7, abs=1e-9)
    assert float(p.sum()) == pytest.approx(k, rel=1e-9)


SCALAR_FORMS = [
    float,
    np.float64,
    np.float32,
    np.float16,
    lambda v: torch.tensor(v),
    lambda v: torch.tensor(v, dtype=torch.float64),
    lambda v: np.array(v),  # a 0-d array
]


@pytest.mark.parametrize("form", SCALAR_FORMS)
def test_every_scalar_form_of_alpha_k_and_dim(form):
    x = torch.tensor([[3.0, 1.0, 2.0, 0.5]], dtype=torch.float64)
    a = float(form(0.5))  # the value the form holds (np.float16(0.5) is exact)
    assert torch.allclose(soft_rank(x, form(0.5)), soft_rank(x, a))  # before: np.float32 refused
    assert torch.allclose(soft_sort(x, form(0.5)), soft_sort(x, a))
    assert torch.allclose(soft_topk(x, form(2.0), form(0.5)), soft_topk(x, 2.0, a))
    assert torch.allclose(soft_topk(x, np.int64(2), a), soft_topk(x, 2, a))
    assert torch.allclose(soft_rank(x, a, dim=np.int64(-1)), soft_rank(x, a, dim=-1))


@pytest.mark.parametrize("bad", [np.float32(math.nan), np.float32(-1.0), np.float64(math.inf)])
def test_bad_numpy_alpha_is_refused_naming_its_value(bad):
    with pytest.raises(ValueError, match="alpha must be finite and > 0"):
        soft_rank(torch.tensor([3.0, 1.0, 2.0]), bad)


@pytest.mark.parametrize("bad", [np.bool_(True), "0.5", np.array([0.5, 0.5])])
def test_non_numbers_are_refused_as_such(bad):
    with pytest.raises((TypeError, ValueError), match="alpha"):
        soft_rank(torch.tensor([3.0, 1.0, 2.0]), bad)
    with pytest.raises(TypeError, match="dim must be an int"):
        soft_rank(torch.tensor([3.0, 1.0, 2.0]), 0.5, dim=np.float32(0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_low_precision_inputs_match_float64_within_their_precision(dtype):
    x = torch.tensor([[0.3, -1.2, 2.5, 0.0, 1.1]])
    ref = soft_rank(x.to(dtype).double(), 0.5)
    got = soft_rank(x.to(dtype), 0.5)
    assert got.dtype == dtype
    assert torch.allclose(got.double(), ref, rtol=2 * torch.finfo(dtype).eps, atol=1e-6)
    top = soft_topk(x.to(dtype), 2, 0.5)
    assert (
        top.dtype == dtype and abs(float(top.double().sum()) - 2) < 5 * 5 * torch.finfo(dtype).eps
    )


def test_one_element_and_empty_rows():
    assert soft_rank(torch.tensor([4.0]), 0.5).tolist() == [0.0]
    assert soft_sort(torch.tensor([4.0]), 0.5).tolist() == pytest.approx([4.0])
    with pytest.raises(ValueError, match="n = 0"):
        soft_rank(torch.zeros(2, 0), 0.5)
    with pytest.raises(ValueError, match="k"):
        soft_topk(torch.tensor([4.0]), 1, 0.5)  # k must be inside (0, n)


@settings(max_examples=40, deadline=None)
@given(
    x=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=6),
    t=st.floats(-1e3, 1e3),
    alpha=st.sampled_from([0.01, 1.0, 30.0]),
)
def test_lapsum_gradient_equals_the_brute_force_at_any_spread(x, t, alpha):
    """``lapsum``'s autograd gradient (to x, t and alpha) equals float64 autograd of
    ``sum_i Lap((t - x_i) / alpha)``, for rows of any spread (before: NaN once the spread passed
    ~354 alpha, the reciprocal's derivative overflowing, and past 600 the logcumsumexp rows'
    untaken branch)."""
    from icml25.lapsum import lapsum
    from icml25.lapsum.functional import laplace_cdf

    xs = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    ts = torch.tensor([t], dtype=torch.float64, requires_grad=True)
    a = torch.tensor(alpha, dtype=torch.float64, requires_grad=True)
    lapsum(xs, ts, alpha=a).sum().backward()
    got = [xs.grad.clone(), ts.grad.clone(), a.grad.clone()]
    for v in (xs, ts, a):
        v.grad = None
    u = (ts - xs) / a
    ref = torch.where(u <= 0, 0.5 * torch.exp(u.clamp(max=0)), 1 - 0.5 * torch.exp(-u.clamp(min=0)))
    ref.sum().backward()
    # The components are bounded by G = n S / alpha, S = 1 + the spread of x and t in units of
    # alpha. Rows wider than 600 alpha are scanned in log space relative to the row's median, so
    # their round-off is eps S relative (docs/lapsum.md, Precision): a tolerance of 4 eps S G
    S = 1 + (max(x + [t]) - min(x + [t])) / alpha
    atol = 4 * torch.finfo(torch.float64).eps * S * (len(x) * S / alpha)
    for g, r in zip(got, (xs.grad, ts.grad, a.grad)):
        assert bool(torch.isfinite(g).all()), got
        torch.testing.assert_close(g, r, rtol=1e-9, atol=atol)
    # laplace_cdf's derivative is the density everywhere, 1/2 at 0 (before: 0 through |x|)
    z = torch.tensor([0.0, -0.0, 1e-30, -3.0, 3.0], dtype=torch.float64, requires_grad=True)
    laplace_cdf(z).sum().backward()
    torch.testing.assert_close(z.grad, 0.5 * torch.exp(-z.detach().abs()))
