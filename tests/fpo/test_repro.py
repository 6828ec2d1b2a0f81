"""The reproduction at smoke size (structure, criteria, the arms each check uses) and, marked
slow, the quick mode's claims."""

from __future__ import annotations

import math

import numpy as np
import pytest


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from icml25.fpo import repro

    return repro.run(quick=True, seed=0, out=tmp_path_factory.mktemp("fpo"), smoke=True)


def test_criteria_are_preregistered():
    from icml25.fpo import repro
    from icml25.registry import get

    assert [(c.design, c.above, c.below) for c in repro.CRITERIA] == [
        ("bootstrap", 0.55, None), ("paired", None, 0.0), ("paired", 0.0, None),
        ("exact", 0.7, None)]  # fmt: skip
    assert repro.run.preregistered_seeds == {"quick": 3, "full": 9}
    assert get("fpo").repro == "icml25.fpo.repro:run"


def test_smoke_result_structure(smoke):
    assert smoke.slug == "fpo" and len(smoke.checks) == 4
    names = [c.name for c in smoke.checks]
    assert names[0].startswith("(a)") and names[1].startswith("(b)") and names[2].startswith("(c)")
    for c in smoke.checks:
        again = c.recompute()  # the verdict follows from the stored data under its criterion
        assert (again.verdict, again.low, again.high) == (c.verdict, c.low, c.high), c.name
        assert math.isfinite(c.estimate)
    win = smoke.checks[0]
    # per-prompt outcomes of both smoke seeds, each 0, 0.5 or 1
    vals = np.array(win.data["values"])
    assert len(vals) == 2 * 40 and set(np.unique(vals)) <= {0.0, 0.5, 1.0}
    assert len(smoke.checks[2].data["a"]) == 2 * 21  # steps 5-25 of each seed
    assert {p.name for p in smoke.figures} == {"winrates.png", "kl.png", "step_time.png"}
    assert all(p.is_file() and p.stat().st_size > 1000 for p in smoke.figures)
    metric = {m.name: m for m in smoke.metrics}
    assert 0 <= metric["win rate fpo vs SFT"].mean <= 1
    assert metric["median step fpo"].mean > 0


@pytest.mark.slow
def test_quick_mode_meets_its_criteria(tmp_path):
    from icml25.fpo import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    assert [c.verdict for c in r.checks] == ["held"] * 4, [(c.name, c.estimate) for c in r.checks]
    assert r.seconds < 240
