"""Property tests at the distinguishability package's public boundary (issue 49): numpy and
Python scalars, float32/float64/bfloat16 tensors, NaN/inf, empty and degenerate input, and
the labeler model against its closed form (docs/distinguishability.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.distinguishability import (
    RewardEnsemble,
    RewardLearner,
    SegmentBuffer,
    select_dq,
    select_pcq,
)
from icml25.distinguishability.reward_model import dq_answer_probs, dq_loss, pcq_loss
from icml25.distinguishability.selection import dq_scores
from icml25.distinguishability.utility import fit_utilities, sample_lotteries

INTS = [lambda v: v, np.int64, np.int32, lambda v: torch.tensor(v)]
REALS = [lambda v: v, np.float64, np.float32, lambda v: torch.tensor(v)]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


@settings(max_examples=40, deadline=None)
@given(
    K=st.integers(1, 4),
    N=st.integers(0, 5),
    dtype=st.sampled_from(DTYPES),
    beta=st.floats(0.1, 3.0),
    seed=st.integers(0, 1000),
)
def test_labeler_model_is_a_distribution_and_matches_the_closed_form(K, N, dtype, beta, seed):
    g = torch.Generator().manual_seed(seed)
    r = [torch.randn(K, N, generator=g, dtype=torch.float64).to(dtype) for _ in range(4)]
    p_d, p_y = dq_answer_probs(*r, beta_d=np.float32(beta), beta_p=beta, eps=np.float64(1e-3))
    assert p_d.shape == (K, N) and p_y.shape == (K, N, 2) and p_d.dtype == dtype
    r64 = [x.double() for x in r]
    d1, d2 = r64[0] - r64[1], r64[2] - r64[3]
    sab = lambda z: torch.sqrt(z * z + 1e-3**2)  # noqa: E731
    ref = torch.sigmoid(float(np.float32(beta)) * (sab(d1) - sab(d2)))
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    assert torch.allclose(p_d.double(), ref, atol=tol)
    total = sum(
        (p_d if d == 1 else 1 - p_d) * (p_y[..., d - 1] if y else 1 - p_y[..., d - 1])
        for d in (1, 2)
        for y in (0, 1)
    )
    assert torch.allclose(total.double(), torch.ones(K, N, dtype=torch.float64), atol=tol)


@settings(max_examples=30, deadline=None)
@given(
    K=st.integers(1, 4),
    C=st.integers(0, 6),
    dtype=st.sampled_from(DTYPES),
    kind=st.sampled_from(["disagreement", "entropy"]),
)
def test_dq_scores_finite_in_every_dtype(K, C, dtype, kind):
    ret = torch.randn(K, C, 4, generator=torch.Generator().manual_seed(C)).to(dtype)
    info, easy = dq_scores(ret, informativeness_kind=kind, eps=np.float32(1e-3))
    assert info.shape == easy.shape == (C,) and info.dtype == dtype
    assert bool(torch.isfinite(info).all() & torch.isfinite(easy).all())


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_dq_scores_refuse_non_finite_returns(bad):
    ret = torch.randn(3, 4, 4)
    ret[1, 2, 3] = bad
    with pytest.raises(ValueError, match="ret .* holds NaN or inf"):
        dq_scores(ret)
    for eps in (0.0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="eps must be a finite number > 0"):
            dq_scores(torch.randn(3, 4, 4), eps=eps)


def test_losses_propagate_nan_returns():
    # documented: NaN returns give a NaN loss (as torch's own losses), never a finite number
    r0, r1 = torch.randn(2, 4), torch.randn(2, 4)
    r0[0, 0] = float("nan")
    assert math.isnan(float(pcq_loss(r0, r1, torch.tensor([1.0, 0.0, 0.5, 1.0]))))
    d = torch.tensor([1.0, 2.0, 1.0, 2.0])
    y = torch.tensor([1.0, 0.0, 1.0, 0.5])
    assert math.isnan(float(dq_loss(r0, r1, r1, r1, d, d, y)))


@pytest.mark.parametrize("conv", REALS)
def test_noise_prob_scalars(conv):
    r0, r1 = torch.randn(2, 4), torch.randn(2, 4)
    y = torch.tensor([1.0, 0.0, 0.5, 1.0])
    a = pcq_loss(r0, r1, y, noise_prob=conv(0.25))
    b = pcq_loss(r0, r1, y, noise_prob=0.25)
    assert torch.allclose(a, b)
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="noise_prob must be a finite number in \\[0, 1\\)"):
            pcq_loss(r0, r1, y, noise_prob=conv(bad))


@pytest.fixture(scope="module")
def small():
    g = torch.Generator().manual_seed(0)
    buf = SegmentBuffer(
        torch.randn(30, 5, 3, generator=g),
        torch.randn(30, 5, 1, generator=g),
        torch.randn(30, 5, generator=g),
    )
    torch.manual_seed(0)
    return RewardEnsemble(3, 1, 2, 8, 1), buf


@settings(max_examples=30, deadline=None)
@given(
    conv=st.sampled_from(INTS),
    n=st.integers(0, 5),
    lb=st.integers(2, 4),
    method=st.sampled_from(["distq", "uniform", "informative", "easy"]),
)
def test_select_accepts_numpy_and_torch_integers(small, conv, n, lb, method):
    ens, buf = small
    a = select_dq(ens, buf, conv(n), method, conv(lb), keep_frac=np.float32(0.5), rng=1)
    b = select_dq(ens, buf, n, method, lb, keep_frac=0.5, rng=1)
    assert a == b and len(a) == n
    for q in a:
        assert all(0 <= i < len(buf) for i in (q.q1.i0, q.q1.i1, q.q2.i0, q.q2.i1))
    p = select_pcq(ens, buf, conv(n), "disagreement", conv(lb), rng=1)
    assert p == select_pcq(ens, buf, n, "disagreement", lb, rng=1)


@pytest.mark.parametrize("bad", [-1, 2.5, True, float("nan"), "3"])
def test_select_refuses_bad_counts(small, bad):
    ens, buf = small
    with pytest.raises(ValueError, match="n \\(queries to select\\) must be an integer >= 0"):
        select_dq(ens, buf, bad)
    with pytest.raises(ValueError, match="large_batch must be an integer >= 1"):
        select_pcq(ens, buf, 2, large_batch=bad if bad != -1 else 0)
    with pytest.raises(ValueError, match="keep_frac must be a finite number in \\(0, 1\\]"):
        select_dq(ens, buf, 2, keep_frac=0.0)


def test_degenerate_buffers_and_ensembles(small):
    ens, _ = small
    tiny = SegmentBuffer(torch.randn(3, 5, 3), torch.randn(3, 5, 1), torch.randn(3, 5))
    with pytest.raises(ValueError, match="the buffer holds 3 segments; at least 4 are needed"):
        select_dq(ens, tiny, 1)
    const = SegmentBuffer(torch.zeros(6, 5, 3), torch.zeros(6, 5, 1), torch.zeros(6, 5))
    qs = select_dq(ens, const, 2, rng=0)  # every score ties: still n valid queries
    assert len(qs) == 2
    with pytest.raises(ValueError, match="obs has a non-finite value"):
        SegmentBuffer(torch.full((2, 5, 3), float("nan")), torch.zeros(2, 5, 1), torch.zeros(2, 5))
    for name, kw in (("n_members", {"n_members": 0}), ("hidden", {"hidden": 2.0})):
        with pytest.raises(ValueError, match=f"{name} must be an integer"):
            RewardEnsemble(3, 1, **kw)
    e = RewardEnsemble(np.int64(3), np.int32(1), n_members=torch.tensor(2), hidden=np.int64(4))
    assert e.K == 2


@pytest.mark.parametrize("conv", REALS)
def test_learner_scalars(small, conv):
    ens, _ = small
    lr = RewardLearner(
        ens,
        lr=conv(1e-3),
        noise_prob=conv(0.1),
        stop_acc=conv(0.9),
        max_epochs=np.int64(3),
        batch_size=np.int32(8),
    )
    assert lr.noise_prob == pytest.approx(0.1) and lr.max_epochs == 3
    for kw in (
        {"lr": 0.0},
        {"lr": float("nan")},
        {"eps": 0.0},
        {"stop_acc": 1.5},
        {"max_epochs": -1},
        {"batch_size": 0},
    ):
        with pytest.raises(ValueError, match=next(iter(kw))):
            RewardLearner(ens, **kw)


@settings(max_examples=25, deadline=None)
@given(n_items=st.integers(2, 5), conv=st.sampled_from(INTS), seed=st.integers(0, 100))
def test_fit_utilities_orders_a_consistent_ranking(n_items, conv, seed):
    rng = np.random.default_rng(seed)
    u_true = rng.permutation(n_items).astype(float)
    pcq = [
        (i, j, 1.0 if u_true[i] > u_true[j] else 0.0)
        for i in range(n_items)
        for j in range(n_items)
        if i != j
    ]
    u = fit_utilities(conv(n_items), pcq, steps=np.int64(300))
    assert u.shape == (n_items,) and bool(torch.isfinite(u).all())
    assert torch.argsort(u).tolist() == np.argsort(u_true).tolist()


def test_fit_utilities_and_lotteries_refuse_bad_input():
    with pytest.raises(ValueError, match="n_items must be an integer >= 2"):
        fit_utilities(1, [(0, 0, 1.0)])
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        fit_utilities(2, [(0, 1, 1.0)], lr=float("nan"))
    with pytest.raises(ValueError, match="u_true holds NaN or inf"):
        sample_lotteries(torch.tensor([0.0, float("nan"), 1.0]), 3)
    rows = sample_lotteries(torch.tensor([0.0, 2.0, 1.0, 3.0]), np.int64(5), rng=0)
    assert rows.shape == (5, 4)
    assert sample_lotteries(torch.tensor([0.0, 2.0, 1.0]), 0).shape[0] == 0


def test_dq_scores_of_no_candidates_are_empty_and_quiet():
    # before: two std() warnings over an empty dimension; a bad kind is refused even then
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        info, easy = dq_scores(torch.randn(3, 0, 4))
    assert info.shape == easy.shape == (0,)
    with pytest.raises(ValueError, match="informativeness must be 'disagreement' or 'entropy'"):
        dq_scores(torch.randn(3, 0, 4), informativeness_kind="variance")
    # before: NaN scores for an empty ensemble
    with pytest.raises(ValueError, match="at least one ensemble member .* got K = 0"):
        dq_scores(torch.randn(0, 3, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("noise_prob", [1e-12, 1e-8, 0.1])
def test_pcq_loss_with_label_noise_is_finite_and_exact(dtype, noise_prob):
    # before: NaN value and gradient once p = (1 - eps) sigma(z) + eps/2 rounded to 1 (float32,
    # eps < ~6e-8, |z| > ~17): (1 - t) log(1 - p) was 0 * -inf
    r0 = torch.tensor([[20.0, -30.0, 0.5, 3.0]], dtype=dtype, requires_grad=True)
    r1 = torch.zeros(1, 4, dtype=dtype)
    y = torch.tensor([1.0, 1.0, 0.5, 0.0])
    loss = pcq_loss(r0, r1, y, noise_prob=noise_prob)
    loss.backward()
    zd = r0.detach().double().requires_grad_(True)
    p = (1 - noise_prob) * torch.sigmoid(zd) + noise_prob / 2
    t = y.double()
    ref = -(
        t * p.log() + (1 - t) * torch.log1p(-(1 - noise_prob) * torch.sigmoid(zd) - noise_prob / 2)
    ).mean()
    ref.backward()
    assert bool(torch.isfinite(r0.grad).all())
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert float(loss) == pytest.approx(float(ref), rel=tol)
    assert torch.allclose(r0.grad.double(), zd.grad, rtol=tol, atol=tol)
