"""Joint rate and control optimisation with a mean-energy constraint (spec §5-§6)."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.cdkf import Sensor, matern_ssm
from icml25.cdkf.aux import robot_energy_model
from icml25.cdkf.control import ControlledSchedulingProblem

D = torch.float64


def robot_problem(eta0=4.0, K=4):
    m = matern_ssm(1.5, 1.0, 1.0)

    def r_far(xi, t):  # noise grows with the robot's distance to the target at 0
        return torch.full((1, 1), 0.09, dtype=D) * torch.exp(xi[0] ** 2)

    sensors = [
        Sensor(m.H, torch.tensor([[0.01]], dtype=D), cost=1.0),
        Sensor(lambda xi, t: m.H, r_far, cost=0.2),
    ]
    aux = robot_energy_model([1.0, 0.2], move_cost=0.5, eta0=eta0, p0=2.0)
    lower = torch.tensor([-math.inf, 0.0], dtype=D)  # mean energy >= 0
    return ControlledSchedulingProblem(
        m,
        sensors,
        6.0,
        K,
        aux=aux,
        aux_lower=lower,
        W=m.H.T @ m.H,
        lam_max=4.0,
        u_bounds=(-1.0, 1.0),
    )


@pytest.mark.slow  # ~25 s of SLSQP
def test_joint_solution_keeps_mean_energy_and_beats_standing_still():
    prob = robot_problem()
    sol = prob.solve_joint(maxiter=30, progress=False)
    energy = sol.info["aux_path"][:, 1]
    # the mean-energy constraint holds on the grid, up to SLSQP's feasibility tolerance
    assert float(energy.min()) >= -1e-4
    still = prob.objective_with(prob.initial_rates() * 0.5, torch.zeros(1, prob.K, dtype=D))
    assert sol.objective < float(still)
    assert float(sol.info["aux_path"][-1, 0]) < 2.0  # the robot moved towards the target


def test_bad_arguments():
    m = matern_ssm(0.5, 1.0, 1.0)
    aux = robot_energy_model([1.0], move_cost=0.5, eta0=1.0, p0=0.0)
    s = Sensor(m.H, torch.eye(1, dtype=D), cost=1.0)
    with pytest.raises(ValueError, match="jump terms"):
        ControlledSchedulingProblem(m, [s, s], 1.0, 2, aux=aux)
    with pytest.raises(ValueError, match="u_bounds"):
        ControlledSchedulingProblem(m, [s], 1.0, 2, aux=aux, u_bounds=(1.0, -1.0))
