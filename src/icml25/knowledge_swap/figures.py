"""The reproduction's figures (docs/knowledge_swap.md, "Reproduction"): the three accuracies per
strategy, the forget-class trajectory, the per-layer LoRA change per stage and the per-layer
linear probes."""

from __future__ import annotations

import numpy as np

from icml25.knowledge_swap.data import HIDDEN
from icml25.knowledge_swap.experiment import FL, LF, SHORT
from icml25.report import pyplot


def plot_bars(M, strategies):
    """Mean (bars) and population sd (error bars) over seeds of Acc_r, Acc_f, Acc_l per strategy
    (``M[strategy][key]``: one value per seed)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    keys = ("acc_r", "acc_f", "acc_l")
    x = np.arange(len(keys))
    w = 0.8 / len(strategies)
    for i, strat in enumerate(strategies):
        d = M[strat]
        ax.bar(
            x + i * w,
            [np.mean(d[k]) for k in keys],
            w,
            yerr=[np.std(d[k]) for k in keys],
            capsize=3,
            label=SHORT[strat],
        )
    ax.set_xticks(x + w * (len(strategies) - 1) / 2, ["Acc_r (up)", "Acc_f (down)", "Acc_l (up)"])
    ax.set_ylabel("test accuracy (%)")
    ax.legend()
    return fig


def plot_trajectory(runs, strategies, steps):
    """Acc_f over the swap's steps per strategy (mean line, min-max band over seeds); the
    vertical line marks the stage change at ``steps``."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for strat in strategies:
        trajs = [x["traj"] for x in runs[strat]]
        xs = [t for t, _ in trajs[0]]
        ys = np.array([[a for _, a in tr] for tr in trajs])
        ax.plot(xs, ys.mean(0), label=SHORT[strat])
        ax.fill_between(xs, ys.min(0), ys.max(0), alpha=0.15)
    ax.axvline(steps, color="k", lw=0.5)
    ax.set_xlabel("step (the line marks the stage change)")
    ax.set_ylabel("Acc_f on the forget classes (%)")
    ax.legend()
    return fig


def plot_norms(runs):
    """The norm of each stage's LoRA change per layer (mean over seeds), L->F and F->L."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, strat in zip(axes, (LF, FL)):
        for stage in ("learn", "forget"):
            arr = np.array([x["moved"][stage] for x in runs[strat]])
            ax.plot(HIDDEN, arr.mean(0), "o-", label=f"{stage} stage")
        ax.set_title(SHORT[strat])
        ax.set_xlabel("layer (low to high)")
    axes[0].set_ylabel("norm of the LoRA change in the stage")
    axes[0].legend()
    return fig


def plot_probes(records):
    """Per-layer linear-probe accuracy (mean over seeds) for every state of ``probes``."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for k, lst in records.items():
        ax.plot(HIDDEN, [np.mean([d[n] for d in lst]) for n in HIDDEN], "o-", label=k)
    ax.set_ylabel("probe accuracy on classes 0,1,8,9 (%)")
    ax.set_title("per-layer linear probes (layer outputs incl. LoRA, before the ReLU)")
    ax.legend(fontsize=6)
    return fig
