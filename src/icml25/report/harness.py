"""The shared harness of every ``repro.py``: the run wrapper, seeds, per-seed loops and figures.

A reproduction is written as one function of a :class:`Run`, decorated with :func:`reproduction`::

    CRITERIA = [Criterion("gain over baseline", "paired", above=0.0, unit="pt", paper_effect=1.5)]

    @reproduction("contrastive", seeds=(8, 10))
    def run(r: Run) -> ReproResult:
        data = setup(r)                                   # setup
        runs = r.over_seeds(lambda s: measure(data, s))   # per-seed measurement
        checks = [CRITERIA[0].check([x["ours"] for x in runs], [x["base"] for x in runs])]
        r.figure(plot(runs), "gain.png")                  # figures
        return r.result(claim=CLAIM, checks=checks, setup="...")

The decorated ``run(quick=True, seed=0, out=..., *, seeds=None, smoke=False)`` is the entry
point the runner calls: it creates ``out``, fixes the torch thread count, picks the seeds (``seeds``
overrides the count, ``icml25 repro --seeds N``), times the run, and fills in what every result
repeats (slug, mode, seeds, seconds, figures, the smoke-size note).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from icml25.report.checks import Check, Criterion
from icml25.report.result import Metric, ReproResult

__all__ = [
    "Run",
    "metrics_over",
    "pyplot",
    "reproduction",
    "save_figure",
    "seed_list",
    "torch_threads",
]

T = TypeVar("T")
SMOKE_NOTE = "Smoke size: everything shrunk for a test; the verdict means nothing here."


def seed_list(seed: int, n: int) -> list[int]:
    """``[seed, seed + 1, ..., seed + n - 1]``, with both checked."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of seeds must be a positive integer, got {n!r}")
    return [seed + i for i in range(n)]


@dataclass
class Run:
    """One invocation of a reproduction: mode, seeds, output folder, and what it has produced."""

    slug: str
    quick: bool
    seed: int
    out: Path
    seeds: list[int]
    smoke: bool = False
    seeds_overridden: bool = False
    figures: list[Path] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    @property
    def mode(self) -> str:
        return "smoke" if self.smoke else "quick" if self.quick else "full"

    def size(self, *, smoke: T, quick: T, full: T) -> T:
        """The value for this run's mode (smoke < quick < full)."""
        return smoke if self.smoke else quick if self.quick else full

    def over_seeds(
        self, measure: Callable[[int], T], *, seeds: Sequence[int] | None = None, label: str = ""
    ) -> list[T]:
        """``[measure(s) for s in seeds]`` (default: the run's seeds) with a progress bar."""
        from icml25.progress import track

        seeds = self.seeds if seeds is None else list(seeds)
        desc = f"{self.slug}: {label or 'seeds'}"
        return [measure(s) for s in track(seeds, desc, total=len(seeds))]

    @contextlib.contextmanager
    def stage(self, label: str) -> Iterator[None]:
        """Name a long stage of the run (``with r.stage("training the base model"): ...``): without
        a terminal its start and end are printed with the time taken (:func:`icml25.progress.stage`).
        """
        from icml25.progress import stage

        with stage(f"{self.slug}: {label}"):
            yield

    def figure(self, fig: Any, name: str) -> Path:
        """Save a matplotlib figure as ``out/name`` (PNG) and list it in the result (by its
        absolute path, so a report written elsewhere finds it)."""
        path = save_figure(fig, self.out.resolve() / name)
        self.figures.append(path)
        return path

    def result(
        self,
        *,
        claim: str,
        checks: Sequence[Check],
        criteria: Sequence[Criterion],
        metrics: Sequence[Metric] = (),
        notes: str | Sequence[str] = "",
        **fields: Any,
    ) -> ReproResult:
        """The :class:`ReproResult`, with slug, mode, seeds, time and figures filled in.

        ``criteria`` are the module's pre-registered criteria: every check must come from one of
        them (a check renamed per setting keeps its criterion's design, thresholds, confidence,
        unit and paper effect), so a threshold cannot be changed after the numbers without
        changing the declared criteria. Declared criteria this run did not evaluate (e.g. the
        full-mode ones in quick mode) are listed in the notes.
        """
        checks = list(checks)
        bad = [c for c in checks if not isinstance(c, Check)]
        if bad:
            raise TypeError(
                f"{self.slug}: checks must be icml25.report.Check objects (Criterion.check(...)), "
                f"got {bad[0]!r}"
            )
        declared = list(criteria)
        if not declared or not all(isinstance(c, Criterion) for c in declared):
            raise TypeError(
                f"{self.slug}: criteria must be the module's declared Criterion objects"
            )
        by_name = {d.name: d for d in declared}
        for c in checks:
            # matched by the name it was declared under (a check renamed per setting keeps it),
            # never by content: another criterion with the same threshold is not this one
            base = c.criterion.declared_as or c.name
            reg = by_name.get(base)
            if reg is None:
                raise ValueError(
                    f"{self.slug}: check {c.name!r} comes from no declared criterion (none is "
                    f"named {base!r}); declare every criterion at module level and rename a "
                    "check only with Check.renamed"
                )
            diff = ", ".join(
                f"{f}: declared {getattr(reg, f)!r}, used {getattr(c.criterion, f)!r}"
                for f in _KEY_FIELDS
                if getattr(reg, f) != getattr(c.criterion, f)
            )
            if diff:
                raise ValueError(
                    f"{self.slug}: check {c.name!r} differs from its declared criterion ({diff})"
                )
        for c in checks:
            _check_verdict_follows(self.slug, c)
        used = {c.criterion.declared_as or c.name for c in checks}
        unused = [d.name for d in declared if d.name not in used]
        notes_list = [notes] if isinstance(notes, str) else list(notes)
        if unused:
            notes_list.append(
                f"Declared criteria not evaluated in this {self.mode} run: {'; '.join(unused)}."
            )
        if self.smoke:
            notes_list.append(SMOKE_NOTE)
        if self.seeds_overridden:
            notes_list.append(
                f"The seed count was set by the caller ({len(self.seeds)} seeds: `--seeds` or "
                "`seeds=`), not the mode's pre-registered default."
            )
        return ReproResult(
            slug=self.slug,
            claim=claim,
            checks=checks,
            metrics=list(metrics),
            figures=[*self.figures, *fields.pop("figures", [])],
            notes=" ".join(n for n in notes_list if n),
            seconds=time.perf_counter() - self.started,
            quick=self.quick,
            seed=self.seed,
            seeds=list(self.seeds),
            **fields,
        )


