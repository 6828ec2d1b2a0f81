"""The reproduction (docs/cdkf.md, "Reproduction"): smoke runs checked for their units, the
pointwise bound check over seeds, exact checks only for deterministic quantities, and the quick
run's recorded verdicts."""

from __future__ import annotations

import math

import pytest
import torch

D = torch.float64


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    pytest.importorskip("scipy")
    from icml25.cdkf import repro

    return {
        quick: repro.run(quick=quick, seed=0, out=tmp_path_factory.mktemp("cdkf"), smoke=True)
        for quick in (True, False)
    }


QUICK_CHECKS = [
    "1 bound - Poisson MC, uniform",
    "1 bound - Poisson MC, best_constant",
    "1 bound - Poisson MC, optimized",
    "1 largest pointwise excess of Poisson MC over the bound",
    "2 optimized / uniform, deterministic schedules",
    "2 optimized / best constant, deterministic schedules",
    "2 realised cost of the optimized schedule",
    "3 Poisson MC - deterministic schedule, optimized rates",
    "4 filter calibration: MSE / predicted variance",
]
ROBOT_CHECKS = {  # which competitors are compared depends on their energy (eligibility)
    "5 robot: optimized minimum mean energy",
    "5 robot: M-optimized / optimized variance - 1",
    "5 robot: kalman_bucy / optimized variance - 1",
    "5 robot: uniform / optimized variance - 1",
    "5 robot: greedy / optimized variance - 1",
    "5 robot: random / optimized variance - 1",
    "6 robot: optimized violation frequency",
}

#: the exact criteria, each a deterministic quantity (docs/cdkf.md, "Reproduction")
DETERMINISTIC = {
    "2 optimized / uniform, deterministic schedules",
    "2 optimized / best constant, deterministic schedules",
    "2 realised cost of the optimized schedule",
    "5 robot: optimized minimum mean energy",
    "5 robot: deterministic method / optimized variance - 1",
    "6 robot: optimized violation frequency",
}


def test_smoke_runs_name_their_units(smoke, check_smoke):
    quick, full = smoke[True], smoke[False]
    check_smoke(quick, "cdkf", metrics=("calibration MSE / predicted variance",))
    check_smoke(full, "cdkf", metrics=("largest pointwise (MC mean - bound) / se",))
    by = {c.name: c for c in quick.checks}
    batches = [f"seed {s} batch {b}" for s in (0, 1) for b in range(20)]
    for name in (
        "1 bound - Poisson MC, uniform",
        "3 Poisson MC - deterministic schedule, optimized rates",
        "4 filter calibration: MSE / predicted variance",
    ):
        assert by[name].n == 40 and by[name].data["units"] == batches
    pointwise = by["1 largest pointwise excess of Poisson MC over the bound"]
    assert pointwise.criterion.design == "mean" and pointwise.n == 2
    assert pointwise.data["units"] == ["seed 0", "seed 1"]
    z = next(m for m in quick.metrics if m.name.startswith("largest pointwise"))
    assert z.values == pytest.approx(pointwise.data["values"])
    for result in (quick, full):
        exact = {
            c.criterion.declared_as or c.name
            for c in result.checks
            if c.criterion.design == "exact"
        }
        assert exact and exact <= DETERMINISTIC
    assert {f.name for f in quick.figures} == {"cdkf_rates.png", "cdkf_bound_vs_mc.png"}
    assert quick.seeds == [0, 1] and quick.key().name == repro_names("OPT_VS_UNIFORM")
    assert by["2 realised cost of the optimized schedule"].criterion.below == 13.0
    # the fixed deviations live in docs/cdkf.md; the power paragraph comes from the checks
    assert not quick.deviations and "With 40 MC batches" in quick.power
    assert {"cdkf_tradeoff.png", "cdkf_robot.png"} <= {f.name for f in full.figures}
    assert any("violation freq." in t for t in full.tables)
    robot = [c.name for c in full.checks if c.name.startswith(("5 robot", "6 robot"))]
    assert robot[0] == "5 robot: optimized minimum mean energy"
    assert robot[-1] == "6 robot: optimized violation frequency"


