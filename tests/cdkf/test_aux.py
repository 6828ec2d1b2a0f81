"""Auxiliary dynamics and their mean bound (Prop. 6.2)."""

from __future__ import annotations

import pytest
import torch

from icml25.cdkf import RateSchedule
from icml25.cdkf.aux import energy_model, mean_aux_bound, robot_energy_model
from icml25.cdkf.schedule import sample_poisson_times

D = torch.float64


def test_energy_with_constant_costs_is_exact_in_the_mean():
    rates = RateSchedule(torch.tensor([[1.0, 2.0], [0.5, 0.0]], dtype=D), 4.0)
    controls = torch.tensor([[0.5, -1.0]], dtype=D)
    aux = energy_model([1.0, 0.2], move_cost=0.5, eta0=15.0)
    path = mean_aux_bound(aux, rates, controls, n_steps=8)
    expected = 15.0 - 0.5 * (0.25 * 2 + 1.0 * 2) - (1.0 * 6.0 + 0.2 * 1.0)
    assert float(path[-1, 0]) == pytest.approx(expected, abs=1e-12)
    g = torch.Generator().manual_seed(0)
    spent = [
        sum(c * len(t) for c, t in zip((1.0, 0.2), sample_poisson_times(rates, g)))
        for _ in range(4000)
    ]
    mc = 15.0 - 1.25 - sum(spent) / len(spent)
    assert abs(mc - float(path[-1, 0])) < 0.1  # the mean of the jump process


def test_robot_position_and_gradients():
    rates = RateSchedule(torch.ones(1, 4, dtype=D), 2.0)
    u = torch.tensor([[1.0, 1.0, -0.5, 0.0]], dtype=D, requires_grad=True)
    aux = robot_energy_model([0.5], move_cost=0.5, eta0=10.0, p0=2.0)
    path = mean_aux_bound(aux, rates, u, n_steps=8)
    assert path[-1, 0].item() == pytest.approx(2.0 + 0.5 + 0.5 - 0.25, abs=1e-12)
    path[-1, 1].backward()
    assert torch.isfinite(u.grad).all() and float(u.grad[0, 0]) < 0  # moving costs energy
    with pytest.raises(ValueError, match="jump terms"):
        mean_aux_bound(aux, RateSchedule(torch.ones(2, 4, dtype=D), 2.0), u, 8)


def _as_general(aux):
    import dataclasses

    return dataclasses.replace(aux, input_only=False)


@pytest.mark.parametrize("d", [1, 2])
def test_input_only_path_and_closed_form_jacobian_equal_rk4_and_autograd(d):
    from icml25.cdkf.aux import mean_aux_jacobian

    g = torch.Generator().manual_seed(d)
    K, S, n_steps = 5, 3, 20
    values = torch.rand(S, K, generator=g, dtype=D) * 2
    u = torch.rand(d, K, generator=g, dtype=D) * 2 - 1
    aux = robot_energy_model(
        [1.0, 0.2, 0.5], move_cost=0.5, eta0=15.0, p0=[2.0] * d if d > 1 else 2.0
    )
    rates = RateSchedule(values, 4.0)
    fast = mean_aux_bound(aux, rates, u, n_steps)
    slow = mean_aux_bound(_as_general(aux), rates, u, n_steps)
    assert (fast - slow).abs().max() < 1e-12
    J = mean_aux_jacobian(aux, rates, u, n_steps)

    def flat(z):
        v, c = z[: S * K].reshape(S, K), z[S * K :].reshape(d, K)
        return mean_aux_bound(_as_general(aux), RateSchedule(v, 4.0), c, n_steps)

    ref = torch.autograd.functional.jacobian(flat, torch.cat([values.reshape(-1), u.reshape(-1)]))
    assert J.shape == ref.shape == (n_steps + 1, d + 1, S * K + d * K)
    assert (J - ref).abs().max() < 1e-12
    assert J.abs().max() > 0.1


def test_input_only_declaration_is_checked():
    from icml25.cdkf.aux import AuxiliaryModel

    aux = AuxiliaryModel(
        lambda xi, u, t: -xi, [lambda xi, u, t: -xi], torch.ones(1, dtype=D), input_only=True
    )
    with pytest.raises(ValueError, match=r"input_only=True\) but"):
        mean_aux_bound(aux, RateSchedule(torch.ones(1, 2, dtype=D), 1.0), None, 4)


def test_joint_constraint_jacobian_is_closed_form():
    """The closed-form constraint Jacobian of the energy model equals autograd's."""
    import math

    from icml25.cdkf import Sensor, matern_ssm
    from icml25.cdkf.control import ControlledSchedulingProblem

    m = matern_ssm(1.5, 1.0, 1.0)
    sensors = [
        Sensor(m.H, torch.tensor([[0.01]], dtype=D), cost=1.0),
        Sensor(m.H, torch.tensor([[0.1]], dtype=D), cost=0.2),
    ]
    aux = robot_energy_model([1.0, 0.2], move_cost=0.5, eta0=6.0, p0=2.0)
    prob = ControlledSchedulingProblem(
        m, sensors, 4.0, 4, aux=aux, aux_lower=torch.tensor([-math.inf, 0.0], dtype=D)
    )
    v, u = torch.ones(2, 4, dtype=D), torch.full((1, 4), 0.5, dtype=D)
    z = torch.cat([v.reshape(-1), u.reshape(-1)])
    J = prob.aux_constraints_jacobian(v, u)
    ref = torch.autograd.functional.jacobian(
        lambda z: prob.aux_constraints(z[:8].reshape(2, 4), z[8:].reshape(1, 4)), z
    )
    assert (J - ref).abs().max() < 1e-12
