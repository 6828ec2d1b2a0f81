"""Reproduction of paper 13 (FPO) on the reversal task (docs/fpo.md, "Reproduction").

A 2-block Llama-style model is fine-tuned on noisy reversals (the SFT / reference model); an SAE
is trained on its last block's residual stream; preference pairs are two of its own samples
ranked by a programmatic reward. FPO, DPO, SimPO, TDPO-2 and FPO with α = 0 are trained from the
same SFT checkpoint on the same pairs, batch order and budget (``experiment.py``).

Claims checked (pre-registered below): (a) FPO beats the SFT model (win rate > 0.55, the paper's
headline 55.1 % over SFT); (b) the feature constraint holds down drift: the sequential KL to the
reference on held-out rejected responses is lower with α = 0.5 than with α = 0; (c) an FPO
optimizer step is cheaper than a TDPO-2 step (no reference forward, no vocabulary-sized KL).

The module reads: claim and criteria -> ``setup`` (sizes; the SFT models and SAEs, built on first
use: one SFT model and an SAE per seed in quick mode, one SAE per SFT model in full mode) ->
``measure_seed`` (pairs, cache, every method, evaluation on the seed's own held-out prompts,
interleaved step timing) -> ``evaluate`` (clustered by the independent unit) -> metrics and tables
-> ``run``, which adds the full-mode ablations (α, k, index mode, official-code mode, layer / site
sweep, temperatures, D_FPO vs KL). Figures are in ``figures.py``; the fixed discussion
(deviations, power, earlier runs) is in docs/fpo.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from icml25.fpo.experiment import (
    K_FPO,
    LR,
    METHODS,
    build_sae,
    build_sft,
    layer_sweep,
    measure_methods,
)
from icml25.fpo.figures import (
    LABEL,
    plot_alpha,
    plot_kl,
    plot_layers,
    plot_steps,
    plot_temperature,
    plot_winrates,
)
from icml25.report import (
    Check,
    Criterion,
    Metric,
    ReproResult,
    Run,
    mean_sd,
    power_summary,
    reproduction,
    table,
)

CLAIM = (
    "FPO (length-normalised preference loss with an offline reference margin and a sparse-"
    "autoencoder feature constraint) improves over the SFT model, keeps the policy closer to the "
    "reference than the same objective without the constraint, and trains faster per step than "
    "TDPO-2."
)

# -- pre-registered: seeds, sizes and criteria (fixed before this version's numbers) ------------

#: quick: one SFT model (seed 0) and 3 seeds, each with its own SAE, pairs, batch order and
#: evaluation prompts; full: 3 SFT models (each with one SAE) x 3 seeds
N_QUICK, N_FULL = 3, 9
N_EVAL, N_HELD = 400, 300
# every method: Adam lr LR (1e-4), 10 warm-up steps then constant, 32 pairs per batch, 2 epochs;
# FPO's top-k K_FPO = 16 (experiment.py)

#: Independent units (docs/fpo.md, "Reproduction"): every seed draws its own pairs, SAE data
#: (quick), batch order, held-out pairs and evaluation prompts, so the items of a seed (prompts,
#: pairs, steps) are nested in it and its trained models are one unit. In full mode three seeds
#: share each SFT model and its SAE, so the SFT model is the unit of (a), (b) and the SAE's FVE.
_UNIT = (
    "; the items of a seed are nested in it, so the values are clustered by trained model (quick: "
    "the seed; full: the SFT model, which 3 seeds share) and the interval is the cluster-robust "
    "t-interval over those clusters"
)
WIN_SFT = Criterion(
    "(a) win rate FPO vs SFT > 0.55",
    "bootstrap",
    above=0.55,
    unit="win rate",
    over="trained models",
    paper_effect=0.001,  # paper: 55.1 % (Gemma-2-2B, AlpacaEval-2), i.e. 0.001 above 0.55
    description="per held-out prompt, 1 if FPO's sample (T = 1) has the higher reward than the "
    "SFT model's sample with the same seed, 0.5 on a tie" + _UNIT,
)
KL_DRIFT = Criterion(
    "(b) seqKL_rejected(FPO) - seqKL_rejected(FPO α=0) < 0",
    "bootstrap",
    below=0.0,
    unit="nats",
    over="trained models",
    description="sequential KL(π_ref ‖ π_θ) summed over each held-out rejected response, FPO "
    "(α = 0.5) minus the same objective with α = 0 on the same pair" + _UNIT,
)
STEP_TIME = Criterion(
    "(c) step time TDPO-2 - FPO > 0",
    "bootstrap",
    above=0.0,
    unit="ms",
    over="timing sessions",
    description="wall-clock of one optimizer step (forward, loss, backward, update), TDPO-2 "
    "minus FPO on the same batch, measured interleaved (steps 5-25 of each seed); the steps of a "
    "seed share one timing session (machine state), so they are clustered by seed and the "
    "interval is the cluster-robust t-interval over the seeds",
)
SAE_FVE = Criterion(
    "SAE fraction of variance explained >= 0.7",
    "mean",
    above=0.7,
    unit="FVE",
    over="SAEs",
    description="held-out FVE of each SAE trained on the reference's last-block residual stream "
    "(quick: one SAE per seed on the one SFT model; full: one per SFT model), t-interval over "
    "the SAEs (a precondition: FPO's constraint is only meaningful on a faithful SAE)",
)
CRITERIA = [WIN_SFT, KL_DRIFT, STEP_TIME, SAE_FVE]


# -- setup ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Setup:
    """What every seed shares: the sizes of this mode, and the SFT models and SAEs, built on first
    use in seed order (``models``: SFT model seed -> task, tokenizer, reference model; ``saes``:
    SAE key -> SAE and its info; the key is the seed in quick mode, the SFT model in full mode)."""

    quick: bool
    seeds: tuple[int, ...]
    n_sft: int
    sft_steps: int
    n_prompts: int
    n_held: int
    n_eval: int
    sae_steps: int
    models: dict[int, dict] = dataclasses.field(default_factory=dict)
    saes: dict[int, dict] = dataclasses.field(default_factory=dict)

    def model_seed(self, seed: int) -> int:
        return 0 if self.quick else seed % 3

    def sae_key(self, seed: int) -> int:
        return seed if self.quick else self.model_seed(seed)


def setup(r: Run) -> Setup:
    return Setup(
        quick=r.quick,
        seeds=tuple(r.seeds),
        n_sft=r.size(smoke=600, quick=12_000, full=20_000),
        sft_steps=r.size(smoke=40, quick=600, full=1000),
        n_prompts=r.size(smoke=160, quick=1500, full=3000),
        n_held=r.size(smoke=30, quick=N_HELD, full=N_HELD),
        n_eval=r.size(smoke=40, quick=N_EVAL, full=N_EVAL),
        sae_steps=r.size(smoke=60, quick=1000, full=1500),
    )


# -- one seed -------------------------------------------------------------------------------------
def measure_seed(seed: int, s: Setup) -> dict:
    """The seed's SFT model and SAE (built here when it is the first seed to use them), then
    :func:`icml25.fpo.experiment.measure_methods`: every method's outcomes on this seed."""
    model_seed, sae_key = s.model_seed(seed), s.sae_key(seed)
    if model_seed not in s.models:
        s.models[model_seed] = build_sft(model_seed, s.n_sft, s.sft_steps)
    if sae_key not in s.saes:
        s.saes[sae_key] = build_sae(s.models[model_seed], sae_key, s.sae_steps, s.n_prompts)
    st = {**s.models[model_seed], **s.saes[sae_key]}
    out = measure_methods(st, seed, s.n_prompts, s.n_held, s.n_eval, full=not s.quick)
    out["model_seed"] = model_seed
    return out