def repro_names(attr):
    from icml25.cdkf import repro

    return getattr(repro, attr).name


def test_criteria_are_module_level_and_name_the_checks(smoke):
    from icml25.cdkf import repro
    from icml25.report import Criterion

    assert all(isinstance(c, Criterion) for c in repro.CRITERIA)
    assert len({c.name for c in repro.CRITERIA}) == len(repro.CRITERIA)
    declared = {(c.design, c.above, c.below, c.unit, c.paper_effect) for c in repro.CRITERIA}
    quick, full = smoke[True], smoke[False]
    assert [c.name for c in quick.checks] == QUICK_CHECKS
    assert [c.name for c in full.checks][: len(QUICK_CHECKS)] == QUICK_CHECKS
    assert set(c.name for c in full.checks[len(QUICK_CHECKS) :]) <= ROBOT_CHECKS
    for result in (quick, full):
        for c in result.checks:
            k = c.criterion
            assert (k.design, k.above, k.below, k.unit, k.paper_effect) in declared, c.name
    assert (repro.OPT_VS_UNIFORM.below, repro.OPT_VS_CONSTANT.below) == (0.85, 0.9)
    assert (repro.CALIBRATION.above, repro.CALIBRATION.below) == (0.85, 1.15)
    assert repro.run.preregistered_seeds == {"quick": 3, "full": 5}


def _exact_criteria():
    from icml25.cdkf import repro

    return [c for c in repro.CRITERIA if c.design == "exact"]


def test_only_deterministic_quantities_are_exact_criteria():
    from icml25.cdkf import repro

    assert {c.name for c in _exact_criteria()} == DETERMINISTIC
    assert repro.BOUND_POINTWISE.design == "mean" and repro.BOUND_POINTWISE.below == 4.0


def _mc(level, excess_se, M=40, n=9, seed=0):
    """One method's Monte Carlo for one seed: MC mean path = bound + excess_se * se + noise."""
    g = torch.Generator().manual_seed(seed)
    se = 0.02 / M**0.5
    avgs = level + 0.02 * torch.randn(M, generator=g, dtype=D)
    path = level + excess_se * se + se * torch.randn(n, generator=g, dtype=D)
    path[0] = level  # t = 0: both equal Sigma0, se 0
    se_path = torch.full((n,), se, dtype=D)
    se_path[0] = 0.0
    return {
        "time_avgs": avgs,
        "time_avg": float(avgs.mean()),
        "time_avg_se": float(avgs.std() / M**0.5),
        "mean_path": path,
        "se_path": se_path,
        "grid": torch.linspace(0, 10, n, dtype=D),
    }


def _planted(excess_se=0.0, seeds=6, bound_gap=0.01, poisson_gap=0.05, cal=1.0):
    levels = {"uniform": 0.44, "best_constant": 0.40, "optimized": 0.345}
    per_seed = [
        {
            **{k: _mc(v, excess_se, seed=10 * s + i) for i, (k, v) in enumerate(levels.items())},
            "calibration": {
                "path_mse": cal
                * 0.3
                * (1 + 0.2 * torch.randn(40, generator=torch.Generator().manual_seed(s), dtype=D)),
                "predicted": 0.3,
            },
        }
        for s in range(seeds)
    ]
    bounds = {k: v + bound_gap for k, v in levels.items()}
    paths = {k: torch.full((5,), v, dtype=D) for k, v in levels.items()}  # 9 = 2 * 4 + 1
    det = {"uniform": 0.39, "best_constant": 0.36, "optimized": levels["optimized"] - poisson_gap}
    return bounds, paths, det, per_seed


