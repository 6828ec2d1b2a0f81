"""Joint rate and control optimisation with a mean-energy constraint (docs/cdkf.md)."""

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


def _small_problem(**kw):
    from icml25.cdkf import SchedulingProblem, Sensor, matern_ssm

    m = matern_ssm(1.5, 1.0, 1.0)
    sensors = [
        Sensor(m.H, torch.tensor([[0.01]], dtype=D), cost=1.0),
        Sensor(torch.tensor([[0.0, 1.0]], dtype=D), torch.tensor([[0.1]], dtype=D), cost=0.3),
    ]
    return SchedulingProblem(m, sensors, 4.0, 8, W=m.H.T @ m.H, budget=4.0, **kw)


def test_running_and_terminal_costs_are_added_exactly():
    base = _small_problem()
    costs = base.costs
    v = torch.rand(2, 8, generator=torch.Generator().manual_seed(0), dtype=D) * 3
    plain = float(base.objective(v))
    run = _small_problem(running_cost=lambda t, P, lam, xi, u: lam @ costs)
    assert float(run.objective(v)) - plain == pytest.approx(float(base.expected_cost(v)), rel=1e-12)
    path = base.bound(v)
    term = _small_problem(w_T=2.5, terminal_cost=lambda P, xi: P[0, 0] ** 2)
    expected = 2.5 * float((base.W @ path[-1]).trace()) + float(path[-1, 0, 0]) ** 2
    assert float(term.objective(v)) - plain == pytest.approx(expected, rel=1e-12)
    # a cost of the covariance itself: int tr(Sigma) dt, trapezoid, against the path
    cov = _small_problem(running_cost=lambda t, P, lam, xi, u: P.diagonal(dim1=-2, dim2=-1).sum(-1))
    tr = path.diagonal(dim1=-2, dim2=-1).sum(-1)
    h = 4.0 / (len(tr) - 1)
    ref = h * (tr.sum() - 0.5 * (tr[0] + tr[-1]))
    assert float(cov.objective(v)) - plain == pytest.approx(float(ref), rel=1e-12)
    # and it changes the optimum: a running cost on the rates spends less than the budget
    sol = _small_problem(running_cost=lambda t, P, lam, xi, u: 0.2 * lam.sum(-1)).solve(maxiter=60)
    assert sol.info["expected_cost"] < 4.0 - 0.1


def test_bad_cost_hooks_are_rejected():
    with pytest.raises(ValueError, match="running_cost must be a callable"):
        _small_problem(running_cost=3.0)
    with pytest.raises(ValueError, match="w_T must be"):
        _small_problem(w_T=-1.0)
    v = torch.ones(2, 8, dtype=D)
    with pytest.raises(ValueError, match=r"shape \(64,\), got \(3,\)"):
        _small_problem(running_cost=lambda t, P, lam, xi, u: torch.ones(3)).objective(v)
    with pytest.raises(ValueError, match="terminal_cost must return a scalar"):
        _small_problem(terminal_cost=lambda P, xi: P).objective(v)


def test_general_path_constraint_keeps_the_robot_out():
    """h(xi, u, t) = p - 1 >= 0: the robot may not come closer than 1 to the target at 0, which
    the unconstrained plan does (the sensor is better there)."""
    import math

    from icml25.cdkf import Sensor, matern_ssm
    from icml25.cdkf.aux import distance_noise, robot_energy_model
    from icml25.cdkf.control import ControlledSchedulingProblem

    m = matern_ssm(1.5, 1.0, 1.0)
    sensors = [Sensor(lambda xi, t: m.H, distance_noise(0.09, 1.0, 0.0), cost=0.2)]
    aux = robot_energy_model([0.2], move_cost=0.1, eta0=20.0, p0=2.0)

    def make(**kw):
        return ControlledSchedulingProblem(
            m,
            sensors,
            4.0,
            8,
            aux=aux,
            W=m.H.T @ m.H,
            budget=2.0,
            aux_lower=torch.tensor([-math.inf, 0.0], dtype=D),
            **kw,
        )

    free = make().solve_joint(maxiter=80)
    assert float(free.info["aux_path"][:, 0].min()) < 0.8  # goes close to the target
    fenced = make(constraints=[lambda xi, u, t: xi[0] - 1.0]).solve_joint(maxiter=80)
    assert float(fenced.info["aux_path"][:, 0].min()) >= 1.0 - 1e-6
    assert fenced.info["min_path_constraint"] >= -1e-6
    assert fenced.objective > free.objective  # the fence costs accuracy
    with pytest.raises(ValueError, match="constraints must be callables"):
        make(constraints=[1.0])
    al = make(constraints=lambda xi, u, t: xi[0] - 1.0).solve_joint("adam_al", outer=3, inner=60)
    assert float(al.info["aux_path"][:, 0].min()) >= 1.0 - 0.05


@pytest.mark.gpu
def test_cuda_inputs_give_cuda_outputs():
    """Rates, controls and models on the GPU: the bound, the objectives and the schedules come
    back on it (the RK4 kernel itself runs on the CPU: the matrices are 2 x 2)."""
    from icml25.cdkf import ContinuousDiscreteKF, RateSchedule, covariance_bound
    from icml25.cdkf.aux import distance_noise
    from icml25.cdkf.schedule import deterministic_schedule

    dev = torch.device("cuda")
    prob = _small_problem(running_cost=lambda t, P, lam, xi, u: lam.sum(-1), w_T=1.0)
    v = torch.ones(2, 8, dtype=D, device=dev, requires_grad=True)
    obj = prob.objective(v)
    obj.backward()
    assert obj.device.type == "cuda" and v.grad.device.type == "cuda"
    assert deterministic_schedule(RateSchedule(v.detach(), 4.0))[0].device.type == "cuda"
    m = matern_ssm(1.5, 1.0, 1.0)
    path = covariance_bound(
        m,
        [Sensor(m.H, torch.tensor([[0.1]], dtype=D))],
        RateSchedule(torch.ones(1, 4, dtype=D, device=dev), 2.0),
    )
    assert path.device.type == "cuda"
    sensors = [Sensor(lambda xi, t: m.H.to(xi), distance_noise(0.09, 1.0, 0.0), cost=0.2)]
    aux = robot_energy_model([0.2], move_cost=0.1, eta0=20.0, p0=2.0)
    cp = ControlledSchedulingProblem(
        m, sensors, 4.0, 8, aux=aux, budget=2.0, aux_lower=torch.tensor([-math.inf, 0.0], dtype=D)
    )
    u = torch.zeros(1, 8, dtype=D, device=dev)
    assert cp.objective_with(v.detach(), u).device.type == "cuda"
    assert cp.aux_constraints(v.detach(), u).device.type == "cuda"
    md = matern_ssm(1.5, 1.0, 1.0)
    kf = ContinuousDiscreteKF(md, [Sensor(md.H, torch.tensor([[0.1]], dtype=D))])
    times = torch.tensor([0.5, 1.0], dtype=D, device=dev)
    mu, _ = kf.filter(
        times,
        torch.zeros(2, dtype=torch.long, device=dev),
        [torch.ones(1, dtype=D, device=dev)] * 2,
        times,
    )
    assert torch.isfinite(mu).all()
