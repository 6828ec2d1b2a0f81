"""SWAN reproduction: ``icml25 repro swan`` on a tiny LLaMA trained on the Python stdlib's source.

Claims (docs/swan.md, "Reproduction"): (C1) zero optimizer state on the hidden matrices, with
exact byte accounting; (C2) at equal tokens SWAN's eval loss matches or beats AdamW and clearly
beats SGD; full mode adds (C3) SWAN reaches AdamW's final loss with <= 0.75x the tokens and (C4)
removing GradWhitening hurts, plus seed spread, anchors (Muon, SinkGD) and a wider model.

Every optimizer of a seed trains the same initial model on the same window order, so the loss
comparisons are paired by seed. The module reads: constants and pre-registered criteria -> setup
-> per-seed training -> checks -> figures.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import torch

from icml25.report import Check, Criterion, Metric, ReproResult, Run, pyplot, reproduction
from icml25.swan import memory
from icml25.swan.data import eval_windows, load_stdlib_corpus, train_tokenizer
from icml25.swan.training import ModelConfig, RunResult, train_run

CLAIM = (
    "Stateless SGD with GradNorm and GradWhitening (SWAN) keeps no optimizer state on the hidden "
    "matrices yet matches or beats Adam's loss at equal tokens, reaching it with fewer tokens."
)
# quick-mode learning rates (docs/swan.md: AdamW 3e-3, SWAN 1e-3; SGD: best of {0.3, 1, 3} measured here)
QUICK_LR = {"adamw": 3e-3, "swan": 1e-3, "sgd": 1.0}
SWEEP = {
    "adamw": [1e-3, 3e-3, 1e-2],
    "sgd": [0.3, 1.0, 3.0],
    "swan": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2],  # widened: the best sat at the old grid's edge
    "muon": [0.02, 0.05],
    "sinkgd": [1e-3, 3e-3],
}
#: pre-registered seed counts (quick, full), sized for the C2 check (see ``POWER``)
SEEDS = (5, 6)
#: optimizers trained on every seed; full mode adds the no-whitening ablation (C4)
ARMS = ("adamw", "swan", "sgd")
ARMS_FULL = (*ARMS, "swan_no_whiten")

# -- pre-registered criteria (thresholds as planned; fixed before any number) ----------------

C1_STATE = Criterion(
    "C1 SWAN matrices holding optimizer state",
    "exact",
    below=0,
    unit="tensors",
    description="hidden matrices with a non-empty optimizer state after training, max over seeds",
)
C1_BYTES = Criterion(
    "C1 optimizer state bytes off the analytic count",
    "exact",
    below=0,
    unit="B",
    description="|measured - analytic| optimizer state bytes, max over seeds",
)
C2_ADAMW = Criterion(
    "C2 SWAN - AdamW final eval CE",
    "paired",
    below=0.02,
    unit="nats",
    # paper (an unverified recollection): SWAN vs Adam eval perplexity 14.42 vs 15.56 at
    # 1B, the smallest of the four configs' gaps: ln(14.42 / 15.56) = -0.076, 0.096 below +0.02
    paper_effect=0.096,
    description="final eval CE at equal tokens, SWAN minus AdamW on the same seed (margin +0.02)",
)
C2_SGD = Criterion(
    "C2 SWAN - SGD final eval CE",
    "paired",
    below=-0.30,
    unit="nats",
    description="final eval CE at equal tokens, SWAN minus SGD on the same seed",
)
FINITE = Criterion(
    "losses finite: non-finite logged losses",
    "exact",
    below=0,
    unit="values",
    description="count of NaN/inf train and eval losses over every per-seed run",
)
IMPROVES = Criterion(
    "eval CE drop from the initial model",
    "mean",
    above=1.0,
    unit="nats",
    description="eval CE of the initial model minus the final eval CE, one value per seed",
)
C3_TOKENS = Criterion(
    "C3 tokens to reach AdamW's final eval CE, SWAN / AdamW",
    "mean",
    below=0.75,
    unit="x",
    paper_effect=0.25,  # the paper's 0.5x at 350M / 1.3B against our 0.75x bar
    description=(
        "per seed: tokens at which SWAN's eval curve first reaches that seed's AdamW final eval "
        "CE (linear interpolation), over AdamW's total tokens; never reached counts as 1"
    ),
)
C4_WHITEN = Criterion(
    "C4 no-whitening ablation - SWAN final eval CE",
    "paired",
    above=0.03,
    unit="nats",
    description="SWAN without GradWhitening minus SWAN, same seed and lr",
)
SPREAD = Criterion(
    "spread: ln of SWAN's seed sd of final eval CE",
    "mean",
    below=math.log(0.05),
    unit="ln nats",
    description=(
        "jackknife pseudo-values of ln(sd) over seeds (Tukey's jackknife t-interval); the bar "
        "ln 0.05 = -3.0 is the planned sd < 0.05 nats"
    ),
)
CRITERIA = (C1_STATE, C1_BYTES, C2_ADAMW, C2_SGD, FINITE, IMPROVES, C3_TOKENS, C4_WHITEN, SPREAD)

POWER = (
    "Sized on the previous full run's per-seed spread of SWAN - AdamW (sd 0.05 nats over 3 seeds "
    "at 600 steps; the quick run had one seed, so its spread at 300 steps is assumed the same): "
    "with 5 quick seeds the C2 AdamW check detects (80% power) a gap 0.083 nats beyond the +0.02 "
    "margin, with 6 full seeds 0.071; the paper's gap is 0.096 (1B, from an unverified "
    "recollection of its table). C3's per-seed spread was not measured before; with 6 seeds it "
    "detects 0.21x beyond 0.75x if its sd is 0.15x (the paper's 0.5x is 0.25x beyond). Each "
    "check states the effect it detects from its own data."
)
DEVIATIONS = [
    "A 0.36 M-parameter LLaMA on 0.6-1.3 M tokens of Python source instead of 60M-1.3B LLaMA on "
    "C4 with 1-13 B tokens; the paper's 0.5x token claim is checked as <= 0.75x.",
    "NS beta=0.8, 10 steps and lr 1e-3 (rescale 'rms') are library choices: the paper's "
    "hyperparameter appendix could not be read (unverified).",
    "C3 uses AdamW at its best swept lr and SWAN at its best swept lr, same schedule.",
    "issue 17: quick mode trains 5 seeds instead of 1 and full mode 6 instead of 3, so that the "
    "loss comparisons are paired t-intervals over seeds sized for the paper's effect (see Power).",
    "issue 17: C2's rules on the seed means (SWAN <= AdamW + 0.02, <= SGD - 0.30) are paired "
    "t-intervals of the per-seed differences against the same margins; 'SWAN and AdamW improve "
    ">= 1 nat' in every run is a t-interval of the mean improvement against the same 1 nat; "
    "finiteness and C1 stay exact counts.",
    "issue 17: C3 was one ratio read off the seed-mean curves; it is now one ratio per seed (SWAN "
    "and AdamW share that seed's data and initial model), tested with a t-interval against the "
    "same 0.75. A seed whose SWAN curve never reaches AdamW's final loss counts as 1.0, a lower "
    "bound of its ratio. The seed-mean-curve ratio is still reported as a metric.",
    "issue 17: C4 used seed 0 only; the no-whitening ablation now trains on every seed and the "
    "+0.03 margin is tested on the paired differences. The finiteness count covers its runs.",
    "issue 17: the spread rule 'SWAN seed sd < 0.05' is tested with a jackknife t-interval of "
    "ln(sd) against ln 0.05 (the harness has no variance design; on normal data its one-sided "
    "error at n = 6 is about 3.7% where 2.5% is nominal, simulated). The chi-square interval is "
    "reported beside it.",
    "issue 17: torch runs on 1 thread (the harness default) instead of the planned 2, so step "
    "times are not comparable with earlier reports.",
    "issue 25: full mode tunes the learning rates on a seed that is never evaluated (10 000 + the "
    "largest evaluated seed; it was the first evaluated seed) and SWAN's grid is widened to "
    "1e-4 ... 1e-2 (its best sat at the old grid's edge). The smoke size trains 60 steps so its "
    "loss drop is a real check.",
]


def _sizes(r: Run) -> dict:
    return r.size(
        smoke=dict(
            train_chars=200_000,
            eval_chars=60_000,
            tok_chars=200_000,
            steps=60,
            long_steps=60,
            eval_windows=16,
            cfg=dict(hidden=32, ff=64, layers=1, seq=32),
            sweep_steps=60,  # as many steps as the runs it tunes the lr for
            wide_steps=12,
        ),
        quick=dict(
            train_chars=2_000_000,
            eval_chars=300_000,
            tok_chars=1_000_000,
            steps=300,
            eval_windows=64,
            cfg={},
        ),
        full=dict(
            train_chars=None,
            eval_chars=None,
            tok_chars=1_000_000,
            steps=300,
            long_steps=600,
            eval_windows=None,
            cfg={},
            sweep_steps=300,
            wide_steps=400,
        ),
    )


def tokens_to_target(tokens: list[int], curve: list[float], target: float) -> float | None:
    """First token count (linear interpolation) at which ``curve`` reaches ``target``."""
    for i in range(1, len(curve)):
        if curve[i] <= target:
            a, b = curve[i - 1], curve[i]
            frac = 1.0 if a == b else (a - target) / (a - b)
            return tokens[i - 1] + frac * (tokens[i] - tokens[i - 1])
    return None


def _mean_curve(runs: list[RunResult]) -> tuple[list[int], list[float]]:
    return runs[0].tokens, [
        statistics.fmean(r.eval_ce[i] for r in runs) for i in range(len(runs[0].tokens))
    ]


def jackknife_log_sd(values: Sequence[float]) -> list[float]:
    """Tukey's jackknife pseudo-values of ``ln(sample sd)``: their mean and t-interval estimate
    ln(sd) (the harness's ``mean`` design). Needs at least 3 values with a non-zero spread."""
    x = [float(v) for v in values]
    n = len(x)
    if n < 3:
        raise ValueError(f"the jackknife of a standard deviation needs >= 3 values, got {n}")

    def log_sd(v: list[float]) -> float:
        sd = statistics.stdev(v)
        if sd <= 0:
            raise ValueError(f"the values {v} have no spread: ln(sd) is undefined")
        return math.log(sd)

    full = log_sd(x)
    return [n * full - (n - 1) * log_sd(x[:i] + x[i + 1 :]) for i in range(n)]


def _chi2_sd_interval(values: Sequence[float]) -> tuple[float, float]:
    from scipy import stats

    n, sd = len(values), statistics.stdev(values)
    return (
        sd * math.sqrt((n - 1) / stats.chi2.ppf(0.975, n - 1)),
        sd * math.sqrt((n - 1) / stats.chi2.ppf(0.025, n - 1)),
    )


# -- setup -----------------------------------------------------------------------------------


def _prepare(z: dict):
    corpus = load_stdlib_corpus()
    tok = train_tokenizer(corpus.train[: z["tok_chars"]])
    train_text = corpus.train if z["train_chars"] is None else corpus.train[: z["train_chars"]]
    eval_text = corpus.eval if z["eval_chars"] is None else corpus.eval[: z["eval_chars"]]
    train_ids = torch.tensor(tok.encode(train_text).ids)
    eval_ids = torch.tensor(tok.encode(eval_text).ids)
    return corpus, tok, train_ids, eval_ids


def tuning_seed(seeds: list[int]) -> int:
    """The learning rates are tuned on this seed, disjoint from the evaluated ``seeds``."""
    return 10_000 + max(seeds)


def _sweep(seed: int, steps: int, train_ids, ev, cfg) -> tuple[dict, str]:
    """Full mode's lr sweep on one seed: the best lr per optimizer and the table."""
    lrs = dict(QUICK_LR)
    rows = ["| optimizer | lr | final eval CE |", "|---|---|---|"]
    for name, grid in SWEEP.items():
        finals = {}
        for lr in grid:
            res = train_run(name, lr, seed, steps, train_ids, ev, cfg)
            finals[lr] = res.final if math.isfinite(res.final) else float("inf")
            rows.append(f"| {name} | {lr:g} | {res.final:.4f} |")
        lrs[name] = min(finals, key=finals.get)
    return lrs, f"Learning-rate sweep (seed {seed}, {steps} steps):\n\n" + "\n".join(rows)


# -- per-seed measurement ----------------------------------------------------------------------


def _lr(lrs: dict, name: str) -> float:
    """An optimizer's lr; the SWAN ablations use SWAN's."""
    return lrs["swan"] if name.startswith("swan_") else lrs[name]


def measure_seed(seed: int, arms, lrs, steps, train_ids, ev, cfg) -> dict[str, RunResult]:
    """Every arm trained from the same initial model on the same window order of ``seed``."""
    return {name: train_run(name, _lr(lrs, name), seed, steps, train_ids, ev, cfg) for name in arms}


# -- checks ------------------------------------------------------------------------------------


def _finals(runs: list[RunResult]) -> list[float]:
    return [r.final for r in runs]


def _nonfinite(runs: list[RunResult]) -> int:
    return sum(1 for r in runs for x in r.eval_ce + r.train_loss if not math.isfinite(x))


def build_checks(main: dict[str, list[RunResult]], *, full: bool) -> tuple[list[Check], list[str]]:
    """The checks from the per-seed runs (``main[name][i]`` is seed i's run of ``name``), and
    notes on anything that could not be tested."""
    notes: list[str] = []
    swan, adamw = main["swan"], main["adamw"]
    checks = [
        C1_STATE.check(max(r.swan_params_with_state for r in swan)),
        C1_BYTES.check(max(abs(r.state_bytes - r.expected_state_bytes) for r in swan)).renamed(
            "C1 SWAN state bytes - AdamW state bytes of the non-SWAN params"
        ),
        C1_BYTES.check(max(abs(r.state_bytes - r.expected_state_bytes) for r in adamw)).renamed(
            "C1 AdamW state bytes - analytic 2 x bytes + 4 per tensor"
        ),
    ]
    bad = {name: _nonfinite(rs) for name, rs in main.items()}
    checks.append(FINITE.check(sum(bad.values())))
    ok = {name: n == 0 for name, n in bad.items()}
    if not all(ok.values()):
        notes.append(
            "Runs with non-finite losses, whose comparisons could not be tested (the claim "
            "cannot hold): " + ", ".join(f"{n} ({k} values)" for n, k in bad.items() if k) + "."
        )
    if ok["swan"] and ok["adamw"]:
        checks.append(C2_ADAMW.check(_finals(swan), _finals(adamw)))
    if ok["swan"] and ok["sgd"]:
        checks.append(C2_SGD.check(_finals(swan), _finals(main["sgd"])))
    for name, label in (("swan", "SWAN"), ("adamw", "AdamW")):
        if ok[name]:
            drops = [r.eval_ce[0] - r.final for r in main[name]]
            checks.append(IMPROVES.check(drops).renamed(f"C2 eval CE drop from init, {label}"))
    if not full:
        return checks, notes
    if ok["swan"] and ok["adamw"]:
        ratios, never = [], []
        for s, a in zip(swan, adamw):
            hit = tokens_to_target(s.tokens, s.eval_ce, a.final)
            ratios.append(1.0 if hit is None else hit / a.tokens[-1])
            if hit is None:
                never.append(s.seed)
        if never:
            notes.append(
                f"C3: on seed(s) {never} SWAN never reached AdamW's final eval CE within the "
                "budget; those ratios count as 1.0, a lower bound."
            )
        checks.append(C3_TOKENS.check(ratios))
    if ok["swan"] and ok["swan_no_whiten"]:
        checks.append(C4_WHITEN.check(_finals(main["swan_no_whiten"]), _finals(swan)))
    if ok["swan"]:
        checks.append(SPREAD.check(jackknife_log_sd(_finals(swan))))
    return checks, notes


# -- the reproduction --------------------------------------------------------------------------


@reproduction("swan", seeds=SEEDS, smoke_seeds=3)
def run(r: Run) -> ReproResult:
    """Train AdamW, SWAN and SGD (full: + the no-whitening ablation) on every seed; check C1-C4."""
    z = _sizes(r)
    full = not r.quick
    corpus, tok, train_ids, eval_ids = _prepare(z)
    cfg = ModelConfig(vocab=tok.get_vocab_size(), **z["cfg"])
    ev = eval_windows(eval_ids, cfg.seq, z["eval_windows"])
    tables: list[str] = []
    lrs = dict(QUICK_LR)
    if full:  # lr sweep on a tuning seed that is never evaluated
        lrs, sweep_table = _sweep(tuning_seed(r.seeds), z["sweep_steps"], train_ids, ev, cfg)
        tables.append(sweep_table)
    steps = z["long_steps"] if full else z["steps"]
    arms = ARMS_FULL if full else ARMS

    per_seed = r.over_seeds(
        lambda s: measure_seed(s, arms, lrs, steps, train_ids, ev, cfg), label="training"
    )
    main = {name: [runs[name] for runs in per_seed] for name in arms}
    extra: dict[str, list[RunResult]] = {}
    if full:  # anchors and the report-only GradNorm ablation, first seed
        for name in ("muon", "sinkgd"):
            extra[name] = [train_run(name, lrs[name], r.seeds[0], steps, train_ids, ev, cfg)]
        extra["swan_no_norm"] = [
            train_run("swan_no_norm", lrs["swan"], r.seeds[0], steps, train_ids, ev, cfg)
        ]

    checks, notes = build_checks(main, full=full)

    # -- reported, not tested --
    metrics: list[Metric] = []
    swan_r = main["swan"][0]
    totals = {
        name: rs[0].param_bytes + rs[0].grad_bytes + rs[0].state_bytes
        for name, rs in main.items()
        if name in ARMS
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
            f"| {name} | {main[name][0].param_bytes:,} | {main[name][0].grad_bytes:,} | "
            f"{main[name][0].state_bytes:,} | {total:,} |"
            for name, total in totals.items()
        )
    )
    if not r.smoke:  # report only: RSS deltas of a small model are allocator noise on CPU
        peaks = memory.peak_step_memory(ARMS, vocab=cfg.vocab)
        for name, delta in peaks.items():
            metrics.append(
                Metric(
                    f"peak RSS over fwd/bwd, {name} (CPU, noisy)",
                    delta / 1e6,
                    unit="MB",
                    description="fresh subprocess each; within allocator noise",
                )
            )
    for name, rs in main.items():
        metrics.append(Metric(f"C2 final eval CE {name} (lr {_lr(lrs, name):g})", _finals(rs)))
    diffs = [s - a for s, a in zip(_finals(main["swan"]), _finals(main["adamw"]))]
    metrics.append(
        Metric(
            "C2 SWAN - AdamW final eval CE",
            diffs,
            description="paired by seed; tested against +0.02",
        )
    )
    metrics.append(
        Metric(
            "C2 seeds with SWAN below AdamW",
            sum(d < 0 for d in diffs),
            description=f"of {len(diffs)} seeds (a count, not a test)",
        )
    )
    metrics.append(
        Metric(
            "row-sum drift max|W1 - W0 1| of SWAN matrices",
            [rr.row_sum_drift for rr in main["swan"]],
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
    if full:
        tok_a, curve_a = _mean_curve(main["adamw"])
        tok_s, curve_s = _mean_curve(main["swan"])
        hit = tokens_to_target(tok_s, curve_s, curve_a[-1])
        metrics.append(
            Metric(
                "C3 tokens-to-AdamW-final ratio of the seed-mean curves",
                float("nan") if hit is None else hit / tok_a[-1],
                description="the previous C3 statistic; paper: 0.5 at 350M/1.3B",
            )
        )
        for name in ("swan_no_norm", "muon", "sinkgd"):
            metrics.append(
                Metric(f"final eval CE {name} (seed {r.seeds[0]})", extra[name][0].final)
            )
        finals_swan = _finals(main["swan"])
        if all(math.isfinite(v) for v in finals_swan) and len(finals_swan) > 1:
            lo, hi = _chi2_sd_interval(finals_swan)
            metrics.append(
                Metric(
                    "spread: SWAN seed sd of final eval CE",
                    statistics.stdev(finals_swan),
                    unit="nats",
                    description=f"chi-square 95% interval [{lo:.3g}, {hi:.3g}] (normal theory)",
                )
            )
        wide = ModelConfig(
            vocab=cfg.vocab,
            hidden=2 * cfg.hidden,
            ff=96 if r.smoke else 344,
            layers=1 if r.smoke else 4,
            seq=2 * cfg.seq,
        )
        ev_w = eval_windows(eval_ids, wide.seq, z["eval_windows"])
        wide_runs = {
            n: train_run(n, lrs[n], r.seeds[0], z["wide_steps"], train_ids, ev_w, wide)
            for n in ("adamw", "swan")
        }
        metrics.append(Metric("wider model (H=128, L=4) final CE AdamW", wide_runs["adamw"].final))
        metrics.append(Metric("wider model (H=128, L=4) final CE SWAN", wide_runs["swan"].final))

    # -- figures --
    r.figure(_plot_curves(main, extra), "curves.png")
    r.figure(_plot_memory(totals, main, table), "memory.png")

    notes.append(
        f"Memory: on this {swan_r.param_bytes // 4:,}-parameter model the "
        "embeddings and head (kept on AdamW) hold most parameters, so SWAN saves only the moments "
        "of the hidden matrices; the analytic ratio for the paper's 1.3B config (bf16) is "
        f"{table[-1]['ratio']:.2f}. SGD's ratio is lower still because it keeps no state at all."
    )
    tables.append(
        "Analytic params+grads+state bytes, GaLore LLaMA configs (bf16):\n\n"
        "| config | hidden params | other params | AdamW | SWAN | ratio |\n|---|---|---|---|---|---|\n"
        + "\n".join(
            f"| {row['config']} | {row['hidden_params'] / 1e6:.1f} M | "
            f"{row['other_params'] / 1e6:.1f} M | {row['adamw_bytes'] / 1e9:.3f} GB | "
            f"{row['swan_bytes'] / 1e9:.3f} GB | {row['ratio']:.2f} |"
            for row in table
        )
    )
    return r.result(
        claim=CLAIM,
        checks=checks,
        metrics=metrics,
        criteria=CRITERIA,
        key_check=C2_ADAMW.name if C2_ADAMW.name in [c.name for c in checks] else None,
        setup=(
            f"Tiny LLaMA (H={cfg.hidden}, FF={cfg.ff}, L={cfg.layers}, S={cfg.seq}, vocab "
            f"{cfg.vocab}) trained from scratch on {corpus.n_files} stdlib files (train sha256 "
            f"{corpus.train_sha256[:12]}, eval {corpus.eval_sha256[:12]}); batches of 16 windows, "
            f"{steps} steps, warm-up 10% then cosine to 10%, no weight decay; seeds {r.seeds}, "
            "each seed's optimizers sharing its initial model and window order; "
            f"lrs {lrs}; SWAN = GradNorm + NS whitening (beta 0.8, 10 steps), embed/head/norms on "
            "AdamW 3e-3."
        ),
        tables=tables,
        notes=notes,
        deviations=DEVIATIONS,
        power=POWER,
    )


# -- figures -----------------------------------------------------------------------------------


def _plot_curves(main: dict, extra: dict):
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


def _plot_memory(totals: dict, main: dict, table: list):
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
