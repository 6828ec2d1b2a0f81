"""What every reproduction's report repeats: Markdown tables, mean ± sd cells, and the sentences
on power and on the checks that did not hold, written from the checks themselves.

A ``repro.py`` keeps only the sentences that depend on its run's numbers; these helpers write
the rest the same way for every paper::

    table(["method", "accuracy"], [[m, mean_sd(acc[m])] for m in methods],
          caption="Test accuracy (mean ± sd over seeds):")
    power_summary(checks)    # "With 3 seeds, the smallest distance ... each check detects ..."
    not_held_notes(checks)   # "Not held: (2) ... 0.01 [-0.02, 0.04] (inconclusive)."
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from icml25.report.checks import Check, _fmt

__all__ = ["mean_sd", "not_held_notes", "power_summary", "table"]


def mean_sd(values: Iterable[float], digits: int = 3) -> str:
    """``"0.812 ± 0.013"``: the mean and the sample standard deviation, ``digits`` decimals; the
    mean alone for one value. NaN values make both NaN (an honest NaN is a result)."""
    v = [float(x) for x in values]
    if not v:
        raise ValueError("mean_sd needs at least one value, got none")
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 0:
        raise ValueError(f"digits must be a non-negative integer, got {digits!r}")
    mean = math.fsum(v) / len(v)
    if len(v) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {statistics.stdev(v):.{digits}f}"


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, caption: str = "") -> str:
    """A Markdown table: a header of ``columns``, one line per row (cells through ``str``; a
    ``|`` inside a cell is escaped), and ``caption`` with a blank line above it when given. A row
    shorter than the header is padded with empty cells; a longer one is an error."""
    columns = [str(c) for c in columns]
    if not columns:
        raise ValueError("a table needs at least one column")
    lines = [caption, ""] if caption else []
    lines += ["| " + " | ".join(map(_cell, columns)) + " |", "|" + "---|" * len(columns)]
    for i, row in enumerate(rows):
        cells = [_cell(x) for x in row]
        if len(cells) > len(columns):
            raise ValueError(
                f"table row {i} has {len(cells)} cells for {len(columns)} columns: {row!r}"
            )
        cells += [""] * (len(columns) - len(cells))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def power_summary(checks: Sequence[Check], *, units: str = "seeds") -> str:
    """One sentence per distinct sample size on what the checks can detect with 80% power (each
    check's ``detectable`` effect, beside the paper's where the criterion carries it), and which
    checks are underpowered. The units are each criterion's ``over`` (``units`` where it has
    none). Empty when no check has a detectable effect (exact checks)."""
    checks = _checked(checks, "power_summary")
    by_n: dict[tuple[int, str], list[Check]] = {}
    for c in checks:
        if c.detectable is not None:
            by_n.setdefault((c.n, c.criterion.over or units), []).append(c)
    parts = []
    for (n, over), group in by_n.items():
        each = "; ".join(f"{c.name}: {_detectable(c)}" for c in group)
        parts.append(
            f"With {n} {over}, the smallest distance from its threshold that each check "
            f"detects with 80% power: {each}."
        )
    weak = [c.name for c in checks if c.underpowered]
    if weak:
        parts.append(
            "Underpowered for the paper's own effect: "
            + "; ".join(weak)
            + ": a check there that is not held says little against the paper."
        )
    return " ".join(parts)


def _checked(checks: Sequence[Check], who: str) -> list[Check]:
    checks = list(checks)
    bad = [c for c in checks if not isinstance(c, Check)]
    if bad:
        raise TypeError(
            f"{who} takes icml25.report.Check objects (Criterion.check(...)), got "
            f"{type(bad[0]).__name__}: {bad[0]!r:.60}"
        )
    return checks


def _detectable(c: Check) -> str:
    unit = f" {c.criterion.unit}" if c.criterion.unit else ""
    text = f"{_fmt(c.detectable)}{unit}"
    if c.criterion.paper_effect is not None:
        text += f" (paper: {_fmt(abs(c.criterion.paper_effect))})"
    return text


def not_held_notes(checks: Sequence[Check]) -> str:
    """``"Not held: <name> <estimate [interval]> (<verdict>); ..."`` for every check that did not
    hold or is inconclusive, or ``""`` when all held: the sentence a report's notes open with."""
    missed = [c for c in _checked(checks, "not_held_notes") if c.verdict != "held"]
    if not missed:
        return ""
    return (
        "Not held: "
        + "; ".join(f"{c.name}: {c.interval_text()} ({c.verdict})" for c in missed)
        + "."
    )
