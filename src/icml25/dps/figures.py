"""The figures of the DPS reproduction (docs/dps.md, "Reproduction"): accuracy per defence and
condition, the defended model's confidence, and DPS-centre accuracy against the bonus weight lam.
Each function returns a matplotlib figure; ``repro.py`` saves it."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.dps.experiment import ATTACKS, LABELS, LAMS
from icml25.report import pyplot


def plot_bars(per_seed: list[dict[str, Any]], full: bool) -> Any:
    """Accuracy (%) per defence and condition, mean and s.d. over seeds (``accuracy_bars.png``)."""
    plt = pyplot()
    names = [n for n in LABELS if f"{n}_clean" in per_seed[0]]
    conds = [("clean", "clean"), ("adv", "patch")] + (
        [("pgd_transfer", "PGD transfer"), ("pgd_white", "PGD white-box")] if full else []
    )
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.6))
    x = np.arange(len(names))
    w = 0.8 / len(conds)
    for k, (cond, label) in enumerate(conds):
        vals = np.array([[np.mean(p[f"{n}_{cond}"]) * 100 for n in names] for p in per_seed])
        ax.bar(
            x + (k - (len(conds) - 1) / 2) * w,
            vals.mean(0),
            w,
            yerr=vals.std(0, ddof=1) if len(per_seed) > 1 else None,
            capsize=2,
            label=label,
        )
    ax.set_xticks(x, [LABELS[n] for n in names])
    ax.set_ylabel("accuracy (%), mean and s.d. over seeds")
    ax.legend(fontsize=8, ncol=len(conds))
    fig.tight_layout()
    return fig


def plot_confidence(per_seed: list[dict[str, Any]]) -> Any:
    """The defended model's max-probability on clean and attacked images (pooled over seeds)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    bins = np.linspace(0, 1, 26)
    for cond in ("clean", *ATTACKS):
        if f"maxp_{cond}" in per_seed[0]:
            v = [x for p in per_seed for x in p[f"maxp_{cond}"]]
            ax.hist(
                v, bins=bins, histtype="step", density=True, label=f"{cond} (mean {np.mean(v):.2f})"
            )
    ax.set_xlabel("max class probability of the defended model")
    ax.set_ylabel("density")
    ax.set_yscale("log")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot_lam(per_seed: list[dict[str, Any]]) -> Any:
    """DPS-centre accuracy against the bonus weight lam, with the Bayes rule as reference lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for cond, label, color in (("clean", "clean", "C0"), ("adv", "patch", "C1")):
        vals = np.array(
            [[np.mean(p[f"dps_bonus_lam{lam:g}_{cond}"]) * 100 for lam in LAMS] for p in per_seed]
        )
        ax.errorbar(
            LAMS,
            vals.mean(0),
            yerr=vals.std(0, ddof=1),
            marker="o",
            capsize=3,
            color=color,
            label=f"bonus, {label}",
        )
        bayes = np.mean([np.mean(p[f"dps_{cond}"]) * 100 for p in per_seed])
        ax.axhline(bayes, ls="--", color=color, label=f"Bayes, {label}")
        van = np.mean([np.mean(p[f"van_{cond}"]) * 100 for p in per_seed])
        ax.axhline(van, ls=":", color=color, label=f"vanilla, {label}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("lam (bonus per matching hint)")
    ax.set_ylabel("DPS-centre accuracy (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
