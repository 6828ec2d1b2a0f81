"""Scheduling baselines of docs/cdkf.md."""

from __future__ import annotations

import pytest
import torch

from icml25.cdkf.baselines import greedy_schedule, m_optimized, uniform_periodic, uniform_rates
from icml25.cdkf.evaluate import schedule_trace
from icml25.cdkf.passby import pass_by_problem

D = torch.float64


def test_uniform_rates_spend_the_budget_and_periodic_times():
    _, sensors, _, _ = pass_by_problem()
    rates = uniform_rates(sensors, 10.0, 20, 12.0)
    cost = sum(s.cost * float(n) for s, n in zip(sensors, rates.expected_counts()))
    assert cost == pytest.approx(12.0)
    times = uniform_periodic([4, 0], 8.0)
    torch.testing.assert_close(times[0], torch.tensor([1.0, 3.0, 5.0, 7.0], dtype=D))
    assert times[1].numel() == 0
    with pytest.raises(ValueError, match="positive cost"):
        uniform_rates([type(sensors[0])(sensors[0].C, sensors[0].R, cost=0.0)], 1.0, 2, 1.0)


def test_greedy_respects_the_budget_and_helps():
    m, sensors, W, _ = pass_by_problem()
    times = greedy_schedule(m, sensors, 10.0, 12.0, 0.25, W)
    cost = sum(s.cost * len(t) for s, t in zip(sensors, times))
    assert cost <= 12.0 + 1e-9
    _, none = schedule_trace(m, sensors, [torch.zeros(0, dtype=D)] * 2, 10.0, 400, W)
    _, greedy = schedule_trace(m, sensors, times, 10.0, 400, W)
    assert greedy < none
    with pytest.raises(ValueError, match="slot"):
        greedy_schedule(m, sensors, 10.0, 12.0, 0.0, W)


def test_m_optimized_keeps_the_best_realisation_within_budget():
    m, sensors, W, prob = pass_by_problem()
    rates = uniform_rates(sensors, 10.0, 20, 12.0)
    best = m_optimized(
        m, sensors, rates, 10, W, torch.Generator().manual_seed(0), n_grid=200, budget=14.0
    )
    assert sum(s.cost * len(t) for s, t in zip(sensors, best)) <= 14.0 + 1e-9
    with pytest.raises(ValueError, match="no realisation"):
        m_optimized(m, sensors, rates, 3, W, torch.Generator().manual_seed(0), budget=0.0)
