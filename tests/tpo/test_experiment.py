"""The reproduction at smoke size (structure only; the verdict means nothing at this size)."""

from __future__ import annotations


def test_repro_smoke(tmp_path):
    from icml25.tpo import experiment as repro

    r = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    assert r.slug == "tpo" and r.held in (True, False)
    assert {f.name for f in r.figures} == {"reward_vs_iteration.png", "tpo_vs_bon.png"}
    names = {m.name for m in r.metrics}
    assert {"TPO-D2-N5", "BoN-15", "TPO scrambled critiques", "role model critic"} <= names
    assert len(r.criterion.split(";")) == 3
