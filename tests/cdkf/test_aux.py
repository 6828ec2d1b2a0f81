"""Auxiliary dynamics and their mean bound (Prop. 6.2)."""

from __future__ import annotations

import pytest
import torch

from icml25.cdkf import RateSchedule, sample_poisson_times
from icml25.cdkf.aux import energy_model, mean_aux_bound, robot_energy_model

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
