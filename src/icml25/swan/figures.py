"""The reproduction's figures (docs/swan.md, "Reproduction"): eval loss against tokens per
optimizer, and the byte accounting (this model's exact bytes, the analytic bytes at the paper's
configurations)."""

from __future__ import annotations

import statistics
from typing import Any

from icml25.report import pyplot

__all__ = ["plot_curves", "plot_memory"]


def plot_curves(main: dict, extra: dict) -> Any:
    """Seed-mean eval cross-entropy against tokens per optimizer (band: min-max over seeds), with
    AdamW's mean final loss as a line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rs in {**main, **extra}.items():
        tokens = [t / 1e3 for t in rs[0].tokens]
        curves = list(zip(*(rr.eval_ce for rr in rs)))
        mean = [statistics.fmean(c) for c in curves]
        line = ax.plot(tokens, mean, marker="o", ms=3, label=name)[0]
        if len(rs) > 1:
            ax.fill_between(
                tokens,
                [min(c) for c in curves],
                [max(c) for c in curves],
                color=line.get_color(),
                alpha=0.2,
            )
    target = statistics.fmean(rr.final for rr in main["adamw"])
    ax.axhline(target, color="k", ls=":", lw=0.8, label="AdamW final")
    ax.set_xlabel("tokens seen (thousands)")
    ax.set_ylabel("eval cross-entropy (nats); band: min-max over seeds")
    ax.set_ylim(top=min(8.0, ax.get_ylim()[1]))
    ax.legend(fontsize=7)
    ax.set_title("tiny LLaMA on stdlib source: eval loss vs tokens")
    return fig


def plot_memory(totals: dict, main: dict, table: list) -> Any:
    """Stacked exact bytes (params, grads, optimizer state) of this model per optimizer, beside
    the analytic AdamW and SWAN bytes of the GaLore LLaMA configurations (``table``)."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    names = list(totals)
    parts = {
        "params": [main[n][0].param_bytes for n in names],
        "grads": [main[n][0].grad_bytes for n in names],
        "optimizer state": [main[n][0].state_bytes for n in names],
    }
    bottom = [0] * len(names)
    for label, vals in parts.items():
        a.bar(names, [v / 1e6 for v in vals], bottom=[x / 1e6 for x in bottom], label=label)
        bottom = [x + v for x, v in zip(bottom, vals)]
    a.set_ylabel("MB (exact)")
    a.set_title("this model, fp32")
    a.legend()
    cfgs = [row["config"] for row in table]
    xs = range(len(cfgs))
    b.bar([x - 0.2 for x in xs], [row["adamw_bytes"] / 1e9 for row in table], 0.4, label="AdamW")
    b.bar([x + 0.2 for x in xs], [row["swan_bytes"] / 1e9 for row in table], 0.4, label="SWAN")
    b.set_xticks(list(xs))
    b.set_xticklabels(cfgs)
    b.set_ylabel("GB, params+grads+state (bf16)")
    b.set_title("analytic, GaLore LLaMA configs")
    b.legend()
    return fig
