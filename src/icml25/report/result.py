"""What a reproduction returns: :class:`ReproResult`, its :class:`Metric` values and its checks.

A paper's ``repro.run(quick, seed, out)`` returns a :class:`ReproResult`: the claim in one sentence,
the evaluated pre-registered checks (:mod:`icml25.report.checks`, which decide the verdict), further
measured :class:`Metric` values (one per seed, so mean and spread are honest), and the figures it
wrote under ``out``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icml25.report.checks import Check, _fmt, combine

__all__ = ["STATUSES", "Metric", "ReproResult"]

#: The outcomes of a reproduction, in the words the report uses.
STATUSES = ("held", "inconclusive", "did not hold", "error", "planned")


def _check_number(name: str, value: Any) -> float:
    # numpy / torch scalars convert through float(); anything else is a caller bug.
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"metric {name!r}: values must be real numbers, got {value!r} "
            f"of type {type(value).__name__}"
        ) from None


@dataclass
class Metric:
    """One measured quantity, with one value per seed (or per independent run).

    ``mean`` and ``std`` (sample standard deviation, 0 for a single value) are computed from
    ``values``; NaN values are kept (an honest NaN is a result) and make the mean NaN.
    """

    name: str
    values: list[float]
    unit: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"metric name must be a non-empty string, got {self.name!r}")
        if isinstance(self.values, (int, float)) and not isinstance(self.values, bool):
            self.values = [self.values]
        try:
            values = list(self.values)
        except TypeError:
            raise TypeError(
                f"metric {self.name!r}: values must be a number or a sequence of numbers, "
                f"got {type(self.values).__name__}"
            ) from None
        if not values:
            raise ValueError(f"metric {self.name!r}: needs at least one value, got none")
        self.values = [_check_number(self.name, v) for v in values]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return math.fsum(self.values) / self.n

    @property
    def std(self) -> float:
        if self.n < 2 or any(math.isnan(v) for v in self.values):
            return 0.0 if self.n < 2 else math.nan
        return statistics.stdev(self.values)

    def format(self) -> str:
        """``"0.812 ± 0.013 (n=3)"``, or ``"0.812"`` for a single value; unit appended."""
        text = _fmt(self.mean)
        if self.n > 1:
            text += f" ± {_fmt(self.std)} (n={self.n})"
        return f"{text} {self.unit}".rstrip()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mean": _json_float(self.mean),
            "std": _json_float(self.std),
            "n": self.n,
            "values": [_json_float(v) for v in self.values],
            "unit": self.unit,
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Metric:
        values = [math.nan if v is None else v for v in data["values"]]
        return cls(data["name"], values, data.get("unit", ""), data.get("description", ""))


@dataclass
class ReproResult:
    """The outcome of one paper's small-scale reproduction.

    Attributes:
        slug: the paper's slug (``icml25.registry``).
        claim: the paper's central claim, one sentence.
        checks: the evaluated pre-registered criteria (:class:`~icml25.report.checks.Check`); the
            verdict is :func:`~icml25.report.checks.combine` of them. Required unless the result
            is planned or an error.
        metrics: further measured values (mean and spread over seeds), reported, not tested.
        setup: how the claim was checked at our scale (data, model, seeds, budget).
        criterion: optional prose on the criteria as a whole (each check states its own).
        key_check: the check shown in the summary table (default: the first).
        figures: PNG files written by the reproduction (absolute, or relative to the report).
        tables: extra Markdown tables for the paper's section.
        notes: discussion, e.g. why a claim did not hold at our scale.
        deviations: every deviation from the paper's own setup, including any change of a
            criterion, seed count or design made after seeing results.
        power: what the quick/full size can detect, where it cannot detect the paper's effect.
        seconds: wall-clock time of the reproduction.
        quick: quick (True) or full (False) mode.
        seed: the base seed; ``seeds`` every seed used.
        error: the traceback, when the reproduction raised.
        planned: the paper has no reproduction yet.
        title: the paper's title (filled in by the runner from the registry).
    """

    slug: str
    claim: str
    checks: list[Check] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    setup: str = ""
    criterion: str = ""
    key_check: str | None = None
    figures: list[Path] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    notes: str = ""
    deviations: list[str] = field(default_factory=list)
    power: str = ""
    seconds: float = 0.0
    quick: bool = True
    seed: int = 0
    seeds: list[int] = field(default_factory=list)
    error: str | None = None
    planned: bool = False
    title: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.slug, str) or not self.slug:
            raise ValueError(f"ReproResult.slug must be a non-empty string, got {self.slug!r}")
        self.checks = list(self.checks)
        bad = [c for c in self.checks if not isinstance(c, Check)]
        if bad:
            raise TypeError(
                f"ReproResult for {self.slug!r}: checks must be icml25.report.Check objects "
                f"(from Criterion.check), got {type(bad[0]).__name__}"
            )
        if not self.checks and self.error is None and not self.planned:
            raise ValueError(
                f"ReproResult for {self.slug!r}: a finished reproduction needs at least one check "
                "(a Criterion evaluated on the measurements) to have a verdict"
            )
        self.figures = [Path(f) for f in self.figures]
        for what, names in (
            ("metric", [m.name for m in self.metrics]),
            ("check", [c.name for c in self.checks]),
        ):
            if len(set(names)) != len(names):
                dup = sorted({n for n in names if names.count(n) > 1})
                raise ValueError(f"ReproResult for {self.slug!r}: duplicate {what} names {dup}")
        if self.key_check is not None and self.key_check not in [c.name for c in self.checks]:
            raise ValueError(
                f"ReproResult for {self.slug!r}: key_check {self.key_check!r} is not one of "
                f"the checks {[c.name for c in self.checks]}"
            )

    @property
    def status(self) -> str:
        """One of :data:`STATUSES`."""
        if self.planned:
            return "planned"
        if self.error is not None:
            return "error"
        return combine(self.checks)

    @property
    def held(self) -> bool | None:
        """True when every check held; None for planned papers and errors."""
        if self.planned or self.error is not None:
            return None
        return self.status == "held"

    def check(self, name: str) -> Check:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check {name!r} in {[c.name for c in self.checks]}")

    def metric(self, name: str) -> Metric:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(f"no metric {name!r} in {[m.name for m in self.metrics]}")

    def key(self) -> Check | None:
        if not self.checks:
            return None
        return self.check(self.key_check) if self.key_check else self.checks[0]

    def key_number(self) -> str:
        """The key check as ``name = estimate [low, high] (n=…)``."""
        c = self.key()
        if c is None:
            return ""
        n = " (exact)" if c.criterion.design == "exact" else f" (n={c.n})"
        return f"{c.name} = {c.interval_text()}{n}"

    @classmethod
    def for_planned(cls, slug: str, title: str = "") -> ReproResult:
        return cls(slug=slug, claim="", planned=True, title=title)

    @classmethod
    def for_error(
        cls, slug: str, error: str, *, seconds: float = 0.0, quick: bool = True, seed: int = 0
    ) -> ReproResult:
        return cls(slug=slug, claim="", error=error, seconds=seconds, quick=quick, seed=seed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "title": self.title,
            "status": self.status,
            "claim": self.claim,
            "checks": [c.to_dict() for c in self.checks],
            "criterion": self.criterion,
            "setup": self.setup,
            "key_check": self.key_check,
            "metrics": [m.to_dict() for m in self.metrics],
            "figures": [str(f) for f in self.figures],
            "tables": list(self.tables),
            "notes": self.notes,
            "deviations": list(self.deviations),
            "power": self.power,
            "seconds": self.seconds,
            "quick": self.quick,
            "seed": self.seed,
            "seeds": list(self.seeds),
            "error": self.error,
            "planned": self.planned,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReproResult:
        finished = not data.get("planned") and data.get("error") is None
        if finished and "checks" not in data:
            raise ValueError(
                f"result for {data.get('slug')!r} has no checks: it was written by an older "
                "icml25 (two verdicts, no intervals); run the reproduction again"
            )
        return cls(
            slug=data["slug"],
            claim=data.get("claim", ""),
            checks=[Check.from_dict(c) for c in data.get("checks", [])],
            metrics=[Metric.from_dict(m) for m in data.get("metrics", [])],
            setup=data.get("setup", ""),
            criterion=data.get("criterion", ""),
            key_check=data.get("key_check"),
            figures=[Path(f) for f in data.get("figures", [])],
            tables=list(data.get("tables", [])),
            notes=data.get("notes", ""),
            deviations=list(data.get("deviations", [])),
            power=data.get("power", ""),
            seconds=float(data.get("seconds", 0.0)),
            quick=bool(data.get("quick", True)),
            seed=int(data.get("seed", 0)),
            seeds=[int(s) for s in data.get("seeds", [])],
            error=data.get("error"),
            planned=bool(data.get("planned", False)),
            title=data.get("title", ""),
        )


def _json_float(x: float) -> float | None:
    return None if math.isnan(x) or math.isinf(x) else x
