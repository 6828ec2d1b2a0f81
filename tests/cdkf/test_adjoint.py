"""The fast bound (numpy RK4 + discrete adjoint) against autograd through the torch RK4 loop."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.cdkf import LinearSDE, RateSchedule, Sensor, covariance_bound, matern_ssm
from icml25.cdkf import bound as bound_mod
from icml25.cdkf.aux import distance_noise, robot_energy_model
from icml25.cdkf.control import ControlledSchedulingProblem
from icml25.cdkf.passby import pass_by_problem

D = torch.float64


def _grads(path_fn, leaves, W):
    path = path_fn()
    obj = torch.einsum("ij,tji->t", W, path).sum() + (path[-1] @ path[-1]).trace()
    return path.detach(), torch.autograd.grad(obj, leaves)


def _compare(sde, sensors, values, leaves, xi_path=None, n_steps=None, tol=1e-10, sym=()):
    """``sym``: indices of symmetric-matrix leaves (Sigma0), whose gradient is defined up to its
    antisymmetric part: the torch loop's extension to non-symmetric matrices differs from ours."""
    rates = RateSchedule(values, 4.0)
    lam_max = float(values.detach().max())
    n_steps = bound_mod.stable_steps(4.0, rates.K, lam_max, n_steps or 5 * rates.K)
    h = 4.0 / n_steps
    W = torch.eye(sde.n, dtype=values.dtype)
    fast = _grads(
        lambda: covariance_bound(sde, sensors, rates, n_steps=n_steps, xi_path=xi_path), leaves, W
    )
    slow = _grads(
        lambda: bound_mod._covariance_bound_torch(sde, sensors, rates, h, n_steps, xi_path),
        leaves,
        W,
    )
    assert (fast[0] - slow[0]).abs().max() < tol
    for i, (a, b) in enumerate(zip(fast[1], slow[1])):
        assert a.shape == b.shape
        if i in sym:
            a, b = 0.5 * (a + a.mT), 0.5 * (b + b.mT)
        assert (a - b).abs().max() <= tol * max(1.0, float(b.abs().max()))
    return fast


def test_rate_gradient_equals_autograd_time_varying_sensor():
    _, _, _, prob = pass_by_problem()
    g = torch.Generator().manual_seed(0)
    values = prob.initial_rates() * (0.5 + torch.rand(prob.S, prob.K, generator=g, dtype=D))
    values.requires_grad_(True)
    rates = RateSchedule(values, prob.T)
    h = prob.T / prob.n_steps
    W = prob.W
    fast = _grads(
        lambda: covariance_bound(prob.sde, prob.sensors, rates, n_steps=prob.n_steps), [values], W
    )
    slow = _grads(
        lambda: bound_mod._covariance_bound_torch(
            prob.sde, prob.sensors, rates, h, prob.n_steps, None
        ),
        [values],
        W,
    )
    assert (fast[0] - slow[0]).abs().max() < 1e-12
    assert (fast[1][0] - slow[1][0]).abs().max() < 1e-12
    assert fast[1][0].abs().max() > 1e-3  # a real gradient, not zeros on both sides


def test_gradients_in_every_matrix_two_dimensional_sensors():
    """Time-varying A and Qc built from a parameter, 2-output sensors whose C and R depend on t
    and on xi: gradients in the rates, the parameters, C, R and Sigma0 all match autograd."""
    theta = torch.tensor([0.7, 0.3], dtype=D, requires_grad=True)
    c_par = torch.tensor([[1.0, 0.2, 0.0], [0.0, 1.0, 0.5]], dtype=D, requires_grad=True)
    r_par = torch.tensor(0.4, dtype=D, requires_grad=True)
    S0 = torch.tensor([[1.0, 0.2, 0.0], [0.2, 0.8, 0.1], [0.0, 0.1, 0.5]], dtype=D)
    S0.requires_grad_(True)
    base = torch.tensor([[-1.0, 1.0, 0.0], [0.0, -0.5, 1.0], [0.0, 0.0, -2.0]], dtype=D)
    sde = LinearSDE(
        lambda xi, t: base * (1 + theta[0] * t / 4),
        lambda xi, t: torch.diag(
            torch.stack([theta[1], 0.2 + 0 * theta[1], 1 + 0.1 * t * theta[1]])
        ),
        torch.zeros(3, dtype=D),
        S0,
    )

    def R2(xi, t):
        return torch.diag(torch.stack([r_par * (1 + 0.1 * t), 0.3 + xi[0] ** 2]))

    sensors = [
        Sensor(lambda xi, t: c_par * (1 + 0.05 * t), R2),
        Sensor(
            torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 0.0]], dtype=D),
            torch.tensor([[0.2, 0.05], [0.05, 0.3]], dtype=D),
        ),
    ]
    values = torch.tensor([[1.0, 3.0, 0.5, 2.0], [0.2, 1.5, 4.0, 1.0]], dtype=D)
    values.requires_grad_(True)

    def xi_path(t):
        return torch.tensor([0.5 * t], dtype=D)

    _compare(sde, sensors, values, [values, theta, c_par, r_par, S0], xi_path=xi_path, sym=(4,))


