"""SWAN reproduction: ``icml25 repro swan`` on a tiny LLaMA trained on the Python stdlib's source.

Claims (spec "Small-scale reproduction"): (C1) zero optimizer state on the hidden matrices, with
exact byte accounting; (C2) at equal tokens SWAN's eval loss matches or beats AdamW and clearly
beats SGD; full mode adds (C3) SWAN reaches AdamW's final loss with <= 0.75x the tokens and (C4)
removing GradWhitening hurts, plus seed spread, anchors (Muon, SinkGD) and a wider model.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from icml25.report import (
    Metric,
    ReproResult,
    checks_table,
    pyplot,
    save_figure,
    torch_threads,
)
from icml25.swan import memory
from icml25.swan.data import eval_windows, load_stdlib_corpus, train_tokenizer
from icml25.swan.training import ModelConfig, RunResult, train_run

CLAIM = (
    "Stateless SGD with GradNorm and GradWhitening (SWAN) keeps no optimizer state on the hidden "
    "matrices yet matches or beats Adam's loss at equal tokens, reaching it with fewer tokens."
)
# quick-mode learning rates (spec: AdamW 3e-3, SWAN 1e-3; SGD: best of {0.3, 1, 3} measured here)
QUICK_LR = {"adamw": 3e-3, "swan": 1e-3, "sgd": 1.0}
SWEEP = {
    "adamw": [1e-3, 3e-3, 1e-2],
    "sgd": [0.3, 1.0, 3.0],
    "swan": [3e-4, 1e-3, 3e-3],
    "muon": [0.02, 0.05],
    "sinkgd": [1e-3, 3e-3],
}


def _sizes(quick: bool, smoke: bool) -> dict:
    if smoke:
        return dict(
            train_chars=200_000,
            eval_chars=60_000,
            tok_chars=200_000,
            steps=20,
            long_steps=20,
            eval_windows=16,
            cfg=dict(hidden=32, ff=64, layers=1, seq=32),
            seeds=[0],
            sweep_steps=12,
            wide_steps=12,
        )
    if quick:
        return dict(
            train_chars=2_000_000,
            eval_chars=300_000,
            tok_chars=1_000_000,
            steps=300,
            eval_windows=64,
            cfg={},
            seeds=[0],
        )
    return dict(
        train_chars=None,
        eval_chars=None,
        tok_chars=1_000_000,
        steps=300,
        long_steps=600,
        eval_windows=None,
        cfg={},
        seeds=[0, 1, 2],
        sweep_steps=300,
        wide_steps=400,
    )


def run(
    quick: bool = True, seed: int = 0, out: Path | str = Path("runs/swan"), *, smoke: bool = False
) -> ReproResult:
    """Run the reproduction (``smoke=True`` shrinks everything for tests: no verdict value)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with torch_threads(2):
        return _run(quick, seed, out, _sizes(quick, smoke), smoke)


def _prepare(z: dict):
    corpus = load_stdlib_corpus()
    tok = train_tokenizer(corpus.train[: z["tok_chars"]])
    train_text = corpus.train if z["train_chars"] is None else corpus.train[: z["train_chars"]]
    eval_text = corpus.eval if z["eval_chars"] is None else corpus.eval[: z["eval_chars"]]
    train_ids = torch.tensor(tok.encode(train_text).ids)
    eval_ids = torch.tensor(tok.encode(eval_text).ids)
    return corpus, tok, train_ids, eval_ids


def _mean_curve(runs: list[RunResult]) -> tuple[list[int], list[float]]:
    return runs[0].tokens, [
        statistics.fmean(r.eval_ce[i] for r in runs) for i in range(len(runs[0].tokens))
    ]


def tokens_to_target(tokens: list[int], curve: list[float], target: float) -> float | None:
    """First token count (linear interpolation) at which ``curve`` reaches ``target``."""
    for i in range(1, len(curve)):
        if curve[i] <= target:
            a, b = curve[i - 1], curve[i]
            frac = 1.0 if a == b else (a - target) / (a - b)
            return tokens[i - 1] + frac * (tokens[i] - tokens[i - 1])
    return None


