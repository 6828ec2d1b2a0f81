"""The statistics behind a reproduction's verdicts, as plain functions of numbers.

Every function returns an interval at a chosen two-sided confidence (95% by default). The checks
in :mod:`icml25.report.checks` compare that interval with the claim's threshold: wholly on the
claim's side is *held*, wholly on the other side is *did not hold*, straddling is *inconclusive*.
A two-sided 95% interval wholly above a threshold is a one-sided test at the 2.5% level.

numpy and scipy are imported inside the functions: ``import icml25.report`` stays cheap.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Interval",
    "bootstrap_mean",
    "cluster_t_interval",
    "detectable_effect",
    "proportion_over_runs",
    "mean_t_interval",
    "sign_flip_is_exact",
    "sign_flip_p",
    "spearman_interval",
    "wilson_interval",
]

#: Power used for the detectable-effect figures (the conventional 80%).
POWER = 0.8
#: Exact sign-flip enumeration up to this many values (2**16 patterns); Monte Carlo above it.
_EXACT_SIGN_FLIP_MAX = 16


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval and the spread it came from.

    ``se`` is the standard error of the estimate (for bootstraps, the standard deviation of the
    resampled estimates); ``n`` is the number of independent units behind it.
    """

    estimate: float
    low: float
    high: float
    n: int
    se: float
    confidence: float


def _finite(name: str, values: Sequence[Any]) -> list[float]:
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a sequence of real numbers, got {values!r}") from None
    bad = [v for v in out if not math.isfinite(v)]
    if bad:
        raise ValueError(f"{name}: values must be finite, got {bad[:3]} among {len(out)} values")
    big = max((abs(v) for v in out), default=0.0)
    if big > 1e150:
        raise ValueError(f"{name}: values up to {big:.3g} overflow the statistics; rescale them")
    return out


def _check_confidence(confidence: float) -> float:
    confidence = float(confidence)
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    return confidence


def mean_t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Student-t interval for the mean of independent values (e.g. paired differences, one per
    seed). Needs at least two values; with zero spread the interval is the point itself."""
    from scipy import stats

    confidence = _check_confidence(confidence)
    x = _finite("mean_t_interval", values)
    n = len(x)
    if n < 2:
        raise ValueError(f"mean_t_interval needs at least 2 values for a spread, got {n}")
    mean = math.fsum(x) / n
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * se
    return Interval(mean, mean - half, mean + half, n, se, confidence)


def sign_flip_p(
    values: Sequence[float], *, null: float = 0.0, alternative: str = "greater", seed: int = 0
) -> float:
    """Permutation p-value of the paired sign-flip test of ``mean(values) == null``.

    Under the null the differences ``values - null`` are symmetric about zero, so every pattern of
    signs is equally likely. Exact over all ``2**n`` patterns for ``n <= 16``
    (:func:`sign_flip_is_exact`), otherwise a Monte Carlo estimate from 20 000 random patterns
    (with the observed one counted, so p is never below 1/20 001). ``alternative`` is
    ``"greater"``, ``"less"`` or ``"two-sided"``. Note the floor: with n values the smallest
    one-sided p is ``2**-n``; below n = 5 no result reaches 5%.
    """
    import numpy as np

    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(
            f"alternative must be 'greater', 'less' or 'two-sided', got {alternative!r}"
        )
    d = np.asarray(_finite("sign_flip_p", values), dtype=np.float64) - float(null)
    n = d.size
    if n == 0:
        raise ValueError("sign_flip_p needs at least one value")
    observed = d.mean()
    if n <= _EXACT_SIGN_FLIP_MAX:
        patterns = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1) * 2 - 1
        extra = 0
    else:
        rng = np.random.default_rng(seed)
        patterns = rng.choice(np.array([-1, 1]), size=(20_000, n))
        extra = 1
    means = (patterns * np.abs(d)).mean(axis=1)
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    if alternative == "greater":
        hits = np.count_nonzero(means >= observed - tol)
    elif alternative == "less":
        hits = np.count_nonzero(means <= observed + tol)
    else:
        hits = np.count_nonzero(np.abs(means) >= abs(observed) - tol)
    return float((hits + extra) / (len(means) + extra))


def sign_flip_is_exact(n: int) -> bool:
    """Whether :func:`sign_flip_p` enumerates all sign patterns for ``n`` values."""
    return n <= _EXACT_SIGN_FLIP_MAX


#: Smallest sample for the plain bootstrap, and smallest number of clusters for the two-stage one:
#: below these the percentile interval is far too narrow (with 2 clusters it cannot leave the range
#: of the two cluster means, whatever their spread).
MIN_BOOTSTRAP_ITEMS = 10
MIN_BOOTSTRAP_CLUSTERS = 5
#: Smallest number of pairs for the Spearman interval (the Fisher-z approximation is poor below).
MIN_SPEARMAN_PAIRS = 10


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval for a proportion ``successes / n`` (items scored right or wrong)."""
    from scipy import stats

    confidence = _check_confidence(confidence)
    if isinstance(successes, bool) or isinstance(n, bool):
        raise TypeError("wilson_interval: successes and n are counts, not booleans")
    try:
        k, n = operator.index(successes), operator.index(n)
    except TypeError:
        raise TypeError(
            f"wilson_interval: counts must be integers, got {successes!r} and {n!r}"
        ) from None
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"wilson_interval needs 0 <= successes <= n and n >= 1, got {k} of {n}")
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # 0/n cannot show a rate above 0, nor n/n one below 1: pin those ends exactly (the formula
    # leaves rounding noise of order 1e-17 there)
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return Interval(p, low, high, n, math.sqrt(p * (1 - p) / n), confidence)


