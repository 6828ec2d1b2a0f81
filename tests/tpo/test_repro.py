"""The reproduction at smoke size (structure only; the verdict means nothing at this size), and
the quick reproduction's regression (slow)."""

from __future__ import annotations

import pytest


def test_repro_smoke_full_structure(tmp_path, check_smoke):
    from icml25.tpo import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(
        r,
        "tpo",
        metrics=("TPO-D2-N5", "BoN-15", "TPO scrambled critiques", "revision-D2-N5"),
        ranges={"TPO": (-1.0, 1.0), "BoN-": (-1.0, 1.0), "role model": (0.0, 1.0)},
    )
    assert len(r.metric("TPO-D2-N5").values) == 1  # one value per seed (one seed at smoke size)
    assert {f.name for f in r.figures} == {
        "reward_vs_iteration.png",
        "tpo_vs_bon.png",
        "width_depth.png",
    }
    names = {m.name for m in r.metrics}
    assert {"TPO-D2-N5", "BoN-15", "TPO scrambled critiques", "role model critic"} <= names
    assert "TPO width 20 depth 5" in names
    assert len(r.criterion.split(";")) == 3


@pytest.mark.slow
def test_quick_repro_meets_the_gates(tmp_path):
    from icml25.tpo import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    assert r.held, r.tables[0]
    assert r.seconds < 240
    gain = r.metric("TPO-D2-N5").mean - r.metric("BoN-15").mean
    assert gain >= 0.03, gain