# -- checks and metrics ---------------------------------------------------------------------------
def evaluate(per_seed: list[dict], s: Setup) -> list[Check]:
    return fpo_checks(per_seed, s.seeds, s.saes, quick=s.quick)


def fpo_checks(per_seed: list[dict], seeds, saes: dict[int, dict], *, quick: bool) -> list:
    """The four pre-registered checks from :func:`measure_seed`'s outputs (one per seed, each
    with its ``model_seed``) and the SAEs by key. The independent unit of (a) and (b) is the
    trained model's lineage: the seed in quick mode (one SFT model), the SFT model in full mode
    (three seeds share it and its SAE); (c) is clustered by seed (one timing session each)."""

    def lineage(p: dict, seed: int) -> str:
        return f"seed {seed}" if quick else f"SFT model {p['model_seed']}"

    def pooled(key: str, a: str, b: str | None = None, *, by_seed: bool = False):
        vals: list[float] = []
        labels: list[str] = []
        for p, seed in zip(per_seed, seeds):
            x = np.asarray(p[key][a], dtype=float)
            if b is not None:
                x = x - np.asarray(p[key][b], dtype=float)
            vals += x.tolist()
            labels += [f"seed {seed}" if by_seed else lineage(p, seed)] * len(x)
        return vals, labels

    wins, win_cl = pooled("win_vs_sft", "fpo")
    dkl, kl_cl = pooled("kl_l", "fpo", "fpo_alpha0")
    dt, t_cl = pooled("step_ms", "tdpo2", "fpo", by_seed=True)
    keys = sorted(saes)
    fve = [saes[k]["sae_info"]["fve"] for k in keys]
    sae_units = [f"seed {k}" if quick else f"SFT model {k}" for k in keys]
    return [
        WIN_SFT.check(wins, clusters=win_cl),
        KL_DRIFT.check(dkl, clusters=kl_cl),
        STEP_TIME.check(dt, clusters=t_cl),
        SAE_FVE.check(fve, units=sae_units),
    ]


