"""First-order solvers, the budget projection, the Kalman-Bucy surrogate and filterpy interop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from icml25.cdkf import LinearSDE, SchedulingProblem, Sensor, matern_ssm
from icml25.cdkf.aux import distance_noise, robot_energy_model
from icml25.cdkf.control import ControlledSchedulingProblem
from icml25.cdkf.filter import ContinuousDiscreteKF
from icml25.cdkf.solvers import project_budget

D = torch.float64


def small_problem(K=5, **kw):
    m = matern_ssm(1.5, 1.0, 1.0)
    s1 = Sensor(m.H, torch.tensor([[0.01]], dtype=D), cost=1.0)
    s2 = Sensor(
        m.H,
        lambda xi, t: torch.tensor([[0.09 * math.exp((2 * math.cos(math.pi * t / 8)) ** 2)]]),
        cost=0.2,
    )
    return SchedulingProblem(
        m, [s1, s2], 10.0, K, W=m.H.T @ m.H, budget=6.0, lam_max=2.0, n_steps=40, **kw
    )


def test_project_budget_is_the_euclidean_projection():
    from scipy.optimize import minimize

    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        lam = torch.randn(2, 4, generator=g, dtype=D) * 3
        costs = torch.tensor([1.0, 0.3], dtype=D)
        proj = project_budget(lam, costs, 2.0, 2.5, dt=0.5)
        w = (costs[:, None] * 0.5).expand(2, 4).reshape(-1).numpy()
        target = lam.reshape(-1).numpy()
        ref = minimize(
            lambda z, a=target: 0.5 * ((z - a) ** 2).sum(),
            np.zeros(8),
            jac=lambda z, a=target: z - a,
            bounds=[(0, 2.5)] * 8,
            constraints=[
                {"type": "ineq", "fun": lambda z, w=w: 2.0 - w @ z, "jac": lambda z, w=w: -w}
            ],
            method="SLSQP",
            options={"ftol": 1e-14, "maxiter": 500},
        )
        assert np.allclose(proj.reshape(-1).numpy(), ref.x, atol=1e-6)
        assert float((torch.from_numpy(w) * proj.reshape(-1)).sum()) <= 2.0 + 1e-12
    inside = torch.full((2, 4), 0.1, dtype=D)
    assert torch.equal(project_budget(inside, torch.ones(2, dtype=D), 10.0, 1.0), inside)
    with pytest.raises(ValueError, match="budget"):
        project_budget(inside, torch.ones(2, dtype=D), -1.0, 1.0)


def test_pgd_and_adam_al_agree_with_slsqp_on_a_small_problem():
    prob = small_problem()
    ref = prob.solve("slsqp")
    pg = prob.solve("pgd", progress=False)
    assert pg.info["expected_cost"] <= 6.0 + 1e-9
    assert pg.objective == pytest.approx(ref.objective, rel=0.01)
    al = prob.solve("adam_al", outer=3, inner=60, lr=0.1, progress=False)
    assert al.info["expected_cost"] <= 6.0 + 1e-9  # the budget is projected on at the end
    assert al.objective == pytest.approx(ref.objective, rel=0.02)
    with pytest.raises(ValueError, match="method"):
        prob.solve("newton")


@pytest.mark.slow  # the quick-repro problem with adam_al's defaults (minutes)
def test_adam_al_agrees_with_slsqp_on_the_quick_problem():
    from icml25.cdkf.passby import pass_by_problem

    prob = pass_by_problem()[-1]
    ref = prob.solve()
    al = prob.solve("adam_al", progress=False)
    assert al.objective == pytest.approx(ref.objective, rel=0.02)
    assert al.info["expected_cost"] <= 12.0 + 1e-3


def test_kalman_bucy_surrogate():
    prob = small_problem(surrogate="kalman_bucy")
    zero = torch.zeros(2, 5, dtype=D)
    lyap = small_problem().bound(zero)
    assert torch.allclose(prob.bound(zero), lyap, atol=1e-8)  # no measurements: same ODE
    v = torch.full((2, 5), 0.5, dtype=D)
    # the relaxation treats rate x information as continuous: more optimistic than the bound
    assert bool((prob.bound(v)[:, 0, 0] <= small_problem().bound(v)[:, 0, 0] + 1e-9).all())
    sol = prob.solve()
    assert sol.info["expected_cost"] <= 6.0 + 1e-6
    with pytest.raises(ValueError, match="surrogate"):
        small_problem(surrogate="lqr")


def test_filterpy_equals_our_filter_on_a_regular_grid():
    filterpy = pytest.importorskip("filterpy")
    del filterpy
    from icml25.cdkf.interop import from_filterpy, to_filterpy

    m = matern_ssm(2.5, 0.7, 1.3)
    sensor = Sensor(m.H, torch.tensor([[0.2]], dtype=D))
    dt, n = 0.3, 12
    kf = to_filterpy(m, sensor, dt)
    ours = ContinuousDiscreteKF(m, [sensor])
    g = torch.Generator().manual_seed(1)
    ys = torch.randn(n, 1, generator=g, dtype=D)
    mu, Sigma = m.mu0.clone(), m.Sigma0.clone()
    for i in range(n):
        kf.predict()
        mu, Sigma = ours.predict(mu, Sigma, i * dt, (i + 1) * dt)
        kf.update(ys[i].numpy())
        mu, Sigma = ours.update(mu, Sigma, ys[i], 0, (i + 1) * dt)
        assert np.allclose(kf.x.reshape(-1), mu.numpy(), atol=1e-10, rtol=0)
        assert np.allclose(kf.P, Sigma.numpy(), atol=1e-10, rtol=0)
    back, s2 = from_filterpy(to_filterpy(m, sensor, dt), dt)
    assert torch.allclose(back.A, m.A, atol=1e-9)
    assert torch.allclose(back.Qc, m.Qc, atol=1e-7 * float(m.Qc.abs().max()))
    assert torch.allclose(s2.R, sensor.R)
    with pytest.raises(ValueError, match="dt"):
        to_filterpy(m, sensor, 0.0)
    kf.F = -np.eye(3)
    with pytest.raises(ValueError, match="negative real axis"):
        from_filterpy(kf, dt)
    timevar = LinearSDE(lambda xi, t: m.A, m.Qc, m.mu0, m.Sigma0)
    with pytest.raises(ValueError, match="time-invariant"):
        to_filterpy(timevar, sensor, dt)


def test_distance_noise_and_planar_robot():
    R = distance_noise(0.09, 1.0, 0.0)
    xi = torch.tensor([2.0, 5.0], dtype=D)
    assert float(R(xi, 0.0)) == pytest.approx(0.09 * math.exp(4.0))
    R2 = distance_noise(torch.eye(2, dtype=D), 0.5, [1.0, 1.0], index=slice(0, 2))
    assert torch.allclose(
        R2(torch.tensor([1.0, 3.0, 9.0], dtype=D), 0.0), math.exp(2.0) * torch.eye(2, dtype=D)
    )
    with pytest.raises(ValueError, match="R0"):
        distance_noise(-1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="r must"):
        distance_noise(1.0, -1.0, 0.0)
    with pytest.raises(ValueError, match="xi"):
        R(None, 0.0)
    planar = robot_energy_model([1.0], move_cost=0.5, eta0=3.0, p0=[0.0, 1.0])
    assert planar.names == ("position_0", "position_1", "energy")
    out = planar.f(planar.xi0, torch.tensor([0.6, 0.8], dtype=D), 0.0)
    assert torch.allclose(out, torch.tensor([0.6, 0.8, -0.5], dtype=D))


def test_controlled_problem_adam_al_and_stride_validation():
    m = matern_ssm(0.5, 1.0, 1.0)
    sensors = [Sensor(lambda xi, t: m.H, distance_noise(0.1, 1.0, 0.0), cost=1.0)]
    aux = robot_energy_model([1.0], move_cost=0.5, eta0=2.0, p0=1.5)
    lower = torch.tensor([-math.inf, 0.0], dtype=D)
    kw = dict(aux=aux, aux_lower=lower, lam_max=2.0, n_steps=20)
    with pytest.raises(ValueError, match="constraint_stride"):
        ControlledSchedulingProblem(m, sensors, 4.0, 4, constraint_stride=3, **kw)
    prob = ControlledSchedulingProblem(m, sensors, 4.0, 4, constraint_stride=5, **kw)
    sol = prob.solve_joint("adam_al", outer=3, inner=60, lr=0.1, progress=False)
    assert float(sol.info["aux_path"][:, 1].min()) >= -1e-2  # mean energy kept (AL tolerance)
    still = prob.objective_with(torch.zeros(1, 4, dtype=D), torch.zeros(1, 4, dtype=D))
    assert sol.objective < float(still)
    with pytest.raises(ValueError, match="method"):
        prob.solve_joint("pgd")


def test_information_lower_bound_needs_an_invertible_prior():
    from icml25.cdkf import RateSchedule
    from icml25.cdkf.bound import information_lower_bound

    m = matern_ssm(1.5, 1.0, 1.0)
    singular = LinearSDE(m.A, m.Qc, m.mu0, torch.diag(torch.tensor([1.0, 0.0], dtype=D)))
    s = Sensor(m.H, torch.tensor([[0.1]], dtype=D))
    with pytest.raises(ValueError, match="invertible Sigma0"):
        information_lower_bound(singular, [s], RateSchedule(torch.ones(1, 2, dtype=D), 1.0))


def test_covariance_cap_slack_and_infeasible_status():
    m = matern_ssm(0.5, 1.0, 1.0)
    s = Sensor(m.H, torch.tensor([[0.1]], dtype=D), cost=1.0)
    free = SchedulingProblem(m, [s], 4.0, 4, budget=4.0, lam_max=4.0)
    capped = SchedulingProblem(m, [s], 4.0, 4, budget=4.0, lam_max=4.0, cov_cap=0.3)
    v = torch.full((1, 4), 1.0, dtype=D)
    tr = capped.bound(v)[:, 0, 0]
    assert float(capped.objective(v) - free.objective(v)) > 0 or float(tr.max()) <= 0.3
    # a cap no budget can meet: the solver keeps the slack and says so
    tight = SchedulingProblem(m, [s], 4.0, 4, budget=0.5, lam_max=4.0, cov_cap=0.05)
    sol = tight.solve()
    assert sol.info["status"] == "infeasible" and sol.info["max_slack"] > 0
    # a generous cap changes nothing and is feasible
    loose = SchedulingProblem(m, [s], 4.0, 4, budget=4.0, lam_max=4.0, cov_cap=10.0)
    sl = loose.solve()
    assert sl.info["max_slack"] == 0.0 and sl.info["status"] != "infeasible"
    assert sl.objective == pytest.approx(free.solve().objective, rel=1e-6)
    with pytest.raises(ValueError, match="cov_cap"):
        SchedulingProblem(m, [s], 4.0, 4, cov_cap=-1.0)
