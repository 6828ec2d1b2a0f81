"""The reproduction at smoke size (structure), and the quick claim (slow)."""

from __future__ import annotations

import pytest

pytest.importorskip("sklearn")


def test_quick_repro_smoke(tmp_path):
    from icml25.knowledge_swap import repro

    r = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    assert r.slug == "knowledge_swap" and r.held in (True, False)
    assert {f.name for f in r.figures} == {
        "swap_bars.png",
        "forget_trajectory.png",
        "lora_norm_profile.png",
    }
    assert any(m.name == "S(L->F) - S(F->L)" for m in r.metrics)


@pytest.mark.slow
def test_full_repro_smoke(tmp_path):
    from icml25.knowledge_swap import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    assert "knock_on_probes.png" in {f.name for f in r.figures}
    assert any(m.name.startswith("sweep S gap") for m in r.metrics)


@pytest.mark.slow
def test_quick_repro_meets_the_criteria(tmp_path):
    from icml25.knowledge_swap import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    assert r.held, r.notes
