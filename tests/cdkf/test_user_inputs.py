"""Inputs a new user passes (issue 19's review): each gets the right answer or a clear error."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.cdkf import (
    ContinuousDiscreteKF,
    LinearSDE,
    RateSchedule,
    SchedulingProblem,
    Sensor,
    covariance_bound,
    matern_ssm,
)
from icml25.cdkf.aux import distance_noise, robot_energy_model
from icml25.cdkf.control import ControlledSchedulingProblem

D = torch.float64


def _data(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    times = torch.sort(torch.rand(n, generator=g, dtype=D) * 5).values
    ys = [torch.randn(1, generator=g, dtype=D) for _ in range(n)]
    return times, torch.zeros(n, dtype=torch.long), ys


@pytest.mark.parametrize("nu", [0.5, 1.5, 2.5])
def test_matern_hyperparameter_gradients_match_finite_differences(nu):
    times, ids, ys = _data()

    def ll(ell, var):
        gp = matern_ssm(nu, lengthscale=ell, variance=var)
        kf = ContinuousDiscreteKF(gp, [Sensor(gp.H, torch.tensor([[0.05]], dtype=D))])
        return kf.log_likelihood(times, ids, ys)

    ell = torch.tensor(0.7, dtype=D, requires_grad=True)
    var = torch.tensor(1.3, dtype=D, requires_grad=True)
    ll(ell, var).backward()
    eps = 1e-6
    fd_ell = (ll(0.7 + eps, 1.3) - ll(0.7 - eps, 1.3)) / (2 * eps)
    fd_var = (ll(0.7, 1.3 + eps) - ll(0.7, 1.3 - eps)) / (2 * eps)
    assert float(ell.grad) == pytest.approx(float(fd_ell), rel=1e-6)
    assert float(var.grad) == pytest.approx(float(fd_var), rel=1e-6)


def test_sensor_and_model_inputs():
    gp = matern_ssm(1.5, 1.0, 1.0)
    s = Sensor(gp.H, 0.01)  # a number is a scalar sensor's noise variance
    assert s.R.shape == (1, 1) and float(s.R) == pytest.approx(0.01)
    with pytest.raises(ValueError, match=r"C must be a \(d, n\) tensor.*C\[None\]"):
        Sensor(gp.H[0], torch.tensor([[0.01]], dtype=D))
    with pytest.raises(ValueError, match=r"R must be \(1, 1\) to match C's 1 rows"):
        Sensor(gp.H, 0.1 * torch.eye(2, dtype=D))
    with pytest.raises(ValueError, match="Qc = sigma sigma"):
        LinearSDE(
            -torch.eye(2, dtype=D),
            torch.diag(torch.tensor([1.0, -1.0], dtype=D)),
            torch.zeros(2, dtype=D),
            torch.eye(2, dtype=D),
        )
    with pytest.raises(ValueError, match=r"got -1.0 at \(sensor, interval\) \(0, 1\)"):
        RateSchedule(torch.tensor([[1.0, -1.0]], dtype=D), 1.0)


def test_filter_inputs():
    gp = matern_ssm(1.5, 1.0, 1.0)
    kf = ContinuousDiscreteKF(gp, [Sensor(gp.H, torch.tensor([[0.05]], dtype=D))])
    times, ids, ys = _data(4)
    grid = torch.tensor([1.0, 2.0, 5.0], dtype=D)
    ref = kf.filter(times, ids, ys, grid)
    lists = kf.filter(times.tolist(), ids.tolist(), ys, grid.tolist())  # lists work
    assert torch.equal(ref[0], lists[0])
    with pytest.raises(ValueError, match=r"one observation per event \(4\), got 3"):
        kf.filter(times, ids, ys[:3], grid)
    with pytest.raises(
        ValueError, match=r"gives 1 value\(s\) per measurement, got .* shape \(2,\)"
    ):
        kf.filter(times, ids, [torch.ones(2, dtype=D)] * 4, grid)
    with pytest.raises(ValueError, match="not finite.*drop the event"):
        kf.filter(times, ids, [torch.tensor([math.nan], dtype=D)] * 4, grid)
    with pytest.raises(ValueError, match=r"t_grid must be sorted.*2.0 before 1.0"):
        kf.filter(times, ids, ys, torch.tensor([2.0, 1.0], dtype=D))
    with pytest.raises(ValueError, match="t_grid must be finite"):
        kf.filter(times, ids, ys, torch.tensor([1.0, math.nan], dtype=D))
    with pytest.raises(ValueError, match="t_grid times must be >= 0"):
        kf.filter(times, ids, ys, torch.tensor([-1.0, 1.0], dtype=D))


def test_smoother_takes_the_auxiliary_path():
    """A sensor whose noise depends on xi: smoothing along xi_path equals smoothing with the same
    noise written as a function of time."""
    gp = matern_ssm(1.5, 1.0, 1.0)

    def pos(t):
        return torch.tensor([2.0 - 0.3 * t], dtype=D)

    by_xi = Sensor(gp.H, distance_noise(0.09, 1.0, 0.0))
    by_t = Sensor(
        gp.H, lambda xi, t: torch.tensor([[0.09 * math.exp((2.0 - 0.3 * t) ** 2)]], dtype=D)
    )
    times, ids, ys = _data(6, seed=3)
    grid = torch.tensor([0.5, 2.5, 4.5], dtype=D)
    a = ContinuousDiscreteKF(gp, [by_xi]).smooth(times, ids, ys, grid, xi_path=pos)
    b = ContinuousDiscreteKF(gp, [by_t]).smooth(times, ids, ys, grid)
    assert torch.allclose(a[0], b[0], atol=1e-12) and torch.allclose(a[1], b[1], atol=1e-12)


def _problem(**kw):
    gp = matern_ssm(1.5, 1.0, 1.0)
    sensors = [Sensor(gp.H, torch.tensor([[0.01]], dtype=D), cost=1.0)]
    kw.setdefault("budget", 2.0)
    return SchedulingProblem(gp, sensors, 4.0, 4, **kw)


def test_scheduling_problem_inputs():
    gp = matern_ssm(1.5, 1.0, 1.0)
    v = torch.ones(1, 4, dtype=D)
    with pytest.raises(ValueError, match=r"W must be \(2, 2\)"):
        _problem(W=torch.eye(3, dtype=D))
    with pytest.raises(ValueError, match="W must be positive semi-definite"):
        _problem(W=-torch.eye(2, dtype=D))
    with pytest.raises(ValueError, match="w_lam must be"):
        _problem(w_lam=-1.0)
    with pytest.raises(ValueError, match="n_steps must be a positive multiple of K=4"):
        _problem(n_steps=10)
    with pytest.warns(UserWarning, match="using n_steps = 64"):
        assert _problem(n_steps=8).n_steps == 64  # lam_max = 8 needs h * 8 <= 0.5
    with pytest.raises(ValueError, match=r"x0 must be \(1, 4\)"):
        _problem().solve(x0=torch.ones(2, 4, dtype=D), maxiter=2)
    with pytest.raises(ValueError, match=r"one value per node .*got \(\)"):
        _problem(running_cost=lambda t, P, lam, xi, u: lam.sum()).objective(v)
    sensors = [Sensor(gp.H, torch.tensor([[0.01]], dtype=D))]
    with pytest.raises(ValueError, match="differs from the rates' horizon 4.0"):
        covariance_bound(gp, sensors, RateSchedule(v, 4.0), T=8.0)


def test_controlled_problem_inputs():
    gp = matern_ssm(1.5, 1.0, 1.0)
    sensors = [Sensor(lambda xi, t: gp.H, distance_noise(0.09, 1.0, 0.0), cost=0.2)]
    aux = robot_energy_model([0.2], move_cost=0.1, eta0=10.0, p0=2.0)
    lower = torch.tensor([-math.inf, 0.0], dtype=D)

    def make(**kw):
        kw.setdefault("aux_lower", lower)
        return ControlledSchedulingProblem(gp, sensors, 4.0, 4, aux=aux, budget=2.0, **kw)

    with pytest.raises(ValueError, match=r"aux_lower must be \(2,\).*position, energy"):
        make(aux_lower=torch.tensor([0.0], dtype=D))
    with pytest.raises(ValueError, match="n_controls = 2"):
        make(n_controls=2)
    with pytest.raises(ValueError, match="call solve_joint"):
        make().solve()
    with pytest.raises(ValueError, match=r"u0 must have shape \(1, 4\)"):
        make().solve_joint(u0=torch.zeros(4, dtype=D), maxiter=2)
    bad = make(constraints=[lambda xi, u, t: torch.ones(2, 2, dtype=D)])
    with pytest.raises(ValueError, match=r"scalar or a \(q,\) tensor, got shape \(2, 2\)"):
        bad.path_constraints(torch.ones(1, 4, dtype=D), torch.zeros(1, 4, dtype=D))


def test_second_review_inputs():
    """The second review: a stiff model is refined instead of exploding, and the remaining
    inputs give answers or clear errors."""
    gp = matern_ssm(0.5, 0.03, 1.0)  # |eig(A)| = 33: RK4 at the rates' step (h = 0.1) explodes
    pr = SchedulingProblem(
        gp, [Sensor(gp.H, 0.01, cost=1.0)], T=10.0, K=20, budget=5.0, lam_max=1.0
    )
    assert pr.n_steps == 680  # h |eig(A)| <= 0.5
    assert 0.9 < float(pr.objective(pr.initial_rates())) < 1.0  # stationary variance 1, measured
    with pytest.warns(UserWarning, match="fastest mode"):
        covariance_bound(
            gp, pr.sensors, RateSchedule(torch.ones(1, 20, dtype=D), 10.0), n_steps=100
        )
    g2 = matern_ssm(1.5, 1.0, 1.0)
    kf = ContinuousDiscreteKF(g2, [Sensor(g2.H, 0.01)])
    t, ids = torch.tensor([0.5, 1.0], dtype=D), torch.tensor([0, 0])
    with pytest.raises(
        ValueError, match=r"gives 1 value\(s\) per measurement, got an observation of 2"
    ):
        kf.log_likelihood(t, ids, [torch.zeros(2, dtype=D)] * 2)
    a = kf.log_likelihood(t, ids, [0.1, 0.1])  # plain numbers as observations
    assert torch.allclose(a, kf.log_likelihood(t, ids, [torch.tensor([0.1], dtype=D)] * 2))
    grid = torch.linspace(0, 2, 5, dtype=D)
    assert kf.smooth(t, ids, [0.1, 0.1], grid)[0].shape == (5, 2)
    assert torch.equal(kf.covariance_path([[0.5, 1.0]], grid), kf.covariance_path([t], grid))
    with pytest.raises(ValueError, match="budget must be a finite number"):
        _problem(budget=math.nan)
    with pytest.raises(ValueError, match="lam_max must be a finite number"):
        _problem(lam_max=math.inf)
    with pytest.raises(ValueError, match="T must be a finite number"):
        SchedulingProblem(g2, kf.sensors, math.inf, 4)
    with pytest.raises(ValueError, match="w_eps must be a finite number"):
        _problem(w_eps=math.nan)
    with pytest.raises(ValueError, match="A must be finite"):
        LinearSDE(
            torch.tensor([[math.nan]], dtype=D),
            torch.eye(1, dtype=D),
            torch.zeros(1, dtype=D),
            torch.eye(1, dtype=D),
        )
    with pytest.raises(ValueError, match="running_cost returned a non-finite value"):
        _problem(running_cost=lambda t, P, lam, xi, u: t * math.nan).objective(
            torch.ones(1, 4, dtype=D)
        )
    sensors = [Sensor(lambda xi, t: g2.H, distance_noise(0.09, 1.0, 0.0), cost=0.2)]
    aux = robot_energy_model([0.2], move_cost=0.1, eta0=10.0, p0=2.0)
    with pytest.raises(ValueError, match="aux_lower must not contain NaN"):
        ControlledSchedulingProblem(
            g2, sensors, 4.0, 4, aux=aux, aux_lower=torch.tensor([math.nan, 0.0], dtype=D)
        )
    with pytest.raises(ValueError, match="w_u must be a finite number >= 0"):
        ControlledSchedulingProblem(g2, sensors, 4.0, 4, aux=aux, w_u=-5.0)
