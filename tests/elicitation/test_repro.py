"""The reproduction at smoke size (structure of the numbers), and quick mode (slow)."""

from __future__ import annotations

import math

import pytest


def test_smoke_reproduction(tmp_path):
    from icml25.elicitation.repro import CRITERIA, run

    res = run(quick=True, smoke=True, out=tmp_path)
    assert [c.criterion.name for c in res.checks] == [c.name for c in CRITERIA]
    assert all(math.isfinite(c.estimate) for c in res.checks)
    assert {p.name for p in res.figures} == {
        "trigger_histograms.png",
        "coverage_sr.png",
        "reward_spreads.png",
    }
    srs = [m for m in res.metrics if m.name.startswith("SR ")]
    assert srs and all(0 <= v <= 1 for m in srs for v in m.values)
    again = run(quick=True, smoke=True, out=tmp_path)  # cached checkpoints and loops
    assert [c.estimate for c in again.checks] == [c.estimate for c in res.checks]


@pytest.mark.slow
def test_quick_reproduction_meets_both_claims(tmp_path):
    from icml25.elicitation.repro import run

    res = run(quick=True, out=tmp_path)
    verdicts = {c.criterion.name[:4]: c.verdict for c in res.checks}
    assert verdicts["(1a)"] == "held" and verdicts["(2a)"] == "held"
