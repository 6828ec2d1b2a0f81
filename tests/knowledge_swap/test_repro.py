"""The reproduction at smoke size (structure and numbers: every metric present, finite, in range,
consistent with its definition; the checks come from the pre-registered criteria and are built from
the right arms), planted per-seed numbers through the check builder, and the quick claim (slow)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")

ACC = ("acc_r", "acc_f", "acc_l", "S")


def _check_structure(r, strategies, n_seeds, check_smoke):
    from icml25.knowledge_swap import repro

    check_smoke(
        r,
        "knowledge_swap",
        metrics=("S(L->F) - S(F->L)", "F->L relapse (Acc_f after learn - after forget)"),
        ranges={"L->F acc": (0, 100), "F->L acc": (0, 100), "pretrained": (0, 100)},
    )
    assert r.setup and len(r.seeds) == n_seeds
    names = {m.name for m in r.metrics}
    want = {f"{s} {k}" for s in strategies for k in ACC} | {
        "S(L->F) - S(F->L)",
        "seeds with S(L->F) - S(F->L) > 3",
        "F->L relapse (Acc_f after learn - after forget)",
        "pretrained Acc_r",
        "pretrained Acc_f",
    }
    assert want <= names, sorted(want - names)
    for m in r.metrics:
        if not m.name.startswith(("sweep", "no-LoRA", "GS-LoRA")):
            assert m.n == n_seeds, m.name
        assert all(math.isfinite(v) for v in m.values), m.name
        lo, hi = (-100, 100) if m.unit == "points" else (0, 100)
        assert all(lo <= v <= hi for v in m.values), (m.name, m.values)
    # each S is the mean of Acc_r, Acc_l and 100 - Acc_f; the key metric is their difference
    get = {m.name: np.array(m.values) for m in r.metrics}
    for s in strategies:
        s_ = (get[f"{s} acc_r"] + get[f"{s} acc_l"] + 100 - get[f"{s} acc_f"]) / 3
        np.testing.assert_allclose(get[f"{s} S"], s_, atol=1e-9)
    np.testing.assert_allclose(get["S(L->F) - S(F->L)"], get["L->F S"] - get["F->L S"], atol=1e-9)
    # the checks are the pre-registered criteria, in order, each built from the right arm
    assert [c.name for c in r.checks] == [c.name for c in repro.CRITERIA]
    assert r.key().name == repro.S_GAP.name
    arms = {
        repro.S_GAP.name: ("L->F S", "F->L S"),
        repro.FORGETS_MORE.name: ("L->F acc_f", "F->L acc_f"),
        repro.LEARNS_ENOUGH.name: ("L->F acc_l", "F->L acc_l"),
    }
    for c in r.checks:
        if c.name in arms:
            a, b = arms[c.name]
            assert c.criterion.design == "paired" and c.n == n_seeds
            np.testing.assert_allclose(c.data["a"], get[a])
            np.testing.assert_allclose(c.data["b"], get[b])
    np.testing.assert_allclose(r.check(repro.SANE_FORGET.name).data["values"], get["L->F acc_f"])
    np.testing.assert_allclose(r.check(repro.SANE_LEARN.name).data["values"], get["L->F acc_l"])
    for f in r.figures:
        assert f.exists() and f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f


def test_criteria_are_declared_at_module_level_with_the_spec_thresholds():
    from icml25.knowledge_swap import repro
    from icml25.report import Criterion

    assert all(isinstance(c, Criterion) for c in repro.CRITERIA)
    assert len({c.name for c in repro.CRITERIA}) == len(repro.CRITERIA) == 5
    got = {c.name: (c.design, c.above, c.below) for c in repro.CRITERIA}
    assert got == {
        repro.S_GAP.name: ("paired", 3.0, None),
        repro.FORGETS_MORE.name: ("paired", None, 0.0),
        repro.LEARNS_ENOUGH.name: ("paired", -5.0, None),
        repro.SANE_FORGET.name: ("mean", None, 20.0),
        repro.SANE_LEARN.name: ("mean", 80.0, None),
    }
    assert repro.run.preregistered_seeds == {"quick": repro.N_QUICK, "full": repro.N_FULL}


def _planted(rng, n, acc_r, acc_f, acc_l):
    out = {
        "acc_r": list(np.clip(acc_r + rng.normal(0, 2, n), 0, 100)),
        "acc_f": list(np.clip(acc_f + rng.normal(0, 1, n), 0, 100)),
        "acc_l": list(np.clip(acc_l + rng.normal(0, 1, n), 0, 100)),
    }
    out["S"] = [(r + l + 100 - f) / 3 for r, f, l in zip(out["acc_r"], out["acc_f"], out["acc_l"])]
    return out


def test_planted_swap_results_give_the_right_verdicts():
    """A clear L->F win is held on every check; the same numbers with the arms exchanged fail (a)
    and (b) with confidence; a planted tie is not held."""
    from icml25.knowledge_swap import repro
    from icml25.report import combine

    rng = np.random.default_rng(0)
    good = _planted(rng, 12, acc_r=85, acc_f=2, acc_l=96)
    bad = _planted(rng, 12, acc_r=65, acc_f=15, acc_l=94)
    checks = {c.name: c for c in repro.swap_checks(good, bad)}
    assert all(c.verdict == "held" for c in checks.values()), {
        k: c.verdict for k, c in checks.items()
    }
    assert checks[repro.S_GAP.name].estimate == pytest.approx(
        np.mean(good["S"]) - np.mean(bad["S"])
    )
    flipped = {c.name: c for c in repro.swap_checks(bad, good)}
    assert flipped[repro.S_GAP.name].verdict == "did not hold"
    assert flipped[repro.FORGETS_MORE.name].verdict == "did not hold"
    assert combine(flipped.values()) == "did not hold"
    tie = _planted(rng, 12, acc_r=85, acc_f=0, acc_l=96)
    same = {k: list(np.array(v) + rng.normal(0, 0.5, 12)) for k, v in tie.items()}
    assert combine(repro.swap_checks(tie, same)) != "held"


def test_quick_repro_smoke(tmp_path, check_smoke):
    from icml25.knowledge_swap import repro

    r = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    _check_structure(r, ("L->F", "F->L"), 2, check_smoke)
    assert {f.name for f in r.figures} == {
        "swap_bars.png",
        "forget_trajectory.png",
        "lora_norm_profile.png",
    }
    assert "Smoke size" in r.notes and r.power
    # the deviations from the paper are stated on the page the report points to
    page = Path(__file__).resolve().parents[2] / "docs" / "knowledge_swap.md"
    deviations = page.read_text(encoding="utf-8").split("## Deviations from the paper", 1)[1]
    assert deviations.count("\n- ") >= 4


@pytest.mark.slow
def test_full_repro_smoke(tmp_path, check_smoke):
    from icml25.knowledge_swap import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    _check_structure(r, ("L->F", "F->L", "simultaneous"), 2, check_smoke)
    assert "knock_on_probes.png" in {f.name for f in r.figures}
    sweep = [m for m in r.metrics if m.name.startswith("sweep S gap")]
    assert sweep and all(math.isfinite(v) for m in sweep for v in m.values)


@pytest.mark.slow
def test_quick_repro_verdicts_are_the_recorded_ones(
    tmp_path, check_smoke, assert_recorded_verdicts
):
    from icml25.knowledge_swap import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    _check_structure(r, ("L->F", "F->L"), repro.N_QUICK, check_smoke)
    assert_recorded_verdicts(r, "knowledge_swap", "quick")
