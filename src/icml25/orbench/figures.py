"""The figures of the OR-Bench reproduction (docs/orbench.md, "Reproduction"): the moderation
per world, the first world's population trade-off and its per-category rates. Each function
returns a matplotlib figure; ``repro.py`` saves it."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25.orbench.categories import CATEGORIES
from icml25.orbench.tradeoff import plot_tradeoff
from icml25.report import pyplot


def plot_moderation(worlds: list[dict[str, Any]]) -> Any:
    """Contamination before and after the vote, and each moderator's error beside the vote's,
    per world (``moderation.png``)."""
    plt = pyplot()
    st = [w["stats"] for w in worlds]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    x = np.arange(len(worlds))
    a1.bar(x - 0.2, [s["contamination_before"] for s in st], 0.4, label="candidates")
    a1.bar(x + 0.2, [s["contamination_after"] for s in st], 0.4, label="pool (after the vote)")
    a1.set_xticks(x, [f"world {w['seed']}" for w in worlds])
    a1.set_ylabel("ground-truth toxic (%)")
    a1.set_title("Contamination before / after moderation")
    a1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for j in range(3):
        a2.bar(
            x + (j - 1.5) * 0.2,
            [s["moderator_error"][j] for s in st],
            0.2,
            label=f"moderator {j + 1}",
        )
    a2.bar(x + 1.5 * 0.2, [s["ensemble_error"] for s in st], 0.2, label="majority vote", color="k")
    a2.set_xticks(x, [f"world {w['seed']}" for w in worlds])
    a2.set_ylabel("error vs ground truth (%)")
    a2.set_title("Single moderators vs the ensemble")
    a2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def plot_population(first: dict[str, Any], summary: Any) -> Any:
    """The first world's population, coloured by recipe, with the quadratic fit
    (``tradeoff.png``)."""
    groups = {k: v["family"] for k, v in first["models"].items()}
    with np.errstate(all="ignore"):
        return plot_tradeoff(
            summary,
            groups=groups,
            title=f"World {first['seed']}: over-refusal vs toxic rejection",
        )


def plot_per_category(first: dict[str, Any], core_names: set[str]) -> Any:
    """OR on the hard set and the pool and TR per category, mean over the first world's core
    checkpoints (``per_category.png``)."""
    plt = pyplot()
    cats = [
        c
        for c in CATEGORIES
        if any(
            c in m["hard_per_category"] or c in m["toxic_per_category"]
            for m in first["models"].values()
        )
    ]
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(cats) + 2), 3.8))
    core = [m for n, m in first["models"].items() if n in core_names]
    for j, (key, label) in enumerate(
        (("hard", "OR on hard"), ("pool", "OR on pool"), ("toxic", "TR on toxic"))
    ):
        vals = [_mean([m[f"{key}_per_category"].get(c) for m in core]) for c in cats]
        ax.bar(np.arange(len(cats)) + (j - 1) * 0.27, vals, 0.27, label=label)
    ax.set_xticks(np.arange(len(cats)), cats, rotation=30, fontsize=7)
    ax.set_ylabel("rate (%), mean over core models")
    ax.set_title(f"World {first['seed']}: per category")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def _mean(values: list[Any]) -> float:
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else 0.0
