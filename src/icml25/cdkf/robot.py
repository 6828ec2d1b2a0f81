"""The full-mode setting "robot with energy" (docs/cdkf.md, "Reproduction", full mode).

A Matern-3/2 GP (l = 1, s2 = 1) on [0, 10] is observed by three sensors: a precise fixed one
(``R = 0.01``, cost 1), one on a 1-D robot whose noise grows with its distance to the target
(``R = 0.09 exp(p^2)``, cost 0.2; ``dp/dt = u``, ``|u| <= 1``, ``p(0) = 2``) and a velocity sensor
(``C = [0, 1]``, ``R = 0.05``, cost 0.5). The robot's battery starts at 15 and drains as
``0.5 u^2`` per unit time plus each measurement's cost; the plan must keep the *mean* energy >= 0.

Methods: optimised rates and robot control (jointly, SLSQP through the bound, deterministic
schedule with ``count="floor"``), the Kalman-Bucy relaxation (the same problem through the
continuous-measurement Riccati ODE), M-optimized (best of 100 Poisson draws of the optimised rates
that fit the energy), uniform (equal constant rates spending the energy left after the baseline
path, periodic times), greedy (one measurement per 0.25-s slot while energy lasts) and random
(Poisson, rate 1 on every sensor, no budget matching). Baseline robot path: to the target at full
speed, then hold.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from icml25.cdkf.aux import distance_noise, robot_energy_model
from icml25.cdkf.baselines import greedy_schedule, kalman_bucy_relaxation, m_optimized
from icml25.cdkf.control import ControlledSchedulingProblem
from icml25.cdkf.evaluate import monte_carlo_covariance, schedule_trace, time_average
from icml25.cdkf.schedule import RateSchedule, deterministic_schedule
from icml25.cdkf.ssm import Sensor, matern_ssm

__all__ = ["RobotSetting", "robot_problem", "evaluate_plan"]

D = torch.float64
T, K, N_STEPS, ETA0, P0, MOVE_COST, LAM_MAX = 10.0, 40, 200, 15.0, 2.0, 0.5, 8.0
COSTS = (1.0, 0.2, 0.5)
NAMES = ("precise", "robot", "velocity")


class RobotSetting:
    """The model, the three sensors and the time-only versions of them for a fixed robot path."""

    def __init__(self) -> None:
        self.gp = matern_ssm(1.5, 1.0, 1.0)
        H = self.gp.H
        self.W = H.T @ H
        self.sensors = [
            Sensor(H, torch.tensor([[0.01]], dtype=D), cost=COSTS[0], name=NAMES[0]),
            Sensor(lambda xi, t: H, distance_noise(0.09, 1.0, 0.0), cost=COSTS[1], name=NAMES[1]),
            Sensor(
                torch.tensor([[0.0, 1.0]], dtype=D),
                torch.tensor([[0.05]], dtype=D),
                cost=COSTS[2],
                name=NAMES[2],
            ),
        ]

    def along(self, controls: Tensor) -> list[Sensor]:
        """Sensors whose robot noise follows the exact position of the given control plan."""
        pos = position_fn(controls)
        H = self.gp.H

        def r_robot(xi, t):
            return torch.tensor([[0.09 * math.exp(pos(t) ** 2)]], dtype=D)

        return [
            self.sensors[0],
            Sensor(H, r_robot, cost=COSTS[1], name=NAMES[1]),
            self.sensors[2],
        ]


def robot_problem(*, surrogate: str = "bound") -> tuple[RobotSetting, ControlledSchedulingProblem]:
    """The robot-with-energy setting and its joint rate-and-control problem (mean energy >= 0 at
    the control-interval ends); ``surrogate="kalman_bucy"`` builds the Kalman-Bucy baseline."""
    setting = RobotSetting()
    aux = robot_energy_model(list(COSTS), move_cost=MOVE_COST, eta0=ETA0, p0=P0)
    prob = ControlledSchedulingProblem(
        setting.gp,
        setting.sensors,
        T,
        K,
        aux=aux,
        aux_lower=torch.tensor([-math.inf, 0.0], dtype=D),  # mean energy >= 0
        W=setting.W,
        lam_max=LAM_MAX,
        n_steps=N_STEPS,
        # the energy only decreases, so its minimum over an interval is at the interval's end
        constraint_stride=N_STEPS // K,
        surrogate=surrogate,
    )
    return setting, prob


def baseline_controls() -> Tensor:
    """Full speed to the target (p = 0) and hold: u = -1 for the first 2 s."""
    edges = torch.arange(K, dtype=D) * (T / K)
    return torch.where(edges < P0 / 1.0 - 1e-12, -1.0, 0.0).reshape(1, K).to(D)


def position_fn(controls: Tensor):
    u = controls.detach().reshape(-1).tolist()
    dt = T / len(u)
    start = [P0]
    for v in u:
        start.append(start[-1] + v * dt)

    def pos(t: float) -> float:
        k = min(int(t / dt), len(u) - 1)
        return start[k] + u[k] * (t - k * dt)

    return pos


def move_energy(controls: Tensor, grid: Tensor) -> Tensor:
    """``int_0^t MOVE_COST u^2`` on the grid (exact for piecewise-constant u)."""
    u2 = controls.detach().reshape(-1) ** 2
    dt = T / u2.numel()
    k = torch.clamp((grid / dt).floor().long(), max=u2.numel() - 1)
    done = torch.cat([torch.zeros(1, dtype=D), (u2 * dt).cumsum(0)])
    return MOVE_COST * (done[k] + u2[k] * (grid - k * dt))


def _det_energy(times: list[Tensor], controls: Tensor, grid: Tensor) -> Tensor:
    spent = move_energy(controls, grid)
    for c, ts in zip(COSTS, times):
        spent = spent + c * (ts.reshape(1, -1) <= grid.reshape(-1, 1)).sum(1).to(D)
    return ETA0 - spent


def _stats(x: Tensor) -> tuple[float, float, float]:
    return float(x.mean()), float(x.std()), float(x.max())


def evaluate_plan(
    setting: RobotSetting,
    controls: Tensor,
    *,
    times: list[Tensor] | None = None,
    rates: RateSchedule | None = None,
    n_fine: int = 1600,
    M: int = 2000,
    generator: torch.Generator | None = None,
) -> dict:
    """Variance and energy statistics of a plan: deterministic ``times`` (exact covariance path)
    or Poisson ``rates`` (Monte Carlo over ``M`` paths). Statistics pool time (and paths):
    variance = ``tr(W Sigma)`` of the mean path over time; energy over time and paths; violation =
    fraction of paths whose energy goes below 0; ``min_mean_energy`` = min over t of the mean."""
    grid = torch.linspace(0, T, n_fine + 1, dtype=D)
    sensors = setting.along(controls)
    if times is not None:
        tr, avg = schedule_trace(setting.gp, sensors, times, T, n_fine, setting.W)
        energy = _det_energy(times, controls, grid).reshape(1, -1)
        counts = [len(t) for t in times]
    else:
        mc = monte_carlo_covariance(
            setting.gp, sensors, rates, M, n_fine, generator, setting.W, costs=list(COSTS)
        )
        tr, avg = mc["mean_path"], mc["time_avg"]
        energy = ETA0 - move_energy(controls, grid).reshape(1, -1) - mc["cost_paths"]
        counts = [float(c) for c in rates.expected_counts()]
    v_mean, v_std, v_max = _stats(tr)
    e_mean, e_std, e_max = _stats(energy)
    return {
        "trace_path": tr,
        "variance": float(avg),
        "variance_std": v_std,
        "variance_max": v_max,
        "variance_time_mean": v_mean,
        "energy_mean": e_mean,
        "energy_std": e_std,
        "energy_max": e_max,
        "energy_path": energy.mean(0),
        "final_energy": float(energy[:, -1].mean()),
        "min_mean_energy": float(energy.mean(0).min()),
        "violation": float((energy.min(1).values < -1e-9).to(D).mean()),
        "counts": counts,
        "time_average_check": float(time_average(tr, T)),
    }


def solve_plans(maxiter: int = 200, progress: bool | None = None) -> dict:
    """Optimise the joint plan through the bound and through the Kalman-Bucy relaxation."""
    setting, prob = robot_problem()
    base = baseline_controls()
    lam0 = torch.full((3, K), (ETA0 - 1.0) / (T * sum(COSTS)), dtype=D)  # feasible start
    opt = prob.solve_joint(maxiter=maxiter, u0=base, x0=lam0, progress=progress)
    kb = kalman_bucy_relaxation(prob, maxiter=maxiter, u0=base, x0=lam0, progress=progress)
    return {"setting": setting, "problem": prob, "optimized": opt, "kalman_bucy": kb}


def run_methods(plans: dict, seeds: list[int], M: int, n_fine: int, m_draws: int = 100) -> dict:
    """Every method's evaluation, per seed where it is random."""
    setting, opt, kb = plans["setting"], plans["optimized"], plans["kalman_bucy"]
    base = baseline_controls()
    out: dict[str, list[dict]] = {}
    u_opt, u_kb = opt.info["controls"], kb.info["controls"]
    det = {
        "optimized": (deterministic_schedule(opt.rates, "floor"), u_opt),
        "kalman_bucy": (deterministic_schedule(kb.rates, "floor"), u_kb),
    }
    left = ETA0 - float(move_energy(base, torch.tensor([T], dtype=D))[0])
    lam_u = left / (T * sum(COSTS))
    uni = RateSchedule(torch.full((3, K), lam_u, dtype=D), T)
    det["uniform"] = (deterministic_schedule(uni, "floor"), base)
    det["greedy"] = (
        greedy_schedule(setting.gp, setting.along(base), T, left, 0.25, setting.W),
        base,
    )
    for name, (times, u) in det.items():
        res = evaluate_plan(setting, u, times=times, n_fine=n_fine)
        out[name] = [res] * len(seeds)  # deterministic: the same for every seed
    left_opt = ETA0 - float(move_energy(u_opt, torch.tensor([T], dtype=D))[0])
    out["m_optimized"], out["random"] = [], []
    for s in seeds:
        g = torch.Generator().manual_seed(1000 + s)
        times = m_optimized(
            setting.gp, setting.along(u_opt), opt.rates, m_draws, setting.W, g, budget=left_opt
        )
        out["m_optimized"].append(evaluate_plan(setting, u_opt, times=times, n_fine=n_fine))
        rnd = RateSchedule(torch.ones(3, K, dtype=D), T)
        out["random"].append(
            evaluate_plan(
                setting,
                base,
                rates=rnd,
                n_fine=n_fine,
                M=M,
                generator=torch.Generator().manual_seed(s),
            )
        )
    return out
