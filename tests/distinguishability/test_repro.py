"""The reproduction at smoke size: structure, checks from the pre-registered criteria built from the
right arms (recomputed by direct calls of the per-seed functions), and the quick claim (slow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium")

DOC = Path(__file__).resolve().parents[2] / "docs" / "distinguishability.md"
FIGURES = {
    "pearson_vs_queries.png",
    "teacher_error.png",
    "reward_scatter.png",
    "lottery_accuracy.png",
    "utility_recovery.png",
}


@pytest.fixture(scope="module")
def smoke_result(tmp_path_factory):
    from icml25.distinguishability import repro

    return repro.run(quick=True, seed=0, out=tmp_path_factory.mktemp("dist"), smoke=True)


def test_criteria_are_declared_at_module_level():
    from icml25.distinguishability import repro
    from icml25.report import Criterion

    assert all(isinstance(c, Criterion) for c in repro.CRITERIA)
    names = [c.name for c in repro.CRITERIA]
    assert len(set(names)) == len(names) == 4
    assert names == [
        *(repro.A_GAIN[t].name for t in repro.TEACHERS),
        *(
            repro.B_GAIN.name,
            repro.C_GAIN.name,
        ),
    ]
    assert all((c.design, c.above, c.below) == ("paired", 0.0, None) for c in repro.CRITERIA)
    assert repro.run.preregistered_seeds == {"quick": repro.N_QUICK, "full": repro.N_FULL}


def test_quick_repro_smoke(smoke_result, check_smoke):
    from icml25.distinguishability import repro

    r = smoke_result
    check_smoke(
        r,
        "distinguishability",
        metrics=("B lottery balanced accuracy PCQ", "B lottery balanced accuracy DQ"),
        prefixes=("A score gain",),
        ranges={"B lottery balanced accuracy": (0, 1), "A seeds with": (0, 1)},
    )
    assert {f.name for f in r.figures} == FIGURES
    assert r.seeds == [0, 1] and "Smoke size" in r.notes and r.power
    # the deviations are stated in docs/distinguishability.md, where the report points
    deviations = DOC.read_text(encoding="utf-8").split("## Deviations from the paper")[1]
    assert "our reconstruction" in deviations and "paired t-intervals" in deviations
    # quick mode: every criterion but Part C's, in the declared order; the key check is Part A's
    assert [c.name for c in r.checks] == [c.name for c in repro.CRITERIA[:-1]]
    assert r.key().name == repro.A_GAIN["boltzmann"].name
    # each check is built from the right arms: a = DQ, b = PCQ (the reported per-seed metrics)
    get = {m.name: m.values for m in r.metrics}
    for t in repro.TEACHERS:
        c = r.check(repro.A_GAIN[t].name)
        assert c.n == 2
        np.testing.assert_allclose(c.data["a"], get[f"A score {t} {repro.PAPER}"])
        np.testing.assert_allclose(c.data["b"], get[f"A score {t} {repro.BASE}"])
        np.testing.assert_allclose(
            np.array(c.data["a"]) - np.array(c.data["b"]), get[f"A score gain dq-pcq {t}"]
        )
    b = r.check(repro.B_GAIN.name)
    np.testing.assert_allclose(b.data["a"], get["B lottery balanced accuracy DQ"])
    np.testing.assert_allclose(b.data["b"], get["B lottery balanced accuracy PCQ"])


def test_checks_match_direct_calls_of_the_per_seed_functions(smoke_result):
    """Recompute seed 1's numbers by calling the per-seed functions directly: a check that paired
    the wrong method, teacher or seed would not match."""
    from icml25.distinguishability import repro
    from icml25.distinguishability.experiment import CurveConfig, lottery_experiment
    from icml25.report import torch_threads

    r = smoke_result
    cfg = CurveConfig(budgets=(10, 20), epochs=5, n_quadruples=100)
    with torch_threads(1):  # the harness runs the reproduction on one thread
        one = repro.measure_part_a(1, cfg, (repro.BASE, repro.PAPER), smoke=True)
    for t in repro.TEACHERS:
        c = r.check(repro.A_GAIN[t].name)
        assert c.data["a"][1] == pytest.approx(one["curves"][(t, repro.PAPER)]["score"])
        assert c.data["b"][1] == pytest.approx(one["curves"][(t, repro.BASE)]["score"])
    lot = lottery_experiment(1)
    b = r.check(repro.B_GAIN.name)
    assert (b.data["a"][1], b.data["b"][1]) == pytest.approx((lot["acc_dq"], lot["acc_pcq"]))


@pytest.mark.slow
def test_full_repro_smoke_has_the_rl_part(tmp_path, check_smoke):
    from icml25.distinguishability import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(r, "distinguishability", prefixes=("C final true return",))
    assert "return_curves.png" in {f.name for f in r.figures}
    assert [c.name for c in r.checks] == [c.name for c in repro.CRITERIA]
    get = {m.name: m.values for m in r.metrics}
    c = r.check(repro.C_GAIN.name)
    np.testing.assert_allclose(c.data["a"], get[f"C final true return {repro.PAPER}"])
    np.testing.assert_allclose(c.data["b"], get[f"C final true return {repro.BASE}"])


def test_part_c_check_names_its_seeds():
    """Part C runs on the first N_RL (3) of the full mode's 10 seeds: its check labels each value
    with its seed, so it does not read as one value per run seed (unit_problems)."""
    from icml25.distinguishability import repro
    from icml25.report.checks import unit_problems

    seeds = list(range(repro.N_FULL))
    final = {repro.PAPER: [-130.0, -135.0, -128.0], repro.BASE: [-134.0, -137.5, -131.0]}
    c = repro.part_c_check(final, seeds[: repro.N_RL])
    assert c.name == repro.C_GAIN.name and c.n == 3
    assert c.data["units"] == ["seed 0", "seed 1", "seed 2"]
    assert not unit_problems(c, seeds)
    # without the labels, 3 values over 10 run seeds would not name their units
    assert unit_problems(repro.C_GAIN.check(final[repro.PAPER], final[repro.BASE]), seeds)


@pytest.mark.slow
def test_quick_repro_runs_and_reports(tmp_path, check_smoke, assert_recorded_verdicts):
    """The quick run end to end, its numbers checked and its verdicts the ones
    docs/distinguishability.md records (no wall-clock limit: timing belongs to benchmarks, and
    the run's own time grows under load)."""
    from icml25.distinguishability import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    check_smoke(r, "distinguishability", metrics=("A score gain dq-pcq boltzmann",))
    assert_recorded_verdicts(r, "distinguishability", "quick")
    assert len(r.seeds) == repro.N_QUICK
    get = {m.name: np.array(m.values, dtype=float) for m in r.metrics}
    assert set(get) >= {
        "A score gain dq-pcq boltzmann",
        "A Spearman score gain dq-pcq oracle",
        "B lottery balanced accuracy DQ",
        "A per-answer DQ@30 oracle",
    }
    # the reward models learn: every arm's held-out correlations are far above chance
    for t in repro.TEACHERS:
        for m in (repro.BASE, repro.PAPER):
            assert get[f"A score {t} {m}"].min() > 0.5, (t, m)
            assert get[f"A Spearman score {t} {m}"].min() > 0.5, (t, m)
    # noise-free lottery answers give better-than-chance choices with either query type
    assert get["B lottery balanced accuracy PCQ"].min() > 0.5
    assert get["B lottery balanced accuracy DQ"].min() > 0.5
    # each verdict is what its interval says (the pre-registered rule, recomputed here)
    for c in r.checks:
        lo, hi = c.low, c.high
        want = "held" if lo > 0 else ("did not hold" if hi < 0 else "inconclusive")
        assert c.verdict == want, c.name
        assert c.estimate == pytest.approx(np.mean(np.array(c.data["a"]) - np.array(c.data["b"])))
