"""Pre-registered criteria and the checks they yield: a reproduction's verdict with its evidence.

A :class:`Criterion` is written at the top of a ``repro.py``, before any number is measured: what is
compared, the design (paired over seeds, a proportion over items, ...), the direction and margin
of the claim, and the paper's own effect size. Calling :meth:`Criterion.check` with the measured
values gives a :class:`Check`: the estimate, its 95% interval, the test used, the raw values (so a
reader can recompute it from ``results.json``) and one of three verdicts:

* **held**: the whole interval lies on the claim's side of the threshold;
* **did not hold**: the whole interval lies on the other side;
* **inconclusive**: the interval straddles the threshold.

A claim with several checks is held only when every check is held (:func:`combine`). A check that
could not be measured (a gate failed, nothing qualified) is :meth:`Criterion.unmeasured`: no
estimate (``null`` in ``results.json``) and inconclusive, with its reason.

Every value counts one independent unit once. ``units=`` names each value's unit (a seed, a
trained model, an image, a prompt cluster); a label that appears twice is an error. Where several
values come from one unit, pass ``clusters=`` (bootstrap design) or average them first.

Designs (what :meth:`Criterion.check` takes):

========== ======================== ==========================================================
design     data                     interval
========== ======================== ==========================================================
paired     ``a, b`` (one per seed)  t-interval of ``a - b``; exact sign-flip p reported beside it
mean       ``values``               t-interval of the mean; sign-flip p against the threshold
proportion ``successes, n``         Wilson score interval; with one count per run (lists), the
                                    wider of the pooled Wilson and a t-interval over the runs
bootstrap  ``values[, clusters]``   percentile bootstrap of the mean; with clusters, a
                                    cluster-robust t-interval below 30 clusters, else a
                                    two-stage bootstrap
spearman   ``x, y``                 Fisher-z interval, Bonett-Wright standard error
exact      ``value[, how]``         none: only for a deterministic quantity (exact math, byte
                                    counts, a closed form); a Monte-Carlo frequency is a
                                    proportion, a noisy fit is repeated over seeds
========== ======================== ==========================================================

Values that agree to their own precision (float32 data within a few ulps, float64 within 1e-9
relative) are identical: a t-interval collapsed to a point is no evidence, so such a verdict rests
on the sign-flip test alone.
"""

from __future__ import annotations

import inspect
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from icml25.report import stats

__all__ = ["DESIGNS", "VERDICTS", "Check", "Criterion", "combine", "unit_problems"]

#: The three verdicts of a check (and of a claim), best first.
VERDICTS = ("held", "inconclusive", "did not hold")
DESIGNS = ("paired", "mean", "proportion", "bootstrap", "spearman", "exact")


