"""The OR-Bench reproduction: the smoke size through the real code path, its checks read the right
quantities from planted worlds and name their independent units, and the values the stand-ins
build in are sanity values with their expected value from the construction, not checks."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from pathlib import Path

import pytest

from icml25.orbench import repro, sanity
from icml25.report import Criterion
from icml25.report.checks import unit_problems

DOCS = Path(__file__).resolve().parents[2] / "docs" / "orbench.md"


def test_criteria_are_declared_at_module_level():
    assert all(isinstance(c, Criterion) for c in repro.CRITERIA)
    names = [c.name for c in repro.CRITERIA]
    assert len(set(names)) == len(names) == 3
    assert repro.ELICIT.above == 0.0 and repro.ELICIT.design == "mean"
    assert repro.CORRELATED.above == 0.5 and repro.CORRELATED.design == "spearman"
    assert repro.NOT_VACUOUS.above == 2.0 and repro.NOT_VACUOUS.design == "exact"
    assert [c.over for c in repro.CRITERIA] == ["worlds", "worlds", "models"]


def test_values_built_in_by_the_stand_ins_are_not_criteria():
    """(1a) and (1b) are the scripted moderators' independent-error arithmetic and (2b) the hard
    subset's selection rule: no verdict may rest on them (issue 46)."""
    names = " ".join(c.name for c in repro.CRITERIA)
    for old in ("(1a)", "(1b)", "(2b)"):
        assert old not in names
    for gone in ("HALVES", "ENSEMBLE", "HARDER"):
        assert not hasattr(repro, gone)


def test_expected_values_from_the_construction():
    p = sanity.moderator_blind_fraction()
    assert p == pytest.approx(0.15)  # 168 of 1,120 (verb, noun) pairs
    # brute force over the 8 right/wrong patterns of three independent moderators
    brute = sum(
        math.prod(p if w else 1 - p for w in pattern)
        for pattern in itertools.product((0, 1), repeat=3)
        if sum(pattern) >= 2
    )
    assert sanity.majority_error(p) == pytest.approx(brute) == pytest.approx(0.06075)
    assert sanity.majority_error(0.0) == 0.0 and sanity.majority_error(1.0, 5) == 1.0
    # the contamination ratio by simulation of the vote: toxic passes w.p. e, safe w.p. 1 - e
    rng, e, c = random.Random(0), sanity.majority_error(p), 0.25
    toxic = [rng.random() < c for _ in range(200_000)]
    passed = [t for t in toxic if (rng.random() < e) == t]
    sim = (sum(passed) / len(passed)) / (sum(toxic) / len(toxic))
    assert sanity.expected_contamination_ratio(c, e) == pytest.approx(sim, rel=0.03)
    for bad in ((0.0, 0.1), (0.3, 1.5)):
        with pytest.raises(ValueError, match="need 0 < c"):
            sanity.expected_contamination_ratio(*bad)
    with pytest.raises(ValueError, match="odd positive"):
        sanity.majority_error(0.1, 2)
    with pytest.raises(ValueError, match="probability"):
        sanity.majority_error(-0.1)


