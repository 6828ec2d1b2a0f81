"""The figures of the reproduction (docs/safety_reasoning.md, "Reproduction"): RT's Best-of-N
curves beside SRG's greedy ASR, greedy ASR per form for both models, and the PCA of the last
prompt token's states."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.report import pyplot
from icml25.safety_reasoning.experiment import OOD

#: One colour per form, in every figure.
COLORS = {
    "plain": "black",
    "cipher": "tab:blue",
    "past": "tab:orange",
    "wrap": "tab:green",
    "pers": "tab:red",
}


def plot_bon(per_seed: list[dict[str, Any]], ns: tuple[int, ...]) -> Any:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for f in ("plain", *OOD):
        ys = np.array([[p["bon"][f]["prefix"][str(n)] for n in ns] for p in per_seed])
        ax.plot(ns, ys.mean(0), "o-", color=COLORS[f], label=f"RT {f}")
        if len(per_seed) > 1:
            ax.fill_between(ns, ys.min(0), ys.max(0), color=COLORS[f], alpha=0.15)
        ax.axhline(np.mean([p["asr"]["SRG"][f] for p in per_seed]), color=COLORS[f], ls="--", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (samples per prompt)")
    ax.set_ylabel("ASR@N (%)")
    ax.set_title("Best-of-N ASR of RT (solid); SRG greedy (dashed)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_bars(per_seed: list[dict[str, Any]], secondary: list[dict[str, Any]]) -> Any:
    plt = pyplot()
    groups = [g for g in (per_seed, secondary) if g]
    fig, axes = plt.subplots(1, len(groups), figsize=(6 * len(groups), 4), squeeze=False)
    forms = ("plain", *OOD)
    x = np.arange(len(forms))
    for ax, runs in zip(axes[0], groups):
        for k, name in enumerate(("RT", "SRG")):
            ys = np.array([[p["asr"][name][f] for f in forms] for p in runs])
            err = ys.std(0, ddof=1) if len(runs) > 1 else None
            ax.bar(x + (k - 0.5) * 0.38, ys.mean(0), 0.38, yerr=err, label=name, capsize=3)
        ax.set_xticks(x, ["ID" if f == "plain" else f for f in forms])
        ax.set_ylabel("greedy ASR (%)")
        ax.set_title(f"world {runs[0]['variant']}, {len(runs)} seed(s)")
        ax.legend()
    fig.tight_layout()
    return fig


def plot_pca(p: dict[str, Any]) -> Any:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    for ax, name in zip(axes, ("RT", "SRG")):
        pc = p["repr"]["pca"][name]
        ax.scatter(*np.asarray(pc["id_harm"]).T[:2], s=8, c="black", label="ID harmful")
        ax.scatter(*np.asarray(pc["id_help"]).T[:2], s=8, c="gray", marker="x", label="ID benign")
        for f in OOD:
            ax.scatter(*np.asarray(pc["ood"][f]).T[:2], s=8, c=COLORS[f], label=f)
        ax.set_title(f"{name}: last prompt token, middle layer (seed {p['seed']})")
        ax.set_xlabel("PC1")
        ax.set_ylabel("PC2")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig
