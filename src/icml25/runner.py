"""Run the registered reproductions and keep the report current after each one.

Every paper runs in isolation: a reproduction that raises (or returns a result that cannot be
written) becomes an ``error`` result with its traceback and the next paper still runs. After each
paper the report folder is rewritten, so a crash or Ctrl-C loses at most the paper in flight. A
folder that already holds a report is merged into: the papers run now replace their own entries,
the others are kept; ``resume=True`` also skips the papers already finished there with the same
mode, seed and seed count.

``jobs=N`` runs up to N papers at a time, each in its own process (started fresh, so one paper's
crash, memory or thread settings never reach another); every paper keeps the thread count its
reproduction fixes (one by default), so its numbers are the same as in a sequential run. Timing
checks share the cores with the other papers then, as under any other load.
"""

from __future__ import annotations

import inspect
import json
import multiprocessing
import os
import platform
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from icml25 import __version__, registry
from icml25._validate import as_int
from icml25.registry import Paper, load_repro
from icml25.report import ReproResult, load_results, write_report
from icml25.report.checks import jsonable

__all__ = ["default_out_dir", "run_one", "run_reproductions"]

Printer = Callable[[str], None]


def default_out_dir(root: Path | str = "runs") -> Path:
    """``runs/<UTC timestamp>/``."""
    return Path(root) / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def run_one(
    paper: Paper, *, quick: bool, seed: int, out: Path, seeds: int | None = None
) -> ReproResult:
    """Run one paper's reproduction into ``out/<slug>/``, turning any exception into a result.

    ``seeds`` overrides the number of seeds the mode pre-registers (``icml25 repro --seeds N``)."""
    if paper.repro is None:
        return ReproResult.for_planned(paper.slug, paper.title)
    paper_out = Path(out) / paper.slug
    paper_out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        run = load_repro(paper)
        kwargs: dict[str, Any] = {}
        if seeds is not None:
            if "seeds" not in inspect.signature(run).parameters:
                raise TypeError(f"{paper.repro} does not take a seed count (seeds=...)")
            kwargs["seeds"] = seeds
        result = run(quick=quick, seed=seed, out=paper_out, **kwargs)
        if not isinstance(result, ReproResult):
            raise TypeError(
                f"{paper.repro} returned {type(result).__name__}, expected icml25.report.ReproResult"
            )
        if result.slug != paper.slug:
            raise ValueError(
                f"{paper.repro} returned a result for {result.slug!r}, not {paper.slug!r}"
            )
        # a result that cannot be written would abort the report of every later paper
        json.dumps(jsonable(result.to_dict()), allow_nan=False)
    except Exception:  # noqa: BLE001 - any failure of one paper is reported, the rest still run
        return ReproResult.for_error(
            paper.slug,
            traceback.format_exc(),
            seconds=time.perf_counter() - t0,
            quick=quick,
            seed=seed,
        )
    if not result.seconds:
        result.seconds = time.perf_counter() - t0
    result.quick, result.seed = quick, seed
    return result


def _environment(jobs: int = 1) -> str:
    parts = [f"Python {platform.python_version()}", platform.machine() or "?"]
    torch = sys.modules.get("torch")
    if torch is None and jobs > 1:  # the papers ran in other processes: name the version they had
        try:
            import torch
        except ImportError:
            torch = None
    if torch is not None:
        parts.append(f"torch {torch.__version__}")
        if jobs == 1:
            parts.append(f"{torch.get_num_threads()} torch threads")
    if jobs > 1:
        parts.append(f"{jobs} reproductions at a time, each in its own process")
    return ", ".join(parts)


