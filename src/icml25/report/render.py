"""``report.md`` and ``results.json``: the report a run of reproductions leaves behind.

:func:`write_report` renders a list of results as ``report.md`` (summary table, one section per
paper with its checks, figures embedded) and ``results.json`` (everything, including each check's
per-seed or per-item values, so a reader can recompute every interval); :func:`load_results`
reads it back and :func:`render_comparison` puts two runs side by side.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from icml25.report.checks import Check, Criterion, _fmt, jsonable
from icml25.report.result import STATUSES, ReproResult

__all__ = [
    "check_criteria",
    "checks_markdown",
    "load_results",
    "render_comparison",
    "render_markdown",
    "verify_results",
    "write_markdown",
    "write_report",
]

_BADGE = {
    "held": "✅ held",
    "inconclusive": "❔ inconclusive",
    "did not hold": "❌ did not hold",
    "error": "💥 error",
    "planned": "⏳ planned",
}


def _cell(text: str) -> str:
    """Make text safe for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


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


def _counts(results: Sequence[ReproResult]) -> str:
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    return (
        f"{len(results)} paper(s): {counts['held']} held, {counts['inconclusive']} inconclusive, "
        f"{counts['did not hold']} did not hold, {counts['error']} error(s), "
        f"{counts['planned']} planned."
    )


