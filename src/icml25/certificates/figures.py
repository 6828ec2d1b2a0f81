"""The reproduction's figures (docs/certificates.md, "Reproduction"): the safety curve of each
controller, the safety-progress trade-off and full mode's sweep over confounding strength."""

from __future__ import annotations

import statistics
from typing import Any

import torch

from icml25.certificates.experiment import EPS, H
from icml25.report import pyplot

__all__ = ["plot_curves", "plot_sweep", "plot_tradeoff"]


def plot_curves(runs: list[dict], controllers: tuple[str, ...]) -> Any:
    """P(safe through t) per controller (mean over seeds), with the front-door certificate's
    Monte-Carlo 95% band of the first seed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    t = list(range(H + 1))
    for name in controllers:
        curves = torch.stack([r["eval"][name]["curve"] for r in runs])
        ax.plot(t, curves.mean(0).tolist(), marker="o", ms=3, label=name)
    mc = runs[0]["mc"]
    ax.fill_between(
        t,
        mc["curve_ci"][:, 0].tolist(),
        mc["curve_ci"][:, 1].tolist(),
        alpha=0.3,
        label="front-door MC 95% CI (seed 0)",
    )
    ax.axhline(1 - EPS, ls="--", color="k", lw=1)
    ax.set_xlabel("t")
    ax.set_ylabel("P(safe through t)")
    ax.legend(fontsize=7)
    ax.set_title("ConfoundedDriving, aggressive nominal")
    return fig


def plot_tradeoff(runs: list[dict]) -> Any:
    """Each controller's P_safe against its progress (means over seeds)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in runs[0]["eval"]:
        p = statistics.fmean(r["eval"][name]["p_safe"] for r in runs)
        g = statistics.fmean(r["eval"][name]["progress"] for r in runs)
        ax.scatter([g], [p])
        ax.annotate(name, (g, p), fontsize=7)
    ax.axhline(1 - EPS, ls="--", color="k", lw=1)
    ax.set_xlabel("progress E[sum v_t]")
    ax.set_ylabel("P_safe over 0..H")
    return fig


def plot_sweep(sweep: dict, kappas, sizes) -> Any:
    """Exact P_safe against the confounding strength at one data size (10,000 where swept)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    n = max(sizes) if 10_000 not in sizes else 10_000
    for key, label in (
        ("front_door", "front-door"),
        ("naive", "naive"),
        ("dtcbf_offline", "DTCBF offline"),
    ):
        means = [statistics.fmean(x[key] for x in sweep[(k, n, 0.0)]) for k in kappas]
        ax.plot(kappas, means, marker="o", label=label)
    ax.axhline(1 - EPS, ls="--", color="k", lw=1)
    ax.set_xlabel("confounding strength kappa")
    ax.set_ylabel(f"exact P_safe (n = {n})")
    ax.legend()
    return fig
