"""The reproduction's figures (docs/proxy_feedback.md, "Reproduction"): the TV to the expert's
policy against the number of expert triples per world, and the condition diagnostics."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.report import pyplot

__all__ = ["plot_conditions", "plot_curve"]


def plot_curve(name: str, runs: list[dict], ns: tuple[int, ...]) -> Any:
    """Mean ± sd TV per method against the expert triples n (log scale); proxy-only as a line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for m in runs[0]["tv"]:
        a = np.array([[x["tv"][m][n] for n in ns] for x in runs])
        mu, sd = a.mean(0), a.std(0, ddof=1) if len(a) > 1 else np.zeros(len(ns))
        if m == "proxy_only":
            ax.axhline(mu[0], color="gray", ls="--", label="proxy_only")
            continue
        ax.errorbar(ns, mu, yerr=sd, marker="o", capsize=3, label=m)
    ax.set_xscale("log")
    ax.set_xlabel("expert triples n")
    ax.set_ylabel("mean TV to expert policy")
    ax.set_title(f"{name} ({len(runs)} seeds, mean ± sd)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_conditions(diag: dict[str, list[dict]]) -> Any:
    """The C1, C2 and C4 diagnostics of each world, mean ± sd over world seeds."""
    plt = pyplot()
    keys = (
        ("levelset_violation", "C1 level-set violation"),
        ("image_gap_q99", "C2 image gap q99"),
        ("L_hat", "C4 L_hat (log)"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    names = list(diag)
    for ax, (k, title) in zip(axes, keys):
        vals = [[d[k] for d in diag[w]] for w in names]
        mu = [float(np.mean(v)) for v in vals]
        sd = [float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for v in vals]
        ax.bar(range(len(names)), mu, yerr=sd, capsize=3, color="tab:blue")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
        if k == "L_hat":
            ax.set_yscale("log")
    fig.tight_layout()
    return fig
