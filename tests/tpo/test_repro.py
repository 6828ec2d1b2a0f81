"""The reproduction at smoke size (structure only; the verdict means nothing at this size), and
the quick reproduction's regression (slow)."""

from __future__ import annotations

import pytest


def test_repro_smoke_full_structure(tmp_path):
    from icml25.tpo import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    assert r.slug == "tpo" and r.held in (True, False)
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
