"""Tables and figures of the FPO reproduction (:mod:`icml25.fpo.repro`): one function per
table or figure, each reading the per-seed measurements that ``repro.measure_seed`` returns."""

from __future__ import annotations

import statistics

import numpy as np

from icml25.report import Metric, pyplot

METHODS = ("dpo", "simpo", "tdpo2", "fpo", "fpo_alpha0")
LABEL = {
    "dpo": "DPO",
    "simpo": "SimPO",
    "tdpo2": "TDPO-2",
    "fpo": "FPO",
    "fpo_alpha0": "FPO α=0",
    "sft": "SFT",
}


def _ms(xs) -> str:
    xs = list(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{np.mean(xs):.3f} ({sd:.3f})"


def main_table(per_seed) -> str:
    rows = [
        "| method | reward T=1 | reward greedy | win vs SFT | FPO wins vs it | seqKL chosen | "
        "seqKL rejected | reward acc. | entropy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in ("sft", *METHODS):

        def f(key, fn=np.mean, m=m):
            return _ms([fn(p[key][m]) for p in per_seed]) if m in per_seed[0][key] else "–"

        h2h = _ms([np.mean(p["h2h"][m]) for p in per_seed]) if m in per_seed[0]["h2h"] else "–"
        rows.append(
            f"| {LABEL[m]} | {f('reward')} | {f('greedy')} | {f('win_vs_sft')} | {h2h} | "
            f"{f('kl_w')} | {f('kl_l')} | {f('acc')} | {f('entropy')} |"
        )
    return (
        "Mean over seeds (sd over seeds); 400 held-out prompts per seed, held-out pairs for "
        "KL and accuracy:\n\n" + "\n".join(rows)
    )


def cost_table(per_seed, setups) -> str:
    rows = [
        "| method | median step (ms) | reference at train time | training run (s) |",
        "|---|---|---|---|",
    ]
    ref_bytes = sum(
        p.numel() * p.element_size() for p in next(iter(setups.values()))["ref"].parameters()
    )
    cache_b = int(np.mean([p["cache_bytes"] for p in per_seed]))
    what = {
        "fpo": f"offline cache, {cache_b / 1e3:.0f} kB",
        "dpo": "offline log-probs",
        "tdpo2": f"reference model, {ref_bytes / 1e3:.0f} kB of parameters",
    }
    for m in ("fpo", "dpo", "tdpo2"):
        med = _ms([np.median(p["step_ms"][m]) for p in per_seed])
        tr = _ms([p["train_s"][m] for p in per_seed])
        rows.append(f"| {LABEL[m]} | {med} | {what[m]} | {tr} |")
    return "Cost per optimizer step, interleaved on the same batches (steps 5-25):\n\n" + "\n".join(
        rows
    )


def ablation_tables(per_seed, metrics: list) -> list[str]:
    names = [
        ("fpo_alpha0", "α = 0"),
        ("fpo_a0.1", "α = 0.1"),
        ("fpo", "α = 0.5 (paper)"),
        ("fpo_a1.0", "α = 1"),
        ("fpo_a2.0", "α = 2"),
        ("fpo_k4", "k = 4"),
        ("fpo_k64", "k = 64"),
        ("fpo_policy_topk", "index: policy top-k (official)"),
        ("fpo_official", "official-code mode"),
    ]
    rows = [
        "| variant | win vs SFT | seqKL rejected | seqKL chosen | reward acc. | entropy |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in names:
        vals = {
            k: [np.mean(p[k][key]) for p in per_seed]
            for k in ("win_vs_sft", "kl_l", "kl_w", "acc", "entropy")
        }
        rows.append(
            f"| {label} | {_ms(vals['win_vs_sft'])} | {_ms(vals['kl_l'])} | "
            f"{_ms(vals['kl_w'])} | {_ms(vals['acc'])} | {_ms(vals['entropy'])} |"
        )
        metrics.append(Metric(f"ablation win rate {key}", vals["win_vs_sft"]))
        metrics.append(Metric(f"ablation seqKL rejected {key}", vals["kl_l"], unit="nats"))
    temps = sorted(per_seed[0]["temps"])
    trow = [
        "| T | "
        + " | ".join(f"FPO vs {LABEL[m]}" for m in ("sft", "dpo", "simpo", "tdpo2"))
        + " |",
        "|---|---|---|---|---|",
    ]
    for t in temps:
        trow.append(
            f"| {t} | "
            + " | ".join(
                _ms([p["temps"][t][m] for p in per_seed]) for m in ("sft", "dpo", "simpo", "tdpo2")
            )
            + " |"
        )
    rhos = []
    for p in per_seed:
        c = p["curve"].get("fpo", [])
        if len(c) >= 3:
            from scipy.stats import spearmanr

            rhos.append(
                float(spearmanr([x["d_margin"] for x in c], [x["kl_margin"] for x in c])[0])
            )
    if rhos:
        metrics.append(Metric("Spearman(D_FPO margin, seqKL margin) over checkpoints", rhos))
    corr = (
        f"\n\nSpearman correlation between the D_FPO margin (rejected minus chosen) and the "
        f"sequential-KL margin on 100 held-out pairs over FPO's training checkpoints (paper "
        f"Figure 4 right): {_ms(rhos) if rhos else 'n/a'} over seeds."
    )
    return [
        "Ablations (full mode; mean (sd) over seeds):\n\n" + "\n".join(rows),
        "Win rate of FPO by sampling temperature (paper Figure 3 right analogue):\n\n"
        + "\n".join(trow)
        + corr,
    ]


def _bootstrap_ci(
    values: np.ndarray, rng: np.random.Generator, n: int = 2000
) -> tuple[float, float]:
    means = [values[rng.integers(0, len(values), len(values))].mean() for _ in range(n)]
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def plot_winrates(per_seed):
    plt = pyplot()
    rng = np.random.default_rng(0)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, names, title in (
        (axes[0], "win_vs_sft", METHODS, "win rate vs SFT"),
        (axes[1], "h2h", ("dpo", "simpo", "tdpo2"), "FPO's win rate vs each method"),
    ):
        for j, m in enumerate(names):
            v = np.concatenate([p[key][m] for p in per_seed])
            lo, hi = _bootstrap_ci(v, rng)
            ax.bar(j, v.mean(), color="C3" if m == "fpo" else "C0")
            ax.errorbar(j, v.mean(), yerr=[[v.mean() - lo], [hi - v.mean()]], color="k", capsize=3)
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        if key == "win_vs_sft":
            ax.axhline(0.55, color="C3", lw=0.8, ls="--", label="gate 0.55")
            ax.legend(loc="lower right")
        ax.set_xticks(range(len(names)), [LABEL[m] for m in names], rotation=20)
        ax.set(title=title, ylim=(0.3, 0.8))
    fig.tight_layout()
    return fig


def plot_kl(per_seed):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    w = 0.38
    for j, m in enumerate(METHODS):
        for k, (side, c) in enumerate((("kl_w", "C2"), ("kl_l", "C1"))):
            v = [np.mean(p[side][m]) for p in per_seed]
            ax.bar(
                j + (k - 0.5) * w,
                np.mean(v),
                w,
                color=c,
                yerr=np.std(v),
                capsize=2,
                label=("chosen" if k == 0 else "rejected") if j == 0 else None,
            )
    ax.set_xticks(range(len(METHODS)), [LABEL[m] for m in METHODS])
    ax.set(ylabel="sequential KL to the reference (nats)", title="Drift on held-out pairs")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_steps(per_seed):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    names = ("fpo", "dpo", "tdpo2")
    ax.boxplot(
        [np.concatenate([p["step_ms"][m] for p in per_seed]) for m in names], showfliers=False
    )
    ax.set_xticks(range(1, 4), [LABEL[m] for m in names])
    ax.set(ylabel="ms per optimizer step", title="Step time, interleaved (CPU, 1 thread)")
    fig.tight_layout()
    return fig


def plot_alpha(per_seed):
    plt = pyplot()
    keys = [
        ("fpo_alpha0", 0.0),
        ("fpo_a0.1", 0.1),
        ("fpo", 0.5),
        ("fpo_a1.0", 1.0),
        ("fpo_a2.0", 2.0),
    ]
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    xs = [a for _, a in keys]
    kl = [np.mean([np.mean(p["kl_l"][k]) for p in per_seed]) for k, _ in keys]
    win = [np.mean([np.mean(p["win_vs_sft"][k]) for p in per_seed]) for k, _ in keys]
    ax.plot(xs, kl, marker="o", color="C1", label="seqKL rejected")
    ax2 = ax.twinx()
    ax2.plot(xs, win, marker="s", color="C3", label="win rate vs SFT")
    ax.set(xlabel="α", ylabel="sequential KL (nats)", title="α sweep")
    ax2.set_ylabel("win rate vs SFT")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="center right", fontsize=8)
    fig.tight_layout()
    return fig


def plot_temperature(per_seed):
    plt = pyplot()
    temps = sorted(per_seed[0]["temps"])
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for m in ("sft", "dpo", "simpo", "tdpo2"):
        ax.plot(
            temps,
            [np.mean([p["temps"][t][m] for p in per_seed]) for t in temps],
            marker="o",
            label=f"FPO vs {LABEL[m]}",
        )
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="sampling temperature", ylabel="win rate", title="FPO's win rate by temperature")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
