"""The reproduction's figures (docs/topo_detect.md, "Reproduction"): the signature curve of §5
and the power of the claim-2 tests."""

from __future__ import annotations

from collections.abc import Sequence

from icml25.report import pyplot


def plot_signature_curve(runs: Sequence[dict], fractions: Sequence[float]):
    """L_TP, L_MK, Pers_0(X) and Pers_1(X) (batch mean +- std) against the adversarial
    fraction, one line per seed (``runs[i]["curve"]`` from ``signature_curve``)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.2))
    for ax, key, label in zip(
        axes, ("tp", "mk", "pers0_x", "pers1_x"), ("L_TP", "L_MK", "Pers_0(X)", "Pers_1(X)")
    ):
        for i, x in enumerate(runs):
            m, s = x["curve"][key]["mean"], x["curve"][key]["std"]
            ax.errorbar(fractions, m, yerr=s, marker="o", ms=3, label=f"seed {x.get('seed', i)}")
        ax.set_xlabel("adversarial fraction")
        ax.set_title(label)
    axes[0].legend(fontsize=7)
    return fig


def plot_power(
    type_i: dict,
    power: dict,
    bound: float,
    names: Sequence[str],
    checked: Sequence[str],
    controls: Sequence[str],
):
    """Power bars (blue: the checked tests, orange: the non-topological controls, grey: report
    only) with type-I error markers and the type-I bound."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(names)), 3.8))
    xs = range(len(names))
    colors = ["C0" if t in checked else "C1" if t in controls else "C7" for t in names]
    ax.bar(
        xs,
        [power[t] for t in names],
        color=colors,
        label="power (H1; orange: controls; grey: report only)",
    )
    ax.scatter(
        xs, [type_i[t] for t in names], color="k", marker="x", label="type-I error (H0)", zorder=3
    )
    ax.axhline(bound, ls="--", color="r", lw=1, label="type-I bound")
    ax.set_xticks(list(xs), names, rotation=35, ha="right", fontsize=7)
    ax.legend(fontsize=7)
    return fig
