"""LapSum reproduction: ``icml25 repro lapsum`` (quick: Parts A + C; full: A + C + B).

Claims checked (spec "Small-scale reproduction"):
A. soft top-k forward+backward is O(n log n) time and O(n) saved memory, exact (sum p = k), and
   faster than the O(n^2) NeuralSort / SoftSort relaxations at n = 4096 (k = n/2);
C. the LapSum top-k loss (P_K = [0,0,0,0,1], alpha = 3) gives a better top-5 accuracy than softmax
   cross-entropy on a noisy 100-class task, for every seed;
B. (full) LapSum permutation learning is on par with NeuralSort on digit-number sets.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from icml25.lapsum import experiments as ex
from icml25.report import (
    Metric,
    ReproResult,
    checks_table,
    pyplot,
    save_figure,
    torch_threads,
)

CLAIM = (
    "LapSum's closed-form inverse gives exact soft top-k with O(n log n) time and O(n) memory, "
    "beating O(n^2) relaxations at large n, and its top-k loss improves top-5 accuracy over "
    "softmax cross-entropy."
)
PAPER = (
    "Paper (secondary summary, unverified): CIFAR-100 ResNet-18 top-5 88.51 (LapSum) vs 86.94 "
    "(SinkhornSort) / 86.73 (DiffSortNets); large-MNIST permutation exact match n=3/5/7: "
    "94.2/85.3/74.1 vs NeuralSort 93.0/83.7/73.8; time and memory at or below every baseline."
)


def _sizes(quick: bool, smoke: bool) -> dict:
    if smoke:
        return dict(
            ns=[2**8, 2**9, 2**10],
            base=[2**8],
            sink=[2**8],
            repeats=1,
            seeds=[0],
            epochs=1,
            n_train=500,
            b_steps=20,
            b_sets=100,
            b_ns=[3],
        )
    if quick:
        return dict(
            ns=[2**10, 2**12, 2**14, 2**16, 2**18],
            base=[2**10, 2**11, 2**12],
            sink=[2**10, 2**12, 2**14],
            repeats=5,
            seeds=[0, 1, 2],
            epochs=30,
            n_train=5000,
            b_steps=2500,
            b_sets=2000,
            b_ns=[3, 5, 7],
        )
    return dict(
        ns=[2**10, 2**12, 2**14, 2**16, 2**18, 2**20],
        base=[2**10, 2**11, 2**12],
        sink=[2**10, 2**12, 2**14],
        repeats=5,
        seeds=[0, 1, 2, 3, 4],
        epochs=30,
        n_train=5000,
        b_steps=2500,
        b_sets=2000,
        b_ns=[3, 5, 7],
    )


def run(
    quick: bool = True, seed: int = 0, out: Path | str = Path("runs/lapsum"), *, smoke: bool = False
) -> ReproResult:
    """Run the reproduction; ``smoke=True`` shrinks every size (tests only, no verdict value)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with torch_threads(2):
        return _run(quick, seed, out, _sizes(quick, smoke), t0, smoke)


def _run(quick: bool, seed: int, out: Path, z: dict, t0: float, smoke: bool) -> ReproResult:
    metrics: list[Metric] = []
    checks: dict[str, bool] = {}
    figures: list[Path] = []
    notes: list[str] = []

    # Part A: scaling, memory, exactness
    timing = ex.scaling(z["ns"], z["base"], z["sink"], repeats=z["repeats"])
    lap = timing["LapSum"]
    fit_ns = [n for n in z["ns"] if 2**12 <= n <= 2**18] or z["ns"]
    slope = ex.loglog_slope(fit_ns, [lap[n]["seconds"] for n in fit_ns])
    n_cmp = max(z["base"])
    speedups = {
        name: timing[name][n_cmp]["seconds"] / lap[n_cmp]["seconds"]
        for name in ("NeuralSort", "SoftSort")
        if n_cmp in timing[name] and n_cmp in lap
    }
    mem_ok = all(v["saved_bytes"] <= 3 * n * 4 + 4096 for n, v in lap.items())
    exact = ex.exactness()
    worst_vjp = max(exact["vjp_rel_error"].values())
    checks["A1 slope <= 1.3"] = slope <= 1.3
    checks["A2 >= 5x faster than NeuralSort and SoftSort"] = (
        bool(speedups) and min(speedups.values()) >= 5
    )
    checks["A3 saved bytes <= 12n + 4096"] = mem_ok
    checks["A4 exact sum and VJP"] = exact["sum_error"] <= 1e-9 * exact["n"] and worst_vjp <= 1e-6
    metrics += [
        Metric(
            "A1 log-log slope of LapSum time, n in [2^12, 2^18]",
            slope,
            description="fwd+bwd, B=1, k=n/2, alpha=1; pass <= 1.3",
        ),
        *[
            Metric(f"A2 speed-up vs {name} at n={n_cmp}", s, unit="x", description="pass >= 5x")
            for name, s in speedups.items()
        ],
        Metric(f"A2 LapSum fwd+bwd at n={n_cmp}", lap[n_cmp]["seconds"] * 1e3, unit="ms")
        if n_cmp in lap
        else Metric("A2 LapSum fwd+bwd", float("nan")),
        Metric(
            "A3 max saved bytes / (4n)",
            max(v["saved_bytes"] / (4 * n) for n, v in lap.items()),
            description="pass <= 3 (+4096 bytes)",
        ),
        Metric(
            "A4 max |sum p - k| (float64, n=1000)", exact["sum_error"], description="pass <= 1e-6"
        ),
        Metric(
            "A4 max VJP relative error (finite differences)", worst_vjp, description="pass <= 1e-6"
        ),
    ]
    if not quick and not smoke:  # spec: full mode adds B = 64 at n = 2^12 (LapSum only)
        from icml25.lapsum.bench import time_fwd_bwd

        x64 = torch.randn(64, 2**12, generator=torch.Generator().manual_seed(0))
        t64 = time_fwd_bwd(lambda x: ex.soft_topk(x, 2**11, 1.0), x64, repeats=z["repeats"])
        metrics.append(Metric("A LapSum fwd+bwd at B=64, n=4096", t64 * 1e3, unit="ms"))
    figures += _plot_scaling(timing, out)
    figures.append(_plot_profiles(out))
    table = [
        "| method | " + " | ".join(f"n=2^{n.bit_length() - 1}" for n in z["ns"]) + " |",
        "|---|" + "---|" * len(z["ns"]),
    ]
    for name, rows in timing.items():
        cells = [f"{rows[n]['seconds'] * 1e3:.1f} ms" if n in rows else "—" for n in z["ns"]]
        table.append(f"| {name} | " + " | ".join(cells) + " |")
    tables = [
        "Part A, forward+backward median wall time (2 threads, float32):\n\n" + "\n".join(table)
    ]

    # Part C: top-k classification
    seeds = [seed + s for s in z["seeds"]]
    runs = {
        name: [
            ex.train_probe(name, s, epochs=z["epochs"], n_train=z["n_train"], n_test=z["n_train"])
            for s in seeds
        ]
        for name in ("ce", "lapsum")
    }
    if not quick:
        extra_seeds = seeds[:3]
        for alpha in (0.3, 1.0, 3.0):
            for p_k, tag in (
                ([0, 0, 0, 0, 1], "[0,0,0,0,1]"),
                ([0.25, 0, 0, 0, 0.75], "[.25,0,0,0,.75]"),
            ):
                runs[f"lapsum P_K={tag} alpha={alpha}"] = [
                    ex.train_probe(
                        "lapsum",
                        s,
                        epochs=z["epochs"],
                        alpha=alpha,
                        p_k=p_k,
                        n_train=z["n_train"],
                        n_test=z["n_train"],
                    )
                    for s in extra_seeds
                ]
        for kind in ("neuralsort", "softsort"):
            runs[f"{kind} top-5 (m=16)"] = [
                ex.train_probe(
                    kind, s, epochs=z["epochs"], n_train=z["n_train"], n_test=z["n_train"]
                )
                for s in extra_seeds
            ]
    gains = [(b["top5"] - a["top5"]) * 100 for a, b in zip(runs["ce"], runs["lapsum"])]
    checks["C top-5 gain > 0 every seed, mean >= 0.5 pt"] = all(g > 0 for g in gains) and (
        sum(gains) / len(gains) >= 0.5
    )
    for name, rs in runs.items():
        label = {"ce": "CE", "lapsum": "LapSum P_K=[0,0,0,0,1] alpha=3"}.get(name, name)
        metrics.append(Metric(f"C top-5 {label}", [r["top5"] for r in rs]))
        metrics.append(Metric(f"C top-1 {label}", [r["top1"] for r in rs]))
    metrics.append(
        Metric(
            "C top-5 gain LapSum - CE (points)",
            gains,
            unit="pt",
            description="paired by seed; pass: every seed > 0 and mean >= 0.5",
        )
    )
    figures.append(_plot_accuracy(runs, out))

    # Part B (full mode): permutation learning
    if not quick:
        b_runs: dict[int, dict[str, list[dict]]] = {}
        for n in z["b_ns"]:
            if n == 7 and ex.elapsed_since(t0) > 28 * 60 * 0.7:
                notes.append("Part B n=7 skipped: the run was close to its 30-minute budget.")
                continue
            b_runs[n] = {
                loss: [
                    ex.permutation_learning(
                        loss, n, seed + s, steps=z["b_steps"], eval_sets=z["b_sets"]
                    )
                    for s in (0, 1, 2)
                ]
                for loss in ("lapsum", "neuralsort")
            }
        ok = True
        for n, res in b_runs.items():
            em = {k: [r["exact"] for r in v] for k, v in res.items()}
            metrics.append(Metric(f"B exact match n={n} LapSum", em["lapsum"]))
            metrics.append(Metric(f"B exact match n={n} NeuralSort", em["neuralsort"]))
            mean = {k: sum(v) / len(v) for k, v in em.items()}
            ok &= mean["lapsum"] >= mean["neuralsort"] - 0.07
            if n == 5:
                ok &= mean["lapsum"] >= 0.30
        checks["B LapSum >= NeuralSort - 0.07 (each n), >= 0.30 at n=5"] = ok and bool(b_runs)
        figures.append(_plot_permutation(b_runs, out))

    held = all(checks.values())
    failed = [k for k, v in checks.items() if not v]
    if failed:
        notes.append("Checks that failed: " + "; ".join(failed) + ".")
    if smoke:
        notes.append("Smoke size: every size shrunk for a test; the verdict means nothing here.")
    tables.append(checks_table(checks))
    return ReproResult(
        slug="lapsum",
        claim=CLAIM,
        held=held,
        metrics=metrics,
        key_metric="C top-5 gain LapSum - CE (points)",
        setup=(
            f"Part A: soft top-k fwd+bwd, B=1, k=n/2, alpha=1, n in {z['ns']}, median of "
            f"{z['repeats']} after 1 warm-up, 2 threads; NeuralSort/SoftSort (tau=1) at n in "
            f"{z['base']}, SOFT top-k (Sinkhorn, 100 iterations) at n in {z['sink']}. Part C: "
            f"linear probe on a noisy 100-class Gaussian task (32-d, 40% structured label noise), "
            f"Adam 1e-2, batch 128, {z['epochs']} epochs, seeds {seeds}."
            + (
                " Part B: MLP scores 2-digit numbers from sklearn digits, 2500 steps, seeds 0-2."
                if not quick
                else ""
            )
        ),
        criterion="All of: " + "; ".join(checks) + ".",
        figures=figures,
        tables=tables,
        notes=" ".join(notes + [PAPER]),
        deviations=[
            "Small synthetic stand-ins for CIFAR-100 / ImageNet-21K-P (linear probe on a noisy "
            "100-class Gaussian task) and for large-MNIST (sklearn 8x8 digits, 2-digit numbers, MLP).",
            "Part C's alpha=3 and P_K=[0,0,0,0,1] are the spec's choice; the paper's per-table alpha "
            "and top1_mode are unverified.",
            "Saved-for-backward bytes count each stored tensor once (torch packs a custom "
            "Function's saved input twice; it is one buffer).",
        ],
        seconds=time.perf_counter() - t0,
        quick=quick,
        seed=seed,
    )


