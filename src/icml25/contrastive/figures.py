"""The figures of the contrastive reproduction (docs/contrastive.md, "Reproduction"): Part A's
similarities at the optima, the negative-similarity histogram, and accuracy and variance over
the grid."""

from __future__ import annotations

import statistics

from icml25.report import pyplot


def plot_theory(rows: list[list[str]]):
    """Part A: mean positive and negative similarity per setting (the rows of
    :func:`~icml25.contrastive.experiment.theory_sandbox`; rows without numbers are skipped)."""
    plt = pyplot()
    labels, pos, neg = [], [], []
    for cells in rows:
        try:
            p_, n_ = float(cells[1]), float(cells[2].split()[0])
        except ValueError:
            continue
        labels.append(cells[0][:28])
        pos.append(p_)
        neg.append(n_)
    fig, ax = plt.subplots(figsize=(9, 4))
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], pos, 0.4, label="mean positive similarity")
    ax.bar([x + 0.2 for x in xs], neg, 0.4, label="mean negative similarity")
    ax.axhline(-1 / 7, color="k", ls=":", lw=0.8, label="-1/(n-1)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=6)
    ax.legend(fontsize=7)
    ax.set_title("free embeddings reach the predicted optima (n = 8)")
    return fig


def plot_hist(base: list[dict], vr: list[dict], delta: float):
    """The first seed's cross-view negative similarities, SimCLR and SimCLR + VRNS."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(base[0]["neg_sample"].numpy(), bins=80, alpha=0.6, density=True, label="SimCLR")
    ax.hist(vr[0]["neg_sample"].numpy(), bins=80, alpha=0.6, density=True, label="SimCLR + VRNS")
    ax.axvline(delta, color="k", ls=":", label="-1/(n-1)")
    ax.set_xlabel("cross-view negative similarity")
    ax.legend()
    return fig


def plot_grid(runs: dict, grid_t, grid_b, vrns: float):
    """Probe accuracy against temperature and negative-similarity variance against batch size,
    for SimCLR (``runs[(t, b, 0.0)]``) and SimCLR + VRNS (``runs[(t, b, vrns)]``)."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for bb in grid_b:
        for lam, style in ((0.0, "--"), (vrns, "-")):
            a.plot(
                grid_t,
                [statistics.fmean(x["acc"] for x in runs[(t, bb, lam)]) for t in grid_t],
                style,
                marker="o",
                label=f"b={bb} {'+VRNS' if lam else 'SimCLR'}",
            )
    a.set_xlabel("temperature")
    a.set_ylabel("probe accuracy")
    a.legend(fontsize=6)
    for t in grid_t:
        for lam, style in ((0.0, "--"), (vrns, "-")):
            b.plot(
                grid_b,
                [statistics.fmean(x["neg_var"] for x in runs[(t, bb, lam)]) for bb in grid_b],
                style,
                marker="o",
                label=f"t={t} {'+VRNS' if lam else 'SimCLR'}",
            )
    b.set_xscale("log", base=2)
    b.set_xlabel("batch size")
    b.set_ylabel("negative-similarity variance")
    b.legend(fontsize=6)
    fig.suptitle("SimCLR on digits, with and without VRNS")
    return fig