def render_markdown(
    results: Sequence[ReproResult], *, out_dir: Path, meta: Mapping[str, Any] | None = None
) -> str:
    """The report as Markdown: header, summary table, one section per paper, planned papers."""
    meta = dict(meta or {})
    done = [r for r in results if not r.planned]
    planned = [r for r in results if r.planned]
    lines = ["# icml25 reproduction report", ""]
    when = meta.get("finished") or meta.get("started") or ""
    seeds = f" · {meta['seeds']} seeds (override)" if meta.get("seeds") else ""
    lines.append(
        f"Mode: **{meta.get('mode') or '?'}** · seed {meta.get('seed', '?')}{seeds} · icml25 "
        f"{meta.get('icml25_version', '?')} · {when}"
    )
    if meta.get("environment"):
        lines.append(f"Environment: {meta['environment']}")
    if meta.get("warnings"):
        lines += [
            "",
            "**Warnings** (`icml25 report` found stored numbers or criteria that are not "
            "what the installed code gives; the checks below are recomputed):",
            "",
        ]
        lines += [f"- {_cell(w)}" for w in meta["warnings"]]
        lines.append("")
    if meta.get("kept"):
        lines.append(
            f"Kept from an earlier run into this folder: {', '.join(meta['kept'])} (each "
            "section states its own mode and seeds)."
        )
    lines += [
        "",
        _counts(results),
        "",
        "Each claim is checked by criteria fixed in the code before the run. A check is **held** "
        "when its whole 95% interval lies on the claim's side of the threshold, **did not hold** "
        "when it lies wholly on the other side, and **inconclusive** when it straddles the "
        "threshold; a claim is held only when all its checks are. A claim that did not hold is a "
        "measured result, not a failure of the software.",
        "",
    ]
    if done:
        lines += [
            "## Summary",
            "",
            "| # | paper | claim | verdict | checks held | key number [95% interval] | time |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in done:
            held = f"{sum(c.held for c in r.checks)}/{len(r.checks)}" if r.checks else "—"
            lines.append(
                f"| {_number(r.slug)} | [{r.slug}](#{_anchor(r)}) | {_cell(r.claim) or '—'} | "
                f"{_BADGE[r.status]} | {held} | {_cell(r.key_number()) or '—'} | "
                f"{r.seconds:.1f} s |"
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


def checks_markdown(checks: Sequence[Check]) -> str:
    """The checks of one claim as a Markdown table: criterion, estimate with interval, n, test,
    power and verdict."""
    rows = [
        "| check | claim | estimate [95% interval] | n | test | power | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        n = "—" if c.criterion.design == "exact" or not c.measured else str(c.n)
        rows.append(
            f"| {_cell(c.name)} | {_cell(c.criterion.threshold_text)} | "
            f"{_cell(c.interval_text())} | {n} | {_cell(c.test)} | {_cell(c.power_text()) or '—'} "
            f"| {_BADGE[c.verdict]} |"
        )
    return "\n".join(rows)


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
    seeds = f"seeds {_seed_text(r.seeds)}" if r.seeds else f"seed {r.seed}"
    lines += [
        "",
        f"**Verdict: {_BADGE[r.status]}** ({'quick' if r.quick else 'full'} mode, {seeds}, "
        f"{r.seconds:.1f} s)",
        "",
    ]
    if r.claim:
        lines += [f"**Claim.** {r.claim}", ""]
    if r.setup:
        lines += [f"**Setup.** {r.setup}", ""]
    if r.criterion:
        lines += [f"**Criteria.** {r.criterion}", ""]
    if r.error is not None:
        lines += ["**The reproduction raised:**", "", "```", r.error.rstrip(), "```", ""]
    if r.checks:
        lines += [checks_markdown(r.checks), ""]
        described = [c for c in r.checks if c.criterion.description]
        if described:
            lines += ["What each check compares:", ""]
            lines += [f"- *{_cell(c.name)}*: {_cell(c.criterion.description)}" for c in described]
            lines.append("")
        weak = [c for c in r.checks if c.underpowered]
        if weak:
            lines += [
                "**Underpowered:** "
                + "; ".join(
                    f"{c.name} detects an effect of {_fmt(c.detectable)} with 80% power, the "
                    f"paper reports {_fmt(abs(c.criterion.paper_effect))}"
                    for c in weak
                    if c.detectable is not None and c.criterion.paper_effect is not None
                )
                + ".",
                "",
            ]
    if r.power:
        lines += [f"**Power.** {r.power}", ""]
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
    if not r.planned:
        lines += [
            f"Every deviation from the paper, the decisions where it is not explicit and the "
            f"discussion of this reproduction: `docs/{r.slug}.md`.",
            "",
        ]
    return lines


def _seed_text(seeds: Sequence[int]) -> str:
    seeds = list(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def write_markdown(
    results: Iterable[ReproResult], out_dir: Path | str, *, meta: Mapping[str, Any] | None = None
) -> Path:
    """Write only ``report.md`` (atomically) from results, leaving ``results.json`` as it is."""
    out_dir = Path(out_dir)
    report = out_dir / "report.md"
    _atomic_write(report, render_markdown(list(results), out_dir=out_dir, meta=meta) + "\n")
    return report


def verify_results(results: Sequence[ReproResult]) -> list[str]:
    """Recompute every check from its stored data and replace it by the recomputed one (so the
    test and power texts follow the current rules); return one line per check whose stored
    estimate, interval or verdict disagrees."""
    problems = []
    for r in results:
        stored_status = getattr(r, "stored_status", None)
        fixed = []
        for c in r.checks:
            if not c.measured:
                fixed.append(c)
                continue
            try:
                again = c.recompute()
            except (KeyError, TypeError, ValueError) as exc:
                problems.append(
                    f"{r.slug}: check {c.name!r}: its stored data cannot be re-evaluated ({exc})"
                )
                fixed.append(c)
                continue
            same = again.verdict == c.verdict and all(
                math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
                for x, y in ((again.estimate, c.estimate), (again.low, c.low), (again.high, c.high))
            )
            if not same:
                problems.append(
                    f"{r.slug}: check {c.name!r}: stored {c.interval_text()} ({c.verdict}) but its "
                    f"data give {again.interval_text()} ({again.verdict}); the report shows the latter"
                )
            fixed.append(again)  # also refreshes the test and power text under the current rules
        r.checks = fixed
        if stored_status is not None and stored_status != r.status:
            problems.append(
                f"{r.slug}: stored verdict {stored_status!r} but its checks give {r.status!r}; "
                "the report shows the latter"
            )
    return problems


_COMPARED = ("design", "above", "below", "confidence", "unit", "paper_effect")


def registered_criteria(slug: str) -> list[Criterion] | None:
    """The criteria the installed code declares for ``slug``'s reproduction (its module's
    ``CRITERIA``), or None when the paper or its reproduction is unknown."""
    import importlib

    from icml25.registry import PAPERS

    paper = next((p for p in PAPERS if p.slug == slug), None)
    if paper is None or paper.repro is None:
        return None
    module = importlib.import_module(paper.repro.split(":")[0])
    declared = getattr(module, "CRITERIA", None)
    if declared is None:
        return None
    return [c for c in declared if isinstance(c, Criterion)]


def check_criteria(results: Sequence[ReproResult]) -> list[str]:
    """Compare every stored check's criterion (name, design, thresholds, confidence, unit) with the
    one the installed code declares; one line per difference. A results.json whose criteria were
    edited, or that an older version with other thresholds wrote, is caught here: its verdicts are
    not the installed code's."""
    problems = []
    for r in results:
        if r.planned or r.error is not None or not r.checks:
            continue
        declared = registered_criteria(r.slug)
        if declared is None:
            continue  # a user's own reproduction: no installed criteria to compare with
        by_name = {d.name: d for d in declared}
        for c in r.checks:
            stored = c.criterion
            base = stored.declared_as or stored.name
            # by the name it was declared under, never by content (two criteria may share a
            # threshold); a check renamed per setting records that name in declared_as, and an
            # older file's renamed check starts with it (its thresholds are then compared)
            reg = by_name.get(base) or next((d for d in declared if base.startswith(d.name)), None)
            if reg is None:
                problems.append(
                    f"{r.slug}: check {c.name!r}: the installed code declares no criterion named "
                    f"{base!r} (declared: {', '.join(repr(n) for n in by_name)})"
                )
                continue
            diff = [
                f"{f} {getattr(stored, f)!r} (installed code: {getattr(reg, f)!r})"
                for f in _COMPARED
                if getattr(stored, f) != getattr(reg, f)
            ]
            if diff:
                problems.append(
                    f"{r.slug}: check {c.name!r}: stored criterion differs from the installed "
                    f"code's {reg.name!r}: {'; '.join(diff)}"
                )
    return problems


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
    payload = jsonable({"meta": meta, "results": [r.to_dict() for r in results]})
    _atomic_write(out_dir / "results.json", json.dumps(payload, indent=2, allow_nan=False) + "\n")
    report = out_dir / "report.md"
    _atomic_write(report, render_markdown(results, out_dir=out_dir, meta=meta) + "\n")
    return report


def load_results(path: Path | str) -> tuple[dict[str, Any], list[ReproResult]]:
    """Read ``results.json`` (or the folder holding it) back into ``(meta, results)``."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    if not path.exists():
        raise FileNotFoundError(
            f"no results.json at {str(path)!r}: give a report folder written by `icml25 repro`"
        )
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not valid JSON ({exc})") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ValueError(f"{str(path)!r} cannot be read as a results.json ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ValueError(f"{str(path)!r} is not an icml25 results.json (no 'results' list)")
    try:
        results = [ReproResult.from_dict(r) for r in data["results"]]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{str(path)!r}: a result or check is malformed ({exc!r})") from None
    for r, raw in zip(results, data["results"]):
        r.stored_status = raw.get("status")  # type: ignore[attr-defined]  # verify_results compares
    return data.get("meta", {}), results


def render_comparison(
    a: tuple[Mapping[str, Any], Sequence[ReproResult]],
    b: tuple[Mapping[str, Any], Sequence[ReproResult]],
    *,
    labels: tuple[str, str] = ("A", "B"),
) -> str:
    """Two runs side by side (each ``(meta, results)`` as from :func:`load_results`): per paper
    present in both, every check's estimate, interval and verdict in each run."""
    (meta_a, res_a), (meta_b, res_b) = a, b
    by_b = {r.slug: r for r in res_b}
    la, lb = labels
    lines = [
        "# icml25 reproduction comparison",
        "",
        f"- **{la}**: {_describe(meta_a)}",
        f"- **{lb}**: {_describe(meta_b)}",
        "",
    ]
    shared = [r for r in res_a if r.slug in by_b and not r.planned]
    slugs_a, slugs_b = {r.slug for r in res_a}, {r.slug for r in res_b}
    only = [f"{s} (in {la})" for s in sorted(slugs_a - slugs_b)]
    only += [f"{s} (in {lb})" for s in sorted(slugs_b - slugs_a)]
    if not shared:
        lines.append("The two runs have no reproduced paper in common.")
    for ra in shared:
        rb = by_b[ra.slug]
        lines += [
            f"## {_number(ra.slug)} · {ra.slug}: {_BADGE[ra.status]} ({la}) · "
            f"{_BADGE[rb.status]} ({lb})",
            "",
            f"| check | claim ({la} / {lb}) | {la}: estimate [95%] (n) | {la} | "
            f"{lb}: estimate [95%] (n) | {lb} |",
            "|---|---|---|---|---|---|",
        ]
        checks_b = {c.name: c for c in rb.checks}
        names = [c.name for c in ra.checks] + [
            c.name for c in rb.checks if c.name not in {x.name for x in ra.checks}
        ]
        checks_a = {c.name: c for c in ra.checks}
        for name in names:
            ca, cb = checks_a.get(name), checks_b.get(name)
            ta = ca.criterion.threshold_text if ca else "—"
            tb = cb.criterion.threshold_text if cb else "—"
            claim = ta if ta == tb else f"{ta} / {tb} (differs)"
            lines.append(
                f"| {_cell(name)} | {_cell(claim)} | {_check_cell(ca)} | "
                f"{_BADGE[ca.verdict] if ca else '—'} | {_check_cell(cb)} | "
                f"{_BADGE[cb.verdict] if cb else '—'} |"
            )
        lines.append("")
    if only:
        lines += [f"In one run only: {', '.join(only)}.", ""]
    return "\n".join(lines)


def _check_cell(c: Check | None) -> str:
    if c is None:
        return "—"
    n = "" if c.criterion.design == "exact" else f" (n={c.n})"
    return _cell(c.interval_text() + n)


def _describe(meta: Mapping[str, Any]) -> str:
    seeds = f", {meta['seeds']} seeds" if meta.get("seeds") else ""
    return (
        f"{meta.get('mode', '?')} mode, seed {meta.get('seed', '?')}{seeds}, icml25 "
        f"{meta.get('icml25_version', '?')}, {meta.get('finished') or meta.get('started') or '?'}"
    )


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