def _run(quick: bool, seed: int, out: Path, z: dict, smoke: bool) -> ReproResult:
    t0 = time.perf_counter()
    corpus, tok, train_ids, eval_ids = _prepare(z)
    cfg = ModelConfig(vocab=tok.get_vocab_size(), **z["cfg"])
    ev = eval_windows(eval_ids, cfg.seq, z["eval_windows"])
    checks: dict[str, bool] = {}
    metrics: list[Metric] = []
    notes: list[str] = []
    tables: list[str] = []
    lrs = dict(QUICK_LR)
    seeds = [seed + s for s in z["seeds"]]

    if not quick:  # lr sweep on the first seed
        sweep_rows = ["| optimizer | lr | final eval CE |", "|---|---|---|"]
        for name, grid in SWEEP.items():
            finals = {}
            for lr in grid:
                r = train_run(name, lr, seeds[0], z["sweep_steps"], train_ids, ev, cfg)
                finals[lr] = r.final if r.final == r.final else float("inf")  # NaN -> inf
                sweep_rows.append(f"| {name} | {lr:g} | {r.final:.4f} |")
            lrs[name] = min(finals, key=finals.get)
        tables.append(
            "Learning-rate sweep (seed 0, "
            + str(z["sweep_steps"])
            + " steps):\n\n"
            + "\n".join(sweep_rows)
        )
    steps = z["steps"] if quick else z["long_steps"]
    main = {
        name: [train_run(name, lrs[name], s, steps, train_ids, ev, cfg) for s in seeds]
        for name in ("adamw", "swan", "sgd")
    }
    extra: dict[str, list[RunResult]] = {}
    if not quick:
        for name in ("muon", "sinkgd"):
            extra[name] = [train_run(name, lrs[name], seeds[0], steps, train_ids, ev, cfg)]
        for name in ("swan_no_whiten", "swan_no_norm"):
            extra[name] = [train_run(name, lrs["swan"], seeds[0], steps, train_ids, ev, cfg)]

    # C1: exact memory accounting
    swan_r, adamw_r = main["swan"][0], main["adamw"][0]
    c1 = (
        swan_r.swan_params_with_state == 0
        and swan_r.state_bytes == swan_r.expected_state_bytes
        and adamw_r.state_bytes == adamw_r.expected_state_bytes
    )
    checks["C1 zero state on SWAN matrices, exact bytes"] = c1
    totals = {
        name: r[0].param_bytes + r[0].grad_bytes + r[0].state_bytes for name, r in main.items()
    }
    for name, total in totals.items():
        metrics.append(Metric(f"C1 params+grads+state bytes, {name}", total, unit="B"))
    metrics.append(
        Metric(
            "C1 SWAN / AdamW total bytes",
            totals["swan"] / totals["adamw"],
            description="tiny model: embeddings dominate, see notes",
        )
    )
    metrics.append(
        Metric(
            "C1 SWAN optimizer state bytes",
            swan_r.state_bytes,
            unit="B",
            description=f"= AdamW state of the non-SWAN params ({swan_r.expected_state_bytes} B)",
        )
    )
    table = memory.analytic_table()
    metrics.append(Metric("C1 analytic SWAN / AdamW bytes at 1.3B (bf16)", table[-1]["ratio"]))
    tables.append(
        "Exact bytes on this model (fp32):\n\n| optimizer | params | grads | optimizer state | total |\n"
        "|---|---|---|---|---|\n"
        + "\n".join(
            f"| {name} | {r[0].param_bytes:,} | {r[0].grad_bytes:,} | {r[0].state_bytes:,} | "
            f"{totals[name]:,} |"
            for name, r in main.items()
        )
    )
    if not smoke:  # report only: RSS deltas of a small model are allocator noise on CPU
        peaks = memory.peak_step_memory(("adamw", "swan", "sgd"), vocab=cfg.vocab)
        for name, delta in peaks.items():
            metrics.append(
                Metric(
                    f"peak RSS over fwd/bwd, {name} (CPU, noisy)",
                    delta / 1e6,
                    unit="MB",
                    description="fresh subprocess each; within allocator noise",
                )
            )

    # C2: equal-token losses
    finals = {name: [r.final for r in rs] for name, rs in main.items()}
    mean = {name: statistics.fmean(v) for name, v in finals.items()}
    checks["C2 SWAN <= AdamW + 0.02 and <= SGD - 0.30"] = (
        mean["swan"] <= mean["adamw"] + 0.02 and mean["swan"] <= mean["sgd"] - 0.30
    )
    for name, vals in finals.items():
        metrics.append(Metric(f"C2 final eval CE {name} (lr {lrs[name]:g})", vals))
    metrics.append(
        Metric(
            "C2 SWAN - AdamW final eval CE",
            [s - a for s, a in zip(finals["swan"], finals["adamw"])],
            description="paired by seed; pass <= +0.02",
        )
    )
    finite = all(
        x == x and abs(x) != float("inf")
        for rs in main.values()
        for r in rs
        for x in r.eval_ce + r.train_loss
    )
    improved = all(r.eval_ce[0] - r.final >= 1.0 for n in ("swan", "adamw") for r in main[n])
    checks["losses finite, SWAN and AdamW improve >= 1 nat"] = finite and improved
    metrics.append(
        Metric(
            "row-sum drift max|W1 - W0 1| of SWAN matrices",
            swan_r.row_sum_drift,
            description="0 in exact arithmetic (GradNorm centring)",
        )
    )
    for name, rs in {**main, **extra}.items():
        metrics.append(
            Metric(
                f"step time {name}",
                rs[0].step_seconds * 1e3,
                unit="ms",
                description=f"optimizer.step alone {rs[0].opt_step_seconds * 1e3:.2f} ms",
            )
        )

    ratio = None
    if not quick:
        tok_a, curve_a = _mean_curve(main["adamw"])
        tok_s, curve_s = _mean_curve(main["swan"])
        hit = tokens_to_target(tok_s, curve_s, curve_a[-1])
        ratio = None if hit is None else hit / tok_a[-1]
        checks["C3 SWAN reaches AdamW's final CE with <= 0.75x tokens"] = (
            ratio is not None and ratio <= 0.75
        )
        metrics.append(
            Metric(
                "C3 tokens-to-AdamW-final ratio",
                float("nan") if ratio is None else ratio,
                description="paper: 0.5 at 350M/1.3B; pass <= 0.75",
            )
        )
        no_white = extra["swan_no_whiten"][0].final
        checks["C4 no-whitening ablation >= SWAN + 0.03"] = no_white >= main["swan"][0].final + 0.03
        for name in ("swan_no_whiten", "swan_no_norm", "muon", "sinkgd"):
            metrics.append(Metric(f"final eval CE {name} (seed {seeds[0]})", extra[name][0].final))
        sd = statistics.stdev(finals["swan"]) if len(finals["swan"]) > 1 else 0.0
        checks["spread: SWAN seed std < 0.05"] = sd < 0.05
        wide = ModelConfig(
            vocab=cfg.vocab,
            hidden=2 * cfg.hidden,
            ff=344 if not smoke else 96,
            layers=4 if not smoke else 1,
            seq=2 * cfg.seq,
        )
        ev_w = eval_windows(eval_ids, wide.seq, z["eval_windows"])
        wide_runs = {
            n: train_run(n, lrs[n], seeds[0], z["wide_steps"], train_ids, ev_w, wide)
            for n in ("adamw", "swan")
        }
        metrics.append(Metric("wider model (H=128, L=4) final CE AdamW", wide_runs["adamw"].final))
        metrics.append(Metric("wider model (H=128, L=4) final CE SWAN", wide_runs["swan"].final))

    figures = [_plot_curves(main, extra, out), _plot_memory(totals, main, table, out)]
    held = all(checks.values())
    failed = [k for k, v in checks.items() if not v]
    if failed:
        notes.append("Checks that failed: " + "; ".join(failed) + ".")
    notes.append(
        f"Memory: on this {swan_r.param_bytes // 4:,}-parameter model the "
        "embeddings and head (kept on AdamW) hold most parameters, so SWAN saves only the moments "
        "of the hidden matrices; the analytic ratio for the paper's 1.3B config (bf16) is "
        f"{table[-1]['ratio']:.2f}. SGD's ratio is lower still because it keeps no state at all."
    )
    if smoke:
        notes.append("Smoke size: everything shrunk for a test; the verdict means nothing here.")
    tables.append(checks_table(checks))
    tables.append(
        "Analytic params+grads+state bytes, GaLore LLaMA configs (bf16):\n\n"
        "| config | hidden params | other params | AdamW | SWAN | ratio |\n|---|---|---|---|---|---|\n"
        + "\n".join(
            f"| {r['config']} | {r['hidden_params'] / 1e6:.1f} M | "
            f"{r['other_params'] / 1e6:.1f} M | {r['adamw_bytes'] / 1e9:.3f} GB | "
            f"{r['swan_bytes'] / 1e9:.3f} GB | {r['ratio']:.2f} |"
            for r in table
        )
    )
    return ReproResult(
        slug="swan",
        claim=CLAIM,
        held=held,
        metrics=metrics,
        key_metric="C2 SWAN - AdamW final eval CE",
        setup=(
            f"Tiny LLaMA (H={cfg.hidden}, FF={cfg.ff}, L={cfg.layers}, S={cfg.seq}, vocab "
            f"{cfg.vocab}) trained from scratch on {corpus.n_files} stdlib files (train sha256 "
            f"{corpus.train_sha256[:12]}, eval {corpus.eval_sha256[:12]}); batches of 16 windows, "
            f"{steps} steps, warm-up 10% then cosine to 10%, no weight decay, seeds {seeds}; "
            f"lrs {lrs}; SWAN = GradNorm + NS whitening (beta 0.8, 10 steps), embed/head/norms on "
            "AdamW 3e-3."
        ),
        criterion="All of: " + "; ".join(checks) + ".",
        figures=figures,
        tables=tables,
        notes=" ".join(notes),
        deviations=[
            "A 0.36 M-parameter LLaMA on 0.6-1.3 M tokens of Python source instead of 60M-1.3B LLaMA "
            "on C4 with 1-13 B tokens; the paper's 0.5x token claim is checked as <= 0.75x.",
            "NS beta=0.8, 10 steps and lr 1e-3 (rescale 'rms') are library choices: the paper's "
            "hyperparameter appendix could not be read (unverified).",
            "C3 uses AdamW at its best swept lr and SWAN at its best swept lr, same schedule.",
        ],
        seconds=time.perf_counter() - t0,
        quick=quick,
        seed=seed,
    )