def _plot_scaling(timing: dict, out: Path) -> list[Path]:
    plt = pyplot()
    paths = []
    for key, fname, ylabel in (
        ("seconds", "scaling_time.png", "fwd+bwd seconds"),
        ("saved_bytes", "scaling_memory.png", "saved bytes"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, rows in timing.items():
            ns = sorted(rows)
            ax.loglog(ns, [rows[n][key] for n in ns], "o-", label=name)
        lap = timing["LapSum"]
        n0 = min(lap)
        ns = sorted(lap)
        for p, style in ((1, ":"), (2, "--")):
            ax.loglog(
                ns,
                [lap[n0][key] * (n / n0) ** p for n in ns],
                "k" + style,
                lw=0.8,
                label=f"slope {p}",
            )
        ax.set_xlabel("n")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        ax.set_title(f"soft top-k, k = n/2: {ylabel}")
        paths.append(save_figure(fig, out / fname))
    return paths


def _plot_profiles(out: Path) -> Path:
    from icml25.lapsum.functional import soft_topk

    plt = pyplot()
    r = torch.linspace(-3, 3, 50, dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(6, 4))
    for alpha in (0.03, 0.3, 3.0):
        ax.plot(r, soft_topk(r, 10, alpha), label=f"alpha={alpha}")
    ax.set_xlabel("sorted score r")
    ax.set_ylabel("soft top-k membership p")
    ax.set_title("n=50, k=10: sharper as alpha -> 0")
    ax.legend()
    return save_figure(fig, out / "topk_profiles.png")


def _plot_accuracy(runs: dict, out: Path) -> Path:
    plt = pyplot()
    names = list(runs)
    shown = {"ce": "CE", "lapsum": "LapSum P_K=[0,0,0,0,1] alpha=3"}
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names)), 4))
    for j, key in enumerate(("top1", "top5")):
        means = [sum(r[key] for r in runs[n]) / len(runs[n]) for n in names]
        sds = [
            torch.tensor([r[key] for r in runs[n]]).std().item() if len(runs[n]) > 1 else 0
            for n in names
        ]
        xs = [i + 0.4 * j for i in range(len(names))]
        ax.bar(xs, means, 0.4, yerr=sds, label=key, capsize=3)
    ax.set_xticks([i + 0.2 for i in range(len(names))])
    ax.set_xticklabels([shown.get(n, n) for n in names], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("test accuracy")
    ax.set_title("noisy 100-class task, linear probe")
    ax.legend()
    return save_figure(fig, out / "topk_accuracy.png")


def _plot_permutation(b_runs: dict, out: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for j, loss in enumerate(("lapsum", "neuralsort")):
        ns = sorted(b_runs)
        means = [sum(r["exact"] for r in b_runs[n][loss]) / 3 for n in ns]
        ax.bar([i + 0.4 * j for i in range(len(ns))], means, 0.4, label=loss)
    ax.set_xticks([i + 0.2 for i in range(len(b_runs))])
    ax.set_xticklabels([f"n={n}" for n in sorted(b_runs)])
    ax.set_ylabel("exact-match accuracy")
    ax.legend()
    return save_figure(fig, out / "permutation_accuracy.png")
