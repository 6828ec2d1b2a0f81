"""The ``icml25`` command: ``list``, ``repro``, ``report``, ``bench`` and one subcommand per paper
that has one.

Exit codes: 0 success; 1 a reproduction raised (or, with ``--strict``, a claim was not held) or a
benchmark failed; 2 bad arguments (argparse's convention). The papers' pipeline commands (``tpo``,
``orbench build|eval``, ``safety_reasoning synthesize``, ``dps run``) follow the same rule: 1 when
requests failed or the server is down (the rows done are kept; a rerun resumes), 2 for bad
arguments or a results file holding rows made with other settings, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from icml25 import __version__
from icml25.registry import PAPERS, load_entry_point, resolve
from icml25.report.result import STATUSES

__all__ = ["build_parser", "main"]


def _cmd_list(args: argparse.Namespace) -> int:
    if args.json:
        rows = [
            {
                "number": p.number,
                "slug": p.slug,
                "title": p.title,
                "module": p.module,
                "status": p.status,
                "link": p.url,
            }
            for p in PAPERS
        ]
        print(json.dumps(rows, indent=2))
        return 0
    import shutil

    # Plain aligned text, one line per paper whatever the terminal width: only the title is cut.
    width = max(shutil.get_terminal_size((120, 24)).columns, 60)
    print(f"icml25 {__version__}: {len(PAPERS)} ICML 2025 papers")
    head = f"{'#':>2}  {'slug':<18}  {'status':<11}  "
    room = width - len(head)
    print(f"{head}title")
    for p in PAPERS:
        title = p.title if len(p.title) <= room else p.title[: room - 1] + "…"
        print(f"{p.number:02d}  {p.slug:<18}  {p.status:<11}  {title}")
    return 0


def _cmd_repro(args: argparse.Namespace) -> int:
    from icml25.progress import set_quiet
    from icml25.runner import default_out_dir, run_reproductions

    try:
        papers = resolve(args.papers)
    except ValueError as exc:
        args.parser.error(str(exc))
    if args.seed < 0:
        args.parser.error(f"--seed must be a non-negative integer, got {args.seed}")
    if args.seeds is not None and args.seeds < 1:
        args.parser.error(f"--seeds must be a positive integer, got {args.seeds}")
    if args.jobs < 1:
        args.parser.error(f"--jobs must be a positive integer, got {args.jobs}")
    if args.resume and not args.out:
        args.parser.error(
            "--resume needs --out DIR, the report folder to resume (without it a new folder "
            "runs/<timestamp>/ would be started and nothing resumed)"
        )
    out = Path(args.out) if args.out else default_out_dir()
    if out.exists() and not out.is_dir():
        args.parser.error(f"--out {str(out)!r} is a file; give a folder for the report")
    if args.quiet:
        set_quiet(True)

    def echo(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        results = run_reproductions(
            papers,
            quick=not args.full,
            seed=args.seed,
            out=out,
            resume=args.resume,
            seeds=args.seeds,
            echo=None if args.quiet else echo,
            jobs=args.jobs,
        )
    except ValueError as exc:  # an unreadable results.json already in --out
        args.parser.error(str(exc))
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    print(
        f"{len(results)} paper(s): {counts['held']} held, {counts['inconclusive']} "
        f"inconclusive, {counts['did not hold']} did not hold, {counts['error']} error(s), "
        f"{counts['planned']} planned. Report: {out / 'report.md'}"
    )
    if counts["error"]:
        return 1
    if args.strict and (counts["did not hold"] or counts["inconclusive"]):
        return 1
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from icml25.report import (
        check_criteria,
        load_results,
        render_comparison,
        verify_results,
        write_markdown,
    )

    if args.out and not args.compare:
        args.parser.error("--out names the comparison file; it needs --compare DIR2")
    folder = Path(args.dir)
    if folder.is_file():  # DIR/results.json given: the report goes next to it
        folder = folder.parent
    try:
        meta, results = load_results(args.dir)
        other = load_results(args.compare) if args.compare else None
    except (FileNotFoundError, ValueError) as exc:
        args.parser.error(str(exc))
    # the stored per-seed data are the source of truth: every check is recomputed from them
    # ... under the installed code's criteria: an edited or outdated threshold is not its verdict
    mine = verify_results(results) + check_criteria(results)
    theirs = verify_results(other[1]) + check_criteria(other[1]) if other else []
    problems = [f"{args.dir}: {p}" for p in mine] if other else list(mine)
    problems += [f"{args.compare}: {p}" for p in theirs]
    for line in problems:
        print(f"warning: {line}", file=sys.stderr)
    if other is None:
        try:
            report = write_markdown(results, folder, meta={**meta, "warnings": mine})
        except OSError as exc:
            args.parser.error(f"cannot write the report into {str(folder)!r}: {exc}")
        print(f"Report: {report}")
        return 1 if problems else 0
    labels = (Path(args.dir).resolve().name or "A", Path(args.compare).resolve().name or "B")
    if labels[0] == labels[1]:
        labels = ("A", "B")
    text = render_comparison((meta, results), other, labels=labels) + "\n"
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            args.parser.error(f"cannot write --out {args.out!r}: {exc}")
        print(f"Comparison: {args.out}")
    else:
        print(text, end="")
    return 1 if problems else 0


def _cmd_bench(args: argparse.Namespace) -> int:
    bench_dir = Path(args.dir)
    if not bench_dir.is_dir():
        args.parser.error(
            f"benchmark folder {str(bench_dir)!r} not found; run from a checkout of icml25 "
            "or pass --dir path/to/benchmarks"
        )
    scripts = {p.stem: p for p in sorted(bench_dir.glob("*.py")) if not p.name.startswith("_")}
    if args.list or not scripts:
        print("\n".join(scripts) if scripts else f"no benchmarks in {bench_dir}")
        return 0
    names = args.names or list(scripts)
    unknown = [n for n in names if n not in scripts]
    if unknown:
        args.parser.error(f"unknown benchmark(s) {unknown}; available: {', '.join(scripts)}")
    failed = []
    for name in names:
        print(f"== {name}", flush=True)
        if subprocess.call([sys.executable, str(scripts[name])]) != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="icml25",
        description="Methods of 19 ICML 2025 papers, and small-scale reproductions of their claims.",
    )
    parser.add_argument("--version", action="version", version=f"icml25 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p_list = sub.add_parser("list", help="the 19 papers and their status")
    p_list.add_argument("--json", action="store_true", help="machine-readable output")
    p_list.set_defaults(func=_cmd_list, parser=p_list)

    p_repro = sub.add_parser(
        "repro",
        help="reproduce papers' central claims and write a report",
        description="Run the registered reproductions (all by default, quick mode by default) and "
        "write DIR/report.md, DIR/results.json and the figures. Each claim is held, inconclusive "
        "or did not hold, from its checks' 95% intervals; a claim that is not held is "
        "reported, not an error: the exit code is non-zero only when a reproduction raised "
        "(or, with --strict, when a claim was not held).",
    )
    p_repro.add_argument(
        "papers", nargs="*", metavar="SLUG", help="papers by slug or number (default: all)"
    )
    p_repro.add_argument("--full", action="store_true", help="full mode (up to ~30 min a paper)")
    p_repro.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p_repro.add_argument(
        "--seeds",
        type=int,
        metavar="N",
        help="number of seeds for every paper, instead of each mode's pre-registered count "
        "(the report notes it)",
    )
    p_repro.add_argument(
        "--out",
        metavar="DIR",
        help="report folder (default runs/<timestamp>/); an existing report there is merged: the "
        "papers run now replace their own entries, the others are kept",
    )
    p_repro.add_argument(
        "--strict", action="store_true", help="also fail when a claim was not held"
    )
    p_repro.add_argument(
        "--resume",
        action="store_true",
        help="skip papers already finished in --out DIR (same mode, seed and seed count)",
    )
    p_repro.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="papers run at a time, each in its own process with the thread count its "
        "reproduction fixes (default 1; `make repro` uses 2, one per core); numbers are the same, "
        "timings share the cores",
    )
    p_repro.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    p_repro.set_defaults(func=_cmd_repro, parser=p_repro)

    p_report = sub.add_parser(
        "report",
        help="re-render a report from its results.json, or compare two runs",
        description="Rewrite DIR/report.md from DIR/results.json (results.json is left as it is); "
        "with --compare DIR2, print the two runs' checks side by side (the same claims on other "
        "seeds or another version). Every check is recomputed from its stored per-seed data; a "
        "stored number or verdict that disagrees is reported on stderr, the recomputed one is "
        "shown, and the exit code is 1. So is a stored criterion (design, threshold, confidence) "
        "that differs from the installed code's.",
    )
    p_report.add_argument("dir", metavar="DIR", help="a report folder written by `icml25 repro`")
    p_report.add_argument("--compare", metavar="DIR2", help="a second report folder")
    p_report.add_argument("--out", metavar="FILE", help="write the comparison here, not stdout")
    p_report.set_defaults(func=_cmd_report, parser=p_report)

    p_bench = sub.add_parser("bench", help="run the side-by-side benchmarks in benchmarks/")
    p_bench.add_argument(
        "names", nargs="*", metavar="NAME", help="benchmark script names (default: all)"
    )
    p_bench.add_argument("--dir", default="benchmarks", help="folder of benchmark scripts")
    p_bench.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p_bench.set_defaults(func=_cmd_bench, parser=p_bench)

    for paper in PAPERS:
        if paper.cli:
            load_entry_point(paper.cli)(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
