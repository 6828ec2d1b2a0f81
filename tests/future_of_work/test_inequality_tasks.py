"""Inequality measures and the task-based automation model (identities, derivatives, paths)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from icml25.future_of_work import TaskModel, simulate_path
from icml25.future_of_work.inequality import gini, lorenz, theil, top_share
from icml25.future_of_work.tasks_model import household_incomes


def test_gini_known_values():
    assert gini([1, 1, 1]) == 0.0
    assert gini([0, 0, 1]) == pytest.approx(2 / 3)
    assert gini([0, 0]) == 0.0
    # two points with population weights: G = w1 w2 |x1 - x2| / μ
    assert gini([1, 3], [0.25, 0.75]) == pytest.approx(0.25 * 0.75 * 2 / (0.25 + 2.25))
    assert gini(np.array([5.0, 5.0, 5.0, 5.0])) == 0.0
    with pytest.raises(ValueError, match="must be >= 0"):
        gini([1, -1])
    assert gini([1, -1, 2], allow_negative=True) > 0
    with pytest.raises(ValueError, match="weights must be"):
        gini([1, 2], [0, 0])
    with pytest.raises(ValueError, match="match"):
        gini([1, 2], [1])


def test_theil_top_share_lorenz():
    assert theil([2, 2, 2]) == pytest.approx(0.0)
    assert theil([0, 0, 1]) == pytest.approx(math.log(3))
    assert top_share([1] * 9 + [11], 0.1) == pytest.approx(0.55)
    pop, inc = lorenz([1, 1, 2])
    assert pop[-1] == 1 and inc[-1] == pytest.approx(1) and np.all(np.diff(inc) >= 0)


def test_equilibrium_identities_and_threshold():
    for N, I, K in ((1.0, 0.3, 1.0), (2.0, 1.5, 3.0), (1.0, 0.05, 0.2)):  # noqa: E741
        m = TaskModel(N, I, K=K)
        eq = m.equilibrium()
        assert eq["W"] * m.L + eq["R"] * m.K == pytest.approx(eq["Y"], rel=1e-12)
        assert eq["labor_share"] == pytest.approx(N - eq["I_eff"], abs=1e-12)
    m = TaskModel(1.0, 0.95)  # automation possible beyond where it pays: capped at I*
    xs = np.linspace(1e-4, 1 - 1e-4, 20001)
    grid = xs[np.argmax([m.ln_output(x) for x in xs])]
    assert abs(m.threshold() - grid) < 1e-4 and m.equilibrium()["I_eff"] == pytest.approx(
        m.threshold()
    )
    assert m.profitability(m.threshold()) == pytest.approx(0, abs=1e-9)


@pytest.mark.parametrize("I", [0.1, 0.25, 0.38])
def test_wage_derivative_is_displacement_plus_productivity(I):  # noqa: E741
    h = 1e-6
    lw = [math.log(TaskModel(1.0, I + s).equilibrium()["W"]) for s in (h, -h)]
    fd = (lw[0] - lw[1]) / (2 * h)
    d = TaskModel(1.0, I).dlnW_dI()
    assert fd == pytest.approx(d["total"], abs=1e-6)
    assert d["displacement"] == pytest.approx(-1 / (1 - I)) and d["productivity"] > 0


def test_reinstatement_derivative_matches_finite_differences():
    h, N, I = 1e-6, 1.0, 0.3  # noqa: E741
    lw = [math.log(TaskModel(N + s, I).equilibrium()["W"]) for s in (h, -h)]
    dlnY_dN = math.log(math.exp(N)) - 0 + math.log(1 / (N - I)) - math.log(1 / (I - N + 1))
    assert (lw[0] - lw[1]) / (2 * h) == pytest.approx(1 / (N - I) + dlnY_dN, abs=1e-6)


def test_paths_automation_new_tasks_and_royalty():
    p0, p1 = simulate_path(g_N=0.0), simulate_path(g_N=0.02)
    assert (
        np.all(np.diff(p0["labor_share"]) <= 1e-12) and p0["labor_share"][-1] < p0["labor_share"][0]
    )
    assert np.all(np.diff(p0["gini"]) >= -1e-12) and p0["gini"][-1] > p0["gini"][0]
    assert np.ptp(p1["labor_share"]) < 1e-9 and np.ptp(p1["gini"]) < 1e-9
    pr = simulate_path(royalty_rate=0.1)
    assert np.all(pr["gini"] < p0["gini"])
    pc = simulate_path(royalty_rate=0.1, royalty_rule="creators")
    assert np.all(np.isfinite(pc["gini"]))


def test_model_bad_input_and_custom_schedules():
    with pytest.raises(ValueError, match=r"I must lie in \(N - 1, N\)"):
        TaskModel(1.0, 1.0)
    with pytest.raises(ValueError, match="K must be"):
        TaskModel(1.0, 0.5, K=0)
    with pytest.raises(ValueError, match="not strictly decreasing"):
        TaskModel(1.0, 0.5, gamma_L=lambda z: math.exp(-5 * z))
    m = TaskModel(1.0, 0.3, gamma_L=lambda z: math.exp(z))  # the default, numerically
    assert m.equilibrium()["Y"] == pytest.approx(TaskModel(1.0, 0.3).equilibrium()["Y"], rel=1e-9)
    with pytest.raises(ValueError, match="phi_own"):
        household_incomes(TaskModel(1, 0.3).equilibrium(), 1, 1, phi_own=0)


def test_review_edge_cases():
    m = TaskModel(1.0, 0.3, K=0.2)  # I above the profitability threshold I* = 0.147
    with pytest.raises(ValueError, match="not below the profitability threshold"):
        m.dlnW_dI()
    with pytest.raises(ValueError, match="overflows"):
        TaskModel(1e6, 1e6 - 0.5).equilibrium()
    with pytest.raises(ValueError, match="period t = 10"):
        simulate_path(g_N=0.05, g_I=0.02)
    with pytest.raises(ValueError, match="one-dimensional"):
        gini(np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"must be >= 0 \(min -1\)$"):
        theil([1, -1])
