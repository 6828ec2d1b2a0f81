"""icml25.topo_detect's MMD tests: Liu et al.'s and Gao et al.'s formulas transcribed in NumPy,
the nulls' type-I errors, the trained kernels (MMD-D, SAMMD), the topological products and bad
input."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.signal import lfilter
from scipy.stats import binom

from icml25.topo_detect import (
    DeepKernelMMD,
    GaussianMMD,
    SemanticAwareMMD,
    TopologicalMMD,
    sample_signatures,
)
from icml25.topo_detect.mmd import (
    gaussian_gram,
    mmd2_unbiased,
    mmd_h1_variance,
    permutation_test,
    wild_bootstrap_test,
)

D = torch.float64


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _np_mmd(K, n, one_sample=True):
    """Liu et al.'s h1_mean_var_gram, written from the formulas in NumPy."""
    Kx, Ky, Kxy = K[:n, :n], K[n:, n:], K[:n, n:]
    nx, ny = Kx.shape[0], Ky.shape[0]
    xx = (Kx.sum() - np.trace(Kx)) / (nx * (nx - 1))
    yy = (Ky.sum() - np.trace(Ky)) / (ny * (ny - 1))
    xy = (Kxy.sum() - np.trace(Kxy)) / (nx * (ny - 1)) if one_sample else Kxy.sum() / (nx * ny)
    return xx - 2 * xy + yy


def test_statistics_equal_a_numpy_transcription_of_liu_et_al():
    g = _gen(0)
    Z = torch.randn(30, 4, generator=g, dtype=D)
    K = gaussian_gram(Z)
    Kn = K.numpy()
    assert float(mmd2_unbiased(K, 15)) == pytest.approx(_np_mmd(Kn, 15), abs=1e-12)
    # the two-sample form, unequal sizes (12 vs 18)
    assert float(mmd2_unbiased(K, 12, use_1sample_u=False)) == pytest.approx(
        _np_mmd(Kn, 12, one_sample=False), abs=1e-12
    )
    hh = Kn[:15, :15] + Kn[15:, 15:] - Kn[:15, 15:] - Kn[:15, 15:].T
    V1 = np.dot(hh.sum(1) / 15, hh.sum(1) / 15) / 15
    V2 = hh.sum() / 15 / 15
    assert float(mmd_h1_variance(K, 15)) == pytest.approx(4 * (V1 - V2**2), abs=1e-12)


@pytest.mark.parametrize("one_sample", [True, False])
def test_permutation_p_values_equal_a_numpy_loop_over_the_same_permutations(one_sample):
    Z = torch.randn(26, 3, generator=_gen(1), dtype=D)
    Z[13:] += 0.4
    n = 13 if one_sample else 11
    K = gaussian_gram(Z)
    stat, p = permutation_test(K, n, 60, _gen(7), use_1sample_u=one_sample)
    g = _gen(7)
    Kn, count = K.numpy(), 0
    obs = _np_mmd(Kn, n, one_sample)
    for _ in range(60):
        idx = torch.randperm(26, generator=g).numpy()
        count += _np_mmd(Kn[np.ix_(idx, idx)], n, one_sample) >= obs - 1e-12
    assert stat == pytest.approx(obs, abs=1e-12)
    assert p == pytest.approx((1 + count) / 61, abs=1e-12)


def test_wild_bootstrap_equals_sammds_process_and_keeps_its_level_in_2d():
    Z = torch.randn(40, 3, generator=_gen(2), dtype=D)
    K = gaussian_gram(Z)
    stat, p = wild_bootstrap_test(K, 20, 50, _gen(3))
    # SAMMD's bootstrap_null, from its formulas: AR(1) by lfilter, centred multipliers
    a = math.exp(-1 / 0.2)
    e = torch.randn(20, 50, generator=_gen(3), dtype=D).numpy() * math.sqrt(1 - a * a)
    w = lfilter([1.0], [1.0, -a], e, axis=0)
    Kn = K.numpy()
    H = Kn[:20, :20] + Kn[20:, 20:] - 2 * Kn[:20, 20:]
    boot = [
        (H * np.outer(w[:, b] - w[:, b].mean(), w[:, b] - w[:, b].mean())).mean() for b in range(50)
    ]
    assert stat == pytest.approx(H.mean(), abs=1e-12)
    assert p == pytest.approx((1 + sum(b >= H.mean() - 1e-12 for b in boot)) / 51, abs=1e-12)
    g = _gen(4)
    ps = [
        wild_bootstrap_test(gaussian_gram(torch.randn(60, 2, generator=g, dtype=D)), 30, 100, g)[1]
        for _ in range(200)
    ]
    rate = sum(q <= 0.05 for q in ps) / 200
    assert binom.ppf(0.005, 200, 0.05) / 200 <= rate <= binom.ppf(0.995, 200, 0.05) / 200
    shifted = torch.cat([torch.randn(30, 2, generator=g), torch.randn(30, 2, generator=g) + 1.5])
    assert wild_bootstrap_test(gaussian_gram(shifted), 30, 100, g)[1] <= 0.05