def _number(name: str, what: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"criterion {name!r}: {what} must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"criterion {name!r}: {what} must be a number, got {value!r}") from None
    if not math.isfinite(out):
        raise ValueError(f"criterion {name!r}: {what} must be finite, got {value!r}")
    return out


def _values(name: str, what: str, values: Any) -> list[float]:
    if isinstance(values, (set, frozenset, dict)):
        raise TypeError(
            f"check {name!r}: {what} must be an ordered sequence (list, tuple, array), got a "
            f"{type(values).__name__}, whose order is arbitrary and would break the pairing"
        )
    if hasattr(values, "tolist"):  # numpy arrays, torch tensors, pandas Series
        values = values.tolist()
    if isinstance(values, (int, float)) and not isinstance(values, bool):
        values = [values]
    if isinstance(values, (str, bytes, bool)):
        raise TypeError(
            f"check {name!r}: {what} must be a sequence of real numbers, got {values!r}"
        )
    try:
        items = list(values)
    except TypeError:
        raise TypeError(
            f"check {name!r}: {what} must be a sequence of real numbers, got {values!r}"
        ) from None
    bad_type = [v for v in items if isinstance(v, (bool, str, bytes))]
    if bad_type:
        raise TypeError(
            f"check {name!r}: {what} must hold real numbers, got {bad_type[0]!r} "
            f"({type(bad_type[0]).__name__})"
        )
    try:
        out = [float(v) for v in items]
    except (TypeError, ValueError):
        raise TypeError(
            f"check {name!r}: {what} must be a sequence of real numbers, got {values!r}"
        ) from None
    bad = [v for v in out if not math.isfinite(v)]
    if bad:
        raise ValueError(
            f"check {name!r}: {what} must be finite; got {bad[:3]} among {len(out)} values "
            "(a run that produced NaN or inf is a failed measurement: report it, do not test it)"
        )
    return out


def _counts(name: str, what: str, values: Any) -> list[int]:
    if hasattr(values, "tolist"):
        values = values.tolist()
    items = list(values) if isinstance(values, (list, tuple)) else [values]
    out = []
    for v in items:
        if isinstance(v, (bool, str, bytes)):
            raise TypeError(f"check {name!r}: {what} must be integer counts, got {v!r}")
        try:
            out.append(operator.index(v))
        except TypeError:
            raise TypeError(f"check {name!r}: {what} must be integer counts, got {v!r}") from None
    return out


def _labels(name: str, clusters: Any) -> list[Any]:
    if isinstance(clusters, (set, frozenset, dict)):
        raise TypeError(
            f"check {name!r}: clusters must be an ordered sequence, one label per value"
        )
    if hasattr(clusters, "tolist"):
        clusters = clusters.tolist()
    out = []
    for c in clusters:
        if c is None or (isinstance(c, float) and math.isnan(c)):
            raise ValueError(f"check {name!r}: cluster labels must not be None or NaN, got {c!r}")
        try:
            out.append(operator.index(c))
        except TypeError:
            out.append(c if isinstance(c, str) else str(c))
    return out


#: Relative spread below which float64 values count as identical (rounding noise, 0.1 + 0.2 vs 0.3).
_IDENTICAL = 1e-9
#: Values that are all exactly float32 numbers count as identical within this many float32 ulps.
_FLOAT32_ULPS = 4
_FLOAT32_EPS = 2.0**-23


def _is_float32(values: Sequence[float]) -> bool:
    import struct

    try:
        return all(struct.unpack("f", struct.pack("f", v))[0] == v for v in values)
    except OverflowError:
        return False


def _all_identical(d: Sequence[float], inputs: Sequence[float]) -> bool:
    """True when the values ``d`` (computed from ``inputs``) agree to the inputs' own precision."""
    scale = max((abs(x) for x in inputs), default=0.0)
    spread = max(d) - min(d)
    if scale == 0 or spread == 0:
        return True
    tol = _FLOAT32_ULPS * _FLOAT32_EPS if _is_float32(inputs) else _IDENTICAL
    return spread <= tol * scale


_MERGE_ADVICE = {
    "counts": "sum that unit's counts into one",
    "values": "average each unit's values first, or cluster them (bootstrap design, clusters=)",
    "pairs": "average each unit's values first (one pair per unit)",
}


def _unit_labels(name: str, units: Any, n: int, what: str) -> list[Any] | None:
    """The units argument checked: one label per value, no label twice."""
    if units is None:
        return None
    if isinstance(units, (str, bytes)):
        raise TypeError(f"check {name!r}: units must be a sequence of labels, got {units!r}")
    labels = _labels(name, units)
    if len(labels) != n:
        raise ValueError(
            f"check {name!r}: {len(labels)} unit labels for {n} {what}; give one label per value"
        )
    seen: dict[Any, int] = {}
    for u in labels:
        seen[u] = seen.get(u, 0) + 1
    twice = [u for u, k in seen.items() if k > 1]
    if twice:
        raise ValueError(
            f"check {name!r}: unit {twice[0]!r} appears {seen[twice[0]]} times among the {n} "
            f"{what} ({len(twice)} unit(s) repeated): a unit counted twice is not independent "
            f"evidence; {_MERGE_ADVICE.get(what, _MERGE_ADVICE['values'])}"
        )
    return labels


#: Default name of the independent units, per design.
_OVER = {
    "paired": "seeds",
    "mean": "seeds",
    "proportion": "items",
    "bootstrap": "items",
    "spearman": "pairs",
    "exact": "",
}


@dataclass(frozen=True)
class Criterion:
    """A pass criterion fixed before the numbers: see the module docstring for the designs.

    Args:
        name: the check's name in the report, e.g. ``"Q2 VRNS raises probe accuracy"``.
        design: one of :data:`DESIGNS`.
        above: the claim is that the quantity is greater than this (the margin).
        below: the claim is that the quantity is less than this. Give both for "within".
        confidence: two-sided confidence of the interval (0.95).
        unit: unit of the compared quantity (shown with the numbers).
        paper_effect: the paper's own effect, as a distance from the threshold in the same unit;
            the report flags the check as underpowered when the effect it could detect with 80%
            power is larger.
        over: what the independent units are ("seeds", "images", "queries", ...); the default
            depends on the design (seeds for paired and mean, items, pairs).
        description: one line on what is compared, for the report.
        declared_as: set by :meth:`Check.renamed`: the name the criterion was declared under, so
            ``icml25 report`` can match a renamed check with the installed code's criterion.

    Interval designs are strict (held means the whole interval is beyond the threshold); the
    ``exact`` design compares its one value inclusively (``value >= above``, ``value <= below``).
    """

    name: str
    design: Literal["paired", "mean", "proportion", "bootstrap", "spearman", "exact"]
    above: float | None = None
    below: float | None = None
    confidence: float = 0.95
    unit: str = ""
    paper_effect: float | None = None
    over: str = ""
    description: str = ""
    declared_as: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"criterion name must be a non-empty string, got {self.name!r}")
        if self.design not in DESIGNS:
            raise ValueError(
                f"criterion {self.name!r}: design must be one of {DESIGNS}, got {self.design!r}"
            )
        above = _number(self.name, "above", self.above)
        below = _number(self.name, "below", self.below)
        if above is None and below is None:
            raise ValueError(
                f"criterion {self.name!r}: give the claim's threshold as above=... and/or below=..."
            )
        if above is not None and below is not None and not above < below:
            raise ValueError(
                f"criterion {self.name!r}: a band (both above= and below=) needs above < below, "
                f"got above={above}, below={below}"
            )
        limits = {"proportion": (0.0, 1.0), "spearman": (-1.0, 1.0)}.get(self.design)
        if limits is not None:
            for what, t in (("above", above), ("below", below)):
                if t is not None and not limits[0] <= t <= limits[1]:
                    raise ValueError(
                        f"criterion {self.name!r}: {what}={t} is outside the range of a "
                        f"{self.design} ({limits[0]:g} to {limits[1]:g})"
                    )
        object.__setattr__(self, "above", above)
        object.__setattr__(self, "below", below)
        effect = _number(self.name, "paper_effect", self.paper_effect)
        if effect is not None and effect < 0:
            raise ValueError(
                f"criterion {self.name!r}: paper_effect is a distance from the threshold in the "
                f"claim's direction and must be >= 0, got {effect}"
            )
        object.__setattr__(self, "paper_effect", effect)
        object.__setattr__(self, "over", self.over or _OVER[self.design])
        confidence = _number(self.name, "confidence", self.confidence)
        if confidence is None or not 0.5 <= confidence < 1:
            raise ValueError(
                f"criterion {self.name!r}: confidence must be in [0.5, 1), got {self.confidence}"
            )
        object.__setattr__(self, "confidence", confidence)

    @property
    def threshold_text(self) -> str:
        u = f" {self.unit}" if self.unit else ""
        if self.above is not None and self.below is not None:
            return f"in [{_fmt(self.above)}, {_fmt(self.below)}]{u}"
        if self.above is not None:
            return f"{'≥' if self.design == 'exact' else '>'} {_fmt(self.above)}{u}"
        return f"{'≤' if self.design == 'exact' else '<'} {_fmt(self.below)}{u}"

    def unmeasured(self, reason: str, *, n: int = 0) -> Check:
        """The check when its quantity could not be measured (a gate failed, nothing qualified):
        no estimate (``null`` in ``results.json``), verdict inconclusive, ``reason`` as its test."""
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(
                f"criterion {self.name!r}: say why it was not measured, got {reason!r}"
            )
        nan = math.nan
        return Check(
            self, nan, nan, nan, int(n), nan, "inconclusive", reason, {"unmeasured": reason}
        )

    def check(self, *args: Any, **kwargs: Any) -> Check:
        """Evaluate the criterion on measured data; the arguments depend on the design (module
        docstring): ``paired(a, b)``, ``mean(values)``, ``proportion(successes, n)``,
        ``bootstrap(values, clusters=None)``, ``spearman(x, y)``, ``exact(value, how=None)``; all
        but ``exact`` take ``units=``, one label per value naming its independent unit."""
        fn = getattr(self, f"_check_{self.design}")
        try:
            inspect.signature(fn).bind(*args, **kwargs)
        except TypeError:
            raise TypeError(
                f"criterion {self.name!r} (design {self.design!r}) takes "
                f"{_SIGNATURES[self.design]}; got {len(args)} positional argument(s)"
                + (f" and {sorted(kwargs)}" if kwargs else "")
            ) from None
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            if str(exc).startswith("check "):
                raise
            raise ValueError(f"check {self.name!r}: {exc}") from None

    # -- designs -------------------------------------------------------------------------------

    def _check_paired(self, a: Any, b: Any, *, units: Sequence[Any] | None = None) -> Check:
        a, b = _values(self.name, "a", a), _values(self.name, "b", b)
        if len(a) != len(b):
            raise ValueError(
                f"check {self.name!r}: paired values need equal lengths, got {len(a)} and {len(b)}"
            )
        d = [x - y for x, y in zip(a, b)]
        data: dict[str, Any] = {"a": a, "b": b}
        _store_units(data, _unit_labels(self.name, units, len(d), "pairs"))
        return self._t_check(d, data, "paired t-interval of the differences", inputs=a + b)

    def _check_mean(self, values: Any, *, units: Sequence[Any] | None = None) -> Check:
        v = _values(self.name, "values", values)
        data: dict[str, Any] = {"values": v}
        _store_units(data, _unit_labels(self.name, units, len(v), "values"))
        return self._t_check(v, data, "t-interval of the mean", inputs=v)

    def _t_check(
        self, d: list[float], data: dict[str, Any], what: str, *, inputs: list[float]
    ) -> Check:
        if not d:
            raise ValueError(f"check {self.name!r}: a {self.design} design needs values, got none")
        if len(d) == 1:
            # one unit (e.g. `icml25 repro --seeds 1`): no spread, so no interval and no verdict
            iv = stats.Interval(d[0], d[0], d[0], 1, 0.0, self.confidence)
            check = self._make(
                iv,
                f"{what}: a single value among the {self.over}, no spread to "
                "build an interval from (run at least 2)",
                data,
            )
            check.verdict = "inconclusive"
            return check
        iv = stats.mean_t_interval(d, self.confidence)
        p = None
        test = f"{what} over {iv.n} {self.over}"
        one_sided = (self.above is None) != (self.below is None)
        if one_sided:
            null = self.above if self.above is not None else self.below
            alt = "greater" if self.above is not None else "less"
            p = stats.sign_flip_p(d, null=null, alternative=alt)
            test += f"; {_sign_flip_name(iv.n)} p = {p:.3g} (one-sided)"
            if iv.n < 5:
                test += f", which cannot go below {2.0**-iv.n:.3g} with {iv.n} {self.over}"
        det: float | None = stats.detectable_effect(iv.se, iv.n, confidence=self.confidence)
        check = self._make(iv, test, data, p_value=p, detectable=det)
        if _all_identical(d, inputs):
            # Identical values (e.g. a saturated score on every seed) collapse the t-interval to
            # a point, which is no evidence of zero spread. The verdict then rests on the sign-flip
            # test alone, whose floor is 2**-n: it takes at least 6 units to reach 2.5%.
            check.detectable = None
            alpha = (1 - self.confidence) / 2
            iv_mid = iv.estimate
            # the side the data are on, for each threshold: the test must establish that side
            sides = [
                ("greater" if iv_mid > t else "less", t)
                for t in (self.above, self.below)
                if t is not None and iv_mid != t
            ]
            ps = [stats.sign_flip_p(d, null=t, alternative=a) for a, t in sides]
            if check.verdict == "held":
                decisive = max(ps) if ps else 1.0
            elif check.verdict == "did not hold":
                decisive = min(ps) if ps else 1.0
            else:
                decisive = 1.0
            check.p_value = decisive if ps else check.p_value
            head = f"{what} over {iv.n} {self.over}; all {iv.n} values identical"
            if not ps:
                check.verdict = "inconclusive"
                check.test = f"{head} and equal to the threshold: no evidence either way"
            elif decisive > alpha:
                check.verdict = "inconclusive"
                floor = 2.0**-iv.n
                check.test = (
                    f"{head}, so the verdict rests on the {_sign_flip_name(iv.n)} test alone: "
                    f"p = {decisive:.3g} > {alpha:.3g}"
                    + (
                        ""
                        if floor <= alpha
                        else f" (the smallest p possible with {iv.n} {self.over})"
                        if decisive == floor
                        else f" (its floor with {iv.n} {self.over} is {floor:.3g})"
                    )
                )
            elif check.verdict != "inconclusive":
                check.test = (
                    f"{head}: the verdict rests on the {_sign_flip_name(iv.n)} test, "
                    f"p = {decisive:.3g} (one-sided)"
                )
        return check

    def _check_proportion(
        self, successes: Any, n: Any, *, units: Sequence[Any] | None = None
    ) -> Check:
        ks, ns = _counts(self.name, "successes", successes), _counts(self.name, "n", n)
        if len(ks) != len(ns) or not ks:
            raise ValueError(
                f"check {self.name!r}: {len(ks)} success count(s) for {len(ns)} total(s); give "
                "one count per total"
            )
        bad = [(k, m) for k, m in zip(ks, ns) if m < 1 or not 0 <= k <= m]
        if bad:
            raise ValueError(
                f"check {self.name!r}: each count needs 0 <= successes <= n and n >= 1, got "
                f"{bad[0][0]} of {bad[0][1]}"
            )
        labels = _unit_labels(self.name, units, len(ks), "counts")
        k_sum, n_sum = sum(ks), sum(ns)
        iv = stats.proportion_over_runs(ks, ns, self.confidence)
        ref = self.above if self.above is not None else self.below
        p0 = min(max(ref if 0 < ref < 1 else iv.estimate, 0.01), 0.99)
        det = stats.detectable_effect(
            max(iv.se, math.sqrt(p0 * (1 - p0) / n_sum)),
            n_sum,
            confidence=self.confidence,
            t_dist=False,
        )
        test = f"Wilson interval of {k_sum}/{n_sum} {self.over}"
        if len(ks) > 1:
            pooled = stats.wilson_interval(k_sum, n_sum, self.confidence)
            widened = iv.low < pooled.low or iv.high > pooled.high
            test += f" counted in {len(ks)} runs; " + (
                f"widened by the cluster-robust t-interval over the runs ({len(ks) - 1} df), "
                "as the runs differ more than their items explain"
                if widened
                else "the cluster-robust t-interval over the runs is no wider"
            )
        data: dict[str, Any] = {"successes": ks, "n": ns}
        _store_units(data, labels)
        return self._make(iv, test, data, detectable=det)

    def _check_bootstrap(
        self,
        values: Any,
        clusters: Sequence[Any] | None = None,
        *,
        units: Sequence[Any] | None = None,
    ) -> Check:
        v = _values(self.name, "values", values)
        cl = None if clusters is None else _labels(self.name, clusters)
        if cl is not None and units is not None:
            raise ValueError(
                f"check {self.name!r}: give clusters= (several values per unit) or units= (one "
                "value per unit), not both: with clusters, the clusters are the units"
            )
        labels = _unit_labels(self.name, units, len(v), "values")
        data: dict[str, Any] = {"values": v, "clusters": cl}
        _store_units(data, labels)
        if cl is not None and len(cl) != len(v):
            raise ValueError(
                f"check {self.name!r}: {len(cl)} cluster labels for {len(v)} values; give one each"
            )
        if cl is not None and len(set(cl)) < 2:
            raise ValueError(
                f"check {self.name!r}: the clustered design needs at least 2 clusters, got "
                f"{len(set(cl))}: with one, nothing varies between independent units"
            )
        if cl is not None and len(set(cl)) < stats.CLUSTER_T_BELOW:
            iv = stats.cluster_t_interval(v, cl, self.confidence)
            how = (
                f"cluster-robust t-interval of the mean of {len(v)} values in {iv.n} clusters "
                f"({iv.n - 1} df; below {stats.CLUSTER_T_BELOW} clusters a bootstrap under-covers)"
            )
            det_t: float | None = stats.detectable_effect(iv.se, iv.n, confidence=self.confidence)
            check = self._make(iv, how, data, detectable=det_t)
            if iv.se == 0 and check.verdict != "inconclusive":
                check.verdict, check.detectable = "inconclusive", None
                check.test += "; every cluster has the same mean, so it cannot decide"
            return check
        iv = stats.bootstrap_mean(v, clusters=cl, confidence=self.confidence)
        how = (
            f"two-stage percentile bootstrap (clusters, then items) of the mean of {len(v)} values "
            f"in {iv.n} clusters"
            if cl is not None
            else f"percentile bootstrap of the mean over {iv.n} {self.over}"
        )
        det: float | None = stats.detectable_effect(
            iv.se, iv.n, confidence=self.confidence, t_dist=False
        )
        check = self._make(iv, how + ", 10 000 resamples", data, detectable=det)
        if iv.se == 0 and check.verdict != "inconclusive":
            # every resample gives the same mean: no spread is no evidence of certainty
            check.verdict, check.detectable = "inconclusive", None
            check.test += "; every resample gives the same mean, so it cannot decide"
        return check

    def _check_spearman(self, x: Any, y: Any, *, units: Sequence[Any] | None = None) -> Check:
        xs, ys = _values(self.name, "x", x), _values(self.name, "y", y)
        labels = _unit_labels(self.name, units, len(xs), "pairs")
        iv = stats.spearman_interval(xs, ys, self.confidence)
        det = None
        ref = self.above if self.above is not None else self.below
        if ref is not None and abs(ref) < 1:
            q = stats.detectable_effect(iv.se, iv.n, confidence=self.confidence, t_dist=False)
            sign = 1 if self.above is not None else -1
            det = abs(math.tanh(math.atanh(ref) + sign * q) - ref)
        test = (
            f"Spearman rank correlation over {iv.n} {self.over}, Fisher-z interval (Bonett-Wright)"
        )
        data: dict[str, Any] = {"x": xs, "y": ys}
        _store_units(data, labels)
        return self._make(iv, test, data, detectable=det)

    def _check_exact(self, value: Any, how: str | None = None) -> Check:
        if isinstance(value, (bool, str, bytes)):
            raise TypeError(f"check {self.name!r}: the exact design takes a number, got {value!r}")
        v = _values(self.name, "value", value)
        if len(v) != 1:
            raise ValueError(f"check {self.name!r}: the exact design takes one value, got {len(v)}")
        if how is not None and not isinstance(how, str):
            raise TypeError(f"check {self.name!r}: how must be a string, got {how!r}")
        iv = stats.Interval(v[0], v[0], v[0], 1, 0.0, self.confidence)
        test = how or "deterministic quantity, compared as measured"
        return self._make(iv, test, {"value": v[0], "how": how})

    def _make(self, iv: stats.Interval, test: str, data: dict[str, Any], **extra: Any) -> Check:
        return Check(
            criterion=self,
            estimate=iv.estimate,
            low=iv.low,
            high=iv.high,
            n=iv.n,
            se=iv.se,
            verdict=_verdict(self, iv.low, iv.high),
            test=test,
            data=data,
            **extra,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "design": self.design,
            "above": self.above,
            "below": self.below,
            "confidence": self.confidence,
            "unit": self.unit,
            "paper_effect": self.paper_effect,
            "over": self.over,
            "description": self.description,
            **({"declared_as": self.declared_as} if self.declared_as else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Criterion:
        return cls(**{k: data[k] for k in _CRITERION_KEYS if k in data})


_CRITERION_KEYS = (
    "name",
    "design",
    "above",
    "below",
    "confidence",
    "unit",
    "paper_effect",
    "over",
    "description",
    "declared_as",
)
_SIGNATURES = {
    "paired": "(a, b, units=None): one value per seed (or unit) for each arm",
    "mean": "(values, units=None)",
    "proportion": "(successes, n, units=None): counts, or one count per run",
    "bootstrap": "(values, clusters=None, units=None)",
    "spearman": "(x, y, units=None)",
    "exact": "(value, how=None): how describes a measurement that is not deterministic",
}


def _sign_flip_name(n: int) -> str:
    if stats.sign_flip_is_exact(n):
        return "exact sign-flip"
    return "sign-flip (Monte Carlo, 20 000 patterns)"


def _verdict(c: Criterion, low: float, high: float) -> str:
    if c.design == "exact":
        ok = (c.above is None or low >= c.above) and (c.below is None or high <= c.below)
        return "held" if ok else "did not hold"
    held = (c.above is None or low > c.above) and (c.below is None or high < c.below)
    if held:
        return "held"
    failed = (c.above is not None and high < c.above) or (c.below is not None and low > c.below)
    return "did not hold" if failed else "inconclusive"


@dataclass
class Check:
    """One evaluated criterion: estimate, interval, test, raw data and verdict."""

    criterion: Criterion
    estimate: float
    low: float
    high: float
    n: int
    se: float
    verdict: Literal["held", "inconclusive", "did not hold"]
    test: str
    data: dict[str, Any] = field(default_factory=dict)
    p_value: float | None = None
    detectable: float | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(
                f"check {self.name!r}: verdict must be one of {VERDICTS}, got {self.verdict!r}"
            )
        if not math.isfinite(self.estimate):
            # nothing was measured: only "inconclusive" can follow, and the reason is kept
            if self.verdict != "inconclusive":
                raise ValueError(
                    f"check {self.name!r}: an estimate of {self.estimate} (not measured) can only "
                    f"be inconclusive, got {self.verdict!r}"
                )
            self.data = dict(self.data)
            self.data.setdefault("unmeasured", self.test or "not measured")

    @property
    def measured(self) -> bool:
        """False for a check whose quantity could not be measured (:meth:`Criterion.unmeasured`)."""
        return "unmeasured" not in self.data

    @property
    def name(self) -> str:
        return self.criterion.name

    @property
    def held(self) -> bool:
        return self.verdict == "held"

    @property
    def underpowered(self) -> bool:
        """The effect this check detects with 80% power is larger than the paper's own."""
        pe = self.criterion.paper_effect
        return pe is not None and self.detectable is not None and self.detectable > abs(pe)

    def interval_text(self) -> str:
        """``"0.42 [0.31, 0.53]"``, or the value alone for an exact check; unit appended."""
        u = f" {self.criterion.unit}" if self.criterion.unit else ""
        if not self.measured:
            return "not measured"
        ts = [t for t in (self.criterion.above, self.criterion.below) if t is not None]
        if self.criterion.design == "exact":
            return f"{_fmt_near(self.estimate, ts)}{u}"
        return f"{_fmt(self.estimate)} [{_fmt_near(self.low, ts)}, {_fmt_near(self.high, ts)}]{u}"

    def power_text(self) -> str:
        if self.detectable is None:
            if "values identical" in self.test:
                return "not estimable (identical values)"
            return ""
        band = self.criterion.above is not None and self.criterion.below is not None
        what = " from the nearer edge" if band else ""
        text = f"detects ≥ {_fmt(self.detectable)}{what}"
        if self.criterion.paper_effect is not None:
            text += f" (paper: {_fmt(abs(self.criterion.paper_effect))})"
            if self.underpowered:
                text += ": underpowered"
        return text

    def recompute(self) -> Check:
        """Evaluate the criterion again on the stored data (what a reader of results.json does)."""
        c = self.criterion
        d = self.data
        if not self.measured:
            return replace(self, data=dict(d))
        units = {"units": d["units"]} if d.get("units") is not None else {}
        if c.design == "paired":
            return c.check(d["a"], d["b"], **units)
        if c.design == "mean":
            return c.check(d["values"], **units)
        if c.design == "proportion":
            return c.check(list(d["successes"]), list(d["n"]), **units)
        if c.design == "bootstrap":
            return c.check(d["values"], d.get("clusters"), **units)
        if c.design == "spearman":
            return c.check(d["x"], d["y"], **units)
        return c.check(d["value"], d.get("how"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "criterion": self.criterion.to_dict(),
            "estimate": _json_number(self.estimate),
            "low": _json_number(self.low),
            "high": _json_number(self.high),
            "n": self.n,
            "se": _json_number(self.se),
            "verdict": self.verdict,
            "test": self.test,
            "p_value": _json_number(self.p_value),
            "detectable": _json_number(self.detectable),
            "data": jsonable(self.data),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        return cls(
            criterion=Criterion.from_dict(data["criterion"]),
            estimate=_from_json(data["estimate"]),
            low=_from_json(data["low"]),
            high=_from_json(data["high"]),
            n=int(data["n"]),
            se=_from_json(data.get("se", 0.0)),
            verdict=data["verdict"],
            test=data.get("test", ""),
            data=dict(data.get("data", {})),
            p_value=data.get("p_value"),
            detectable=data.get("detectable"),
        )

    def renamed(self, name: str) -> Check:
        """The same check under another name (e.g. one criterion applied per setting); the
        criterion remembers the name it was declared under."""
        declared = self.criterion.declared_as or self.criterion.name
        return replace(self, criterion=replace(self.criterion, name=name, declared_as=declared))


def unit_problems(check: Check, seeds: Sequence[int] = ()) -> list[str]:
    """Why ``check`` may count an independent unit more than once (empty when it names its units).

    A check names its units by ``units=`` or ``clusters=``; a per-seed design (paired, mean) with
    one value per seed of ``seeds``, a proportion with one count (its items) or one count per
    seed, and an exact quantity need no labels. Anything else (e.g. 900 segment values pooled over
    3 seeds) must say what its independent units are."""
    c, d = check.criterion, check.data
    if not check.measured or c.design == "exact":
        return []
    if d.get("units") is not None or d.get("clusters") is not None:
        return []
    n_values = {
        "paired": len(d.get("a", [])),
        "mean": len(d.get("values", [])),
        "proportion": len(d.get("successes", [])),
        "bootstrap": len(d.get("values", [])),
        "spearman": len(d.get("x", [])),
    }[c.design]
    if c.design in ("paired", "mean") and seeds and n_values == len(seeds):
        return []
    if c.design == "proportion" and (n_values == 1 or (seeds and n_values == len(seeds))):
        return []
    return [
        f"check {check.name!r} ({c.design}, {n_values} values over {c.over}) does not name its "
        "independent units: pass units= (one label per value; a label may not repeat) or "
        "clusters= (several values per unit)"
    ]


def combine(checks: Iterable[Check]) -> str:
    """The verdict of a claim from its checks: held only if every check held; did not hold if any
    check did not hold; inconclusive otherwise."""
    verdicts = [c.verdict for c in checks]
    if not verdicts:
        raise ValueError("a claim needs at least one check to have a verdict")
    if "did not hold" in verdicts:
        return "did not hold"
    return "held" if all(v == "held" for v in verdicts) else "inconclusive"


def _json_number(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def _from_json(x: Any) -> float:
    return math.nan if x is None else float(x)


def jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON: non-finite floats become ``None``, numpy/torch scalars and arrays
    numbers and lists, paths and other objects their text. Writing a report never fails on a
    check's content."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays and scalars, torch tensors
        return jsonable(obj.tolist())
    if isinstance(obj, (set, frozenset)):
        return [jsonable(v) for v in sorted(obj, key=str)]
    try:
        return jsonable(float(obj))
    except (TypeError, ValueError):
        return str(obj)


def _store_units(data: dict[str, Any], labels: list[Any] | None) -> None:
    if labels is not None:
        data["units"] = labels


def _fmt_near(x: float, thresholds: Sequence[float]) -> str:
    """:func:`_fmt`, with more digits where the short form would hide the side of a threshold."""
    text = _fmt(x)
    if any(t != x and _fmt(t) == text for t in thresholds):
        return f"{x:.10g}"
    return text


def _fmt(x: float) -> str:
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == 0:
        return "0"
    if float(x).is_integer() and abs(x) < 1e5:
        return str(int(x))
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.3g}"
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.4g}"
