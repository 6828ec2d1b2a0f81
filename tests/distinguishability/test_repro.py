"""The reproduction's structure at smoke size, and the quick claim (slow)."""

from __future__ import annotations

import pytest

pytest.importorskip("gymnasium")


def test_quick_repro_smoke(tmp_path, check_smoke):
    from icml25.distinguishability import repro

    r = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    check_smoke(r, "distinguishability", prefixes=("A score gain",))
    names = {f.name for f in r.figures}
    assert names == {
        "pearson_vs_queries.png",
        "teacher_error.png",
        "reward_scatter.png",
        "lottery_accuracy.png",
        "utility_recovery.png",
    }
    assert all(f.exists() for f in r.figures)
    assert any(m.name.startswith("A score gain") for m in r.metrics)
    assert "B DQ balanced lottery accuracy" in r.criterion


@pytest.mark.slow
def test_full_repro_smoke_has_the_rl_part(tmp_path):
    from icml25.distinguishability import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    assert "return_curves.png" in {f.name for f in r.figures}
    assert any(m.name.startswith("C final true return") for m in r.metrics)


@pytest.mark.slow
def test_quick_repro_runs_and_reports(tmp_path):
    import time

    from icml25.distinguishability import repro

    t0 = time.perf_counter()
    r = repro.run(quick=True, seed=0, out=tmp_path)
    assert time.perf_counter() - t0 < 180
    assert {m.name for m in r.metrics} >= {
        "A score gain dq-pcq boltzmann",
        "B lottery balanced accuracy DQ",
    }
