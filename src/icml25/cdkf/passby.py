"""The quick setting "GP-pass-by" (docs/cdkf.md, "Reproduction").

A Matern-3/2 GP (l = 1, s2 = 1) on [0, 10] is observed by a precise, expensive sensor (R = 0.01,
cost 1) and a cheap one carried past the target (``R = 0.09 exp(p(t)^2)``, ``p(t) = 2 cos(pi t /
8)``, cost 0.2: accurate near t = 4). At an expected-cost budget, rates are optimised through the
bound of Proposition 6.1 and turned into deterministic time stamps (Proposition 8.1); uniform and
the best constant rates are the baselines at equal cost.

:func:`solve` does everything no seed changes (the optimisation, the schedules and their exact
covariance paths); :func:`monte_carlo` the Poisson Monte Carlo and the filter calibration of one
seed; :func:`pooled` and :func:`pointwise_excess` read Monte Carlo against the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icml25.cdkf.baselines import greedy_schedule, m_optimized
from icml25.cdkf.evaluate import monte_carlo_covariance, schedule_trace, simulate_and_filter
from icml25.cdkf.ocp import SchedulingProblem, Solution
from icml25.cdkf.schedule import RateSchedule, deterministic_schedule
from icml25.cdkf.ssm import LinearSDE, Sensor, matern_ssm

__all__ = [
    "PassBy",
    "monte_carlo",
    "pass_by_problem",
    "pointwise_excess",
    "pooled",
    "report_baselines",
    "solve",
    "tradeoff",
]

D = torch.float64
T, K, BUDGET, LAM_MAX = 10.0, 20, 12.0, 8.0  # docs/cdkf.md
COSTS = (1.0, 0.2)  # precise, pass-by
METHODS = ("uniform", "best_constant", "optimized")


def pass_by_problem(budget: float = BUDGET):
    """Our quick setting: GP (l = 1, s2 = 1), precise sensor (R 0.01, cost 1) and pass-by
    sensor (R 0.09 exp(p(t)^2), p(t) = 2 cos(pi t / 8), cost 0.2); ``W = H^T H``."""
    m = matern_ssm(1.5, 1.0, 1.0)
    precise = Sensor(m.H, torch.tensor([[0.01]], dtype=D), cost=COSTS[0], name="precise")

    def r2(xi, t):
        return torch.tensor([[0.09 * math.exp((2 * math.cos(math.pi * t / 8)) ** 2)]], dtype=D)

    passby = Sensor(lambda xi, t: m.H, r2, cost=COSTS[1], name="pass-by")
    sensors = [precise, passby]
    W = m.H.T @ m.H
    return m, sensors, W, SchedulingProblem(m, sensors, T, K, W=W, budget=budget, lam_max=LAM_MAX)


@dataclass
class PassBy:
    """The pass-by problem, its solutions and everything about them that no seed changes."""

    m: LinearSDE
    sensors: list[Sensor]
    W: torch.Tensor
    prob: SchedulingProblem
    opt: Solution
    methods: dict[str, RateSchedule]
    bounds: dict[str, float]  # time-averaged bound
    bound_paths: dict[str, torch.Tensor]  # tr(W Sigma-hat) on the RK4 grid
    times: dict[str, list[torch.Tensor]]  # deterministic schedule, one tensor per sensor
    det: dict[str, float]  # time-averaged exact variance of the schedule
    det_paths: dict[str, torch.Tensor]  # tr(W Sigma) of the schedule on the fine grid
    costs: dict[str, float]  # realised cost of the schedule


def solve(maxiter: int, n_fine: int) -> PassBy:
    """Optimise the rates (and the best constant ones) by SLSQP, and evaluate every method's bound
    and deterministic schedule exactly on ``n_fine`` steps."""
    m, sensors, W, prob = pass_by_problem()
    opt = prob.solve(maxiter=maxiter)
    const = prob.solve(constant=True, maxiter=maxiter)
    methods = {
        "uniform": RateSchedule(torch.ones(2, K, dtype=D), T),
        "best_constant": const.rates,
        "optimized": opt.rates,
    }
    bounds = {n: float(prob.objective(r.values)) for n, r in methods.items()}
    bound_paths = {
        n: torch.einsum("ij,tji->t", W, prob.bound(r.values).detach()) for n, r in methods.items()
    }
    times = {n: deterministic_schedule(r) for n, r in methods.items()}
    traces = {n: schedule_trace(m, sensors, times[n], T, n_fine, W) for n in methods}
    costs = {n: sum(s.cost * len(t) for s, t in zip(sensors, times[n])) for n in methods}
    return PassBy(
        m,
        sensors,
        W,
        prob,
        opt,
        methods,
        bounds,
        bound_paths,
        times,
        det={n: tr[1] for n, tr in traces.items()},
        det_paths={n: tr[0] for n, tr in traces.items()},
        costs=costs,
    )


def monte_carlo(
    p: PassBy, seed: int, M: int, n_fine: int, cal_paths: int, cal_fine: int
) -> dict[str, dict]:
    """Poisson Monte Carlo of every method's rates (``M`` paths on ``n_fine`` steps) and the
    filter calibration of the optimised schedule (``cal_paths`` simulated GP paths), one seed."""
    out = {
        name: monte_carlo_covariance(
            p.m, p.sensors, rates, M, n_fine, torch.Generator().manual_seed(seed), p.W
        )
        for name, rates in p.methods.items()
    }
    out["calibration"] = simulate_and_filter(
        p.m,
        p.sensors,
        p.times["optimized"],
        T,
        cal_paths,
        cal_fine,
        torch.Generator().manual_seed(100 + seed),
        p.m.H,
    )
    return out


def pointwise_excess(bound_paths: dict, mcs: dict) -> tuple[float, str]:
    """The largest ``(MC mean - bound) / se`` over the RK4 grid times and the methods of one
    seed's Monte Carlo ``mcs`` (method -> :func:`monte_carlo_covariance` result), and where."""
    worst, where = -math.inf, ""
    for name in METHODS:
        mc = mcs[name]
        fine = mc["mean_path"].numel() - 1
        coarse = bound_paths[name].numel() - 1
        if fine % coarse:
            raise ValueError(f"the MC grid ({fine} steps) does not refine the RK4 grid ({coarse})")
        step = fine // coarse
        excess = mc["mean_path"][::step] - bound_paths[name]
        z = excess / mc["se_path"][::step].clamp_min(1e-15)  # se = 0 at t = 0: both equal Sigma0
        if float(z.max()) > worst:
            worst = float(z.max())
            where = f"{name}, t = {float(mc['grid'][::step][int(z.argmax())]):g}"
    return worst, where


def pooled(mcs: list[dict]) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """Mean path, its se, the time average and its se over every seed's paths (equal M)."""
    n = len(mcs)
    mean = sum(mc["mean_path"] for mc in mcs) / n
    se = torch.sqrt(sum(mc["se_path"] ** 2 for mc in mcs)) / n
    avg = sum(mc["time_avg"] for mc in mcs) / n
    avg_se = math.sqrt(sum(mc["time_avg_se"] ** 2 for mc in mcs)) / n
    return mean, se, avg, avg_se


def report_baselines(
    p: PassBy, m_draws: int, seed: int, n_fine: int
) -> list[tuple[str, list[torch.Tensor], float, float]]:
    """The report-only baselines of docs/cdkf.md on the same budget: greedy (slots of 0.25) and
    M-optimized (the best of ``m_draws`` Poisson draws of the optimised rates), each as
    ``(name, times, time-averaged exact variance, realised cost)``."""
    greedy = greedy_schedule(p.m, p.sensors, T, BUDGET, 0.25, p.W)
    gen = torch.Generator().manual_seed(seed)
    mopt = m_optimized(p.m, p.sensors, p.opt.rates, m_draws, p.W, gen, budget=BUDGET + max(COSTS))
    out = []
    for name, times in (
        ("greedy (slots of 0.25)", greedy),
        ("M-optimized (best of 100 Poisson draws)", mopt),
    ):
        _, avg = schedule_trace(p.m, p.sensors, times, T, n_fine, p.W)
        cost = sum(sn.cost * len(t) for sn, t in zip(p.sensors, times))
        out.append((name, times, avg, cost))
    return out


def tradeoff(maxiter: int, n_fine: int) -> dict[float, dict[str, float]]:
    """Time-averaged exact variance of each method's deterministic schedule at budgets 4, 8, 12
    and 20 (uniform = the equal budget split)."""
    m, sensors, W, _ = pass_by_problem()
    curve = {}
    for B in (4.0, 8.0, 12.0, 20.0):
        _m, _s, _W, p = pass_by_problem(B)
        o, c = p.solve(maxiter=maxiter), p.solve(constant=True, maxiter=maxiter)
        uni = RateSchedule(p.initial_rates(), T)
        curve[B] = {
            k: schedule_trace(m, sensors, deterministic_schedule(rr), T, n_fine, W)[1]
            for k, rr in (("uniform", uni), ("best_constant", c.rates), ("optimized", o.rates))
        }
    return curve