def test_constant_model_and_float32():
    m = matern_ssm(2.5, 0.8, 1.0)
    sensors = [
        Sensor(m.H, torch.tensor([[0.05]], dtype=D)),
        Sensor(torch.tensor([[0.0, 1.0, 0.0]], dtype=D), torch.tensor([[0.3]], dtype=D)),
    ]
    v = torch.tensor([[2.0, 0.0, 5.0], [1.0, 1.0, 0.0]], dtype=D, requires_grad=True)
    _compare(m, sensors, v, [v])
    v32 = v.detach().float().requires_grad_(True)
    path = covariance_bound(m, sensors, RateSchedule(v32, 4.0), n_steps=42)
    assert path.dtype == torch.float32
    ref = covariance_bound(m, sensors, RateSchedule(v.detach(), 4.0), n_steps=42)
    assert (path.double() - ref).abs().max() < 1e-5
    path.sum().backward()
    assert v32.grad.dtype == torch.float32 and torch.isfinite(v32.grad).all()


def test_sensors_of_different_sizes_use_the_torch_loop():
    m = matern_ssm(1.5, 1.0, 1.0)
    sensors = [
        Sensor(m.H, torch.tensor([[0.05]], dtype=D)),
        Sensor(torch.eye(2, dtype=D), 0.2 * torch.eye(2, dtype=D)),
    ]
    assert bound_mod.stage_matrices(m, sensors, 0.1, 10) is None
    v = torch.ones(2, 2, dtype=D, requires_grad=True)
    path = covariance_bound(m, sensors, RateSchedule(v, 1.0), n_steps=10)
    # equals the same problem with the 2-D sensor split into two independent scalar sensors only
    # approximately, so compare with the torch loop directly
    ref = bound_mod._covariance_bound_torch(m, sensors, RateSchedule(v, 1.0), 0.1, 10, None)
    assert torch.equal(path, ref)


def test_joint_problem_gradient_in_controls_equals_autograd(monkeypatch):
    """The robot problem: the bound depends on the control through xi (distance noise)."""
    m = matern_ssm(1.5, 1.0, 1.0)
    sensors = [
        Sensor(m.H, torch.tensor([[0.01]], dtype=D), cost=1.0),
        Sensor(lambda xi, t: m.H, distance_noise(0.09, 1.0, 0.0), cost=0.2),
    ]
    aux = robot_energy_model([1.0, 0.2], move_cost=0.5, eta0=10.0, p0=2.0)
    prob = ControlledSchedulingProblem(
        m, sensors, 5.0, 10, aux=aux, budget=6.0, aux_lower=torch.tensor([-math.inf, 0.0], dtype=D)
    )
    g = torch.Generator().manual_seed(1)
    v = (0.5 + torch.rand(2, 10, generator=g, dtype=D)).requires_grad_(True)
    u = (torch.rand(1, 10, generator=g, dtype=D) * 2 - 1).requires_grad_(True)
    fast = torch.autograd.grad(prob.objective_with(v, u), [v, u])
    monkeypatch.setattr(bound_mod, "stage_matrices", lambda *a, **k: None)  # force the torch loop
    slow = torch.autograd.grad(prob.objective_with(v, u), [v, u])
    for a, b in zip(fast, slow):
        assert (a - b).abs().max() < 1e-11
    assert fast[1].abs().max() > 1e-4


@pytest.mark.parametrize("device", ["cpu"])
def test_result_follows_the_rates_device(device):
    m = matern_ssm(1.5, 1.0, 1.0)
    v = torch.ones(1, 2, dtype=D, device=device)
    path = covariance_bound(m, [Sensor(m.H, torch.tensor([[0.1]], dtype=D))], RateSchedule(v, 1.0))
    assert path.device.type == device
