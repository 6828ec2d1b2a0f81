"""The reproduction at smoke size (structure only; the verdict means nothing at this size), its
checks against planted measurements, and the quick reproduction's regression (slow)."""

from __future__ import annotations

import math

import pytest

from icml25.report import Criterion


def test_repro_smoke_full_structure(tmp_path, check_smoke):
    from icml25.tpo import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(
        r,
        "tpo",
        metrics=("TPO-D2-N5", "BoN-15", "TPO scrambled critiques", "revision-D2-N5"),
        ranges={"TPO": (-1.0, 1.0), "BoN-": (-1.0, 1.0), "role model": (0.0, 1.0)},
    )
    assert r.seeds == [0, 1]
    assert len(r.metric("TPO-D2-N5").values) == 2  # one value per seed
    assert {f.name for f in r.figures} == {
        "reward_vs_iteration.png",
        "tpo_vs_bon.png",
        "width_depth.png",
    }
    names = {m.name for m in r.metrics}
    assert {"TPO-D2-N5", "BoN-15", "TPO scrambled critiques", "role model critic"} <= names
    assert "TPO width 20 depth 5" in names
    # the checks are the pre-registered criteria, in order, and nothing else
    assert [c.name for c in r.checks] == [c.name for c in repro.CRITERIA]
    assert [c.criterion for c in r.checks] == repro.CRITERIA
    assert r.key_check == repro.BEATS_BON.name
    # each check is built from its own arms: its per-seed values are the per-seed means that the
    # metrics compute separately from the method means
    pairs = {
        repro.FRESH_GAIN.name: "fresh reward gain (iteration D - 0)",
        repro.BEATS_BON.name: "TPO-D2-N5 - BoN-15",
        repro.BEATS_SCRAMBLED.name: "TPO-D2-N5 - scrambled",
    }
    for check, metric in pairs.items():
        assert math.isclose(r.check(check).estimate, r.metric(metric).mean, abs_tol=1e-12)
    gap = r.metric("TPO-D2-N5").mean - r.metric("BoN-15").mean
    assert math.isclose(r.check(repro.BEATS_BON.name).estimate, gap, abs_tol=1e-12)
    for check, metric in pairs.items():
        assert r.check(check).data["values"] == pytest.approx(r.metric(metric).values)
    assert all(c.n == 2 for c in r.checks)


def test_criteria_are_declared_at_module_level():
    from icml25.tpo import repro

    assert len(repro.CRITERIA) == 3 and all(isinstance(c, Criterion) for c in repro.CRITERIA)
    assert [c.design for c in repro.CRITERIA] == ["mean"] * 3
    assert [c.above for c in repro.CRITERIA] == [0.10, 0.03, 0.03]  # the planned gates
    assert all(c.below is None and c.paper_effect for c in repro.CRITERIA)
    assert repro.run.preregistered_seeds == {"quick": 3, "full": 5}


def _planted(seed, *, tpo, bon, scrambled, fresh, n=6):
    """A per-seed measurement as ``measure_seed`` returns it, with fixed per-query values."""
    best = {k: [0.0] * n for k in ("BoN-5", "BoN-30", "BoN-60", "revision-D2-N5")}
    best |= {
        "TPO-D2-N5": [tpo] * n,
        "BoN-15": [bon] * n,
        "TPO scrambled critiques": [scrambled] * n,
    }
    # per-query spread, and a per-seed shift so the seeds differ
    best["TPO-D2-N5"] = [tpo + 0.005 * seed + 0.01 * ((i + seed) % 3 - 1) for i in range(n)]
    return {"best": best, "fresh": {"TPO-D2-N5": [[fresh[0], 0.7, fresh[1]]] * n}}


def test_checks_use_the_right_arms():
    from icml25.tpo import repro

    seeds = [0, 1, 2]
    runs = [
        _planted(s, tpo=0.99, bon=0.88, scrambled=0.95, fresh=(0.55, 0.94 + 0.01 * s))
        for s in seeds
    ]
    fresh, bon, scr = repro.tpo_checks(runs, seeds)
    assert [c.name for c in (fresh, bon, scr)] == [c.name for c in repro.CRITERIA]
    assert math.isclose(fresh.estimate, 0.40, abs_tol=1e-9)
    assert math.isclose(bon.estimate, 0.115, abs_tol=1e-9)
    assert math.isclose(scr.estimate, 0.045, abs_tol=1e-9)
    assert fresh.held and bon.held and scr.held
    assert bon.n == 3 and bon.data["values"] == pytest.approx([0.11, 0.115, 0.12])
    # a TPO that is worse than Best-of-15 and no better than scrambled critiques fails (2), (3)
    runs = [
        _planted(s, tpo=0.85, bon=0.88, scrambled=0.85, fresh=(0.55, 0.6 + 0.01 * s)) for s in seeds
    ]
    fresh, bon, scr = repro.tpo_checks(runs, seeds)
    assert [c.verdict for c in (fresh, bon, scr)] == ["did not hold"] * 3
    assert bon.estimate < 0 < bon.high - bon.low


@pytest.mark.slow
def test_quick_repro_meets_the_gates(tmp_path, check_smoke, assert_recorded_verdicts):
    from icml25.tpo import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    check_smoke(r, "tpo")
    assert_recorded_verdicts(r, "tpo", "quick")
    assert r.seeds == [0, 1, 2] and all(c.n == 3 for c in r.checks)
    # ~154 s on an idle 2-core machine (docs/tpo.md); much longer under load
    assert r.seconds < 240
    assert r.check(repro.BEATS_BON.name).low > 0.03
