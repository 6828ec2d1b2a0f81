"""Data valuation: exact Shapley against brute force, the axioms (hypothesis), Monte-Carlo within
its bound, Banzhaf, leave-one-out on duplicates, and the scikit-learn utility."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.future_of_work import (
    GroupUtility,
    banzhaf_exact,
    banzhaf_msr,
    gradient_attribution,
    loo,
    shapley_exact,
    shapley_tmc,
)


def _random_game(n, seed):
    rng = np.random.default_rng(seed)
    table = {
        frozenset(s): float(rng.normal()) if s else 0.0
        for k in range(n + 1)
        for s in itertools.combinations(range(n), k)
    }
    return lambda S: table[frozenset(S)]


def _brute_subsets(u, n):
    """The Shapley formula summed over explicit subsets (itertools), independent of the bitmasks."""
    out = []
    for h in range(n):
        others = [g for g in range(n) if g != h]
        tot = 0.0
        for k in range(n):
            w = math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n)
            for s in itertools.combinations(others, k):
                tot += w * (u(frozenset(s) | {h}) - u(frozenset(s)))
        out.append(tot)
    return out


@pytest.mark.parametrize("n", [1, 3, 8, 12])
def test_exact_shapley_matches_brute_force_enumeration(n):
    u = _random_game(n, n)
    ex = shapley_exact(u, list(range(n)))
    assert np.allclose([ex[h] for h in range(n)], _brute_subsets(u, n), atol=1e-10)
    assert abs(sum(ex.values()) - ex.total) < 1e-10 and ex.n_utility_calls == 2**n


def test_exact_shapley_matches_the_permutation_definition():
    n = 6
    u = _random_game(n, 0)
    acc = np.zeros(n)
    for perm in itertools.permutations(range(n)):
        pre: frozenset = frozenset()
        for h in perm:
            acc[h] += u(pre | {h}) - u(pre)
            pre = pre | {h}
    ex = shapley_exact(u, list(range(n)))
    assert np.allclose([ex[h] for h in range(n)], acc / math.factorial(n), atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    v=st.lists(st.floats(-5, 5), min_size=2, max_size=7),
    w=st.lists(st.floats(-5, 5), min_size=7, max_size=7),
    seed=st.integers(0, 1000),
)
def test_axioms(v, w, seed):
    n = len(v)
    g = list(range(n))
    add = shapley_exact(lambda S: sum(v[h] for h in S), g)  # additive game: φ = v
    assert np.allclose([add[h] for h in g], v, atol=1e-9)
    u1 = _random_game(n, seed)

    def u2(S):
        return sum(w[h] for h in S) ** 2

    a, b = shapley_exact(u1, g), shapley_exact(u2, g)
    both = shapley_exact(lambda S: u1(S) + u2(S), g)
    assert np.allclose([both[h] for h in g], [a[h] + b[h] for h in g], atol=1e-8)  # additivity
    assert abs(sum(a.values()) - (u1(frozenset(g)) - u1(frozenset()))) < 1e-9  # efficiency

    if n < 3:
        return

    def sym(S):  # players 0 and 1 interchangeable, player n-1 a null player
        S = set(S) - {n - 1}
        c = len(S & {0, 1})
        return u1(frozenset(S - {0, 1}) | frozenset(range(c)))

    s = shapley_exact(sym, g)
    assert abs(s[0] - s[1]) < 1e-9 and abs(s[n - 1]) < 1e-12  # symmetry, null player


def test_monte_carlo_lies_within_its_reported_bound_and_converges():
    g = list(range(6))
    u = _random_game(6, 3)
    ex = shapley_exact(u, g)
    rng_vals = max(abs(u(frozenset(s))) for k in range(7) for s in itertools.combinations(g, k))
    mc = shapley_tmc(
        u, g, max_perms=3000, tol=0.0, seed=1, min_perms=10**6, value_range=2 * rng_vals
    )
    err = max(abs(mc[h] - ex[h]) for h in g)
    assert err <= mc.bound and all(mc.stderr[h] > 0 for h in g)
    assert err < 5 * max(mc.stderr.values())
    v = [0.3, 0.1, 0.5, 0.2, 0.0, 0.4]

    def game(S):  # additive plus a small threshold effect
        return sum(v[h] for h in S) + 0.1 * (len(S) >= 3)

    mc2 = shapley_tmc(game, g, max_perms=2000, tol=0.0, seed=0, min_perms=10**6)
    ex2 = shapley_exact(game, g)
    assert max(abs(mc2[h] - ex2[h]) for h in g) < 0.01
    trunc = shapley_tmc(lambda S: min(len(S), 2), g, max_perms=200, tol=0.01, seed=0)
    assert trunc.n_utility_calls < 2**6  # truncation skips the flat tail


def test_valuations_compare_by_their_values():
    g = [0, 1]
    a = shapley_exact(lambda S: float(len(S)), g)
    b = shapley_exact(lambda S: 2.0 * len(S), g)
    assert a != b and a == {0: 1.0, 1: 1.0} and a == shapley_exact(lambda S: float(len(S)), g)


def test_loo_pays_duplicates_nothing_while_shapley_splits():
    def u(S):  # groups 0 and 1 carry the same data
        return 0.5 * bool({0, 1} & set(S)) + 0.2 * (2 in S)

    sh, lo = shapley_exact(u, [0, 1, 2]), loo(u, [0, 1, 2])
    assert lo[0] == lo[1] == 0.0 and abs(sh[0] - 0.25) < 1e-12 and abs(sh[1] - 0.25) < 1e-12


def test_banzhaf_exact_and_msr():
    g = list(range(5))
    u = _random_game(5, 7)
    ex = banzhaf_exact(u, g)
    brute = [
        np.mean(
            [
                u(frozenset(s) | {h}) - u(frozenset(s))
                for k in range(5)
                for s in itertools.combinations([x for x in g if x != h], k)
            ]
        )
        for h in g
    ]
    assert np.allclose([ex[h] for h in g], brute)
    msr = banzhaf_msr(u, g, n_samples=4000, seed=0)
    assert all(abs(msr[h] - ex[h]) < 4 * msr.stderr[h] + 1e-9 for h in g)


def test_group_utility_with_a_scikit_learn_estimator():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int)
    groups = np.repeat(["good", "noise", "tiny"], [60, 50, 10])
    y_train = y.copy()
    y_train[60:110] = rng.integers(0, 2, 50)  # the noise group's labels are random
    Xv = rng.normal(size=(200, 3))
    yv = (Xv[:, 0] > 0).astype(int)
    util = GroupUtility(LogisticRegression(), X, y_train, groups, Xv, yv)
    assert util(frozenset()) == pytest.approx(max(np.mean(yv), 1 - np.mean(yv)), abs=0.06)
    sh = shapley_exact(util, util.group_ids)
    assert sh["good"] > sh["noise"] and abs(sum(sh.values()) - sh.total) < 1e-12
    single = GroupUtility(LogisticRegression(), X[:5], np.zeros(5, int), groups[:5], Xv, yv)
    assert single(frozenset({"good"})) == pytest.approx(np.mean(yv == 0))  # one class: constant
    ll = GroupUtility(LogisticRegression(), X, y_train, groups, Xv, yv, metric="neg_log_loss")
    assert ll(frozenset({"good"})) > ll(frozenset({"noise"}))
    fitfn = GroupUtility(
        None,
        X,
        y_train,
        groups,
        Xv,
        yv,
        fit_fn=lambda Xs, ys: lambda Xq: (Xq[:, 0] > 0).astype(int),
    )
    assert fitfn(frozenset({"noise"})) == 1.0

    class Broken:
        def fit(self, X, y):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="the first model fit"):  # a broken estimator is loud
        GroupUtility(Broken, X, y_train, groups, Xv, yv)(frozenset({"good"}))

    class FailsOnNoise(LogisticRegression):  # one subset fails later: scored as a constant
        def fit(self, X, y):
            if len(y) == 50:
                raise RuntimeError("boom")
            return super().fit(X, y)

    flaky = GroupUtility(FailsOnNoise, X, y_train, groups, Xv, yv)  # a class works as a factory
    flaky(frozenset({"good"}))
    with pytest.warns(UserWarning, match="fit failed"):
        assert flaky(frozenset({"noise"})) == pytest.approx(
            max(np.mean(yv), 1 - np.mean(yv)), abs=0.1
        )
    assert len(flaky.failures) == 1
    with pytest.raises(ValueError, match="X must be 2-D"):
        GroupUtility(LogisticRegression(), X[:, 0], y, groups, Xv, yv)
    with pytest.raises(ValueError, match="value_range"):
        shapley_tmc(lambda S: 0.0, [0, 1], value_range=-1)
    with pytest.raises(ValueError, match="unknown groups"):
        util(frozenset({"nobody"}))
    with pytest.raises(ValueError, match="one row each"):
        GroupUtility(LogisticRegression(), X, y, groups[:10], Xv, yv)


def test_gradient_attribution_and_limits():
    tg = np.ones((4, 2))
    vg = np.ones((3, 2))
    v = gradient_attribution(tg, vg, ["a", "a", "b", "b"])
    assert v == {"a": 12.0, "b": 12.0} and v.method == "gradient"
    with pytest.raises(ValueError, match="share C and p"):
        gradient_attribution(tg, np.ones((3, 5)), [0, 0, 1, 1])
    with pytest.raises(ValueError, match="too many for exact enumeration"):
        shapley_exact(lambda S: 0.0, list(range(15)))
    with pytest.raises(ValueError, match="distinct"):
        loo(lambda S: 0.0, [1, 1])
    with pytest.raises(ValueError, match="returned nan"):
        shapley_exact(lambda S: float("nan"), [0, 1])


def test_against_shap_exact_where_installed():
    shap = pytest.importorskip("shap")
    n = 6
    u = _random_game(n, 11)

    def f(masks):
        return np.array([u(frozenset(np.flatnonzero(m))) for m in masks])

    ex = shapley_exact(u, list(range(n)))
    expl = shap.explainers.Exact(f, shap.maskers.Independent(np.zeros((1, n))))
    sv = expl(np.ones((1, n))).values[0]
    assert np.allclose(sv, [ex[h] for h in range(n)], atol=1e-9)
