"""The rate optimiser, the Monte-Carlo evaluation and the reproduction's smoke run."""

from __future__ import annotations

import pytest
import torch

from icml25.cdkf import RateSchedule, SchedulingProblem, Sensor, matern_ssm, monte_carlo_covariance

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


def test_repro_smoke(tmp_path, check_smoke):
    pytest.importorskip("scipy")
    from icml25.cdkf import repro

    result = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    check_smoke(result, "cdkf")
    assert {f.name for f in result.figures} == {"cdkf_rates.png", "cdkf_bound_vs_mc.png"}
    assert all(f.exists() for f in result.figures)
    assert "bound >= Monte Carlo" in result.criterion


@pytest.mark.slow
def test_quick_repro_holds(tmp_path):
    from icml25.cdkf import repro

    result = repro.run(quick=True, seed=0, out=tmp_path)
    assert result.held, result.notes


def test_full_repro_smoke_has_the_robot_part(tmp_path):
    from icml25.cdkf import repro

    result = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    names = {f.name for f in result.figures}
    assert {"cdkf_tradeoff.png", "cdkf_robot.png"} <= names
    assert any("robot" in c for c in result.criterion.split(";"))
    assert any("violation freq." in t for t in result.tables)
