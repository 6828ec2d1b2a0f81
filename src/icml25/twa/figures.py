"""The figures of the TWA reproduction (docs/twa.md, "Reproduction"): the penalty per method and
the in-span log-probability changes (full mode)."""

from __future__ import annotations

import numpy as np

from icml25.report import pyplot

INSPAN_KEYS = ("stem_span", "stem_token", "suffix_span", "suffix_token")


def plot_penalty(methods, per_seed):
    """Mean penalty per method (the mean over seeds of each seed's mean), sd over seeds."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.2))
    means = [[float(np.mean(p["penalty"][m])) for p in per_seed] for m in methods]
    ax.bar(
        range(len(methods)),
        [np.mean(v) for v in means],
        yerr=[np.std(v, ddof=1) if len(v) > 1 else 0 for v in means],
        capsize=3,
    )
    ax.set_xticks(range(len(methods)), methods, rotation=30, ha="right")
    ax.set_ylabel("mean penalty (lower is better)")
    ax.set_title("MQM-style penalty of greedy translations (mean, sd over seeds)")
    fig.tight_layout()
    return fig


def plot_inspan(per_seed):
    """The mean change of log p inside agreement spans, pooled over every seed's spans."""
    d = {k: np.concatenate([np.array(p["inspan"][k]) for p in per_seed]) for k in INSPAN_KEYS}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    keys = INSPAN_KEYS
    ax.bar(range(4), [np.mean(d[k]) for k in keys], color=["C0", "C1", "C0", "C1"])
    ax.set_xticks(
        range(4),
        ["stem, span-UL", "stem, token-UL", "suffix, span-UL", "suffix, token-UL"],
        rotation=20,
        ha="right",
    )
    ax.axhline(0, color="k", lw=0.8)
    ax.set_ylabel("d log p (fine-tuned - base)")
    ax.set_title("Inside agreement spans: the correct stem and the wrong suffix")
    fig.tight_layout()
    return fig