def test_wild_bootstrap_is_conservative_in_32d():
    """docs/topo_detect.md quotes the wild bootstrap's measured type-I error: near 0.05 in 2-D,
    far below it in 32-D (0.006 at n = 50 over 2000 trials), where the permutation null on the
    same Gram matrices keeps its level. 400 trials here: the wild bootstrap's rate lies below
    the 0.5% binomial quantile of a level-0.05 test, the permutation test's inside the band."""
    g = _gen(11)
    wild = perm = 0
    for _ in range(400):
        K = gaussian_gram(torch.randn(100, 32, generator=g, dtype=D))
        wild += wild_bootstrap_test(K, 50, 100, g)[1] <= 0.05
        perm += permutation_test(K, 50, 100, g)[1] <= 0.05
    low, high = binom.ppf(0.005, 400, 0.05), binom.ppf(0.995, 400, 0.05)
    assert wild < low <= perm <= high, (wild, perm, low, high)


def test_unequal_sizes_with_the_two_sample_form():
    g = _gen(5)
    test = GaussianMMD(use_1sample_u=False)
    assert test.test(torch.randn(40, 2, generator=g), torch.randn(25, 2, generator=g) + 2, g).reject
    with pytest.raises(ValueError, match="same size"):
        GaussianMMD().test(torch.randn(40, 2), torch.randn(25, 2))
    with pytest.raises(ValueError, match="equal sizes"):
        mmd2_unbiased(gaussian_gram(torch.randn(30, 2)), 10)


def _shifted(g, n=100, shift=0.6):
    P = torch.randn(n, 5, generator=g)
    Q = torch.randn(n, 5, generator=g)
    Q[:, 0] += shift
    return P, Q


def test_deep_kernel_mmd_trains_detects_and_keeps_its_level():
    g = _gen(6)
    P, Q = _shifted(g)
    test = DeepKernelMMD()
    with pytest.raises(RuntimeError, match="fit"):
        test.test(P, Q)
    torch.manual_seed(0)
    test.fit(P, Q, epochs=200, lr=1e-3)
    assert test.history[-1] > test.history[0] + 0.05  # J went up
    assert test.bandwidths["sigma_q"] > 0 and 0 < test.epsilon < 1
    assert len(test.net) == 7 and test.net[0].out_features == 15  # Liu et al.: hidden = 3 dim
    power = [test.test(*_shifted(g, shift=1.0), g).reject for _ in range(20)]
    assert sum(power) >= 18  # a clear shift
    null = [
        test.test(torch.randn(100, 5, generator=g), torch.randn(100, 5, generator=g), g).reject
        for _ in range(100)
    ]
    assert sum(null) / 100 <= binom.ppf(0.99, 100, 0.05) / 100


def test_semantic_aware_mmd_starts_at_the_median_and_learns():
    g = _gen(7)
    P, Q = _shifted(g)
    feat = lambda z: z[:, :2]  # noqa: E731 - the "semantic" features of the toy
    test = SemanticAwareMMD(feat).fit(P, Q, epochs=0)
    cross = torch.cdist(feat(P).double(), feat(Q).double()).pow(2)
    assert test.bandwidths["sigma_phi"] == pytest.approx(float(cross.median()), rel=1e-5)
    assert test.bandwidths["sigma_q"] == pytest.approx(2 * 5, rel=1e-6)
    assert test.epsilon == pytest.approx(1e-10, rel=1e-3)
    trained = SemanticAwareMMD(feat, null="wild_bootstrap").fit(P, Q, epochs=150, lr=1e-2)
    assert trained.history[-1] > trained.history[0]
    assert sum(trained.test(*_shifted(g), g).reject for _ in range(10)) >= 8


def _sig(z, generator):
    return sample_signatures(z, torch.zeros_like(z), generator=generator, chunk_size=25)


