"""Property-based tests at the public boundary of ``icml25.contrastive`` (issue 49): numpy and
Python scalars, float32/float64/bf16 views, NaN/inf, empty and degenerate inputs (constant
rows, one row), and random views against brute-force loops and closed forms."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.contrastive import ContrastiveLoss, similarity_stats, theory, vrns_loss
from icml25.contrastive.losses import (
    dcl_loss,
    infonce_loss,
    nt_xent_loss,
    sigmoid_loss,
    spectral_contrastive_loss,
)

SETTINGS = settings(max_examples=30, deadline=None)
SCALARS = [float, np.float32, np.float64]


def _views(m, d, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(m, d, generator=g, dtype=torch.float64)
    v = torch.randn(m, d, generator=g, dtype=torch.float64)
    return u.to(dtype), v.to(dtype)


def _unit(x):
    return [[a / math.sqrt(sum(b * b for b in row)) for a in row] for row in x.double().tolist()]


def _dot(a, b):
    return sum(x * y for x, y in zip(a, b))


def _brute_family(u, v, t, c1, c2, psi):
    """Def. 3.1 written as loops, both directions averaged over the 2m anchors."""
    U, V = _unit(u), _unit(v)
    m = len(U)
    out = []
    for A, B in ((U, V), (V, U)):
        for i in range(m):
            pos = math.exp(_dot(A[i], B[i]) / t)
            neg = 0.0
            for j in range(m):
                if j != i:
                    neg += c1 * math.exp(_dot(A[i], B[j]) / t) + c2 * math.exp(_dot(A[i], A[j]) / t)
            out.append(-math.log(pos / (pos + neg)) if psi == "log1p" else -math.log(pos / neg))
    return sum(out) / len(out)


@SETTINGS
@given(
    st.integers(2, 5),
    st.integers(1, 4),
    st.integers(0, 2**16),
    st.floats(0.05, 2.0),
    st.sampled_from(SCALARS),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_infonce_family_against_loops(m, d, seed, t, kind, dtype):
    u, v = _views(m, d, seed, dtype)
    tol = dict(rel=1e-4, abs=1e-5) if dtype == torch.float32 else dict(rel=1e-9)
    temp = kind(t)
    for fn, c1, c2, psi in (
        (infonce_loss, 1, 0, "log1p"),
        (nt_xent_loss, 1, 1, "log1p"),
        (dcl_loss, 1, 1, "log"),
    ):
        got = fn(u, v, temp)
        assert got.dtype == dtype
        assert float(got) == pytest.approx(_brute_family(u, v, float(temp), c1, c2, psi), **tol)


@SETTINGS
@given(
    st.integers(2, 6),
    st.integers(1, 4),
    st.integers(0, 2**16),
    st.sampled_from([2, 4]),
    st.integers(2, 100),
)
def test_vrns_against_loops(m, d, seed, p, n_train):
    u, v = _views(m, d, seed)
    U, V = _unit(u), _unit(v)
    delta = -1 / (n_train - 1)
    terms = [(_dot(U[i], V[j]) - delta) ** p for i in range(m) for j in range(m) if i != j]
    want = sum(terms) / len(terms)
    for n, pp in ((n_train, p), (np.int64(n_train), np.int32(p))):
        assert float(vrns_loss(u, v, n_train=n, p=pp)) == pytest.approx(want, rel=1e-9)


@SETTINGS
@given(
    st.integers(2, 5),
    st.integers(1, 4),
    st.integers(0, 2**16),
    st.floats(0.5, 20),
    st.floats(-15, 5),
    st.sampled_from(SCALARS),
)
def test_sigmoid_loss_against_loops(m, d, seed, t, bias, kind):
    u, v = _views(m, d, seed)
    U, V = _unit(u), _unit(v)
    tt, bb = float(kind(t)), float(kind(bias))

    def sp(x):
        return math.log1p(math.exp(-abs(x))) + max(x, 0.0)

    want = sum(sp(-(tt * _dot(U[i], V[i]) + bb)) for i in range(m)) / m
    want += sum(sp(tt * _dot(U[i], V[j]) + bb) for i in range(m) for j in range(m) if i != j) / m
    got = sigmoid_loss(u, v, kind(t), kind(bias))
    assert float(got) == pytest.approx(want, rel=1e-6)


@SETTINGS
@given(
    m=st.integers(2, 6),
    d=st.integers(2, 5),
    seed=st.integers(0, 2**16),
    terms=st.sampled_from([(1, 0), (0, 1), (1, 1)]),
    psi=st.sampled_from(["log1p", "log"]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    repeat=st.booleans(),
)
def test_all_positives_gradient_is_finite_and_matches_float64(
    m, d, seed, terms, psi, dtype, repeat
):
    """``positives="all"``: with instance ids it equals the instance reading, gradient included;
    with repeated labels the float32 gradient is float64's (before: NaN in float32 whenever an
    anchor was its id's only row and within-view terms were on, the untaken branch's log(0))."""
    from icml25.contrastive.losses import info_nce_family

    index = torch.arange(m) // 2 if repeat else torch.arange(m)
    if repeat and terms == (1, 0) and m <= 2:
        return  # every cross-view entry shares the anchor's id: no negatives (refused)

    def loss_and_grad(dt, positives):
        u, v = (x.to(dt).requires_grad_(True) for x in _views(m, d, seed))
        loss = info_nce_family(
            u,
            v,
            c1=terms[0],
            c2=terms[1],
            psi=psi,
            temperature=0.3,
            index=index,
            positives=positives,
        )
        loss.backward()
        return float(loss), torch.cat([u.grad, v.grad]).double()

    try:
        ref_loss, ref_grad = loss_and_grad(torch.float64, "all")
    except ValueError as exc:  # an anchor with no negatives is refused in every dtype
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            loss_and_grad(dtype, "all")
        return
    loss, grad = loss_and_grad(dtype, "all")
    assert bool(torch.isfinite(grad).all()), grad
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    assert loss == pytest.approx(ref_loss, rel=tol, abs=tol)
    assert torch.allclose(grad, ref_grad, rtol=10 * tol, atol=10 * tol)
    if not repeat:
        inst_loss, inst_grad = loss_and_grad(dtype, "instance")
        assert loss == pytest.approx(inst_loss, rel=tol, abs=tol)
        assert torch.allclose(grad, inst_grad, rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("m", [2, 3, 7])
def test_constant_rows_give_the_closed_form(m):
    # every similarity is 1: InfoNCE = log m, NT-Xent = log(2m - 1), spectral = -1 + 1 = 0
    u = torch.ones(m, 3, dtype=torch.float64)
    assert float(infonce_loss(u, u.clone(), 0.3)) == pytest.approx(math.log(m))
    assert float(nt_xent_loss(u, u.clone(), np.float32(0.3))) == pytest.approx(math.log(2 * m - 1))
    assert float(spectral_contrastive_loss(u, u.clone())) == pytest.approx(0.0, abs=1e-12)
    # every negative similarity is 1: VRNS (s - delta)^2 vanishes at delta = 1
    assert float(vrns_loss(u, u.clone(), delta=np.float64(1.0))) == pytest.approx(0.0, abs=1e-24)


def test_bf16_views_compute_in_float32_and_stay_close():
    u, v = _views(6, 8, 3, torch.float32)
    ref = nt_xent_loss(u, v, 0.2)
    got = nt_xent_loss(u.to(torch.bfloat16), v.to(torch.bfloat16), np.float32(0.2))
    assert got.dtype == torch.float32
    assert float(got) == pytest.approx(float(ref), abs=0.02)
    crit = ContrastiveLoss(
        "simclr", np.float64(0.2), vrns_weight=np.float32(1.0), n_train=np.int64(100)
    )
    assert crit(u.to(torch.bfloat16), v.to(torch.bfloat16)).dtype == torch.float32


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0, True, "0.1", np.nan])
def test_bad_temperatures_name_the_value(bad):
    u, v = _views(4, 3, 0)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0, got"):
        infonce_loss(u, v, bad)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0, got"):
        ContrastiveLoss("dcl", temperature=bad)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ContrastiveLoss("simclr", vrns_weight=float("nan")), "vrns_weight must be"),
        (lambda: ContrastiveLoss("simclr", vrns_weight=1, n_train=1), "n_train must be"),
        (lambda: ContrastiveLoss("simclr", p=np.int64(3)), "p must be an even integer >= 2"),
        (lambda: ContrastiveLoss("siglip", bias=float("inf")), "bias must be a finite number"),
        (lambda: ContrastiveLoss("simclr", log_every=np.int64(0)), "log_every must be"),
        (lambda: theory.etf_threshold(1), "n must be an integer >= 2, got 1"),
        (lambda: theory.minibatch_variance_bounds(10, np.int64(3)), "m dividing n"),
    ],
)
def test_bad_settings_name_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_non_finite_empty_and_one_row_views_are_refused():
    u, v = _views(4, 3, 0)
    for bad in (float("nan"), float("inf")):
        w = u.clone()
        w[1, 2] = bad
        with pytest.raises(ValueError, match="u or v contains NaN/inf"):
            nt_xent_loss(w, v, 0.5)
        with pytest.raises(ValueError, match="u or v contains NaN/inf"):
            ContrastiveLoss("siglip")(w, v)
    with pytest.raises(ValueError, match="m >= 2 rows"):
        infonce_loss(u[:1], v[:1], 0.1)
    with pytest.raises(ValueError, match="m >= 2 rows"):
        infonce_loss(u[:0], v[:0], 0.1)
    with pytest.raises(ValueError, match="no negative pairs"):
        vrns_loss(u, v, n_train=5, index=torch.zeros(4, dtype=torch.long))


def test_theory_takes_numpy_integers():
    assert theory.etf_threshold(np.int64(5)) == -0.25
    E = theory.simplex_etf(np.int32(4), np.int64(3))
    G = E @ E.T
    off = G[~torch.eye(4, dtype=torch.bool)]
    assert torch.allclose(off, torch.full_like(off, -1 / 3))
    assert theory.minibatch_variance_bounds(np.int64(10), np.int64(5)) == pytest.approx(
        theory.minibatch_variance_bounds(10, 5)
    )


def test_similarity_stats_refuses_non_tensors():
    u, v = _views(4, 3, 0)
    with pytest.raises(TypeError, match="u must be a torch.Tensor, got ndarray"):
        similarity_stats(u.numpy(), v)