def metrics(per_seed: list[dict], s: Setup) -> list[Metric]:
    def over(name: str, f, unit: str = "") -> Metric:
        return Metric(name, [f(p) for p in per_seed], unit=unit)

    out = []
    for m in ("sft", *METHODS):
        out.append(over(f"mean reward T=1 {m}", lambda p, m=m: p["reward"][m]))
        out.append(over(f"mean reward greedy {m}", lambda p, m=m: p["greedy"][m]))
        out.append(over(f"entropy {m}", lambda p, m=m: p["entropy"][m], unit="nats"))
    for m in METHODS:
        out.append(over(f"win rate {m} vs SFT", lambda p, m=m: float(np.mean(p["win_vs_sft"][m]))))
        out.append(over(f"seqKL chosen {m}", lambda p, m=m: float(np.mean(p["kl_w"][m])), "nats"))
        out.append(over(f"seqKL rejected {m}", lambda p, m=m: float(np.mean(p["kl_l"][m])), "nats"))
        out.append(over(f"reward accuracy {m}", lambda p, m=m: p["acc"][m]))
    for m in ("dpo", "simpo", "tdpo2"):
        out.append(over(f"win rate FPO vs {m}", lambda p, m=m: float(np.mean(p["h2h"][m]))))
    for m in ("fpo", "tdpo2", "dpo"):
        out.append(over(f"median step {m}", lambda p, m=m: float(np.median(p["step_ms"][m])), "ms"))
    saes = [x["sae_info"] for x in s.saes.values()]
    out.append(Metric("SAE FVE", [i["fve"] for i in saes]))
    out.append(Metric("SAE L0", [i["l0"] for i in saes]))
    out.append(Metric("SAE dead fraction", [i["dead_frac"] for i in saes]))
    return out


