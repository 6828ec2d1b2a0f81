"""The reproduction's figures (docs/distinguishability.md, "Reproduction"): Part A's learning
curves, teacher errors and reward scatter, Part B's lottery accuracy and utilities, Part C's
return curves."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from icml25.distinguishability.experiment import affine_align
from icml25.report import pyplot

__all__ = [
    "plot_curves",
    "plot_lottery",
    "plot_returns",
    "plot_scatter",
    "plot_teacher_error",
    "plot_utilities",
]


def plot_curves(
    budgets: tuple[int, ...],
    methods: tuple[str, ...],
    res: dict,
    teachers: tuple[str, ...],
    main: tuple[str, str],
) -> Any:
    """Held-out Pearson against the number of queries (mean, error bars sd over seeds), one panel
    per teacher; the ``main`` methods drawn thicker."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, tname in zip(axes, teachers):
        for method in methods:
            arr = np.array(
                [[x["curve"][b]["pearson"] for b in budgets] for x in res[(tname, method)]]
            )
            ax.errorbar(
                budgets,
                arr.mean(0),
                yerr=arr.std(0),
                label=method,
                capsize=3,
                lw=2 if method in main else 1,
            )
        ax.set_title(f"{tname} teacher")
        ax.set_xlabel("queries")
    axes[0].set_ylabel("held-out Pearson r(R_hat, R)")
    axes[0].legend(fontsize=7)
    return fig


def plot_teacher_error(methods: tuple[str, ...], res: dict, teachers: tuple[str, ...]) -> Any:
    """The teacher's error rate on its own answers per method, one bar per teacher."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = np.arange(len(methods))
    for i, tname in enumerate(teachers):
        vals = [np.mean([y["teacher_error"] for y in res[(tname, m)]]) for m in methods]
        ax.bar(x + 0.4 * i, vals, width=0.4, label=f"{tname} teacher")
    ax.set_xticks(x + 0.2, methods, rotation=20, fontsize=7)
    ax.set_ylabel("teacher error rate on its answers")
    ax.legend()
    return fig


def plot_scatter(first: dict, budget: int, main: tuple[str, str]) -> Any:
    """Learned vs true held-out returns of the first seed's Boltzmann-teacher ensembles of the
    ``main`` methods, titled with their held-out Pearson at ``budget``."""
    held = first["held"]
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    true = held.returns()
    for ax, method in zip(axes, main):
        with torch.no_grad():
            pred = first["ensembles"][method].segment_returns(held.obs, held.act).mean(0)
        pearson = first["curves"][("boltzmann", method)]["curve"][budget]["pearson"]
        ax.scatter(true.numpy(), affine_align(pred, true).numpy(), s=4)
        ax.set_title(f"{method}: r = {pearson:.3f}")
        ax.set_xlabel("true return")
    axes[0].set_ylabel("learned return (affinely aligned)")
    return fig


def plot_lottery(seeds: list[int], acc_p: list[float], acc_d: list[float]) -> Any:
    """Balanced accuracy of the expected-utility choices per seed, PCQ beside DQ."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(seeds) + 2), 3.5))
    x = np.arange(len(acc_p))
    ax.bar(x - 0.2, acc_p, 0.4, label="PCQ")
    ax.bar(x + 0.2, acc_d, 0.4, label="DQ")
    ax.set_xticks(x, [f"seed {s}" for s in seeds], fontsize=7)
    ax.set_ylim(0.5, 1.0)
    ax.set_ylabel("balanced accuracy of EU choices")
    ax.legend()
    return fig


def plot_utilities(lot: dict) -> Any:
    """One seed's true utilities beside the PCQ and DQ fits (affinely aligned)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    u = lot["u_true"]
    ax.plot(u.numpy(), "k-", label="true u")
    ax.plot(affine_align(lot["u_pcq"], u).numpy(), "o--", label="PCQ fit")
    ax.plot(affine_align(lot["u_dq"], u).numpy(), "s--", label="DQ fit")
    ax.set_xlabel("item")
    ax.set_ylabel("utility (affinely aligned)")
    ax.legend()
    return fig


def plot_returns(steps_axis: list, curves: dict[str, list]) -> Any:
    """Part C: true return of the deterministic policy against environment steps per method
    (mean, band ± sd over seeds)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for k, v in curves.items():
        arr = np.array(v)
        ax.plot(steps_axis, arr.mean(0), label=k)
        ax.fill_between(steps_axis, arr.mean(0) - arr.std(0), arr.mean(0) + arr.std(0), alpha=0.2)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("true return (10 episodes)")
    ax.legend()
    ax.set_title("Pendulum-v1: PEBBLE with PCQ vs DQ feedback")
    return fig
