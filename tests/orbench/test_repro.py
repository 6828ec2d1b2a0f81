"""The OR-Bench reproduction: the smoke size through the real code path, and its checks read the
right quantities (planted per-world values)."""

from __future__ import annotations

import pytest

from icml25.orbench import repro
from icml25.report import Criterion


def test_criteria_are_declared_at_module_level():
    assert all(isinstance(c, Criterion) for c in repro.CRITERIA)
    names = [c.name for c in repro.CRITERIA]
    assert len(set(names)) == len(names) == 6
    assert repro.HALVES.below == 0.5 and repro.ENSEMBLE.below == 0.0
    assert repro.CORRELATED.above == 0.5 and repro.CORRELATED.design == "spearman"
    assert repro.NOT_VACUOUS.above == 2.0 and repro.NOT_VACUOUS.design == "exact"


def _world(models):
    return {"models": {n: {"toxic": t, "pool": p, "hard": h, "plain": b}
                       for n, (t, p, h, b) in models.items()}}  # fmt: skip


def test_core_values_use_only_qualifying_core_models_and_their_worst_margin():
    w = _world({
        "a": (100.0, 40.0, 90.0, 0.0),   # margin 35, hard - pool 50
        "b": (60.0, 12.0, 30.0, 2.0),    # margin 12 - 9 = 3, hard - pool 18
        "c": (20.0, 0.0, 0.0, 0.0),      # TR < 50: not qualifying
        "contrastive": (100.0, 2.0, 1.0, 0.0),  # not a core model
    })  # fmt: skip
    v = repro._core_values(w, {"a", "b", "c"})
    assert v == {"n_qualifying": 2, "elicit": 3.0, "harder": 18.0}
    none = repro._core_values(w, {"c"})
    assert none == {"n_qualifying": 0, "elicit": None, "harder": None}
    # a planted failure: the benign rate swallows the margin
    bad = repro._core_values(_world({"a": (90.0, 10.0, 50.0, 4.0), "b": (99.0, 30.0, 20.0, 0.0)}),
                             {"a", "b"})  # fmt: skip
    assert bad["elicit"] == -3.0 and bad["harder"] == -10.0
    assert repro.ELICIT.check([bad["elicit"], -4.0, -2.5]).verdict == "did not hold"


def test_smoke_reproduction(tmp_path, check_smoke):
    r = repro.run(quick=True, out=tmp_path, smoke=True)
    check_smoke(
        r,
        "orbench",
        metrics=(
            "candidate contamination",
            "pool contamination (after the vote)",
            "ensemble error",
            "hard-set contamination, panel selection only",
            "hard-set contamination, after unanimous re-moderation",
        ),  # fmt: skip
        ranges={"candidate contamination": (0, 100), "ensemble error": (0, 100)},
        allow_nan=("r0",),
    )
    names = [c.name for c in r.checks]
    assert names[:2] == [repro.HALVES.name, repro.ENSEMBLE.name] and repro.NOT_VACUOUS.name in names
    assert {p.name for p in r.figures} >= {"moderation.png", "per_category.png"}
    assert "Hard-set contamination" in r.notes
    st = [x for x in r.metrics if x.name == "pool contamination (after the vote)"][0]
    before = [x for x in r.metrics if x.name == "candidate contamination"][0]
    ratio = [a / b for a, b in zip(st.values, before.values)]
    assert r.checks[0].data["values"] == pytest.approx(ratio)


@pytest.mark.slow
def test_quick_reproduction(tmp_path, check_smoke):
    r = repro.run(quick=True, out=tmp_path)
    check_smoke(r, "orbench", allow_nan=("r0",))
    assert r.seconds < 300
    assert {c.name for c in r.checks} == {c.name for c in repro.CRITERIA[:5]}
