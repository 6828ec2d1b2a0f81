"""Property tests at SWAN's public boundary (issue 49): the whitening against the exact polar
factor from an SVD (full-rank, rank-deficient, tiny and empty matrices), every scalar form for
lr/beta/steps, bf16/float32 parameters, NaN gradients, empty parameter groups."""

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from icml25.swan import SWAN, swan_direction
from icml25.swan.functional import grad_norm, whiten


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, "float32"])
def test_non_floating_compute_dtype_is_refused_at_construction(dtype):
    with pytest.raises(ValueError, match="compute_dtype"):  # before: accepted, failed at step
        SWAN(nn.Linear(4, 4).parameters(), compute_dtype=dtype)


def test_packed_in_proj_is_whitened_per_block_by_swan_param_groups():
    from icml25.swan import swan_param_groups

    groups = swan_param_groups(nn.MultiheadAttention(8, 2))
    fused = [g for g in groups if g.get("blocks", 1) == 3]
    assert fused and any("in_proj_weight" in n for g in fused for n in g["names"])


D = torch.float64
INTS = [int, np.int64, np.int32, lambda v: torch.tensor(v)]
REALS = [float, np.float32, np.float64, lambda v: torch.tensor(v, dtype=D)]


def _polar(G: torch.Tensor, rel_tol: float = 1e-7) -> torch.Tensor:
    """``U_r V_r^T`` over the singular values above ``rel_tol * max`` (the polar factor on the
    range of G; zero for a zero matrix)."""
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)
    keep = (rel_tol * S.max() < S).to(G.dtype) if S.numel() and S.max() > 0 else S * 0
    return (U * keep) @ Vh


matrices = st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(0, 6), st.integers(0, 10**6))


def _matrix(m, n, rank, seed):
    g = torch.Generator().manual_seed(seed)
    r = min(rank, m, n)
    return torch.randn(m, r, generator=g, dtype=D) @ torch.randn(r, n, generator=g, dtype=D)


@settings(max_examples=30, deadline=None)
@given(
    shape=matrices,
    method=st.sampled_from(["eigh", "svd"]),
    scale=st.sampled_from([1e-20, 1.0, 1e20]),
)
def test_exact_whitening_is_the_polar_factor(shape, method, scale):
    G = _matrix(*shape) * scale  # rank 0..min(m, n): zero, rank-deficient and full-rank matrices
    O = whiten(G, method)
    assert O.shape == G.shape and O.dtype == G.dtype
    assert torch.allclose(O, _polar(G), atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 5), n=st.integers(1, 5), seed=st.integers(0, 10**6))
def test_newton_schulz_converges_to_the_polar_factor_at_beta_one_half(m, n, seed):
    g = torch.Generator().manual_seed(seed)
    U, _ = torch.linalg.qr(torch.randn(m, m, generator=g, dtype=D))
    V, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=D))
    k = min(m, n)
    S = torch.zeros(m, n, dtype=D)
    S[range(k), range(k)] = torch.linspace(1.0, 0.2, k, dtype=D)  # condition number <= 5
    G = U @ S @ V.T
    for method in ("ns", "nsds"):
        O = whiten(G, method, steps=40, beta=0.5)
        if method == "ns" or k == 1:  # NSDS is exact only where the Gram matrix is diagonal
            assert torch.allclose(O, _polar(G), atol=1e-8)
        assert bool(torch.isfinite(O).all())


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 0), (2, 0, 4)])
@pytest.mark.parametrize("method", ["ns", "nsds", "eigh", "svd"])
def test_empty_matrices_whiten_to_empty(shape, method):
    G = torch.zeros(shape, dtype=D)
    O = whiten(G, method)  # before: a raw IndexError from amax
    assert O.shape == G.shape and O.dtype == G.dtype


def test_empty_gradient_gives_an_empty_direction():
    assert swan_direction(torch.zeros(0, 3), norm=False).shape == (0, 3)


