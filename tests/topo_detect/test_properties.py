"""Property tests at topo_detect's public boundary (issue 49): 0-dim persistence against a
union-find (Kruskal) brute force, MMD against its direct O(n^2) formula, numpy/torch/pandas
inputs, constant and duplicate points, too few samples, every scalar form."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from icml25.topo_detect import GaussianMMD
from icml25.topo_detect.mmd import (
    gaussian_gram,
    mmd2_unbiased,
    permutation_test,
    wild_bootstrap_test,
)
from icml25.topo_detect.persistence import total_persistence, vr_diagrams

SCALARS = [int, np.int64, np.int32, lambda v: torch.tensor(v)]
REALS = [float, np.float32, np.float64, lambda v: torch.tensor(v, dtype=torch.float64)]


def _kruskal_deaths(X: np.ndarray) -> list[float]:
    """H0 deaths of the Vietoris-Rips filtration: the edge lengths a union-find keeps (the
    minimum spanning tree), zero-length edges left out (duplicates)."""
    n = len(X)
    parent = list(range(n))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    edges = sorted((math.dist(X[i], X[j]), i, j) for i in range(n) for j in range(i + 1, n))
    deaths = []
    for w, i, j in edges:
        a, b = find(i), find(j)
        if a != b:
            parent[a] = b
            deaths.append(w)
    return sorted(w for w in deaths if w > 0)


clouds = st.integers(2, 10).flatmap(
    lambda n: st.integers(1, 3).flatmap(
        lambda d: arrays(np.float64, (n, d), elements=st.floats(-10, 10, width=32))
    )
)


@settings(max_examples=50, deadline=None)
@given(X=clouds, offset=st.sampled_from([0.0, 1e3]))
def test_h0_diagram_equals_union_find(X, offset):
    X = X + offset  # far from the origin too: distances must not lose their digits
    dg = vr_diagrams(torch.as_tensor(X), max_dim=0)[0].diagram
    assert torch.all(dg[:, 0] == 0)
    ref = _kruskal_deaths(X)
    got = sorted(dg[:, 1].tolist())
    # zero-length bars are dropped; a bar shorter than the distance's round-off may be too
    ref = [w for w in ref if w > 1e-6 * max(1.0, offset)]
    got = [w for w in got if w > 1e-6 * max(1.0, offset)]
    assert got == pytest.approx(ref, rel=1e-6, abs=1e-6 * max(1.0, offset))


@settings(max_examples=25, deadline=None)
@given(X=clouds)
def test_numpy_torch_pandas_and_lists_give_the_same_diagrams(X):
    ref = vr_diagrams(X, max_dim=1)
    for form in (torch.as_tensor(X), pd.DataFrame(X), X.tolist()):
        got = vr_diagrams(form, max_dim=1)
        for a, b in zip(got, ref):
            assert torch.allclose(a.diagram.double(), b.diagram, rtol=1e-5, atol=1e-5)


def test_constant_duplicate_and_tiny_clouds():
    for X in (np.ones((5, 2)), np.zeros((1, 3)), np.zeros((0, 2))):
        assert all(len(d) == 0 for d in vr_diagrams(X, max_dim=1))
    dup = np.array([[0.0, 0.0], [0.0, 0.0], [3.0, 4.0], [3.0, 4.0]])
    (h0,) = vr_diagrams(dup, max_dim=0)
    assert h0.diagram.tolist() == [[0.0, 5.0]]  # N_distinct - 1 bars
    with pytest.raises(ValueError, match="non-finite"):
        vr_diagrams(np.array([[0.0, math.nan], [1.0, 1.0]]))


def _direct_mmd2(K: np.ndarray, n: int, one_sample_u: bool) -> float:
    m = len(K) - n
    xx = sum(K[i, j] for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    yy = sum(K[i, j] for i in range(n, n + m) for j in range(n, n + m) if i != j) / (m * (m - 1))
    if one_sample_u:
        xy = sum(K[i, n + j] for i in range(n) for j in range(m) if i != j) / (n * (n - 1))
    else:
        xy = sum(K[i, n + j] for i in range(n) for j in range(m)) / (n * m)
    return xx + yy - 2 * xy


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 6),
    m=st.integers(2, 6),
    d=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    h=st.floats(0.1, 10.0),
    form=st.sampled_from(REALS),
)
def test_mmd2_unbiased_equals_the_direct_formula(n, m, d, seed, h, form):
    F = np.random.default_rng(seed).normal(size=(n + m, d))
    K = gaussian_gram(F, bandwidth=form(h))
    direct_K = np.exp(-((F[:, None, :] - F[None, :, :]) ** 2).sum(-1) / float(form(h)))
    assert np.allclose(K.numpy(), direct_K, rtol=1e-12, atol=1e-12)
    two = float(mmd2_unbiased(K, np.int64(n), use_1sample_u=False))
    assert two == pytest.approx(_direct_mmd2(direct_K, n, False), rel=1e-10, abs=1e-12)
    if m == n:
        one = float(mmd2_unbiased(K, n))
        assert one == pytest.approx(_direct_mmd2(direct_K, n, True), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("form", SCALARS)
def test_integer_arguments_in_every_form(form):
    F = np.random.default_rng(0).normal(size=(12, 2))
    K = gaussian_gram(F)
    g = torch.Generator().manual_seed(0)
    ref = permutation_test(K, 6, 40, generator=torch.Generator().manual_seed(0))
    assert permutation_test(K, form(6), form(40), generator=g) == ref
    wild = wild_bootstrap_test(K, 6, 40, generator=torch.Generator().manual_seed(1))
    assert (
        wild_bootstrap_test(K, form(6), form(40), generator=torch.Generator().manual_seed(1))
        == wild
    )
    Kn = K.numpy()  # the wild bootstrap's statistic is the V-statistic (SAMMD)
    v = (Kn[:6, :6].sum() + Kn[6:, 6:].sum() - 2 * Kn[:6, 6:].sum()) / 36
    assert wild[0] == pytest.approx(v, rel=1e-12)
    assert len(vr_diagrams(F, max_dim=form(1))) == 2
    assert GaussianMMD(n_perm=form(30)).n_perm == 30


@pytest.mark.parametrize("form", REALS)
def test_real_arguments_in_every_form(form):
    dg = torch.tensor([[0.0, 1.0], [0.5, 2.5]], dtype=torch.float64)
    assert float(total_persistence(dg, form(2.0))) == pytest.approx(5.0)
    assert GaussianMMD(alpha=form(0.1)).alpha == pytest.approx(0.1, rel=1e-6)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda K: mmd2_unbiased(K, 2.0), "n must be an integer >= 2, got 2.0"),
        (lambda K: mmd2_unbiased(K, True), "n must be an integer >= 2, got True"),
        (lambda K: permutation_test(K, 3, 0), "n_perm must be an integer >= 1, got 0"),
        (lambda K: permutation_test(K, 3, 10, alpha=math.nan), "alpha must be"),
        (lambda K: wild_bootstrap_test(K, 3, 10, ln=np.float32(0)), r"ln must be .* > 0"),
        (lambda K: GaussianMMD(alpha=np.float32(1.5)), "alpha must be a finite number in"),
        (lambda K: vr_diagrams(np.ones((3, 2)), max_dim=0.5), "max_dim must be an integer"),
        (lambda K: total_persistence(K, math.nan), "alpha must be a finite number > 0"),
        (lambda K: gaussian_gram(np.ones((3, 2)), bandwidth=math.inf), "bandwidth must be"),
    ],
)
def test_bad_numbers_are_refused_naming_them(call, match):
    K = gaussian_gram(np.random.default_rng(0).normal(size=(6, 2)))
    with pytest.raises(ValueError, match=match):
        call(K)


def test_too_few_samples_and_degenerate_samples():
    X = np.random.default_rng(0).normal(size=(6, 2))
    with pytest.raises(ValueError, match="at least 2 points"):
        GaussianMMD().test(X[:1], X[:1])
    with pytest.raises(ValueError, match="at least 2 rows"):
        gaussian_gram(X[:1])
    with pytest.raises(ValueError, match="finite"):
        GaussianMMD().test(X, X * math.nan)
    # two identical constant samples: no evidence of a difference
    with pytest.warns(UserWarning, match="identical"):
        res = GaussianMMD(n_perm=20).test(np.ones((5, 2)), np.ones((5, 2)))
    assert res.stat == 0.0 and res.p_value == 1.0 and not res.reject


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_tensor_dtypes(dtype):
    X = torch.randn(8, 2, generator=torch.Generator().manual_seed(0)).to(dtype)
    dg = vr_diagrams(X, max_dim=0)[0]
    ref = _kruskal_deaths(X.double().numpy())
    assert sorted(dg.diagram[:, 1].tolist()) == pytest.approx(ref, rel=1e-5, abs=1e-6)
    res = GaussianMMD(n_perm=20).test(X, X + 3, generator=torch.Generator().manual_seed(0))
    assert res.stat > 0 and math.isfinite(res.p_value)


def test_pandas_dataframes_are_their_values():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(20, 3)), rng.normal(size=(20, 3)) + 1.0
    fromframe = GaussianMMD().test(
        pd.DataFrame(X), pd.DataFrame(Y), generator=torch.Generator().manual_seed(0)
    )  # before: KeyError
    fromarray = GaussianMMD().test(X, Y, generator=torch.Generator().manual_seed(0))
    assert fromframe.p_value == fromarray.p_value
    assert fromframe == fromarray
    a, b = vr_diagrams(pd.DataFrame(X)), vr_diagrams(X)
    assert all(torch.equal(u.diagram, v.diagram) for u, v in zip(a, b))


def test_a_dataframe_of_strings_is_refused_clearly():
    frame = pd.DataFrame({"a": ["x", "y", "z"], "b": [1.0, 2.0, 3.0]})
    with pytest.raises(TypeError, match="numeric"):
        GaussianMMD().test(frame, frame)


def test_a_fractional_homology_dimension_is_refused():
    from icml25.topo_detect import tp_loss

    Y = torch.randn(6, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"dims must be an integer in \[0, 2\], got 0.5"):
        tp_loss(Y, Y, dims=(0.5,))  # before: truncated to dimension 0 silently
    assert float(tp_loss(Y, Y, dims=(np.int64(0),))) == pytest.approx(
        float(tp_loss(Y, Y, dims=(0,)))
    )


@pytest.mark.parametrize("offset", [10.0, 1e3])
def test_float32_distances_keep_their_digits_far_from_the_origin(offset):
    from icml25.topo_detect.persistence import distance_matrix

    g = torch.Generator().manual_seed(0)
    X = torch.randn(12, 3, generator=g, dtype=torch.float64) * 0.05 + offset
    X = X.float()
    exact = torch.cdist(X.double(), X.double())  # of the float32 points themselves
    got = distance_matrix(X)  # before: |a|^2 + |b|^2 - 2 a.b cancelled (1.5% off at 10)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), exact, rtol=1e-5, atol=1e-6)
    # the hypothesis example: two points 0.0137 apart at -10, given as a list (float32)
    (h0,) = vr_diagrams([[-9.98632812], [-10.0]], max_dim=0)
    assert float(h0.diagram[0, 1]) == pytest.approx(0.01367188, rel=1e-5)
