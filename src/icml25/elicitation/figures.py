"""The reproduction's figures (docs/elicitation.md, "Reproduction"): the trigger histograms of
one run, coverage and success against the iteration, and the reward and penalty spreads."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.report import pyplot


def plot_histograms(run: dict[str, Any]) -> Any:
    """Successful samples per behaviour, stacked by trigger, for every iterate and the final
    mixture of Frank-Wolfe (top) and the restarts (bottom)."""
    plt = pyplot()
    T = len(run["fw"]["iterates"])
    fig, axes = plt.subplots(2, T + 1, figsize=(3 * (T + 1), 5.5), sharey=True, squeeze=False)
    colors = ("tab:blue", "tab:orange", "tab:green")
    for r_, meth in enumerate(("fw", "restart")):
        panels = [*run[meth]["iterates"], run[meth]["mixtures"][-1]]
        for c_, ev in enumerate(panels):
            ax = axes[r_][c_]
            h = np.array(ev["hist"], dtype=float)
            bottom = np.zeros(len(h))
            for k in range(3):
                ax.bar(
                    range(1, len(h) + 1),
                    h[:, k],
                    bottom=bottom,
                    color=colors[k],
                    label=f"trigger {k + 1}",
                )
                bottom += h[:, k]
            ax.set_title(f"{meth} {'mixture' if c_ == T else f'iterate {c_ + 1}'}", fontsize=9)
            ax.set_xlabel("behaviour")
    axes[0][0].set_ylabel("successful samples")
    axes[1][0].set_ylabel("successful samples")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_curves(runs: list[dict[str, Any]]) -> Any:
    """Coverage and success rate of the mixture and the iterate's mean trigger count against
    the iteration (mean and sd over runs), Frank-Wolfe against restarts; the reverse model's
    success rate dashed."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    T = len(runs[0]["fw"]["mixtures"])
    ts = np.arange(1, T + 1)
    for meth, color in (("fw", "tab:red"), ("restart", "tab:gray")):
        cov = np.array([[m["coverage"] for m in x[meth]["mixtures"]] for x in runs])
        sr = np.array([[m["sr"] for m in x[meth]["mixtures"]] for x in runs])
        cnt = np.array([[i["mean_count"] for i in x[meth]["iterates"]] for x in runs])
        for ax, v in zip(axes, (cov, sr, cnt)):
            ax.errorbar(
                ts,
                v.mean(0),
                yerr=v.std(0, ddof=1) if len(runs) > 1 else None,
                color=color,
                marker="o",
                capsize=3,
                label=meth,
            )
    axes[1].axhline(
        np.mean([x["sr"]["sft"] for x in runs]), color="black", ls="--", lw=1, label="SFT"
    )
    for ax, t in zip(
        axes, ("coverage of the mixture", "SR of the mixture", "mean trigger count (iterate)")
    ):
        ax.set_title(t)
        ax.set_xlabel("iteration t")
        ax.set_xticks(ts)
    axes[1].legend()
    fig.tight_layout()
    return fig


def plot_spreads(run: dict[str, Any], lam: float) -> Any:
    """The spread over candidates of the reward and of the weighted penalty per DPO round of
    the Frank-Wolfe run (``run["fw"]["spreads"]``); grey lines mark the iterations."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    sp = np.array(run["fw"]["spreads"], dtype=float)
    x = np.arange(len(sp))
    ax.plot(x, sp[:, 2], label="std(log p_m(y|x)) (reward)")
    ax.plot(x, lam * sp[:, 3], label=f"λ · std(log q̄) (penalty, λ = {lam})")
    for t in range(2, int(sp[:, 0].max()) + 1):
        ax.axvline(np.argmax(sp[:, 0] == t), color="gray", lw=0.5)
    ax.set_xlabel("DPO round (all iterations)")
    ax.set_ylabel("spread over candidates (nats)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