def bootstrap_mean(
    values: Sequence[float],
    *,
    clusters: Sequence[Any] | None = None,
    confidence: float = 0.95,
    n_boot: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval for the mean of per-item values (e.g. per-query reward
    differences).

    With ``clusters`` (one label per value, e.g. the seed whose model produced it) the bootstrap is
    two-stage: resample clusters with replacement, then items within each drawn cluster, so the
    spread between independently trained models is part of the interval. ``n`` is then the number
    of clusters. The resampling uses its own generator seeded by ``seed``: reruns give the same
    interval.
    """
    import numpy as np

    confidence = _check_confidence(confidence)
    x = np.asarray(_finite("bootstrap_mean", values), dtype=np.float64)
    if clusters is None and x.size < MIN_BOOTSTRAP_ITEMS:
        raise ValueError(
            f"the bootstrap needs at least {MIN_BOOTSTRAP_ITEMS} values, got {x.size}; for fewer "
            "independent units use a t-interval (the 'mean' or 'paired' design)"
        )
    if n_boot < 100:
        raise ValueError(f"n_boot must be at least 100, got {n_boot}")
    rng = np.random.default_rng(seed)
    if clusters is None:
        idx = rng.integers(0, x.size, size=(n_boot, x.size))
        boots = x[idx].mean(axis=1)
        n_units = x.size
    else:
        labels = list(clusters)
        if len(labels) != x.size:
            raise ValueError(
                f"bootstrap_mean: {len(labels)} cluster labels for {x.size} values; give one each"
            )
        groups = [x[[i for i, c in enumerate(labels) if c == g]] for g in dict.fromkeys(labels)]
        n_units = len(groups)
        if n_units < MIN_BOOTSTRAP_CLUSTERS:
            raise ValueError(
                f"the two-stage bootstrap needs at least {MIN_BOOTSTRAP_CLUSTERS} clusters, got "
                f"{n_units}; with fewer, compare the clusters' means with a t-interval (the "
                "'mean' or 'paired' design over seeds)"
            )
        boots = np.empty(n_boot)
        picks = rng.integers(0, n_units, size=(n_boot, n_units))
        for b in range(n_boot):
            parts = [groups[g][rng.integers(0, groups[g].size, groups[g].size)] for g in picks[b]]
            boots[b] = np.concatenate(parts).mean()
    alpha = 1 - confidence
    low, high = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return Interval(
        float(x.mean()), float(low), float(high), int(n_units), float(boots.std(ddof=1)), confidence
    )


#: Below this many clusters the clustered designs use :func:`cluster_t_interval`, not the
#: two-stage bootstrap: a percentile bootstrap over few clusters is too narrow (it covered 0.87 at
#: 5 clusters and about 0.90 at 10 where 0.95 was asked; tests/test_stats.py simulates both).
CLUSTER_T_BELOW = 30


def cluster_t_interval(
    values: Sequence[float], clusters: Sequence[Any], confidence: float = 0.95
) -> Interval:
    """Cluster-robust t-interval for the mean of per-item values grouped in clusters (e.g. the
    seed, trained model or world that produced each item).

    The estimate is the mean of all items; its variance is the cluster-robust (CR1) sandwich
    ``k / (k - 1) * sum_c (n_c * (mean_c - mean))**2 / N**2`` over the ``k`` clusters, and the
    quantile is Student's t on ``k - 1`` degrees of freedom. With equal cluster sizes this is
    exactly the t-interval of the clusters' means, so it holds its level with as few as 2 clusters
    when the cluster means are roughly normal. ``n`` is the number of clusters.
    """
    from scipy import stats

    confidence = _check_confidence(confidence)
    x = _finite("cluster_t_interval", values)
    labels = list(clusters)
    if len(labels) != len(x):
        raise ValueError(
            f"cluster_t_interval: {len(labels)} cluster labels for {len(x)} values; give one each"
        )
    sums: dict[Any, float] = {}
    sizes: dict[Any, int] = {}
    for v, c in zip(x, labels):
        sums[c] = sums.get(c, 0.0) + v
        sizes[c] = sizes.get(c, 0) + 1
    k = len(sums)
    if k < 2:
        raise ValueError(
            f"cluster_t_interval needs at least 2 clusters for a spread between them, got {k}"
        )
    total = len(x)
    mean = math.fsum(x) / total
    resid = [sums[c] - sizes[c] * mean for c in sums]  # n_c * (mean_c - mean)
    var = k / (k - 1) * math.fsum(e * e for e in resid) / (total * total)
    se = math.sqrt(var)
    half = float(stats.t.ppf(0.5 + confidence / 2, k - 1)) * se
    return Interval(mean, mean - half, mean + half, k, se, confidence)


def proportion_over_runs(
    successes: Sequence[int], n: Sequence[int], confidence: float = 0.95
) -> Interval:
    """A proportion counted over several runs (e.g. one count per trained model): the wider of
    the pooled Wilson interval and the cluster-robust t-interval over runs
    (:func:`cluster_t_interval` with each run a cluster of 0/1 items).

    Pooling alone treats every item as independent and ignores the variance between runs; the
    t-interval alone collapses when every run has the same rate (e.g. 0 of 100 in each). Taking
    the wider keeps both sources of error. ``n`` of the result is the number of items.
    """
    from scipy import stats

    confidence = _check_confidence(confidence)
    ks = [operator.index(k) for k in successes]
    ns = [operator.index(m) for m in n]
    if len(ks) != len(ns) or not ks:
        raise ValueError(f"proportion_over_runs: {len(ks)} counts for {len(ns)} totals")
    pooled = wilson_interval(sum(ks), sum(ns), confidence)
    if len(ks) < 2:
        return pooled
    total, p = sum(ns), sum(ks) / sum(ns)
    k = len(ks)
    var = k / (k - 1) * math.fsum((s - m * p) ** 2 for s, m in zip(ks, ns)) / (total * total)
    half = float(stats.t.ppf(0.5 + confidence / 2, k - 1)) * math.sqrt(var)
    low = max(0.0, min(pooled.low, p - half))
    high = min(1.0, max(pooled.high, p + half))
    return Interval(p, low, high, total, max(pooled.se, math.sqrt(var)), confidence)


def spearman_interval(x: Sequence[float], y: Sequence[float], confidence: float = 0.95) -> Interval:
    """Spearman rank correlation with a Fisher-z interval using the Bonett-Wright standard error
    ``sqrt((1 + r**2 / 2) / (n - 3))``. Needs at least 10 pairs."""
    from scipy import stats

    confidence = _check_confidence(confidence)
    a, b = _finite("spearman_interval x", x), _finite("spearman_interval y", y)
    if len(a) != len(b):
        raise ValueError(f"spearman_interval: x has {len(a)} values, y has {len(b)}")
    n = len(a)
    if n < MIN_SPEARMAN_PAIRS:
        raise ValueError(
            f"the Spearman interval needs at least {MIN_SPEARMAN_PAIRS} pairs, got {n} (its "
            "Fisher-z approximation is poor below that)"
        )
    if len(set(a)) < 2 or len(set(b)) < 2:
        raise ValueError("spearman_interval: x and y must each take at least two distinct values")
    r = float(stats.spearmanr(a, b).statistic)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    se = math.sqrt((1 + r * r / 2) / (n - 3))
    rc = min(max(r, -0.999999), 0.999999)
    lo, hi = math.tanh(math.atanh(rc) - z * se), math.tanh(math.atanh(rc) + z * se)
    return Interval(r, lo, hi, n, se, confidence)


def detectable_effect(se: float, n: int, *, confidence: float = 0.95, t_dist: bool = True) -> float:
    """The smallest true distance from the threshold that the check would call *held* with 80%
    power, given the standard error ``se`` of the estimate from ``n`` units: ``(q_conf + q_power)
    * se`` with Student-t quantiles on ``n - 1`` degrees of freedom (normal ones if not t_dist)."""
    from scipy import stats

    confidence = _check_confidence(confidence)
    if t_dist and n >= 2:
        q = stats.t.ppf(0.5 + confidence / 2, n - 1) + stats.t.ppf(POWER, n - 1)
    else:
        q = stats.norm.ppf(0.5 + confidence / 2) + stats.norm.ppf(POWER)
    return float(q * se)
