"""The toy pipeline end to end at smoke size, and the quick reproduction (slow)."""

from __future__ import annotations

import json

import pytest


def test_smoke_pipeline(tmp_path):
    from icml25.safety_reasoning.repro import run

    res = run(quick=True, smoke=True, out=tmp_path)
    names = [c.name for c in res.checks]
    assert any(n.startswith("(2a)") for n in names) and any(n.startswith("(2b)") for n in names)
    assert {p.name for p in res.figures} == {"bon_curves.png", "asr_bars.png", "pca.png"}
    (seed_file,) = tmp_path.glob("seed_V2_*.json")
    data = json.loads(seed_file.read_text())
    assert set(data["asr"]) == {"RT", "SRG"} and set(data["asr"]["RT"]) == {
        "plain",
        "cipher",
        "past",
        "wrap",
        "pers",
    }
    assert 0 < data["synthesis"]["acceptance_rate"] <= 1
    # a rerun reuses the saved seed (nothing is trained again)
    again = run(quick=True, smoke=True, out=tmp_path)
    assert [c.estimate for c in again.checks] == [c.estimate for c in res.checks]


@pytest.mark.slow
def test_quick_reproduction_regression(tmp_path):
    from icml25.safety_reasoning.repro import CRITERIA, run

    res = run(quick=True, out=tmp_path)
    assert res.seconds < 240
    declared = {c.name.split(" (attacks")[0] for c in CRITERIA}
    assert {c.name.split(" (attacks")[0] for c in res.checks} <= declared
    assert len(res.checks) == 4  # checks 1, 2a, 2b, 2c in quick mode
