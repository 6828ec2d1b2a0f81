"""The interpretation check's figures (docs/future_of_work.md, "Reproduction"): payouts by rule,
the payouts' Lorenz curves and the task model's labour-share and Gini paths."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.future_of_work.inequality import lorenz
from icml25.report import pyplot

__all__ = ["plot_lorenz", "plot_paths", "plot_payouts"]


def plot_payouts(runs: list[dict], groups: list[str], rules: tuple[str, ...]) -> Any:
    """Each holder's payout under each rule, % of the pool (mean over seeds)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    w = 0.2
    for k, rule in enumerate(rules):
        v = [np.mean([x["payouts"][rule][h] for x in runs]) / 1e3 for h in groups]
        ax.bar(np.arange(len(groups)) + (k - 1.5) * w, v, w, label=rule)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel("payout, % of the pool")
    ax.set_title("Royalty payouts by rule (mean over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_lorenz(runs: list[dict], rules: tuple[str, ...]) -> Any:
    """Lorenz curves of the first seed's payouts, one per rule."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 4))
    for rule in rules:
        pop, inc = lorenz(list(runs[0]["payouts"][rule].values()))
        ax.plot(pop, inc, marker=".", label=rule)
    ax.plot([0, 1], [0, 1], color="gray", ls="--", lw=0.8)
    ax.set_xlabel("share of rights-holders")
    ax.set_ylabel("share of payouts")
    ax.set_title("Lorenz curves of payouts (seed 0)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_paths(p0: dict, p1: dict, pr: dict) -> Any:
    """Labour share and Gini of household incomes along the task model's paths: no new tasks,
    new tasks as fast as automation, and no new tasks with a 10 % royalty."""
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.4))
    for p, lab in ((p0, "g_N = 0"), (p1, "g_N = g_I"), (pr, "g_N = 0, royalty 10%")):
        a1.plot(p["t"], p["labor_share"], label=lab)
        a2.plot(p["t"], p["gini"], label=lab)
    a1.set_title("labour share")
    a2.set_title("Gini of household incomes")
    for a in (a1, a2):
        a.set_xlabel("t")
        a.legend(fontsize=8)
    fig.tight_layout()
    return fig
