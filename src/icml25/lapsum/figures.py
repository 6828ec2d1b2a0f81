"""The figures of the LapSum reproduction (docs/lapsum.md, "Reproduction"): Part A's scaling in
time and memory, the soft top-k profiles, Part C's accuracies and Part B's exact matches. Each
function returns matplotlib figures; ``repro.py`` saves them."""

from __future__ import annotations

import statistics
from typing import Any

import torch

from icml25.lapsum.functional import soft_topk
from icml25.report import pyplot


def plot_scaling(timing: dict) -> list[tuple[Any, str]]:
    """Part A, log-log: fwd+bwd seconds (``scaling_time.png``) and saved bytes
    (``scaling_memory.png``) per method and n, with slope-1 and slope-2 guides from LapSum's
    smallest n; ``[(figure, file name), ...]``."""
    plt = pyplot()
    figs = []
    for key, fname, ylabel in (
        ("seconds", "scaling_time.png", "fwd+bwd seconds"),
        ("saved_bytes", "scaling_memory.png", "saved bytes"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, rows in timing.items():
            ns = sorted(rows)
            ax.loglog(ns, [rows[n][key] for n in ns], "o-", label=name)
        lap = timing["LapSum"]
        n0 = min(lap)
        ns = sorted(lap)
        for p, style in ((1, ":"), (2, "--")):
            ax.loglog(
                ns,
                [lap[n0][key] * (n / n0) ** p for n in ns],
                "k" + style,
                lw=0.8,
                label=f"slope {p}",
            )
        ax.set_xlabel("n")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        ax.set_title(f"soft top-k, k = n/2: {ylabel}")
        figs.append((fig, fname))
    return figs


def plot_profiles() -> Any:
    """Soft top-k membership over sorted scores at three alphas (``topk_profiles.png``)."""
    plt = pyplot()
    r = torch.linspace(-3, 3, 50, dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(6, 4))
    for alpha in (0.03, 0.3, 3.0):
        ax.plot(r, soft_topk(r, 10, alpha), label=f"alpha={alpha}")
    ax.set_xlabel("sorted score r")
    ax.set_ylabel("soft top-k membership p")
    ax.set_title("n=50, k=10: sharper as alpha -> 0")
    ax.legend()
    return fig


def plot_accuracy(runs: dict) -> Any:
    """Part C: test top-1 and top-5 per loss, mean ± sd over seeds (``topk_accuracy.png``)."""
    plt = pyplot()
    names = list(runs)
    shown = {"ce": "CE", "lapsum": "LapSum P_K=[0,0,0,0,1] alpha=3"}
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names)), 4))
    for j, key in enumerate(("top1", "top5")):
        means = [statistics.fmean(x[key] for x in runs[n]) for n in names]
        sds = [statistics.stdev(x[key] for x in runs[n]) if len(runs[n]) > 1 else 0 for n in names]
        xs = [i + 0.4 * j for i in range(len(names))]
        ax.bar(xs, means, 0.4, yerr=sds, label=key, capsize=3)
    ax.set_xticks([i + 0.2 for i in range(len(names))])
    ax.set_xticklabels([shown.get(n, n) for n in names], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("test accuracy")
    ax.set_title("noisy 100-class task, linear probe")
    ax.legend()
    return fig


def plot_permutation(b_runs: dict) -> Any:
    """Part B: exact-match accuracy per set size, LapSum and NeuralSort, mean over seeds
    (``permutation_accuracy.png``)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ns = sorted(b_runs)
    for j, loss in enumerate(("lapsum", "neuralsort")):
        means = [statistics.fmean(x["exact"] for x in b_runs[n][loss]) for n in ns]
        ax.bar([i + 0.4 * j for i in range(len(ns))], means, 0.4, label=loss)
    ax.set_xticks([i + 0.2 for i in range(len(ns))])
    ax.set_xticklabels([f"n={n}" for n in ns])
    ax.set_ylabel("exact-match accuracy")
    ax.legend()
    return fig
