"""The reproduction's figures (docs/rlthf.md, "Reproduction"): accuracy against the human
budget, the reward distribution of RM_0 (the paper's key diagnostic) and the curated set."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.report import pyplot

__all__ = ["plot_accuracy", "plot_curation", "plot_distribution"]


def _error_bars(a: np.ndarray) -> np.ndarray | None:
    return a.std(0, ddof=1) if len(a) > 1 else None


def plot_accuracy(per_seed: list[dict], methods: tuple[str, ...], iterations: int) -> Any:
    """Mean ± sd test accuracy per method against the human budget, with the AI-only and
    full-human reward models as lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    x = [2 * t for t in range(iterations + 1)]
    for m in methods:
        a = np.array([p["acc"][m] for p in per_seed])
        ax.errorbar(x, a.mean(0), yerr=_error_bars(a), marker="o", capsize=3, label=m)
    for m, style in (("ai_only", ":"), ("full_human", "--")):
        mean = np.mean([p["acc"][m][0] for p in per_seed])
        ax.axhline(mean, color="k", ls=style, lw=1, label=m)
    ax.set_xlabel("human annotation (% of the pool)")
    ax.set_ylabel("RM test accuracy vs human labels")
    ax.set_title(f"RLTHF vs baselines ({len(per_seed)} seeds, mean ± sd)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_distribution(p: dict) -> Any:
    """RM_0's sorted margins on its own training pairs with the running AI-label accuracy, the
    knee points ``k_0``, ``k_u``, ``k_l``, the drop boundary and the annotated bottom."""
    plt = pyplot()
    d = p["dist"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    pos = np.arange(d["n"])
    ax.plot(pos, d["sorted"], color="C0", label="RM_0 margin (sorted)")
    ax.axhline(0, color="grey", lw=0.5)
    ax2 = ax.twinx()
    ax2.plot(pos, d["window_acc"], color="C1", lw=1, label="AI-label accuracy (window 2 %)")
    ax2.set_ylim(0, 1.02)
    ax2.set_ylabel("AI-label accuracy")
    marks = (
        (d["zero_crossing"], "k_0", "k"),
        (d["upper_bend"], "k_u", "C2"),
        (d["lower_bend"], "k_l", "C3"),
        (d["p_drop"], "p_drop", "C4"),
    )
    for k, name, c in marks:
        ax.axvline(k, color=c, ls="--", lw=1, label=f"{name} = {k}")
    ax.axvspan(d["n"] - d["annotated"], d["n"], color="C3", alpha=0.15, label="annotated (bottom)")
    ax.set_xlabel("position on the sorted curve")
    ax.set_ylabel("margin r(x, y+) - r(x, y-)")
    ax.set_title(f"Reward distribution of RM_0 on its own training pairs (seed {p['seed']})")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def plot_curation(per_seed: list[dict]) -> Any:
    """The kept fraction of the pool and the accuracy of the curated labels per iteration."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for key, c in (("kept_fraction", "C0"), ("curated_label_accuracy", "C1")):
        a = np.array([[h[key] for h in p["history"]["rlthf"]] for p in per_seed])
        x = np.arange(a.shape[1])
        label = key.replace("_", " ")
        ax.errorbar(x, a.mean(0), yerr=_error_bars(a), marker="o", capsize=3, color=c, label=label)
    ax.set_xlabel("iteration (0 = AI labels only)")
    ax.set_ylim(0, 1.02)
    ax.set_title("RLTHF curated training set")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
