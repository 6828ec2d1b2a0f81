"""The reproduction's figures (docs/tpo.md, "Reproduction"): reward per TPO iteration, TPO against
Best-of-N by policy samples, and (full mode) the width x depth grid."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.report import pyplot
from icml25.tpo.experiment import MAX_DEPTH, WIDTHS

__all__ = ["plot_bon", "plot_grid", "plot_iterations"]


def plot_iterations(curves: dict[str, dict[str, list]]) -> Any:
    """Fresh-candidate and best-so-far reward per iteration of the TPO variants (mean ± sd over
    seeds of the per-seed mean curves)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, kind, label in (
        (axes[0], "fresh", "mean reward of fresh candidates"),
        (axes[1], "best curve", "best-so-far reward"),
    ):
        for name, c in curves[kind].items():
            arr = np.array(c)
            ax.errorbar(range(arr.shape[1]), arr.mean(0), yerr=arr.std(0), label=name, capsize=3)
        ax.set_xlabel("TPO iteration (0 = initial samples)")
        ax.set_ylabel(label)
        ax.set_xticks(range(np.array(next(iter(curves[kind].values()))).shape[1]))
    axes[0].legend(fontsize=7)
    return fig


def plot_bon(per_seed: dict[str, list[float]]) -> Any:
    """Final best reward against policy samples per query: Best-of-N and the 15-sample TPO runs
    (mean ± population sd over seeds)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ks = [5, 15, 30, 60]
    ax.errorbar(
        ks,
        [np.mean(per_seed[f"BoN-{k}"]) for k in ks],
        yerr=[np.std(per_seed[f"BoN-{k}"]) for k in ks],
        fmt="o-",
        capsize=3,
        label="Best-of-N",
    )
    for name, marker in (
        ("TPO-D2-N5", "*"),
        ("TPO scrambled critiques", "x"),
        ("revision-D2-N5", "s"),
    ):
        ax.errorbar(
            [15],
            [np.mean(per_seed[name])],
            yerr=[np.std(per_seed[name])],
            fmt=marker,
            ms=10,
            capsize=3,
            label=name,
        )
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("policy samples per query")
    ax.set_ylabel("final best reward")
    ax.legend(fontsize=7)
    return fig


def plot_grid(G: np.ndarray, B: np.ndarray) -> Any:
    """The width x depth grid of TPO's final reward, and each width against Best-of-N with the
    same number of samples N(D+1)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    im = axes[0].imshow(G, aspect="auto", cmap="viridis")
    axes[0].set_xticks(range(MAX_DEPTH + 1))
    axes[0].set_yticks(range(len(WIDTHS)), [str(w) for w in WIDTHS])
    axes[0].set_xlabel("depth D")
    axes[0].set_ylabel("width N")
    for wi in range(len(WIDTHS)):
        for d in range(MAX_DEPTH + 1):
            axes[0].text(d, wi, f"{G[wi, d]:.2f}", ha="center", va="center", fontsize=7, color="w")
    fig.colorbar(im, ax=axes[0], label="TPO final reward")
    ks = np.arange(1, len(B) + 1)
    axes[1].plot(ks, B, "k-", label="Best-of-N")
    for wi, w in enumerate(WIDTHS):
        axes[1].plot([w * (d + 1) for d in range(MAX_DEPTH + 1)], G[wi], "o-", label=f"TPO N={w}")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("policy samples per query, N(D+1)")
    axes[1].set_ylabel("final best reward")
    axes[1].legend(fontsize=7)
    return fig
