"""The reproduction's figures (docs/cdkf.md, "Reproduction"): the optimised rates with their
deterministic time stamps, the bound against Monte Carlo, the budget trade-off, and the robot
setting's plan, energy and variance."""

from __future__ import annotations

from typing import Any

import torch

from icml25.cdkf import robot
from icml25.cdkf.passby import METHODS, PassBy, T, pooled
from icml25.cdkf.schedule import RateSchedule, deterministic_schedule
from icml25.report import pyplot

__all__ = ["plot_bound_vs_mc", "plot_rates", "plot_robot", "plot_tradeoff"]


def plot_rates(rates: RateSchedule, times: list[torch.Tensor]) -> Any:
    """The optimised rates of the two pass-by sensors as stairs, their time stamps as ticks."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    edges = torch.linspace(0, rates.T, rates.K + 1)
    for s, name in enumerate(("precise sensor", "pass-by sensor")):
        line = ax.stairs(rates.values[s].detach().numpy(), edges.numpy(), label=name)
        ax.plot(
            times[s].numpy(),
            [-0.3 - 0.3 * s] * len(times[s]),
            "|",
            color=line.get_edgecolor(),
            ms=8,
        )
    ax.set_xlabel("t")
    ax.set_ylabel("rate (1/s); ticks: schedule")
    ax.legend()
    ax.set_title("optimised measurement rates and deterministic time stamps")
    return fig


def plot_bound_vs_mc(p: PassBy, per_seed: list[dict]) -> Any:
    """Per method: the bound on the RK4 grid, the Poisson Monte Carlo pooled over seeds (mean ± 2
    se) and the deterministic schedule's exact variance."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    grid = torch.linspace(0, T, p.prob.n_steps + 1)
    for name in METHODS:
        line = ax.plot(grid, p.bound_paths[name], label=f"{name}: bound")[0]
        mean, se, _, _ = pooled([s[name] for s in per_seed])
        fine = per_seed[0][name]["grid"]
        color = line.get_color()
        ax.plot(fine, mean, ":", color=color, label=f"{name}: Poisson MC")
        ax.fill_between(fine, mean - 2 * se, mean + 2 * se, color=color, alpha=0.2)
        ax.plot(fine, p.det_paths[name], "--", color=color, lw=0.8, label=f"{name}: schedule")
    ax.set_xlabel("t")
    ax.set_ylabel("posterior variance of f (MC: mean ± 2 se, seeds pooled)")
    ax.legend(fontsize=6)
    return fig


def plot_tradeoff(curve: dict[float, dict[str, float]]) -> Any:
    """Each method's time-averaged variance against the expected-cost budget."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    budgets = sorted(curve)
    for name in METHODS:
        ax.plot(budgets, [curve[b][name] for b in budgets], "o-", label=name)
    ax.set_xlabel("expected-cost budget B")
    ax.set_ylabel("time-averaged variance of f (schedule)")
    ax.set_title("GP pass-by: budget trade-off")
    ax.legend()
    return fig


def plot_robot(plans: dict, res: dict, methods: tuple[str, ...]) -> Any:
    """The robot setting: the optimised rates and schedule, the robot's position and the mean
    energy of each plan, and the variance of f per method (first seed)."""
    plt = pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(7.5, 8.5), sharex=True)
    opt = plans["optimized"]
    edges = torch.linspace(0, robot.T, robot.K + 1).numpy()
    times = deterministic_schedule(opt.rates, "floor")
    for s, name in enumerate(robot.NAMES):
        line = axes[0].stairs(opt.rates.values[s].detach().numpy(), edges, label=name)
        ticks = [-0.3 - 0.3 * s] * len(times[s])
        axes[0].plot(times[s].numpy(), ticks, "|", color=line.get_edgecolor())
    axes[0].set_ylabel("optimised rate (1/s)")
    axes[0].legend(fontsize=7)
    grid = torch.linspace(0, robot.T, 401, dtype=torch.float64)
    for name, u in (
        ("optimized", opt.info["controls"]),
        ("baseline path", robot.baseline_controls()),
    ):
        pos = robot.position_fn(u)
        axes[1].plot(grid.numpy(), [pos(float(t)) for t in grid], label=f"position, {name}")
    ax2 = axes[1].twinx()
    for name in ("optimized", "uniform", "greedy", "random"):
        e = res[name][0]["energy_path"]
        ax2.plot(torch.linspace(0, robot.T, e.numel()).numpy(), e.numpy(), ":", label=name)
    ax2.axhline(0.0, color="k", lw=0.5)
    ax2.set_ylabel("mean energy (dotted)")
    ax2.legend(fontsize=6, loc="upper right")
    axes[1].set_ylabel("robot position")
    axes[1].legend(fontsize=6, loc="lower right")
    for name in methods:
        tr = res[name][0]["trace_path"]
        axes[2].plot(torch.linspace(0, robot.T, tr.numel()).numpy(), tr.numpy(), label=name, lw=0.9)
    axes[2].set_ylabel("variance of f")
    axes[2].set_xlabel("t")
    axes[2].legend(fontsize=6, ncol=3)
    fig.suptitle("robot with energy")
    return fig