def test_topological_mmd_over_a_trained_base_learns_sigma_g_with_it():
    g = _gen(8)
    P, Q = _shifted(g, n=50)
    base = SemanticAwareMMD(lambda z: z[:, :2])
    test = TopologicalMMD(base, _sig)
    test.fit(P, Q, epochs=0, generator=g)
    start = {"s_g": float(test.sigma_g_sqrt.detach()), "s_phi": float(base.sigma_phi_sqrt.detach())}
    pooled = torch.cat([P, Q])
    test2 = TopologicalMMD(SemanticAwareMMD(lambda z: z[:, :2]), _sig).fit(
        P, Q, epochs=50, lr=1e-2, generator=_gen(8)
    )
    assert float(test2.sigma_g_sqrt.detach()) != pytest.approx(start["s_g"], rel=1e-3)  # learned
    assert float(test2.base.sigma_phi_sqrt.detach()) != pytest.approx(
        start["s_phi"], rel=1e-3
    )  # jointly
    assert len(test2.parameters()) == 4  # eps, sigma_q, sigma_phi, sigma_g
    K = test2.gram(pooled, _gen(0))
    assert K.shape == (100, 100) and K.dtype == D and bool(torch.isfinite(K).all())
    assert test2.test(*_shifted(g, n=50), g).p_value > 0
    concat = TopologicalMMD(SemanticAwareMMD(lambda z: z[:, :2]), _sig, fusion="concat")
    concat.fit(P, Q, epochs=5, generator=g)
    assert concat.parameters() == concat.base.parameters()  # no s_g: g joins phi
    assert 0 < concat.test(P, Q, g).p_value <= 1
    with pytest.raises(ValueError, match="concat"):
        TopologicalMMD([lambda z: z], _sig, fusion="concat")


def test_topological_mmd_per_sample_signatures_keep_the_level_on_trained_bases():
    g = _gen(9)
    test = TopologicalMMD(SemanticAwareMMD(lambda z: z[:, :2]), _sig, n_perm=50)
    test.fit(
        torch.randn(40, 4, generator=g), torch.randn(40, 4, generator=g), epochs=20, generator=g
    )
    rej = [
        test.test(torch.randn(40, 4, generator=g), torch.randn(40, 4, generator=g), g).reject
        for _ in range(50)
    ]
    assert sum(rej) / 50 <= 0.14


def test_samples_as_numpy_arrays_and_dicts():
    rng = np.random.default_rng(0)
    P, Q = rng.normal(size=(30, 3)), rng.normal(size=(30, 3)) + 2.0
    assert GaussianMMD().test(P, Q, _gen(0)).reject
    test = GaussianMMD([lambda z: z["a"], lambda z: z["b"]])
    S_P = {"a": torch.as_tensor(P), "b": torch.as_tensor(P[:, :1])}
    S_Q = {"a": torch.as_tensor(Q), "b": torch.as_tensor(Q[:, :1])}
    assert test.test(S_P, S_Q, _gen(0)).reject
    with pytest.raises(ValueError, match="different keys"):
        test.test(S_P, {"a": S_Q["a"]})
    with pytest.raises(ValueError, match="same length"):
        test.test({"a": S_P["a"], "b": S_P["b"][:5]}, S_Q)


def test_bad_input_names_the_value():
    with pytest.raises(ValueError, match="alpha"):
        GaussianMMD(alpha=1.5)
    with pytest.raises(ValueError, match="null"):
        GaussianMMD(null="bootstrap")
    with pytest.raises(ValueError, match="n_perm"):
        GaussianMMD(n_perm=True)
    with pytest.raises(ValueError, match="wild bootstrap"):
        GaussianMMD(null="wild_bootstrap", use_1sample_u=False)
    with pytest.raises(ValueError, match="fusion"):
        TopologicalMMD(None, _sig, fusion="sum")
    with pytest.raises(TypeError, match="callable"):
        TopologicalMMD(None, "not a function")
    with pytest.raises(ValueError, match="finite"):
        GaussianMMD().test(torch.full((5, 2), float("nan")), torch.zeros(5, 2))
    with pytest.raises(ValueError, match="one row per pooled"):
        TopologicalMMD(None, lambda z, g: torch.zeros(3, 1)).test(
            torch.randn(5, 2), torch.randn(5, 2)
        )
    with pytest.raises(ValueError, match="epochs"):
        DeepKernelMMD().fit(torch.randn(10, 2), torch.randn(10, 2), epochs=-1)
    with pytest.raises(ValueError, match="lr"):
        SemanticAwareMMD(lambda z: z).fit(torch.randn(10, 2), torch.randn(10, 2), lr=0.0)
    with pytest.raises(ValueError, match="ln"):
        wild_bootstrap_test(gaussian_gram(torch.randn(10, 2)), 5, 20, ln=0)
    with pytest.warns(UserWarning, match="can never reject"):
        permutation_test(gaussian_gram(torch.randn(10, 2)), 5, 10)
    with pytest.raises(ValueError, match="n must be"):
        mmd2_unbiased(gaussian_gram(torch.randn(10, 2)), 1)
    assert float(mmd2_unbiased(gaussian_gram(torch.randn(10, 2)), np.int64(5))) == pytest.approx(
        float(mmd2_unbiased(gaussian_gram(torch.randn(10, 2, generator=_gen(1))), 5)), abs=10
    )  # numpy integers are accepted


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_trained_and_topological_tests_on_cuda():
    g = _gen(10)
    P, Q = (t.cuda() for t in _shifted(g, n=50))
    test = TopologicalMMD(DeepKernelMMD(), _sig).fit(P, Q, epochs=20, lr=1e-3, generator=g)
    assert test.base.net[0].weight.is_cuda and test.sigma_g_sqrt.is_cuda
    K = test.gram(torch.cat([P, Q]), g)
    assert K.is_cuda
    assert 0 < test.test(P, Q, g).p_value <= 1
    assert GaussianMMD(null="wild_bootstrap").test(P, Q, g).p_value > 0