@pytest.mark.parametrize("i", range(4))
def test_step_and_beta_in_every_numeric_form(i):
    G = torch.randn(3, 5, generator=torch.Generator().manual_seed(0), dtype=D)
    ref = whiten(G, "ns", steps=7, beta=0.75)
    assert torch.equal(whiten(G, "ns", steps=INTS[i](7), beta=REALS[i](0.75)), ref)
    with pytest.raises(ValueError, match="steps must be an integer >= 1, got 7.0"):
        whiten(G, steps=7.0)
    with pytest.raises(ValueError, match=r"beta must be a finite number in \(0, 1\], got"):
        whiten(G, beta=REALS[i](1.5))


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 6),
    n=st.integers(2, 6),
    seed=st.integers(0, 10**6),
    scale=st.sampled_from([1e-3, 1.0, 1e3]),
)
def test_direction_has_unit_rms_and_ignores_the_gradient_scale(m, n, seed, scale):
    G = torch.randn(m, n, generator=torch.Generator().manual_seed(seed), dtype=D)
    d = swan_direction(G, whitening="eigh", compute_dtype=D)
    assert float(d.pow(2).mean().sqrt()) == pytest.approx(1.0, rel=1e-9)
    assert torch.allclose(
        swan_direction(G * scale, whitening="eigh", compute_dtype=D), d, atol=1e-9
    )
    N = grad_norm(G)
    assert torch.allclose(N.mean(-1), torch.zeros(m, dtype=D), atol=1e-9)
    assert torch.allclose(N.pow(2).mean(-1), torch.ones(m, dtype=D), rtol=1e-6)


def _step(dtype=torch.float32, grad=None, **kw):
    p = nn.Parameter(torch.randn(4, 6, generator=torch.Generator().manual_seed(0)).to(dtype))
    p.grad = (
        torch.randn(4, 6, generator=torch.Generator().manual_seed(1)).to(dtype)
        if grad is None
        else grad
    )
    before = p.detach().clone()
    opt = SWAN([{"params": [p], "use_swan": True}], **kw)
    opt.step()
    return p.detach() - before, opt


@pytest.mark.parametrize("i", range(4))
def test_optimizer_numbers_in_every_numeric_form(i):
    ref, _ = _step(lr=0.01, ns_steps=5, ns_beta=0.7)
    got, _ = _step(lr=REALS[i](0.01), ns_steps=INTS[i](5), ns_beta=REALS[i](0.7))
    assert torch.allclose(got, ref, rtol=1e-6, atol=1e-9)
    for bad, match in (
        ({"lr": REALS[i](math.nan)}, "lr must be a finite number >= 0"),
        ({"ns_steps": 0}, "ns_steps must be an integer >= 1, got 0"),
        ({"ns_beta": REALS[i](0.0)}, r"ns_beta must be a finite number in \(0, 1\]"),
        (
            {"adamw_betas": (0.9, np.float32(1.0))},
            r"betas / adamw_betas must be a finite number in \[0, 1\)",
        ),
    ):
        with pytest.raises(ValueError, match=match):
            _step(**bad)


def test_bf16_and_float32_parameters_take_the_same_step():
    d32, _ = _step(torch.float32, lr=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d16, _ = _step(torch.bfloat16, lr=0.01)
    assert d16.dtype == torch.bfloat16
    # bf16 parameters: the update is computed in float32 and rounded once into bf16
    assert torch.allclose(d16.float(), d32, atol=2 * 2**-8 * 2.5)
    assert float(d32.pow(2).mean().sqrt()) == pytest.approx(0.01, rel=1e-5)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_gradient_raises_or_skips(bad):
    grad = torch.randn(4, 6)
    grad[1, 2] = bad
    with pytest.raises(FloatingPointError, match="NaN/inf"):
        _step(grad=grad.clone())
    delta, opt = _step(grad=grad.clone(), nonfinite="skip")
    assert torch.count_nonzero(delta) == 0 and opt.skipped_steps == 1


def test_empty_parameter_lists_and_groups():
    with pytest.raises(ValueError, match="empty parameter list"):
        SWAN([])
    p = nn.Parameter(torch.randn(3, 3))
    p.grad = torch.randn(3, 3)
    opt = SWAN([{"params": [p], "use_swan": True}, {"params": [], "use_swan": False}])
    before = p.detach().clone()
    opt.step()  # an empty group is a no-op, the other still steps
    assert not torch.equal(p.detach(), before)