_KEY_FIELDS = ("design", "above", "below", "confidence", "unit", "paper_effect")


def _check_verdict_follows(slug: str, c: Check) -> None:
    """A check's verdict, estimate and interval are what its criterion gives on its stored data
    (a hand-built or edited Check cannot claim more than its data)."""
    if not c.measured:
        return  # Check itself allows such a check only as inconclusive
    try:
        again = c.recompute()
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{slug}: check {c.name!r} cannot be re-evaluated from its stored data ({exc}); build "
            "checks with Criterion.check(...) or Criterion.unmeasured(reason)"
        ) from None
    same = again.verdict == c.verdict and all(
        math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
        for x, y in ((again.estimate, c.estimate), (again.low, c.low), (again.high, c.high))
    )
    if not same:
        raise ValueError(
            f"{slug}: check {c.name!r} says {c.interval_text()} ({c.verdict}) but its criterion "
            f"gives {again.interval_text()} ({again.verdict}) on its data"
        )


def _thresholds(c: Criterion) -> tuple[Any, ...]:
    return tuple(getattr(c, f) for f in _KEY_FIELDS)


def reproduction(
    slug: str,
    *,
    seeds: tuple[int, int],
    smoke_seeds: int = 2,
    threads: int | None = 1,
    default_out: str | None = None,
) -> Callable[[Callable[[Run], ReproResult]], Callable[..., ReproResult]]:
    """Turn ``body(run: Run) -> ReproResult`` into the ``run(quick, seed, out)`` entry point.

    Args:
        slug: the paper's slug.
        seeds: pre-registered number of seeds in (quick, full) mode.
        smoke_seeds: seeds in the smoke size used by the default test suite (2: the paired and
            mean designs need at least two).
        threads: torch thread count for the run (1: tiny models are slower oversubscribed);
            ``None`` leaves it alone.
        default_out: default output folder when ``out`` is None (``runs/<slug>`` under the
            current directory).
    """
    n_quick, n_full = seeds
    seed_list(0, n_quick), seed_list(0, n_full), seed_list(0, smoke_seeds)  # validated once

    def decorate(body: Callable[[Run], ReproResult]) -> Callable[..., ReproResult]:
        def run(
            quick: bool = True,
            seed: int = 0,
            out: Path | str | None = None,
            *,
            seeds: int | None = None,
            smoke: bool = False,
        ) -> ReproResult:
            n = (
                seeds
                if seeds is not None
                else smoke_seeds
                if smoke
                else n_quick
                if quick
                else n_full
            )
            r = Run(
                slug=slug,
                quick=bool(quick),
                seed=seed,
                out=Path(out if out is not None else default_out or f"runs/{slug}"),
                seeds=seed_list(seed, n),
                smoke=bool(smoke),
                seeds_overridden=seeds is not None,
            )
            r.out.mkdir(parents=True, exist_ok=True)
            ctx = torch_threads(threads) if threads is not None else contextlib.nullcontext()
            with ctx:
                result = body(r)
            if not isinstance(result, ReproResult):
                raise TypeError(f"{slug}: the reproduction returned {type(result).__name__}")
            return result

        # the entry point keeps the body's name and docstring, but its own signature (the runner
        # inspects it for ``seeds``), so no functools.wraps (whose __wrapped__ hides it)
        for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(run, attr, getattr(body, attr))
        run.body = body  # type: ignore[attr-defined]
        run.preregistered_seeds = {"quick": n_quick, "full": n_full}  # type: ignore[attr-defined]
        return run

    return decorate


def metrics_over(
    runs: Sequence[Mapping[str, Any]],
    keys: Mapping[str, str],
    *,
    unit: str = "",
    description: str = "",
) -> list[Metric]:
    """One :class:`Metric` per ``{metric name: key}``, with one value per run (seed)."""
    return [
        Metric(name, [r[key] for r in runs], unit=unit, description=description)
        for name, key in keys.items()
    ]


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


def save_figure(fig: Any, path: Path | str, *, dpi: int = 120) -> Path:
    """Save a matplotlib figure as PNG (Agg backend), close it, and return the path."""
    plt = pyplot()
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"figures are PNG files; got {str(path)!r} (use a .png suffix)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path