# -- the new-user review's findings -------------------------------------------------------------


def test_fit_never_writes_into_the_callers_graph():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(4, 4, generator=g, requires_grad=True)
    P, Q = torch.randn(20, 4, generator=g), torch.randn(20, 4, generator=g) + 1
    for test in (
        DeepKernelMMD(),
        SemanticAwareMMD(lambda z: z[:, :2]),
        TopologicalMMD(GaussianMMD(), lambda s, gen: s[:, :1] ** 2),
    ):
        test.fit(P @ W, Q @ W, epochs=3, generator=torch.Generator().manual_seed(1))
        assert W.grad is None, type(test).__name__
        assert test.test(P @ W, Q @ W, generator=torch.Generator().manual_seed(2)).p_value > 0


def test_fit_is_reproducible_from_its_generator_whatever_the_global_seed():
    g = torch.Generator().manual_seed(0)
    P, Q = torch.randn(20, 3, generator=g), torch.randn(20, 3, generator=g) + 0.5
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        t = DeepKernelMMD().fit(P, Q, epochs=5, generator=torch.Generator().manual_seed(7))
        runs.append(t.history)
    assert runs[0] == runs[1]


def test_the_level_warning_uses_the_tests_own_alpha():
    with pytest.warns(UserWarning, match="can never reject"):
        GaussianMMD(n_perm=50, alpha=0.01)  # smallest p 1/51 > 0.01
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GaussianMMD(n_perm=7, alpha=0.2)  # 1/8 <= 0.2: no warning
        GaussianMMD(n_perm=19)


def test_unequal_sizes_for_every_test_and_the_topological_test_inherits_the_base():
    g = torch.Generator().manual_seed(0)
    P, Q = torch.randn(30, 3, generator=g), torch.randn(20, 3, generator=g) + 2
    sig = lambda s, gen: s[:, :1]  # noqa: E731
    for t in (
        GaussianMMD(use_1sample_u=False),
        TopologicalMMD(GaussianMMD(use_1sample_u=False), sig),
        TopologicalMMD(None, sig, use_1sample_u=False),
    ):
        assert t.test(P, Q, generator=torch.Generator().manual_seed(1)).reject
    dk = DeepKernelMMD(use_1sample_u=False).fit(P[:20], Q, epochs=2)
    assert dk.test(P, Q, generator=torch.Generator().manual_seed(1)).p_value <= 1
    base = SemanticAwareMMD(lambda z: z, null="wild_bootstrap", n_perm=30, alpha=0.1)
    topo = TopologicalMMD(base, sig)
    assert (topo.n_perm, topo.alpha, topo.null) == (30, 0.1, "wild_bootstrap")
    assert TopologicalMMD(base, sig, n_perm=40).n_perm == 40


def test_clear_errors_for_what_users_pass():
    x = torch.randn(10, 4)
    with pytest.raises(ValueError, match=r"same shape per point, got \(4,\) and \(3,\)"):
        GaussianMMD().test(x, torch.randn(10, 3))
    dk = DeepKernelMMD().fit(x, x + 1, epochs=1)
    with pytest.raises(ValueError, match="fitted on inputs of 4 features per point, got 3"):
        dk.test(torch.randn(10, 3), torch.randn(10, 3))
    dk.fit(torch.randn(10, 3), torch.randn(10, 3) + 1, epochs=1)  # refit on another size
    assert 0 < dk.test(torch.randn(10, 3), torch.randn(10, 3)).p_value <= 1
    with pytest.raises(TypeError, match="pass feature callables"):
        GaussianMMD().test({"emb": x}, {"emb": x + 1})
    with pytest.raises(TypeError, match="feature 'caption' must be numeric"):
        GaussianMMD([lambda s: s["emb"]]).test(
            {"emb": x, "caption": ["a"] * 10}, {"emb": x, "caption": ["b"] * 10}
        )
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        GaussianMMD().test(x, x, generator=5)
