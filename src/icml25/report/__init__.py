"""Reproduction results, the checks that decide their verdicts, and the report they render into.

* :mod:`~icml25.report.stats`: t-intervals, the exact sign-flip test, Wilson intervals,
  (two-stage) bootstrap intervals, Spearman intervals, detectable effect sizes.
* :mod:`~icml25.report.checks`: :class:`Criterion` (pre-registered in a ``repro.py``) and the
  :class:`Check` it yields, with three verdicts: held, inconclusive, did not hold.
* :mod:`~icml25.report.result`: :class:`ReproResult` and :class:`Metric`.
* :mod:`~icml25.report.harness`: the :func:`reproduction` decorator and :class:`Run` every
  ``repro.py`` is written with.
* :mod:`~icml25.report.text`: what every report repeats: Markdown tables, mean ± sd cells, the
  power summary and the notes on the checks that did not hold, written from the checks.
* :mod:`~icml25.report.render`: ``report.md`` / ``results.json``, and comparisons of two runs.

Importing this package loads only the standard library; numpy, scipy and matplotlib load on use.
"""

from __future__ import annotations

from icml25.report.checks import DESIGNS, VERDICTS, Check, Criterion, combine
from icml25.report.harness import (
    Run,
    metrics_over,
    pyplot,
    reproduction,
    save_figure,
    seed_list,
    torch_threads,
)
from icml25.report.render import (
    check_criteria,
    checks_markdown,
    load_results,
    render_comparison,
    render_markdown,
    verify_results,
    write_markdown,
    write_report,
)
from icml25.report.result import STATUSES, Metric, ReproResult
from icml25.report.text import mean_sd, not_held_notes, power_summary, table

__all__ = [
    "DESIGNS",
    "STATUSES",
    "VERDICTS",
    "Check",
    "Criterion",
    "Metric",
    "ReproResult",
    "Run",
    "check_criteria",
    "checks_markdown",
    "combine",
    "load_results",
    "mean_sd",
    "metrics_over",
    "not_held_notes",
    "power_summary",
    "pyplot",
    "render_comparison",
    "render_markdown",
    "reproduction",
    "save_figure",
    "seed_list",
    "table",
    "torch_threads",
    "verify_results",
    "write_markdown",
    "write_report",
]
