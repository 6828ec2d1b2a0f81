"""Property tests at the future-of-work package's public boundary (issue 49): numpy and Python
scalars, float32/float64/bfloat16 inputs, NaN/inf, empty and degenerate input, and random
games against brute-force references (docs/future_of_work.md)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.future_of_work import (
    CollectiveLicensingPool,
    Flat,
    Licensee,
    Work,
    banzhaf_exact,
    gradient_attribution,
    loo,
    shapley_exact,
)
from icml25.future_of_work.inequality import gini, lorenz, theil, top_share
from icml25.future_of_work.licensing import largest_remainder

SCALARS = [lambda v: v, np.float64, np.float32, lambda v: torch.tensor(v)]


def _game(n: int, seed: int):
    rng = np.random.default_rng(seed)
    table = {
        frozenset(s): float(rng.normal())
        for r in range(n + 1)
        for s in itertools.combinations(range(n), r)
    }
    return lambda S: table[frozenset(S)]


def _shapley_by_permutations(u, n):
    phi = np.zeros(n)
    perms = list(itertools.permutations(range(n)))
    for p in perms:
        s: set = set()
        for i in p:
            phi[i] += u(frozenset(s | {i})) - u(frozenset(s))
            s.add(i)
    return phi / len(perms)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 5), seed=st.integers(0, 1000))
def test_shapley_banzhaf_loo_equal_brute_force(n, seed):
    u = _game(n, seed)
    ids = np.arange(n)  # numpy ids
    phi = shapley_exact(u, list(ids))
    ref = _shapley_by_permutations(u, n)
    assert np.allclose([phi[i] for i in ids], ref, atol=1e-12)
    assert math.isclose(sum(phi.values()), u(range(n)) - u(()), abs_tol=1e-12)  # efficiency
    bz = banzhaf_exact(u, list(range(n)))
    for i in range(n):
        others = [j for j in range(n) if j != i]
        subsets = [c for r in range(n) for c in itertools.combinations(others, r)]
        ref_b = np.mean([u(frozenset(c) | {i}) - u(frozenset(c)) for c in subsets])
        assert bz[i] == pytest.approx(ref_b, abs=1e-12)
    lv = loo(u, list(range(n)))
    for i in range(n):
        assert lv[i] == pytest.approx(u(range(n)) - u(set(range(n)) - {i}), abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    incomes=st.lists(st.floats(0, 1e6), min_size=1, max_size=20),
    dtype=st.sampled_from(["list", np.float32, np.float64, torch.float32, torch.bfloat16]),
)
def test_inequality_matches_the_pairwise_definition(incomes, dtype):
    if dtype == "list":
        x = incomes
    elif isinstance(dtype, torch.dtype):
        x = torch.tensor(incomes, dtype=dtype)
    else:
        x = np.array(incomes, dtype=dtype)
    a = np.array([float(v) for v in (x.tolist() if hasattr(x, "tolist") else x)])
    g = gini(x)
    mu = a.mean()
    ref = 0.0 if mu == 0 else np.abs(a[:, None] - a[None, :]).mean() / (2 * mu)
    assert g == pytest.approx(ref, abs=1e-9)
    assert 0.0 <= g <= 1.0 and theil(x) >= -1e-12
    pop, inc = lorenz(x)
    assert pop[0] == inc[0] == 0 and pop[-1] == pytest.approx(1) and inc[-1] == pytest.approx(1)
    assert 0.0 <= top_share(x, np.float32(0.5)) <= 1.0 + 1e-12


@pytest.mark.parametrize("bad", [[], [float("nan")], [1.0, float("inf")], [[1.0, 2.0]], ["a"]])
def test_inequality_refuses_bad_incomes(bad):
    with pytest.raises(ValueError, match="income"):
        gini(bad)


def test_inequality_degenerate_inputs():
    assert gini([5.0, 5.0, 5.0]) == 0.0 and theil([5.0, 5.0]) == 0.0
    assert gini([0.0, 0.0]) == 0.0 and gini([7.0]) == 0.0
    for conv in SCALARS:
        assert top_share([1.0, 3.0], conv(0.5)) == pytest.approx(0.75)
    for bad in (0.0, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="q must be a finite number in \\(0, 1\\]"):
            top_share([1.0, 2.0], bad)


@settings(max_examples=40, deadline=None)
@given(
    total=st.integers(0, 10**6),
    weights=st.lists(st.floats(0, 1e3), min_size=1, max_size=8),
    conv=st.sampled_from([int, np.int64, np.int32]),
)
def test_largest_remainder_sums_exactly(total, weights, conv):
    w = {f"h{i}": v for i, v in enumerate(weights)}
    if sum(weights) == 0:
        if total:
            with pytest.raises(ValueError, match="all weights are 0"):
                largest_remainder(conv(total), w)
        return
    out = largest_remainder(conv(total), w)
    assert sum(out.values()) == total
    tot = sum(weights)
    for k, v in w.items():  # within one cent of the exact quota
        assert abs(out[k] - total * v / tot) < 1 + 1e-9


@pytest.mark.parametrize("bad", [-1, 2.5, True, float("nan"), "3"])
def test_largest_remainder_refuses_bad_totals(bad):
    with pytest.raises(ValueError, match="total_cents must be an integer >= 0"):
        largest_remainder(bad, {"a": 1})


def test_largest_remainder_refuses_non_mapping_weights():
    with pytest.raises(TypeError, match="weights must be a mapping"):
        largest_remainder(100, [1, 2])


@settings(max_examples=30, deadline=None)
@given(
    C=st.integers(1, 3),
    n=st.integers(0, 6),
    m=st.integers(0, 4),
    p=st.integers(1, 4),
    dtype=st.sampled_from([np.float32, np.float64, torch.float32, torch.bfloat16]),
    seed=st.integers(0, 1000),
)
def test_gradient_attribution_equals_the_loop(C, n, m, p, dtype, seed):
    rng = np.random.default_rng(seed)
    tg, vg = rng.normal(size=(C, n, p)), rng.normal(size=(C, m, p))
    if isinstance(dtype, torch.dtype):
        tg_in, vg_in = torch.tensor(tg, dtype=dtype), torch.tensor(vg, dtype=dtype)
        tg = tg_in.double().numpy()
        vg = vg_in.double().numpy()
    else:
        tg_in, vg_in = tg.astype(dtype), vg.astype(dtype)
        tg, vg = tg_in.astype(float), vg_in.astype(float)
    groups = rng.integers(0, 3, size=n)
    lr = [np.float32(0.5)] * C
    out = gradient_attribution(tg_in, vg_in, groups, lr=lr)
    for h in set(groups.tolist()):
        ref = sum(
            0.5 * float(tg[c, i] @ vg[c, j])
            for c in range(C)
            for i in range(n)
            for j in range(m)
            if groups[i] == h
        )
        assert out[h] == pytest.approx(ref, rel=1e-5, abs=1e-5)
        assert math.isfinite(out[h])


def test_distribute_accepts_numpy_scalars_and_refuses_nan():
    works = [Work("a", "x", np.float32(1)), Work("b", "y", np.int64(3))]
    pool = CollectiveLicensingPool(works, Flat("10.00"), admin_rate=np.float64(0.1))
    pool.collect([Licensee("dev")])
    pay = pool.distribute("hybrid", values={"x": 1.0, "y": 0.0}, alpha=np.float32(0.5))
    assert sum(pay.values()) == Decimal("9.00")
    for bad in (float("nan"), 1.5):
        with pytest.raises(ValueError, match="alpha must be a finite number in \\[0, 1\\]"):
            pool.distribute("hybrid", values={"x": 1.0, "y": 0.0}, alpha=bad)
    with pytest.raises(ValueError, match="min_payout must be a finite amount"):
        pool.distribute("volume", min_payout=float("nan"))
