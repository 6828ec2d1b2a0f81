"""The rate optimiser and the Monte-Carlo evaluation (the reproduction: test_repro.py)."""

from __future__ import annotations

import pytest
import torch

from icml25.cdkf import RateSchedule, SchedulingProblem, Sensor, matern_ssm
from icml25.cdkf.evaluate import monte_carlo_covariance, simulate_and_filter

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
