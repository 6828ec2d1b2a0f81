"""The reproduction's figures (docs/fpo.md, "Reproduction"): win rates, drift to the reference,
step times and, in full mode, the α sweep, the sampling temperature and the layer / site sweep.
Each reads the per-seed records of :func:`icml25.fpo.repro.measure_seed`."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.fpo.experiment import METHODS
from icml25.report import pyplot

__all__ = [
    "LABEL",
    "plot_alpha",
    "plot_kl",
    "plot_layers",
    "plot_steps",
    "plot_temperature",
    "plot_winrates",
]

LABEL = {
    "dpo": "DPO",
    "simpo": "SimPO",
    "tdpo2": "TDPO-2",
    "fpo": "FPO",
    "fpo_alpha0": "FPO α=0",
    "sft": "SFT",
}


def _bootstrap_ci(
    values: np.ndarray, rng: np.random.Generator, n: int = 2000
) -> tuple[float, float]:
    means = [values[rng.integers(0, len(values), len(values))].mean() for _ in range(n)]
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def plot_winrates(per_seed):
    plt = pyplot()
    rng = np.random.default_rng(0)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, names, title in (
        (axes[0], "win_vs_sft", METHODS, "win rate vs SFT"),
        (axes[1], "h2h", ("dpo", "simpo", "tdpo2"), "FPO's win rate vs each method"),
    ):
        for j, m in enumerate(names):
            v = np.concatenate([p[key][m] for p in per_seed])
            lo, hi = _bootstrap_ci(v, rng)
            ax.bar(j, v.mean(), color="C3" if m == "fpo" else "C0")
            ax.errorbar(j, v.mean(), yerr=[[v.mean() - lo], [hi - v.mean()]], color="k", capsize=3)
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        if key == "win_vs_sft":
            ax.axhline(0.55, color="C3", lw=0.8, ls="--", label="gate 0.55")
            ax.legend(loc="lower right")
        ax.set_xticks(range(len(names)), [LABEL[m] for m in names], rotation=20)
        ax.set(title=title, ylim=(0.3, 0.8))
    fig.tight_layout()
    return fig


def plot_kl(per_seed):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    w = 0.38
    for j, m in enumerate(METHODS):
        for k, (side, c) in enumerate((("kl_w", "C2"), ("kl_l", "C1"))):
            v = [np.mean(p[side][m]) for p in per_seed]
            ax.bar(
                j + (k - 0.5) * w,
                np.mean(v),
                w,
                color=c,
                yerr=np.std(v),
                capsize=2,
                label=("chosen" if k == 0 else "rejected") if j == 0 else None,
            )
    ax.set_xticks(range(len(METHODS)), [LABEL[m] for m in METHODS])
    ax.set(ylabel="sequential KL to the reference (nats)", title="Drift on held-out pairs")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_steps(per_seed):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    names = ("fpo", "dpo", "tdpo2")
    ax.boxplot(
        [np.concatenate([p["step_ms"][m] for p in per_seed]) for m in names], showfliers=False
    )
    ax.set_xticks(range(1, 4), [LABEL[m] for m in names])
    ax.set(ylabel="ms per optimizer step", title="Step time, interleaved (CPU, 1 thread)")
    fig.tight_layout()
    return fig


def plot_alpha(per_seed):
    plt = pyplot()
    keys = [
        ("fpo_alpha0", 0.0),
        ("fpo_a0.1", 0.1),
        ("fpo", 0.5),
        ("fpo_a1.0", 1.0),
        ("fpo_a2.0", 2.0),
    ]
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    xs = [a for _, a in keys]
    kl = [np.mean([np.mean(p["kl_l"][k]) for p in per_seed]) for k, _ in keys]
    win = [np.mean([np.mean(p["win_vs_sft"][k]) for p in per_seed]) for k, _ in keys]
    ax.plot(xs, kl, marker="o", color="C1", label="seqKL rejected")
    ax2 = ax.twinx()
    ax2.plot(xs, win, marker="s", color="C3", label="win rate vs SFT")
    ax.set(xlabel="α", ylabel="sequential KL (nats)", title="α sweep")
    ax2.set_ylabel("win rate vs SFT")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="center right", fontsize=8)
    fig.tight_layout()
    return fig


def plot_temperature(per_seed):
    plt = pyplot()
    temps = sorted(per_seed[0]["temps"])
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for m in ("sft", "dpo", "simpo", "tdpo2"):
        ax.plot(
            temps,
            [np.mean([p["temps"][t][m] for p in per_seed]) for t in temps],
            marker="o",
            label=f"FPO vs {LABEL[m]}",
        )
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="sampling temperature", ylabel="win rate", title="FPO's win rate by temperature")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_layers(sweep: dict[str, tuple]) -> Any:
    """Mean win rate vs SFT of FPO with the SAE at each block's residual output and MLP output
    (:func:`icml25.fpo.experiment.layer_sweep`)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for site in ("residual", "MLP"):
        ys = [np.mean(sweep[f"{site} {i}"][0]) for i in range(4)]
        ax.plot(range(4), ys, marker="o", label=site)
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xticks(range(4))
    ax.set(xlabel="block", ylabel="win rate vs SFT", title="FPO by SAE site (4-block model)")
    ax.legend()
    fig.tight_layout()
    return fig