def run_reproductions(
    papers: Sequence[Paper],
    *,
    quick: bool = True,
    seed: int = 0,
    out: Path | str,
    resume: bool = False,
    seeds: int | None = None,
    echo: Printer | None = None,
    jobs: int = 1,
) -> list[ReproResult]:
    """Run ``papers`` in order and write ``out/report.md`` + ``out/results.json`` after each.

    Args:
        papers: the papers to run (planned ones are listed as planned, not run).
        quick: quick mode (default) or full mode.
        seed: base seed handed to every reproduction.
        out: report folder; each paper writes its figures under ``out/<slug>/``.
        resume: reuse results in ``out/results.json`` that finished (with a verdict) with the
            same mode, seed and seed count, instead of running those papers again. Without it,
            the papers given run again; either way the other papers already in the report are
            kept.
        seeds: number of seeds for every paper, instead of each mode's pre-registered count.
        echo: called with one line per paper started and finished; ``None`` prints none of
            them (the reproductions' own progress lines are silenced by ``ICML25_QUIET=1``,
            :func:`icml25.progress.set_quiet`).
        jobs: papers run at a time, each in a fresh process (1: one after the other, in this
            process). The report is rewritten as each one finishes, in paper order. A
            reproduction whose ``@reproduction(threads=None)`` leaves the thread count alone gets
            torch's default in its fresh process, not this process's setting.

    Returns:
        One :class:`ReproResult` per paper, in the order given.
    """
    jobs = as_int("jobs", jobs, 1)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    earlier = _earlier_results(out)
    previous: dict[str, ReproResult] = {}
    if resume:
        previous = {
            p.slug: earlier[p.slug]
            for p in papers
            if p.slug in earlier and _same_run(p, earlier[p.slug], quick, seed, seeds)
        }
    asked = {p.slug for p in papers}
    report = _Report(
        papers,
        out,
        quick=quick,
        jobs=jobs,
        say=echo or (lambda _line: None),
        kept={slug: r for slug, r in earlier.items() if slug not in asked},
        meta=_run_meta(quick, seed, seeds),
    )
    todo = []
    for paper in papers:
        if paper.repro is None:
            report.finish(paper, ReproResult.for_planned(paper.slug, paper.title))
        elif paper.slug in previous:
            report.resumed(paper, previous[paper.slug])
        else:
            todo.append(paper)
    if jobs == 1:
        for paper in todo:
            report.start(paper)
            report.finish(paper, run_one(paper, quick=quick, seed=seed, out=out, seeds=seeds))
    else:
        _run_in_processes(
            todo, jobs, report.start, report.finish, quick=quick, seed=seed, out=out, seeds=seeds
        )
    if not papers:
        report.write()
    return [report.done[p.slug] for p in papers]


def _earlier_results(out: Path) -> dict[str, ReproResult]:
    """The results already in ``out/results.json``, by slug (none when there is no report)."""
    if not (out / "results.json").exists():
        return {}
    try:
        _, old = load_results(out)
    except ValueError as exc:
        raise ValueError(
            f"{exc}; the report already in {str(out)!r} cannot be merged into: move it away "
            "or choose another --out"
        ) from None
    return {r.slug: r for r in old}


def _run_meta(quick: bool, seed: int, seeds: int | None) -> dict[str, Any]:
    return {
        "mode": "quick" if quick else "full",
        "seed": seed,
        "seeds": seeds,
        "icml25_version": __version__,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
    }


