"""The reproduction's figures (docs/antidote.md, "Reproduction"): HS and FA against the pruning
ratio, and HS against FA along the ratio grid, one curve per scorer and panel per attack setting.
Each reads ``res[setting][seed]``, one seed's :meth:`HarmfulFinetuneExperiment.run` result."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.report import pyplot

__all__ = ["LABEL", "plot_metric_vs_ratio", "plot_tradeoff"]

LABEL = {
    "antidote": "Antidote (harmful Wanda)",
    "benign_wanda": "Wanda on benign data",
    "magnitude": "magnitude",
    "random": "random",
    "antidote_B": "Antidote on lora_B only (ours)",
}


def plot_metric_vs_ratio(res, settings, seeds, ratios, scorers, what: str) -> Any:
    """``what`` (``"HS"`` or ``"FA"``) against the ratio: mean ± sd over seeds per scorer, with
    the attacked model (no defence) as a line."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 3.6), squeeze=False)
    for ax, name in zip(axes[0], settings):
        for s in scorers:
            arr = np.array([[res[name][sd][s][rho][what] for rho in ratios] for sd in seeds])
            ax.errorbar(ratios, arr.mean(0), yerr=arr.std(0), marker="o", capsize=3, label=LABEL[s])
        nd = np.mean([res[name][sd]["none"][0.0][what] for sd in seeds])
        ax.axhline(nd, color="k", ls="--", lw=1, label="no defence")
        ax.set_title(name)
        ax.set_xlabel("dense ratio rho (fraction of each row removed)")
        ax.set_ylabel(f"{what} (%)")
    axes[0][0].legend(fontsize=7)
    return fig


def plot_tradeoff(res, settings, seeds, ratios, scorers) -> Any:
    """Mean HS against mean FA along the ratio grid, per scorer, and the attacked model."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 3.6), squeeze=False)
    for ax, name in zip(axes[0], settings):
        for s in scorers:
            hs = [np.mean([res[name][sd][s][rho]["HS"] for sd in seeds]) for rho in ratios]
            fa = [np.mean([res[name][sd][s][rho]["FA"] for sd in seeds]) for rho in ratios]
            ax.plot(fa, hs, "o-", label=LABEL[s])
        nd = [np.mean([res[name][sd]["none"][0.0][k] for sd in seeds]) for k in ("FA", "HS")]
        ax.plot(*nd, "k*", ms=12, label="no defence")
        ax.set_title(name)
        ax.set_xlabel("task accuracy FA (%)")
        ax.set_ylabel("harmful score HS (%)")
    axes[0][0].legend(fontsize=7)
    return fig
