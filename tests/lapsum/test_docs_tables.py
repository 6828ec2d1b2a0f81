"""docs/lapsum.md's Markdown tables are whole: no stray output line inside one (issue 46: difftopk's
import printed "No module named 'torch_sparse'" into the benchmark's soft top-k table, and the
line was pasted into the page as a row)."""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "lapsum.md"


def _stray_lines(text: str) -> list[tuple[int, str]]:
    """Lines that sit between a table's header separator and a later row of the same table but
    are not rows themselves (a table ends at a blank line)."""
    stray, in_table, pending = [], False, []
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("|---") or s.startswith("| ---"):
            in_table, pending = True, []
        elif not s:
            in_table, pending = False, []
        elif in_table and not (s.startswith("|") and s.endswith("|")):
            pending.append((i, line))
        elif in_table:
            stray += pending
            pending = []
    return stray


def test_tables_hold_only_rows():
    stray = _stray_lines(DOC.read_text(encoding="utf-8"))
    assert not stray, f"lines inside a table of {DOC.name} that are not rows: {stray}"


def test_a_stray_line_is_found():
    table = "| a | b |\n|---|---|\n| 1 | 2 |\nNo module named 'torch_sparse'\n| 3 | 4 |\n"
    assert _stray_lines(table) == [(4, "No module named 'torch_sparse'")]
    assert _stray_lines(table.replace("No module named 'torch_sparse'\n", "")) == []