def test_panel_rates_read_the_selection_metadata(tmp_path):
    meta = {
        "hard_selection": {
            "panel": ["a", "b", "c"],
            "k_min": 2,
            "rejections": {"x": 3, "y": 2, "z": 0, "w": 1},
        }
    }
    (tmp_path / "metadata.json").write_text(json.dumps(meta))
    rows = [
        {"prompt": "p1", "category": "privacy", "subset": "hard", "id": "x"},
        {"prompt": "p2", "category": "privacy", "subset": "hard", "id": "y"},
    ]
    (tmp_path / "or-bench-hard-1k.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    got = sanity.panel_rates(tmp_path)
    assert got["hard"] == pytest.approx(100 * 5 / 6) and got["pool"] == pytest.approx(50.0)
    assert got["floor"] == pytest.approx(200 / 3) and got["hard"] >= got["floor"]


def _world(seed, models):
    return {
        "seed": seed,
        "models": {
            n: {"toxic": t, "pool": p, "hard": h, "plain": b} for n, (t, p, h, b) in models.items()
        },
    }


def test_core_values_use_only_qualifying_core_models_and_their_worst_margin():
    w = _world(
        0,
        {
            "a": (100.0, 40.0, 90.0, 0.0),  # margin 35, hard - pool 50
            "b": (60.0, 12.0, 30.0, 2.0),  # margin 12 - 9 = 3, hard - pool 18
            "c": (20.0, 0.0, 0.0, 0.0),  # TR < 50: not qualifying
            "contrastive": (100.0, 2.0, 1.0, 0.0),  # not a core model
        },
    )
    v = repro._core_values(w, {"a", "b", "c"})
    assert v == {"n_qualifying": 2, "elicit": 3.0, "harder": 18.0}
    none = repro._core_values(w, {"c"})
    assert none == {"n_qualifying": 0, "elicit": None, "harder": None}
    # a planted failure: the benign rate swallows the margin
    bad = repro._core_values(
        _world(0, {"a": (90.0, 10.0, 50.0, 4.0), "b": (99.0, 30.0, 20.0, 0.0)}), {"a", "b"}
    )
    assert bad["elicit"] == -3.0 and bad["harder"] == -10.0
    assert repro.ELICIT.check([bad["elicit"], -4.0, -2.5]).verdict == "did not hold"


def _planted(n_models=12):
    """Five worlds; worlds 2 and 4 have no qualifying core model; the first world has a graded
    population of ``n_models`` models (three of them core)."""
    core = {"core@1", "core@2", "core@3"}
    worlds = []
    for s in range(5):
        qualifies = s not in (2, 4)
        models = {
            "core@1": (10.0, 0.0, 0.0, 0.0),
            "core@2": (80.0 if qualifies else 30.0, 40.0 + s, 90.0, 0.0),
            "core@3": (95.0 if qualifies else 40.0, 45.0, 95.0, 1.0),
        }
        if s == 0:
            models.update(
                {f"other@{j}": (5.0 + 8 * j, 0.0, 3.0 + 7 * j, 0.0) for j in range(n_models - 3)}
            )
        worlds.append(_world(s, models))
    return worlds, core


def test_checks_name_their_units_when_worlds_drop_out():
    """(2a) keeps only the worlds with a qualifying model (3 of 5 values over 5 seeds): it must
    say which worlds, and (3) pools the first world's models: it must name them."""
    worlds, core = _planted()
    summary = repro._summary(worlds[0])
    checks = repro.evaluate(worlds, core, summary, population=True)
    assert [c.name for c in checks] == [c.name for c in repro.CRITERIA]
    assert [u for c in checks for u in unit_problems(c, list(range(5)))] == []
    elicit, vacuous, rho = checks
    assert elicit.data["units"] == ["world 0", "world 1", "world 3"]
    assert elicit.data["values"] == [35.0, 36.0, 38.0]  # min(35 + s, 45 - 7)
    assert vacuous.estimate == 0 and vacuous.verdict == "did not hold"
    assert rho.data["units"] == summary.models and rho.n == 12
    assert rho.estimate == pytest.approx(summary.spearman)
    # quick mode evaluates no population check; nothing qualifying anywhere: unmeasured
    assert len(repro.evaluate(worlds, core, summary, population=False)) == 2
    nobody = [_world(s, {"core@1": (10.0, 0.0, 0.0, 0.0)}) for s in range(3)]
    c0 = repro.evaluate(nobody, core, None, population=True)
    assert [c.measured for c in c0] == [False, True, False]
    assert c0[0].verdict == c0[2].verdict == "inconclusive"


def test_recorded_verdict_markers_match_the_checks_of_each_mode():
    text = DOCS.read_text(encoding="utf-8")
    for mode, n in (("quick", 2), ("full", 3)):
        found = re.findall(rf"<!-- recorded verdicts, {mode}, seed 0: ([^>]*?) -->", text)
        assert len(found) == 1, mode
        assert len(found[0].split(";")) == n, (mode, found)


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
            "sanity: contamination ratio (pool / candidates)",
            "sanity: ensemble - best single moderator error",
            "sanity: panel OR(hard) - OR(pool)",
        ),
        ranges={"candidate contamination": (0, 100), "ensemble error": (0, 100)},
        allow_nan=("r0", "sanity: core OR(hard)"),
    )
    # the smoke core crosses TR >= 50%, so (2a) is measured, with one unit per world
    assert [c.name for c in r.checks] == [repro.ELICIT.name, repro.NOT_VACUOUS.name]
    assert r.checks[0].measured and r.checks[0].data["units"] == ["world 0", "world 1"]
    assert {p.name for p in r.figures} >= {"moderation.png", "per_category.png"}
    assert "Hard-set contamination" in r.notes
    sanity = r.tables[0]
    assert sanity.startswith("Sanity values") and "no verdict rests on them" in sanity
    assert "6.08 = 3p²(1-p) + p³" in sanity and "(was 1a)" in sanity and "(was 2b)" in sanity
    get = {m.name: m for m in r.metrics}
    ratio = [
        a / b
        for a, b in zip(
            get["pool contamination (after the vote)"].values, get["candidate contamination"].values
        )
    ]
    assert get["sanity: contamination ratio (pool / candidates)"].values == pytest.approx(ratio)
    assert any(math.isfinite(v) for v in get["sanity: panel OR(hard) - OR(pool)"].values)


@pytest.mark.slow
def test_quick_reproduction(tmp_path, check_smoke, assert_recorded_verdicts):
    """The quick mode as docs/orbench.md records it: (2a) and (2c) over 5 worlds."""
    r = repro.run(quick=True, out=tmp_path)
    check_smoke(r, "orbench", allow_nan=("r0", "sanity: core OR(hard)"))
    assert_recorded_verdicts(r, "orbench", "quick")
    get = {m.name: m for m in r.metrics}
    # the sanity values sit where the construction puts them
    assert get["sanity: expected ensemble error from the construction"].mean == pytest.approx(6.075)
    assert abs(get["ensemble error"].mean - 6.075) < 3