#: the full mode's ablation variants (key in the per-seed records, label in the table)
ABLATIONS = [
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


def ablation_metrics(per_seed: list[dict]) -> list[Metric]:
    out = []
    for key, _ in ABLATIONS:
        out.append(
            Metric(f"ablation win rate {key}", [np.mean(p["win_vs_sft"][key]) for p in per_seed])
        )
        out.append(
            Metric(
                f"ablation seqKL rejected {key}",
                [np.mean(p["kl_l"][key]) for p in per_seed],
                unit="nats",
            )
        )
    rhos = _curve_rhos(per_seed)
    if rhos:
        out.append(Metric("Spearman(D_FPO margin, seqKL margin) over checkpoints", rhos))
    return out


def _curve_rhos(per_seed: list[dict]) -> list[float]:
    """Per seed with at least 3 checkpoints, the Spearman correlation between the D_FPO margin
    and the sequential-KL margin over FPO's training checkpoints (paper Figure 4 right)."""
    rhos = []
    for p in per_seed:
        c = p["curve"].get("fpo", [])
        if len(c) >= 3:
            from scipy.stats import spearmanr

            rhos.append(
                float(spearmanr([x["d_margin"] for x in c], [x["kl_margin"] for x in c])[0])
            )
    return rhos


# -- tables ---------------------------------------------------------------------------------------
def main_table(per_seed: list[dict]) -> str:
    def cell(key: str, m: str) -> str:
        return mean_sd([np.mean(p[key][m]) for p in per_seed]) if m in per_seed[0][key] else "–"

    keys = ("reward", "greedy", "win_vs_sft", "h2h", "kl_w", "kl_l", "acc", "entropy")
    return table(
        ["method", "reward T=1", "reward greedy", "win vs SFT", "FPO wins vs it", "seqKL chosen"]
        + ["seqKL rejected", "reward acc.", "entropy"],
        [[LABEL[m], *(cell(k, m) for k in keys)] for m in ("sft", *METHODS)],
        caption="Mean ± sd over seeds; 400 held-out prompts per seed, held-out pairs for KL and "
        "accuracy:",
    )


def cost_table(per_seed: list[dict], models: dict[int, dict]) -> str:
    ref = next(iter(models.values()))["ref"]
    ref_bytes = sum(p.numel() * p.element_size() for p in ref.parameters())
    cache_b = int(np.mean([p["cache_bytes"] for p in per_seed]))
    what = {
        "fpo": f"offline cache, {cache_b / 1e3:.0f} kB",
        "dpo": "offline log-probs",
        "tdpo2": f"reference model, {ref_bytes / 1e3:.0f} kB of parameters",
    }
    rows = [
        [
            LABEL[m],
            mean_sd([np.median(p["step_ms"][m]) for p in per_seed]),
            what[m],
            mean_sd([p["train_s"][m] for p in per_seed]),
        ]
        for m in ("fpo", "dpo", "tdpo2")
    ]
    return table(
        ["method", "median step (ms)", "reference at train time", "training run (s)"],
        rows,
        caption="Cost per optimizer step, interleaved on the same batches (steps 5-25; mean ± sd "
        "over seeds):",
    )


def ablation_tables(per_seed: list[dict]) -> list[str]:
    cols = ("win_vs_sft", "kl_l", "kl_w", "acc", "entropy")
    rows = [
        [label, *(mean_sd([np.mean(p[k][key]) for p in per_seed]) for k in cols)]
        for key, label in ABLATIONS
    ]
    ablations = table(
        ["variant", "win vs SFT", "seqKL rejected", "seqKL chosen", "reward acc.", "entropy"],
        rows,
        caption="Ablations (full mode; mean ± sd over seeds):",
    )
    others = ("sft", "dpo", "simpo", "tdpo2")
    temps = table(
        ["T", *(f"FPO vs {LABEL[m]}" for m in others)],
        [
            [t, *(mean_sd([p["temps"][t][m] for p in per_seed]) for m in others)]
            for t in sorted(per_seed[0]["temps"])
        ],
        caption="Win rate of FPO by sampling temperature (paper Figure 3 right analogue):",
    )
    rhos = _curve_rhos(per_seed)
    corr = (
        "Spearman correlation between the D_FPO margin (rejected minus chosen) and the "
        "sequential-KL margin on 100 held-out pairs over FPO's training checkpoints (paper "
        f"Figure 4 right): {mean_sd(rhos) if rhos else 'n/a'} over seeds."
    )
    return [ablations, f"{temps}\n\n{corr}"]


def layer_table(sweep: dict[str, tuple], seeds: list[int]) -> str:
    """The layer / site sweep; the sd of the win rate is the population sd over the seeds."""
    rows = [
        [
            name,
            f"{fve:.3f}",
            f"{np.mean(wins):.3f} ({np.std(wins):.3f})",
            f"{np.mean(accs):.3f}",
            f"{np.mean(ents):.3f}",
        ]
        for name, (wins, accs, ents, fve) in sweep.items()
    ]
    return table(
        ["site", "SAE FVE", "win rate vs SFT (sd)", "reward accuracy", "entropy"],
        rows,
        caption="Layer / site sweep on a 4-block SFT model (paper Table 3 analogue; FPO with an "
        f"SAE at each site, seeds {seeds}):",
    )


def setup_text(s: Setup, per_seed: list[dict]) -> str:
    n_pairs = int(np.mean([p["n_pairs"] for p in per_seed]))
    return (
        f"Reversal task (prompts of 3-6 symbols a-l, reward = position matches of the reversal "
        f"minus a length penalty). SFT/reference: Llama-style, 2 blocks, d = 64, {s.sft_steps} "
        f"steps on {s.n_sft} noisy reversals. SAE: TopK (512 features, k_sae = 8) on the last "
        f"block's residual output at response positions, {s.sae_steps} Adam steps. Pairs: two "
        f"T = 1 samples of the SFT model for each of {s.n_prompts} prompts, ties dropped, "
        f"{s.n_held} held out (about {n_pairs} for training). Every method: Adam lr {LR}, 10 "
        f"warm-up steps then constant, 32 pairs per batch, 2 epochs, clip 1.0; FPO α = 0.5, "
        f"β = 0.1, k = {K_FPO}, union index set, mean pooling; DPO β = 0.1; SimPO β = 2, γ = 0.5; "
        f"TDPO-2 α = 0.5, β = 0.1. Evaluation: {s.n_eval} held-out prompts drawn afresh for each "
        f"seed, one T = 1 sample per model with the same per-prompt seed, and greedy. Seeds "
        f"{list(s.seeds)} ("
        + ("one SFT model, an SAE per seed" if s.quick else "3 SFT models and SAEs, seed mod 3")
        + ")."
    )


# -- the run --------------------------------------------------------------------------------------
@reproduction("fpo", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    s = setup(r)
    per_seed = r.over_seeds(lambda seed: measure_seed(seed, s), label="FPO and baselines")
    checks = evaluate(per_seed, s)
    found = metrics(per_seed, s)
    tables = [main_table(per_seed), cost_table(per_seed, s.models)]
    r.figure(plot_winrates(per_seed), "winrates.png")
    r.figure(plot_kl(per_seed), "kl.png")
    r.figure(plot_steps(per_seed), "step_time.png")
    if not s.quick:  # the ablations, the temperatures and the layer / site sweep
        found += ablation_metrics(per_seed)
        tables += ablation_tables(per_seed)
        r.figure(plot_alpha(per_seed), "ablation_alpha.png")
        r.figure(plot_temperature(per_seed), "temperature.png")
        seeds = list(s.seeds[:3])
        sweep = layer_sweep(
            seeds, s.n_sft, s.sft_steps, s.sae_steps, s.n_prompts, s.n_held, s.n_eval
        )
        tables.append(layer_table(sweep, seeds))
        r.figure(plot_layers(sweep), "ablation_layer.png")
        found += [Metric(f"layer sweep win rate {k}", v[0]) for k, v in sweep.items()]
    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=WIN_SFT.name,
        metrics=found,
        setup=setup_text(s, per_seed),
        power=power_summary(checks),
        tables=tables,
    )