@dataclass
class _Report:
    """The report of one ``run_reproductions`` call: the papers kept from an earlier run, the
    results so far, and the ``[k/N]`` each paper started as (its result line repeats it)."""

    papers: Sequence[Paper]
    out: Path
    quick: bool
    jobs: int
    say: Printer
    kept: dict[str, ReproResult]
    meta: dict[str, Any]
    done: dict[str, ReproResult] = field(default_factory=dict)
    position: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kept:
            self.meta["kept"] = sorted(self.kept)
        self.runnable = [p for p in self.papers if p.repro is not None]

    def _number(self, paper: Paper) -> str:
        return f"[{self.position[paper.slug]}/{len(self.runnable)}] {paper.number:02d} {paper.slug}"

    def start(self, paper: Paper) -> None:
        self.position[paper.slug] = len(self.position) + 1
        mode = "quick" if self.quick else "full"
        self.say(f"{self._number(paper)}: running {mode} reproduction…")

    def resumed(self, paper: Paper, result: ReproResult) -> None:
        self.position[paper.slug] = len(self.position) + 1
        self.say(f"{self._number(paper)}: {result.status} (resumed)")
        self.finish(paper, result, resumed=True)

    def finish(self, paper: Paper, result: ReproResult, resumed: bool = False) -> None:
        """Record a paper's result, say so, and rewrite the report in paper order."""
        result.title = result.title or paper.title
        self.done[paper.slug] = result
        if paper.repro is not None and not resumed:
            line = f"{self._number(paper)}: {result.status}"
            if result.key_number():
                line += f" · {result.key_number()}"
            self.say(f"{line} ({result.seconds:.1f} s)")
            if result.error:
                self.say(result.error.rstrip().splitlines()[-1])
        self.meta["environment"] = _environment(self.jobs)
        self.write()

    def write(self) -> None:
        ordered = [self.done[p.slug] for p in self.papers if p.slug in self.done]
        results = _in_paper_order([*self.kept.values(), *ordered], self.papers)
        write_report(results, self.out, meta=self.meta)


def _run_in_processes(todo, jobs, start, finish, **kw) -> None:
    """Run ``todo`` with up to ``jobs`` fresh processes at a time (spawned: no state inherited
    from this one), in order; ``start(paper)`` as each begins, ``finish(paper, result)`` as each
    ends. A process that dies without a result (killed, out of memory) is that paper's error."""
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    queue, running = list(todo), {}
    previous = None
    if threading.current_thread() is threading.main_thread():
        # a SIGTERM to this process alone (a batch system stopping the job) stops the papers too
        previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        while queue or running:
            while queue and len(running) < jobs:
                paper = queue.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(paper, kw, send), daemon=True)
                start(paper)
                t0 = time.perf_counter()
                proc.start()
                send.close()  # the child holds the only write end: its exit is an EOF here
                running[recv] = (paper, proc, t0)
            for conn in wait(list(running)):
                paper, proc, t0 = running.pop(conn)
                try:
                    result = conn.recv()
                except EOFError:
                    proc.join()
                    result = ReproResult.for_error(
                        paper.slug,
                        f"the process running this reproduction exited with code {proc.exitcode} "
                        "without a result (killed, or out of memory?)\n",
                        seconds=time.perf_counter() - t0,
                        quick=kw["quick"],
                        seed=kw["seed"],
                    )
                conn.close()
                proc.join()
                finish(paper, result)
    finally:
        for _conn, (_paper, proc, _t0) in running.items():
            proc.terminate()
            proc.join()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _child(paper: Paper, kw: dict[str, Any], send: Any) -> None:
    """One paper in a fresh process: its result goes back through ``send``. The process ends
    itself if the runner dies without stopping it (SIGKILL leaves no time to)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    try:
        send.send(run_one(paper, **kw))
    except KeyboardInterrupt:  # Ctrl-C reaches every process; the parent reports it
        pass
    finally:
        send.close()


def _same_run(paper: Paper, r: ReproResult, quick: bool, seed: int, seeds: int | None) -> bool:
    """``r`` finished with a verdict in this mode, seed and seed count (the mode's pre-registered
    count when ``seeds`` is None)."""
    if r.status not in ("held", "inconclusive", "did not hold") or r.quick != quick:
        return False
    if r.seed != seed or paper.repro is None:
        return False
    if seeds is None:
        try:
            preregistered = getattr(load_repro(paper), "preregistered_seeds", None)
        except (ImportError, LookupError):
            return False
        if preregistered is None:  # a plain run function: no seed count to compare
            return True
        seeds = preregistered["quick" if quick else "full"]
    return len(r.seeds) == seeds


def _in_paper_order(results: list[ReproResult], papers: Sequence[Paper]) -> list[ReproResult]:
    number = {p.slug: p.number for p in (*registry.PAPERS, *papers)}
    return sorted(results, key=lambda r: number.get(r.slug, len(number) + 1))