def test_checks_read_the_right_arms():
    from icml25.cdkf import repro

    bounds, paths, det, per_seed = _planted()
    checks = repro.build_checks(bounds, paths, det, 12.4, per_seed)
    by = {c.name: c for c in checks}
    assert [c.name for c in checks] == QUICK_CHECKS
    for name in ("uniform", "best_constant", "optimized"):
        c = by[f"1 bound - Poisson MC, {name}"]
        pooled = torch.cat([s[name]["time_avgs"] for s in per_seed]).mean()
        assert c.estimate == pytest.approx(bounds[name] - float(pooled)) and c.n == 120
        assert c.verdict == "held"
    assert by["2 optimized / uniform, deterministic schedules"].estimate == pytest.approx(
        0.295 / 0.39
    )
    c3 = by["3 Poisson MC - deterministic schedule, optimized rates"]
    opt_mc = torch.cat([s["optimized"]["time_avgs"] for s in per_seed]).mean()
    assert c3.estimate == pytest.approx(float(opt_mc) - 0.295) and c3.held
    c4 = by["4 filter calibration: MSE / predicted variance"]
    assert c4.estimate == pytest.approx(
        float(torch.cat([s["calibration"]["path_mse"] for s in per_seed]).mean()) / 0.3
    )
    assert c4.held


def test_violations_and_miscalibration_do_not_hold():
    from icml25.cdkf import repro

    bounds, paths, det, per_seed = _planted(bound_gap=-0.02, poisson_gap=-0.05, cal=1.4)
    by = {c.name: c for c in repro.build_checks(bounds, paths, det, 14.0, per_seed)}
    assert by["1 bound - Poisson MC, optimized"].verdict == "did not hold"
    assert by["3 Poisson MC - deterministic schedule, optimized rates"].verdict == "did not hold"
    assert by["4 filter calibration: MSE / predicted variance"].verdict == "did not hold"
    assert by["2 realised cost of the optimized schedule"].verdict == "did not hold"
    # a bound that is tight within Monte-Carlo error is inconclusive, not held
    bounds, paths, det, per_seed = _planted(bound_gap=0.0, seeds=2)
    by = {c.name: c for c in repro.build_checks(bounds, paths, det, 12.0, per_seed)}
    assert by["1 bound - Poisson MC, uniform"].verdict == "inconclusive"


def _brute_force_max_z(paths, mcs):
    best = -math.inf
    for name, bound in paths.items():
        for i in range(1, bound.numel()):  # t = 0 has z = 0
            j = 2 * i  # the MC grid refines the bound's by 2
            z = (float(mcs[name]["mean_path"][j]) - float(bound[i])) / float(
                mcs[name]["se_path"][j]
            )
            best = max(best, z)
    return best


def test_pointwise_check_takes_one_z_score_per_seed():
    from icml25.cdkf import repro

    bounds, paths, det, per_seed = _planted(excess_se=0.0, seeds=6)
    checks = repro.build_checks(bounds, paths, det, 12.4, per_seed, seeds=[5, 6, 7, 8, 9, 10])
    c = next(c for c in checks if c.name == repro.BOUND_POINTWISE.name)
    want = [_brute_force_max_z(paths, s) for s in per_seed]
    assert c.data["values"] == pytest.approx(want) and len(set(want)) == 6
    assert c.data["units"] == [f"seed {s}" for s in range(5, 11)]
    assert c.n == 6 and c.low < c.estimate < c.high and c.held  # noise only: max z of ~1-3
    assert next(c for c in checks if c.name.endswith(", optimized")).data["units"][20] == (
        "seed 6 batch 0"
    )
    # Monte Carlo 6 se above the bound at every grid time, on every seed: did not hold
    bounds, paths, det, per_seed = _planted(excess_se=6.0, seeds=6)
    c = next(
        c
        for c in repro.build_checks(bounds, paths, det, 12.4, per_seed)
        if c.name == repro.BOUND_POINTWISE.name
    )
    assert c.verdict == "did not hold" and c.low > 4.0
    with pytest.raises(ValueError, match="seed labels"):
        repro.build_checks(bounds, paths, det, 12.4, per_seed, seeds=[0, 1])


