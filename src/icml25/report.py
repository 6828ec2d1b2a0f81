"""Reproduction results and the report they are rendered into.

A paper's ``repro.run(quick, seed, out)`` returns a :class:`ReproResult`: the claim in one sentence,
how it was checked, the measured :class:`Metric` values (one per seed, so mean and spread are
honest), the verdict, and the figures it wrote under ``out``. :func:`write_report` renders a list
of results as ``report.md`` (summary table + one section per paper, figures embedded) and
``results.json`` (everything, machine-readable; :func:`load_results` reads it back).

Only the standard library is imported here; :func:`save_figure` imports matplotlib when called.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "Metric",
    "ReproResult",
    "STATUSES",
    "checks_table",
    "load_results",
    "pyplot",
    "render_markdown",
    "save_figure",
    "torch_threads",
    "write_report",
]

#: The four outcomes of a reproduction, in the words the report uses.
STATUSES = ("held", "did not hold", "error", "planned")


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
        held: the verdict of the pass criterion as measured; ``None`` only for planned papers and
            reproductions that raised.
        metrics: measured values (mean and spread over seeds).
        setup: how the claim was checked at our scale (data, model, seeds, budget).
        criterion: the pass criterion exactly as checked, so a reader can see it could fail.
        key_metric: the metric shown in the summary table (default: the first).
        figures: PNG files written by the reproduction (absolute, or relative to the report).
        tables: extra Markdown tables for the paper's section.
        notes: discussion, e.g. why a claim did not hold at our scale.
        deviations: every deviation from the paper's own setup.
        seconds: wall-clock time of the reproduction.
        quick: quick (True) or full (False) mode.
        seed: the base seed.
        error: the traceback, when the reproduction raised.
        planned: the paper has no reproduction yet.
        title: the paper's title (filled in by the runner from the registry).
    """

    slug: str
    claim: str
    held: bool | None
    metrics: list[Metric] = field(default_factory=list)
    setup: str = ""
    criterion: str = ""
    key_metric: str | None = None
    figures: list[Path] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    notes: str = ""
    deviations: list[str] = field(default_factory=list)
    seconds: float = 0.0
    quick: bool = True
    seed: int = 0
    error: str | None = None
    planned: bool = False
    title: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.slug, str) or not self.slug:
            raise ValueError(f"ReproResult.slug must be a non-empty string, got {self.slug!r}")
        if self.held is not None and not isinstance(self.held, bool):
            # numpy.bool_ is common here; accept it, but not e.g. the string "yes".
            if type(self.held).__name__ in ("bool_", "bool"):
                self.held = bool(self.held)
            else:
                raise TypeError(f"ReproResult.held must be True, False or None, got {self.held!r}")
        if self.held is None and self.error is None and not self.planned:
            raise ValueError(
                f"ReproResult for {self.slug!r}: a finished reproduction needs a verdict "
                "(held=True or held=False); None is only for planned papers and errors"
            )
        self.figures = [Path(f) for f in self.figures]
        names = [m.name for m in self.metrics]
        if len(set(names)) != len(names):
            raise ValueError(f"ReproResult for {self.slug!r}: duplicate metric names in {names}")
        if self.key_metric is not None and self.key_metric not in names:
            raise ValueError(
                f"ReproResult for {self.slug!r}: key_metric {self.key_metric!r} is not one of "
                f"the metrics {names}"
            )

    @property
    def status(self) -> str:
        """One of :data:`STATUSES`."""
        if self.planned:
            return "planned"
        if self.error is not None:
            return "error"
        return "held" if self.held else "did not hold"

    def metric(self, name: str) -> Metric:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(f"no metric {name!r} in {[m.name for m in self.metrics]}")

    def key_number(self) -> str:
        if not self.metrics:
            return ""
        m = self.metric(self.key_metric) if self.key_metric else self.metrics[0]
        return f"{m.name} = {m.format()}"

    @classmethod
    def for_planned(cls, slug: str, title: str = "") -> ReproResult:
        return cls(slug=slug, claim="", held=None, planned=True, title=title)

    @classmethod
    def for_error(
        cls, slug: str, error: str, *, seconds: float = 0.0, quick: bool = True, seed: int = 0
    ) -> ReproResult:
        return cls(
            slug=slug, claim="", held=None, error=error, seconds=seconds, quick=quick, seed=seed
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "title": self.title,
            "status": self.status,
            "claim": self.claim,
            "held": self.held,
            "criterion": self.criterion,
            "setup": self.setup,
            "key_metric": self.key_metric,
            "metrics": [m.to_dict() for m in self.metrics],
            "figures": [str(f) for f in self.figures],
            "tables": list(self.tables),
            "notes": self.notes,
            "deviations": list(self.deviations),
            "seconds": self.seconds,
            "quick": self.quick,
            "seed": self.seed,
            "error": self.error,
            "planned": self.planned,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReproResult:
        return cls(
            slug=data["slug"],
            claim=data.get("claim", ""),
            held=data.get("held"),
            metrics=[Metric.from_dict(m) for m in data.get("metrics", [])],
            setup=data.get("setup", ""),
            criterion=data.get("criterion", ""),
            key_metric=data.get("key_metric"),
            figures=[Path(f) for f in data.get("figures", [])],
            tables=list(data.get("tables", [])),
            notes=data.get("notes", ""),
            deviations=list(data.get("deviations", [])),
            seconds=float(data.get("seconds", 0.0)),
            quick=bool(data.get("quick", True)),
            seed=int(data.get("seed", 0)),
            error=data.get("error"),
            planned=bool(data.get("planned", False)),
            title=data.get("title", ""),
        )


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run a block with ``torch.set_num_threads(n)`` and restore the previous count afterwards:
    reproductions fix their thread count so timings and tiny-model speed are comparable."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def pyplot() -> Any:
    """``matplotlib.pyplot`` with the non-interactive Agg backend (reproductions draw headless)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def checks_table(checks: Mapping[str, bool]) -> str:
    """A Markdown table of named pass/fail checks, for a reproduction's section."""
    rows = "\n".join(f"| {name} | {'PASS' if ok else 'FAIL'} |" for name, ok in checks.items())
    return "| check | result |\n|---|---|\n" + rows


def save_figure(fig: Any, path: Path | str, *, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG (Agg backend), close it, and return the path."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"figures are PNG files; got {str(path)!r} (use a .png suffix)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def _fmt(x: float) -> str:
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.3g}"
    if abs(x) >= 100:
        return f"{x:.1f}"
    return f"{x:.4g}"


def _json_float(x: float) -> float | None:
    return None if math.isnan(x) or math.isinf(x) else x


def _cell(text: str) -> str:
    """Make text safe for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


_BADGE = {
    "held": "✅ held",
    "did not hold": "❌ did not hold",
    "error": "💥 error",
    "planned": "⏳ planned",
}


def _place_figures(result: ReproResult, out_dir: Path) -> list[Path]:
    """Figures as paths relative to ``out_dir``; those living elsewhere are copied in."""
    placed = []
    for fig in result.figures:
        src = fig if fig.is_absolute() else out_dir / fig
        try:
            placed.append(src.resolve().relative_to(out_dir.resolve()))
            continue
        except ValueError:
            pass
        if src.exists():
            dest = out_dir / result.slug / src.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
            placed.append(dest.relative_to(out_dir))
        else:
            placed.append(fig)  # kept as given; the report marks it missing
    return placed


def render_markdown(
    results: Sequence[ReproResult], *, out_dir: Path, meta: Mapping[str, Any] | None = None
) -> str:
    """The report as Markdown: header, summary table, one section per paper, planned papers."""
    meta = dict(meta or {})
    done = [r for r in results if not r.planned]
    planned = [r for r in results if r.planned]
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    lines = ["# icml25 reproduction report", ""]
    mode = meta.get("mode", "")
    when = meta.get("finished") or meta.get("started") or ""
    lines.append(
        f"Mode: **{mode or '?'}** · seed {meta.get('seed', '?')} · icml25 "
        f"{meta.get('icml25_version', '?')} · {when}"
    )
    if meta.get("environment"):
        lines.append(f"Environment: {meta['environment']}")
    lines += [
        "",
        f"{len(results)} paper(s): {counts['held']} held, {counts['did not hold']} did not hold, "
        f"{counts['error']} error(s), {counts['planned']} planned.",
        "",
        "A claim that did not hold is a measured result, not a failure of the software: each "
        "section gives the criterion as checked, the numbers (mean ± sample std over seeds) and "
        "the deviations from the paper's own setup.",
        "",
    ]
    if done:
        lines += [
            "## Summary",
            "",
            "| # | paper | claim | verdict | key number | time |",
            "|---|---|---|---|---|---|",
        ]
        for r in done:
            num = _number(r.slug)
            lines.append(
                f"| {num} | [{r.slug}](#{_anchor(r)}) | {_cell(r.claim) or '—'} | "
                f"{_BADGE[r.status]} | {_cell(r.key_number()) or '—'} | {r.seconds:.1f} s |"
            )
        lines.append("")
    for r in done:
        lines += _section(r, out_dir)
    if planned:
        lines += ["## Planned (no reproduction yet)", "", "| # | paper | title |", "|---|---|---|"]
        for r in planned:
            lines.append(f"| {_number(r.slug)} | {r.slug} | {_cell(r.title)} |")
        lines.append("")
    return "\n".join(lines)


def _number(slug: str) -> str:
    from icml25.registry import PAPERS

    for p in PAPERS:
        if p.slug == slug:
            return f"{p.number:02d}"
    return "—"


def _anchor(r: ReproResult) -> str:
    return f"{_number(r.slug)}-{r.slug}".replace("_", "-").lower()


def _section(r: ReproResult, out_dir: Path) -> list[str]:
    lines = [f'<a id="{_anchor(r)}"></a>', "", f"## {_number(r.slug)} · {r.slug}"]
    if r.title:
        lines += ["", f"*{r.title}*"]
    lines += [
        "",
        f"**Verdict: {_BADGE[r.status]}** ({'quick' if r.quick else 'full'} mode, seed {r.seed}, "
        f"{r.seconds:.1f} s)",
        "",
    ]
    if r.claim:
        lines += [f"**Claim.** {r.claim}", ""]
    if r.setup:
        lines += [f"**Setup.** {r.setup}", ""]
    if r.criterion:
        lines += [f"**Pass criterion.** {r.criterion}", ""]
    if r.error is not None:
        lines += ["**The reproduction raised:**", "", "```", r.error.rstrip(), "```", ""]
    if r.metrics:
        lines += ["| metric | value | per-run values | description |", "|---|---|---|---|"]
        for m in r.metrics:
            per_run = ", ".join(_fmt(v) for v in m.values) if m.n > 1 else ""
            lines.append(
                f"| {_cell(m.name)} | {_cell(m.format())} | {per_run} | {_cell(m.description)} |"
            )
        lines.append("")
    for table in r.tables:
        lines += [table.rstrip(), ""]
    for fig in _place_figures(r, out_dir):
        if (out_dir / fig).exists():
            lines += [f"![{fig.stem}]({fig.as_posix()})", ""]
        else:
            lines += [f"*(figure `{fig.as_posix()}` is missing)*", ""]
    if r.notes:
        lines += [f"**Notes.** {r.notes}", ""]
    if r.deviations:
        lines += ["**Deviations from the paper.**", ""]
        lines += [f"- {d}" for d in r.deviations]
        lines.append("")
    return lines


def write_report(
    results: Iterable[ReproResult], out_dir: Path | str, *, meta: Mapping[str, Any] | None = None
) -> Path:
    """Write ``report.md`` and ``results.json`` into ``out_dir``; return the report's path.

    Figures outside ``out_dir`` are copied under ``out_dir/<slug>/`` so the folder is self-contained.
    Both files are written atomically (temp file + rename), so a crash never leaves half a report.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = list(results)
    meta = dict(meta or {})
    meta.setdefault("finished", datetime.now(timezone.utc).isoformat(timespec="seconds"))
    for r in results:
        r.figures = _place_figures(r, out_dir)
    payload = {"meta": meta, "results": [r.to_dict() for r in results]}
    _atomic_write(out_dir / "results.json", json.dumps(payload, indent=2, allow_nan=False) + "\n")
    report = out_dir / "report.md"
    _atomic_write(report, render_markdown(results, out_dir=out_dir, meta=meta) + "\n")
    return report


def load_results(path: Path | str) -> tuple[dict[str, Any], list[ReproResult]]:
    """Read ``results.json`` (or the folder holding it) back into ``(meta, results)``."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    data = json.loads(path.read_text())
    return data.get("meta", {}), [ReproResult.from_dict(r) for r in data.get("results", [])]


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