def _plot_curves(main: dict, extra: dict, out: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, rs in {**main, **extra}.items():
        tokens = [t / 1e3 for t in rs[0].tokens]
        curves = list(zip(*(r.eval_ce for r in rs)))
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
    target = statistics.fmean(r.final for r in main["adamw"])
    ax.axhline(target, color="k", ls=":", lw=0.8, label="AdamW final")
    ax.set_xlabel("tokens seen (thousands)")
    ax.set_ylabel("eval cross-entropy (nats)")
    ax.set_ylim(top=min(8.0, ax.get_ylim()[1]))
    ax.legend(fontsize=7)
    ax.set_title("tiny LLaMA on stdlib source: eval loss vs tokens")
    return save_figure(fig, out / "curves.png")


def _plot_memory(totals: dict, main: dict, table: list, out: Path) -> Path:
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
    cfgs = [r["config"] for r in table]
    xs = range(len(cfgs))
    b.bar([x - 0.2 for x in xs], [r["adamw_bytes"] / 1e9 for r in table], 0.4, label="AdamW")
    b.bar([x + 0.2 for x in xs], [r["swan_bytes"] / 1e9 for r in table], 0.4, label="SWAN")
    b.set_xticks(list(xs))
    b.set_xticklabels(cfgs)
    b.set_ylabel("GB, params+grads+state (bf16)")
    b.set_title("analytic, GaLore LLaMA configs")
    b.legend()
    return save_figure(fig, out / "memory.png")