def _robot_results(opt_variance):
    def res(var, seeds=3, jitter=0.0):
        return [
            {"variance": var * (1 + jitter * (s - 1)), "min_mean_energy": 1.0, "violation": 0.0}
            for s in range(seeds)
        ]

    return {
        "optimized": [
            {"variance": v, "min_mean_energy": 1.0, "violation": 0.0} for v in opt_variance
        ],
        "m_optimized": res(0.125, jitter=0.03),
        "kalman_bucy": res(0.300),
        "uniform": res(0.401),
        "greedy": res(0.167),
        "random": res(0.303, jitter=0.001),
    }


def test_robot_checks_compare_eligible_methods_with_the_optimized_plan():
    from icml25.cdkf import repro

    def res(var, energy=1.0, violation=0.0, seeds=3, jitter=0.0):
        return [
            {
                "variance": var * (1 + jitter * (s - 1)),
                "min_mean_energy": energy,
                "violation": violation,
            }
            for s in range(seeds)
        ]

    results = {
        "optimized": res(0.109),
        "m_optimized": res(0.125, jitter=0.03),
        "kalman_bucy": res(0.300),
        "uniform": res(0.401),
        "greedy": res(0.167),
        "random": res(0.303, energy=-3.0, violation=0.79, jitter=0.001),
    }
    checks, eligible = repro.robot_checks(results)
    by = {c.name: c for c in checks}
    assert "random" not in eligible and "5 robot: random / optimized variance - 1" not in by
    assert by["5 robot: greedy / optimized variance - 1"].estimate == pytest.approx(
        0.167 / 0.109 - 1
    )
    mopt = by["5 robot: M-optimized / optimized variance - 1"]
    assert mopt.criterion.design == "mean" and mopt.n == 3 and mopt.held
    assert all(c.held for c in checks)
    # a competitor better than the optimised plan, or an optimised plan out of energy, fails
    results["greedy"] = res(0.100)
    results["optimized"] = res(0.109, energy=-0.5, violation=1.0)
    by = {c.name: c for c in repro.robot_checks(results)[0]}
    assert by["5 robot: greedy / optimized variance - 1"].verdict == "did not hold"
    assert by["5 robot: optimized minimum mean energy"].verdict == "did not hold"
    assert by["6 robot: optimized violation frequency"].verdict == "did not hold"


def test_exact_robot_checks_refuse_values_that_vary_between_seeds():
    from icml25.cdkf import repro

    checks, _ = repro.robot_checks(_robot_results([0.109] * 3))
    exact = [c for c in checks if c.criterion.design == "exact"]
    assert {c.criterion.declared_as or c.name for c in exact} == DETERMINISTIC - {
        "2 optimized / uniform, deterministic schedules",
        "2 optimized / best constant, deterministic schedules",
        "2 realised cost of the optimized schedule",
    }
    # a plan whose variance differs between seeds is not deterministic: no exact check of it
    with pytest.raises(ValueError, match="same on every seed"):
        repro.robot_checks(_robot_results([0.109, 0.110, 0.108]))


def test_the_optimized_plan_has_one_energy_realisation():
    """Check 6 is exact: a deterministic schedule and control give one energy path, so the
    violation frequency is 0 or 1 (no sampling), the same for every seed."""
    from icml25.cdkf import robot
    from icml25.cdkf.schedule import RateSchedule, deterministic_schedule

    setting, _ = robot.robot_problem()
    u = robot.baseline_controls()
    for rate, violated in ((0.3, 0.0), (3.0, 1.0)):  # 3/s on every sensor runs out of energy
        times = deterministic_schedule(
            RateSchedule(torch.full((3, robot.K), rate, dtype=D), robot.T), "floor"
        )
        res = [robot.evaluate_plan(setting, u, times=times, n_fine=200) for _ in range(2)]
        assert res[0]["violation"] == res[1]["violation"] == violated
        assert (res[0]["min_mean_energy"] < 0) == bool(violated)


@pytest.mark.slow
def test_quick_repro_verdicts_are_the_recorded_ones(tmp_path, assert_recorded_verdicts):
    from icml25.cdkf import repro

    result = repro.run(quick=True, seed=0, out=tmp_path)
    assert_recorded_verdicts(result, "cdkf", mode="quick")
    assert result.status == "held"
