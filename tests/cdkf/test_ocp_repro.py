"""The rate optimiser, the Monte-Carlo evaluation and the reproduction's smoke run."""

from __future__ import annotations

import pytest
import torch

from icml25.cdkf import (
    RateSchedule,
    SchedulingProblem,
    Sensor,
    matern_ssm,
    monte_carlo_covariance,
    simulate_and_filter,
)

D = torch.float64


def one_sensor_problem(budget=4.0):
    m = matern_ssm(0.5, 1.0, 1.0)
    s = Sensor(m.H, torch.tensor([[0.1]], dtype=D), cost=1.0)
    return m, SchedulingProblem(m, [s], T=4.0, K=4, budget=budget, lam_max=4.0)


def test_single_sensor_spends_the_whole_budget_and_never_more():
    _, prob = one_sensor_problem()
    sol = prob.solve()
    assert sol.info["expected_cost"] == pytest.approx(4.0, abs=1e-6)  # the budget is active
    assert sol.info["expected_cost"] <= 4.0 + 1e-6
    assert sol.objective < float(prob.objective(torch.zeros(1, 4, dtype=D)))


def test_objective_gradcheck_in_the_rates():
    _, prob = one_sensor_problem()
    prob.n_steps = 16  # h * max rate well below 0.5: no refinement near the test point
    v = torch.tensor([[0.5, 1.0, 0.2, 0.7]], dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(prob.objective, (v,))


def test_monte_carlo_zero_rates_is_deterministic_lyapunov():
    m, prob = one_sensor_problem()
    mc = monte_carlo_covariance(
        m,
        prob.sensors,
        RateSchedule(torch.zeros(1, 4, dtype=D), 4.0),
        20,
        40,
        torch.Generator().manual_seed(0),
        prob.W,
    )
    assert float(mc["se_path"].max()) == 0.0
    torch.testing.assert_close(mc["mean_path"], torch.ones(41, dtype=D))  # stationary OU variance


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"T": 0.0}, "T must be"),
        ({"K": 0}, "K must be"),
        ({"lam_max": 0.0}, "lam_max"),
        ({"budget": -1.0}, "budget"),
    ],
)
def test_bad_problem_arguments(kwargs, match):
    m = matern_ssm(0.5, 1.0, 1.0)
    args = {"T": 1.0, "K": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        SchedulingProblem(m, [Sensor(m.H, torch.eye(1, dtype=D))], **args)


def test_monte_carlo_and_calibration_return_per_path_values():
    m, prob = one_sensor_problem()
    rates = RateSchedule(torch.ones(1, 4, dtype=D), 4.0)
    mc = monte_carlo_covariance(
        m, prob.sensors, rates, 30, 40, torch.Generator().manual_seed(0), prob.W
    )
    assert mc["time_avgs"].shape == (30,)
    assert float(mc["time_avgs"].mean()) == pytest.approx(mc["time_avg"], rel=1e-12)
    assert float(mc["time_avgs"].std() / 30**0.5) == pytest.approx(mc["time_avg_se"], rel=1e-12)
    times = [torch.tensor([0.5, 1.5, 2.5], dtype=D)]
    cal = simulate_and_filter(
        m, prob.sensors, times, 4.0, 25, 40, torch.Generator().manual_seed(1), m.H
    )
    assert cal["path_mse"].shape == (25,)
    assert float(cal["path_mse"].mean()) == pytest.approx(cal["mse"], rel=1e-12)


# -- the reproduction --------------------------------------------------------------------------

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


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    pytest.importorskip("scipy")
    from icml25.cdkf import repro

    return {
        quick: repro.run(quick=quick, seed=0, out=tmp_path_factory.mktemp("cdkf"), smoke=True)
        for quick in (True, False)
    }


def test_repro_smoke(smoke, check_smoke):
    result = smoke[True]
    check_smoke(result, "cdkf", metrics=("calibration MSE / predicted variance",))
    assert {f.name for f in result.figures} == {"cdkf_rates.png", "cdkf_bound_vs_mc.png"}
    assert (
        result.seeds == [0, 1]
        and result.key().name == "2 optimized / uniform, deterministic schedules"
    )
    by = {c.name: c for c in result.checks}
    # Monte-Carlo checks: 20 batch means per seed, both seeds pooled
    for name in (
        "1 bound - Poisson MC, optimized",
        "4 filter calibration: MSE / predicted variance",
    ):
        assert by[name].n == 40 and by[name].criterion.over != "seeds"
    assert by["2 realised cost of the optimized schedule"].criterion.below == 13.0
    assert any(d.startswith("issue 17") for d in result.deviations) and result.power


def test_full_repro_smoke_has_the_robot_part(smoke, check_smoke):
    result = smoke[False]
    check_smoke(result, "cdkf")
    names = {f.name for f in result.figures}
    assert {"cdkf_tradeoff.png", "cdkf_robot.png"} <= names
    assert any("violation freq." in t for t in result.tables)
    robot = [c.name for c in result.checks if c.name.startswith(("5 robot", "6 robot"))]
    assert robot[0] == "5 robot: optimized minimum mean energy"
    assert robot[-1] == "6 robot: optimized violation frequency"


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


def _mc(level: float, spread: float, M: int = 40, n: int = 9, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    avgs = level + spread * torch.randn(M, generator=g, dtype=D)
    return {
        "time_avgs": avgs,
        "time_avg": float(avgs.mean()),
        "time_avg_se": float(avgs.std() / M**0.5),
        "mean_path": torch.full((n,), level, dtype=D),
        "se_path": torch.full((n,), spread / M**0.5, dtype=D),
        "grid": torch.linspace(0, 10, n, dtype=D),
    }


def _planted(bound_gap=0.01, poisson_gap=0.05, cal=1.0, seeds=2):
    levels = {"uniform": 0.44, "best_constant": 0.40, "optimized": 0.345}
    per_seed = [
        {
            **{k: _mc(v, 0.02, seed=10 * s + i) for i, (k, v) in enumerate(levels.items())},
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
    paths = {
        k: torch.full((5,), v + bound_gap, dtype=D) for k, v in levels.items()
    }  # 9 = 2 * 4 + 1
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
        assert c.estimate == pytest.approx(bounds[name] - float(pooled)) and c.n == 40
        assert c.verdict == "held"
    assert by["1 largest pointwise excess of Poisson MC over the bound"].held
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
    # the bound 0.02 below an MC mean with se 0.02 / sqrt(80): z = 4.5 > 4
    pointwise = by["1 largest pointwise excess of Poisson MC over the bound"]
    assert pointwise.estimate == pytest.approx(0.02 / (0.02 / 40**0.5 / 2**0.5))
    assert pointwise.verdict == "did not hold"
    assert by["3 Poisson MC - deterministic schedule, optimized rates"].verdict == "did not hold"
    assert by["4 filter calibration: MSE / predicted variance"].verdict == "did not hold"
    assert by["2 realised cost of the optimized schedule"].verdict == "did not hold"
    # a bound that is tight within Monte-Carlo error is inconclusive, not held
    bounds, paths, det, per_seed = _planted(bound_gap=0.0)
    by = {c.name: c for c in repro.build_checks(bounds, paths, det, 12.0, per_seed)}
    assert by["1 bound - Poisson MC, uniform"].verdict == "inconclusive"


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


@pytest.mark.slow
def test_quick_repro_holds(tmp_path):
    from icml25.cdkf import repro

    result = repro.run(quick=True, seed=0, out=tmp_path)
    assert result.status == "held", [(c.name, c.verdict) for c in result.checks]
