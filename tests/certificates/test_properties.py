"""Property tests at the certificates package's public boundary (issue 49): numpy and Python
scalars, float32/float64/bfloat16 distributions, NaN/inf, empty and degenerate input, and
random small MDPs against a brute-force reference (docs/certificates.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.certificates import (
    DTCBFFilter,
    OfflineDataset,
    SafetyCertificate,
    SafetyQ,
    candidate_filter,
)
from icml25.certificates.qfunctions import exact_safety_q, risk_policy

D = torch.float64
SCALARS = [lambda v: v, np.float64, np.float32, lambda v: torch.tensor(v)]
INTS = [lambda v: v, np.int64, np.int32, lambda v: torch.tensor(v)]


def _kernel(seed: int, X: int, U: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    k = torch.rand(X, U, X, generator=g, dtype=D) + 0.05
    return k / k.sum(-1, keepdim=True)


def _brute_force_v(K, safe, H, pi):
    """Backward induction written out with Python loops."""
    X, U, _ = K.shape
    V = [[float(safe[x]) for x in range(X)]]
    for _ in range(H):
        prev = V[-1]
        V.append(
            [
                float(safe[x])
                * sum(
                    float(pi[u]) * sum(float(K[x, u, y]) * prev[y] for y in range(X))
                    for u in range(U)
                )
                for x in range(X)
            ]
        )
    return torch.tensor(V, dtype=D)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    X=st.integers(1, 4),
    U=st.integers(1, 3),
    H=st.integers(1, 3),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
    mask=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_exact_safety_q_equals_brute_force(seed, X, U, H, dtype, mask):
    K = _kernel(seed, X, U)
    pi = torch.ones(U, dtype=dtype) / U
    safe = torch.tensor(mask[:X])
    Q, V = exact_safety_q(K.to(dtype) if dtype != torch.bfloat16 else K, safe, np.int64(H), pi)
    ref = _brute_force_v(K, safe, H, risk_policy(pi, X, U, H)[1, 0])
    tol = 1e-12 if dtype != torch.float32 else 1e-5
    assert torch.allclose(V, ref, atol=tol)
    assert bool(((V >= 0) & (V <= 1)).all())


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    un=st.integers(0, 2),
    t=st.integers(0, 2),
    conv=st.sampled_from(INTS),
    alpha=st.sampled_from([0.0, 0.3]),
)
def test_filter_equals_brute_force_selection(seed, un, t, conv, alpha):
    X, U, H = 3, 3, 3
    K = _kernel(seed, X, U)
    safe = torch.tensor([True, True, False])
    Q, V = exact_safety_q(K, safe, H)
    cert = SafetyCertificate(SafetyQ(Q, V, safe), eps=np.float32(0.2), alpha=alpha)
    for x in range(2):
        u, info = cert.filter(conv(x), conv(t), conv(un))
        k = H - t
        margins = [cert.margin(x, v, t) for v in range(U)]
        ok = [v for v in range(U) if margins[v] >= -1e-12]
        if ok:
            best = min(ok, key=lambda v: (abs(v - un), -float(Q[k, x, v]), v))
            assert u == best and not info["fallback"]
            assert info["margin"] >= -1e-12
        else:
            assert info["fallback"] and u == int(Q[k, x].argmax())


@pytest.mark.parametrize("conv", SCALARS)
def test_certificate_scalars_numpy_and_python(conv):
    K = _kernel(0, 3, 2)
    Q, V = exact_safety_q(K, [True, True, False], 2)
    cert = SafetyCertificate(
        SafetyQ(Q, V, torch.tensor([True, True, False])), eps=conv(0.2), alpha=conv(0.5)
    )
    assert cert.eps == pytest.approx(0.2) and cert.alpha == 0.5
    for bad in (float("nan"), float("inf"), 0.0, 1.0):
        with pytest.raises(ValueError, match="eps must be a finite number in \\(0, 1\\)"):
            SafetyCertificate(cert.q, eps=conv(bad))
    with pytest.raises(ValueError, match="alpha must be a finite number"):
        SafetyCertificate(cert.q, alpha=True)


@settings(max_examples=40, deadline=None)
@given(
    nominal=st.lists(st.floats(-5, 5), min_size=1, max_size=2),
    radius=st.floats(0.05, 2.0),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 100),
)
def test_candidate_filter_never_mislabels(nominal, radius, dtype, seed):
    def margin_fn(c):
        return radius - c.abs().sum(-1)

    def q_fn(c):
        return -(c**2).sum(-1)

    u0 = torch.tensor(nominal, dtype=dtype)
    u, info = candidate_filter(
        q_fn,
        margin_fn,
        u0,
        -1.0,
        1.0,
        n_candidates=np.int64(32),
        generator=torch.Generator().manual_seed(seed),
    )
    assert bool(((u >= -1) & (u <= 1)).all())
    assert info["margin"] == pytest.approx(float(margin_fn(u[None])[0]))
    if not info["fallback"]:
        assert info["margin"] >= -1e-12
    else:
        assert info["margin"] < 0


@pytest.mark.parametrize(
    "u0", [[float("nan")], [0.0, float("inf")], torch.tensor([float("nan")], dtype=torch.bfloat16)]
)
def test_candidate_filter_refuses_non_finite(u0):
    with pytest.raises(ValueError, match="u_nominal must be finite"):
        candidate_filter(lambda c: c[:, 0], lambda c: c[:, 0], u0, -1.0, 1.0)


def test_candidate_filter_degenerate_inputs():
    f = lambda c: c[:, 0]  # noqa: E731
    with pytest.raises(ValueError, match="u_nominal must hold at least one"):
        candidate_filter(f, f, [], -1.0, 1.0)
    with pytest.raises(ValueError, match="low < high"):
        candidate_filter(f, f, [0.0], 1.0, 1.0)
    with pytest.raises(ValueError, match="the action box must be finite"):
        candidate_filter(f, f, [0.0], -math.inf, 1.0)
    with pytest.raises(ValueError, match="n_candidates must be an integer >= 2"):
        candidate_filter(f, f, [0.0], -1.0, 1.0, n_candidates=2.0)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 20),
    U=st.integers(1, 4),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)
def test_risk_policies_in_any_float_dtype(n, U, dtype):
    X, H = n, 2
    p = torch.rand(X, U, generator=torch.Generator().manual_seed(n)).to(dtype) + 0.1
    p = p / p.sum(-1, keepdim=True)  # normalised in its own dtype
    out = risk_policy(p, X, U, H)
    assert out.dtype == D and torch.allclose(out.sum(-1), torch.ones(H + 1, X, dtype=D))
    bad = p.clone()
    bad[0, 0] = bad[0, 0] + 0.5
    with pytest.raises(ValueError, match="pi_risk must sum to 1"):
        risk_policy(bad, X, U, H)
    nan = p.clone()
    nan[0, 0] = float("nan")
    with pytest.raises(ValueError, match="pi_risk must be finite"):
        risk_policy(nan, X, U, H)


@settings(max_examples=25, deadline=None)
@given(
    col=st.sampled_from(["x", "u", "m", "x_next"]),
    bad=st.sampled_from([float("nan"), 0.5, -1.0, "a"]),
)
def test_offline_dataset_bad_columns_are_named(col, bad):
    cols = {"x": [0, 1], "u": [1, 0], "m": [0, 0], "x_next": [1, 1]}
    cols[col] = [0, bad] if not isinstance(bad, str) else np.array(["0", bad])
    with pytest.raises(ValueError, match=rf"^(column '{col}'|{col}) must hold"):
        OfflineDataset.from_frame(cols)


def test_offline_dataset_empty_and_numpy_columns():
    with pytest.raises(ValueError, match="the dataset is empty"):
        OfflineDataset([], [], [], [])
    ds = OfflineDataset(
        np.array([0, 1], dtype=np.int32),
        np.array([1.0, 0.0]),
        None,
        torch.tensor([1, 1], dtype=torch.int16),
    )
    assert ds.u.dtype == torch.long and ds.u.tolist() == [1, 0]


@pytest.mark.parametrize("conv", SCALARS[:3])
def test_dtcbf_scalars_and_bad_alpha(conv):
    K = _kernel(1, 3, 2)
    h = torch.tensor([1.0, 0.5, 0.0])
    f = DTCBFFilter(K, h, alpha_cbf=conv(0.5), horizon=np.int64(4))
    assert f.alpha == 0.5 and f.horizon == 4
    for bad in (float("nan"), 1.5, -0.1):
        with pytest.raises(ValueError, match="alpha_cbf must be a finite number in \\[0, 1\\]"):
            DTCBFFilter(K, h, alpha_cbf=conv(bad))
    with pytest.raises(ValueError, match="h must be a finite barrier value"):
        DTCBFFilter(K, torch.tensor([1.0, float("nan"), 0.0]))
