"""The statistics behind the verdicts: each helper against scipy.stats on fixed data, the
bootstrap's coverage on a known distribution, and the three verdicts on planted effects."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from icml25.report import Criterion, combine
from icml25.report import stats as S

DATA = [0.8, 1.9, -0.3, 1.1, 2.4, 0.2, 1.5]


def test_t_interval_matches_scipy():
    iv = S.mean_t_interval(DATA, 0.95)
    ref = sps.ttest_1samp(DATA, 0.0).confidence_interval(0.95)
    assert iv.low == pytest.approx(ref.low, rel=1e-12) and iv.high == pytest.approx(
        ref.high, rel=1e-12
    )
    assert iv.se == pytest.approx(sps.sem(DATA), rel=1e-12) and iv.n == 7
    # paired: the interval of a - b is scipy's ttest_rel interval
    a, b = np.array(DATA), np.array(DATA[::-1]) * 0.5
    c = Criterion("d", "paired", above=0.0).check(a, b)
    ref = sps.ttest_rel(a, b).confidence_interval(0.9 + 0.05)
    assert (c.low, c.high) == (pytest.approx(ref.low), pytest.approx(ref.high))


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (47, 60), (360, 360), (181, 360)])
def test_wilson_matches_scipy(k, n):
    iv = S.wilson_interval(k, n)
    ref = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert iv.low == pytest.approx(ref.low, abs=1e-12) and iv.high == pytest.approx(
        ref.high, abs=1e-12
    )


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_sign_flip_matches_scipy_permutation_test(alternative):
    d = np.array([0.5, 1.2, -0.4, 0.9, 0.3, 1.4, -0.1, 0.7])
    ref = sps.permutation_test(
        (d,),
        np.mean,
        permutation_type="samples",
        alternative=alternative,
        n_resamples=np.inf,
    ).pvalue
    assert S.sign_flip_p(d, alternative=alternative) == pytest.approx(ref, rel=1e-12)
    # against a threshold other than zero: the test of d - null
    ref = sps.permutation_test(
        (d - 0.2,), np.mean, permutation_type="samples", alternative="greater", n_resamples=np.inf
    ).pvalue
    assert S.sign_flip_p(d, null=0.2) == pytest.approx(ref, rel=1e-12)


def test_sign_flip_floor_and_monte_carlo():
    assert S.sign_flip_p([1.0, 2.0, 3.0]) == pytest.approx(1 / 8)  # all positive: the floor 2**-n
    p = S.sign_flip_p(np.linspace(0.1, 2.0, 20))  # Monte Carlo branch (n > 16)
    assert 0 < p < 1e-3


def test_spearman_matches_scipy_and_covers():
    x = [1.0, 2.5, 2.0, 4.0, 3.5, 6.0, 5.0, 8.0, 9.5, 9.0]
    y = [2.0, 1.0, 4.0, 3.0, 6.0, 5.0, 8.0, 7.0, 9.0, 10.0]
    iv = S.spearman_interval(x, y)
    assert iv.estimate == pytest.approx(sps.spearmanr(x, y).statistic)
    assert -1 < iv.low < iv.estimate < iv.high < 1
    # coverage over simulated bivariate normals with known Spearman rho
    rng = np.random.default_rng(1)
    rho_p = 0.6
    rho_s = 6 / math.pi * math.asin(rho_p / 2)
    cov = [[1, rho_p], [rho_p, 1]]
    hits = 0
    for _ in range(400):
        z = rng.multivariate_normal([0, 0], cov, size=40)
        s = S.spearman_interval(z[:, 0], z[:, 1])
        hits += s.low <= rho_s <= s.high
    assert 0.92 <= hits / 400 <= 0.985  # within the binomial band of 95% at 400 runs


def test_bootstrap_coverage_on_a_known_distribution():
    rng = np.random.default_rng(0)
    runs, hits = 300, 0
    for i in range(runs):
        x = rng.gamma(4.0, 1.0, size=60)  # mean 4, mildly skewed
        iv = S.bootstrap_mean(x, n_boot=2000, seed=i)
        hits += iv.low <= 4.0 <= iv.high
    # 95% nominal; 3 binomial standard errors at 300 runs is about 0.038
    assert 0.95 - 0.038 - 0.01 <= hits / runs <= 0.95 + 0.038


def test_clustered_bootstrap_counts_clusters_and_is_wider():
    rng = np.random.default_rng(3)
    offsets = rng.normal(0, 1.0, size=6)  # a strong per-cluster (per-seed) effect
    values = np.concatenate([o + rng.normal(0, 0.2, size=50) for o in offsets])
    labels = np.repeat(np.arange(6), 50)
    flat = S.bootstrap_mean(values)
    clustered = S.bootstrap_mean(values, clusters=labels.tolist())
    assert clustered.n == 6 and flat.n == 300
    assert (clustered.high - clustered.low) > 3 * (flat.high - flat.low)
    again = S.bootstrap_mean(values, clusters=labels.tolist())
    assert (again.low, again.high) == (clustered.low, clustered.high)  # seeded: reproducible


def _simulate(criterion, sampler, runs=400, seed=0):
    rng = np.random.default_rng(seed)
    verdicts = [criterion.check(*sampler(rng)).verdict for _ in range(runs)]
    return {v: verdicts.count(v) / runs for v in ("held", "inconclusive", "did not hold")}


@pytest.mark.parametrize(
    ("criterion", "null", "large"),
    [
        (
            Criterion("paired", "paired", above=0.0),
            lambda g: (g.normal(0, 1, 5), g.normal(0, 1, 5)),
            lambda g: (g.normal(4, 1, 5), g.normal(0, 1, 5)),
        ),
        (
            Criterion("margin", "mean", above=0.5),
            lambda g: (g.normal(0.5, 1, 8),),
            lambda g: (g.normal(3.0, 1, 8),),
        ),
        (
            Criterion("accuracy", "proportion", above=0.5),
            lambda g: (int(g.binomial(360, 0.5)), 360),
            lambda g: (int(g.binomial(360, 0.7)), 360),
        ),
        (
            Criterion("per query", "bootstrap", above=0.0, over="queries"),
            lambda g: (g.normal(0, 1, 50),),
            lambda g: (g.normal(1, 1, 50),),
        ),
        (
            Criterion("rank", "spearman", above=0.0),
            lambda g: (g.normal(size=30), g.normal(size=30)),
            lambda g: (lambda x: (x, x + 0.3 * g.normal(size=30)))(g.normal(size=30)),
        ),
    ],
    ids=["paired", "mean", "proportion", "bootstrap", "spearman"],
)
def test_planted_null_is_not_held_and_planted_effect_is(criterion, null, large):
    runs = 150 if criterion.design == "bootstrap" else 400
    at_null = _simulate(criterion, null, runs=runs)
    assert at_null["held"] <= 0.05  # inconclusive or did not hold in >= 95% of runs
    effect = _simulate(criterion, large, runs=runs // 2, seed=1)
    assert effect["held"] >= 0.95


def test_verdicts_of_a_below_and_a_within_claim():
    below = Criterion("ratio", "mean", below=1.0)
    assert below.check([0.5, 0.6, 0.55]).verdict == "held"
    assert below.check([1.5, 1.6, 1.55]).verdict == "did not hold"
    assert below.check([0.5, 1.6, 1.0]).verdict == "inconclusive"
    within = Criterion("calibration", "mean", above=0.85, below=1.15)
    assert within.check([0.98, 1.02, 1.0, 0.99]).verdict == "held"
    assert within.check([1.5, 1.6, 1.55]).verdict == "did not hold"
    assert within.check([0.8, 1.1, 0.95]).verdict == "inconclusive"
    assert within.check([0.98, 1.02, 1.0]).p_value is None  # no one-sided test for a band


def test_exact_checks_are_inclusive_and_combine():
    c = Criterion("bytes", "exact", below=100)
    assert c.check(100).verdict == "held" and c.check(100.5).verdict == "did not hold"
    assert combine([c.check(1), c.check(2)]) == "held"
    inc = Criterion("x", "mean", above=0).check([1.0, -1.0])
    assert combine([c.check(1), inc]) == "inconclusive"
    assert combine([c.check(1), inc, c.check(200)]) == "did not hold"
    with pytest.raises(ValueError, match="at least one check"):
        combine([])


def test_detectable_effect_and_underpowered_flag():
    # (t_.975,4 + t_.8,4) * se
    assert S.detectable_effect(1.0, 5) == pytest.approx(sps.t.ppf(0.975, 4) + sps.t.ppf(0.8, 4))
    c = Criterion("gain", "paired", above=0.0, paper_effect=0.5, unit="pt")
    noisy = c.check([0.19, 0.8, -0.4], [0.0, 0.0, 0.0])
    assert noisy.verdict == "inconclusive" and noisy.underpowered
    assert "underpowered" in noisy.power_text() and "paper: 0.5" in noisy.power_text()
    precise = c.check([5.1, 5.0, 4.9, 5.05], [0.0] * 4)
    assert not precise.underpowered


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: Criterion("x", "anova", above=0), ValueError, "design must be one of"),
        (lambda: Criterion("x", "mean"), ValueError, "above=... and/or below"),
        (lambda: Criterion("x", "mean", above=2, below=1), ValueError, "above < below"),
        (lambda: Criterion("x", "mean", above="big"), TypeError, "above must be a number"),
        (lambda: Criterion("x", "mean", above=math.nan), ValueError, "finite"),
        (lambda: Criterion("", "mean", above=0), ValueError, "non-empty"),
        (lambda: Criterion("x", "mean", above=0, confidence=1.5), ValueError, "confidence"),
        (lambda: Criterion("x", "mean", above=0).check([]), ValueError, "needs values"),
        (lambda: Criterion("x", "mean", above=0).check([1.0, math.nan]), ValueError, "finite"),
        (lambda: Criterion("x", "paired", above=0).check([1, 2], [1]), ValueError, "equal lengths"),
        (lambda: Criterion("x", "paired", above=0).check([1, 2]), TypeError, r"takes \(a, b"),
        (
            lambda: Criterion("x", "proportion", above=0.5).check(11, 10),
            ValueError,
            "successes <= n",
        ),
        (
            lambda: Criterion("x", "proportion", above=0.5).check(0.5, 10),
            TypeError,
            "integer counts",
        ),
        (lambda: Criterion("x", "exact", above=0).check([1, 2]), ValueError, "one value"),
        (
            lambda: Criterion("x", "spearman", above=0).check([1, 2, 3], [1, 2, 3]),
            ValueError,
            "10 pairs",
        ),
        (
            lambda: Criterion("x", "bootstrap", above=0).check([1.0, 2.0], clusters=[0]),
            ValueError,
            "cluster labels",
        ),
        (lambda: Criterion("x", "bootstrap", above=0).check([1.0, 2.0]), ValueError, "at least 10"),
        (
            lambda: Criterion("x", "bootstrap", above=0).check([1.0] * 20, clusters=[0] * 20),
            ValueError,
            "at least 2 clusters",
        ),
        (
            lambda: Criterion("x", "bootstrap", above=0).check([1.0] * 10, clusters=[None] * 10),
            ValueError,
            "None or NaN",
        ),
        (
            lambda: Criterion("x", "paired", above=0).check({3.0, 1.0}, {2.0, 0.5}),
            TypeError,
            "ordered",
        ),
        (lambda: Criterion("x", "mean", above=0).check(["1", "2"]), TypeError, "real numbers"),
        (lambda: Criterion("x", "mean", above=0).check([True, False]), TypeError, "real numbers"),
        (lambda: Criterion("x", "exact", above=0).check(True), TypeError, "takes a number"),
        (lambda: Criterion("x", "mean", above=0).check([1e308, 1e308]), ValueError, "overflow"),
        (lambda: Criterion("x", "mean", above=0).check([1.0, math.inf]), ValueError, "NaN or inf"),
        (lambda: Criterion("x", "proportion", above=1.5), ValueError, "outside the range"),
        (lambda: Criterion("x", "spearman", below=-2), ValueError, "outside the range"),
        (lambda: Criterion("x", "mean", above=0, paper_effect=-1), ValueError, ">= 0"),
        (lambda: Criterion("x", "mean", above=0, paper_effect="1"), TypeError, "must be a number"),
        (
            lambda: Criterion("x", "proportion", above=0.5).check([], []),
            ValueError,
            "one count per",
        ),
        (lambda: Criterion("x", "mean", above=0).check(), TypeError, r"takes \(values"),
    ],
)
def test_bad_input_names_the_value(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_check_round_trips_through_json_and_recomputes():
    import json

    from icml25.report import Check

    crits = [
        (Criterion("p", "paired", above=0.0), ([1.0, 2.0, 1.5], [0.0, 0.5, 0.2])),
        (Criterion("w", "proportion", above=0.5), ([30, 35], [50, 50])),
        (Criterion("b", "bootstrap", above=0.0), ([0.1, 0.3, -0.1, 0.2] * 5, [0, 1, 2, 3, 4] * 4)),
        (Criterion("s", "spearman", above=0.0), (list(range(10)), [2, 1, 4, 3, 5, 7, 6, 9, 8, 10])),
        (Criterion("e", "exact", below=3), (2.0,)),
    ]
    for crit, args in crits:
        c = crit.check(*args)
        back = Check.from_dict(json.loads(json.dumps(c.to_dict())))
        again = back.recompute()
        assert (again.estimate, again.low, again.high, again.verdict) == (
            c.estimate,
            c.low,
            c.high,
            c.verdict,
        )


def test_identical_values_need_the_sign_flip_test_to_decide():
    """A saturated score on every seed collapses the t-interval to a point; the verdict then rests
    on the exact sign-flip test, which needs at least 6 units to reach 2.5%."""
    c = Criterion("harm", "mean", above=50)
    assert c.check([100.0] * 3).verdict == "inconclusive"
    assert "identical" in c.check([100.0] * 3).test
    assert c.check([100.0] * 6).verdict == "held"
    assert c.check([0.0] * 3).verdict == "inconclusive"
    assert c.check([0.0] * 6).verdict == "did not hold"
    band = Criterion("ratio", "mean", above=0.85, below=1.15)
    assert (
        band.check([1.0] * 6).verdict == "held" and band.check([2.0] * 6).verdict == "did not hold"
    )
    assert Criterion("d", "paired", above=0).check([1.0] * 3, [0.0] * 3).verdict == "inconclusive"


def test_review_cases_rounding_noise_and_saturation():
    """Cases a first user found: rounding noise must not dodge the identical-values rule, 0/n and
    n/n must not be held in the impossible direction, numpy counts work, Monte Carlo is labelled."""
    assert Criterion("m", "mean", above=0).check([0.3, 0.1 + 0.2]).verdict == "inconclusive"
    near = Criterion("p", "paired", above=0).check([100.0, 100.0], [99.0, 99.0 + 1e-9])
    assert near.verdict == "inconclusive"
    assert Criterion("p", "proportion", above=0.0).check(0, 100).verdict == "inconclusive"
    assert Criterion("p", "proportion", below=1.0).check(30, 30).verdict == "inconclusive"
    counts = Criterion("p", "proportion", above=0.5).check(np.array([8, 9]), np.array([10, 10]))
    assert counts.n == 20
    assert "Monte Carlo" in Criterion("m", "mean", above=0).check(np.linspace(0.1, 1, 20)).test
    assert "exact sign-flip" in Criterion("m", "mean", above=0).check([0.1, 0.5, 0.2]).test
    refuted = Criterion("p", "paired", above=0).check([0.0] * 6, [1.0] * 6)
    assert refuted.verdict == "did not hold" and refuted.p_value == pytest.approx(1 / 64)
    flat = Criterion("x", "mean", above=0, paper_effect=1).check([2.0] * 5)
    assert flat.detectable is None and "not estimable" in flat.power_text()
    d90 = Criterion("p", "proportion", above=0.5, confidence=0.9).check(80, 100).detectable
    d99 = Criterion("p", "proportion", above=0.5, confidence=0.99).check(80, 100).detectable
    assert d99 > d90
    assert Criterion("p", "proportion", above=0.5).over == "items"
    # the short form would print "10" against "<= 10": more digits show the side
    assert Criterion("e", "exact", below=10).check(10.0000001).interval_text() == "10.0000001"


def test_a_single_seed_is_inconclusive_not_an_error():
    c = Criterion("x", "paired", above=0).check([3.0], [1.0])
    assert c.verdict == "inconclusive" and c.estimate == c.low == c.high == 2.0 and c.n == 1
    assert "single value" in c.test
    again = c.recompute()
    assert (again.verdict, again.low, again.high) == (c.verdict, c.low, c.high)
