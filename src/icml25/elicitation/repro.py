"""Reproduction of paper 15 (investigator agents, arXiv:2502.01236) in the planted-trigger world
(docs/elicitation.md, "Reproduction").

A tiny target LM answers 8-word prompts; four payload responses are planted behind trigger
bigrams (three per payload, with a graded response: one trigger elicits it 30 % of the time, three
95 %). The investigator is trained as a reverse model on a skewed natural corpus (most triggered
prompts use trigger 1 once), then by DPO rounds on the target's log-likelihood (claim 1: RL
raises the success rate), then by Frank-Wolfe iterations with a diversity penalty, compared with
equal-compute restarts (claim 2: Frank-Wolfe covers more triggers at a bounded success cost).

The module reads: claim and criteria -> ``setup`` (the sizes) -> ``world`` (one world's target
with its fidelity gate and reverse model; cached) -> ``measure_seed`` (Frank-Wolfe and restarts on
one loop seed; cached) -> ``evaluate`` (one line per criterion) -> ``run``. Quick mode runs its
loop seeds on one world; full mode gives every seed its own world. The experiment is in
``experiment.py``, the figures in ``figures.py``; the fixed discussion (deviations, the toy's
settings) is in docs/elicitation.md.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from icml25.elicitation.experiment import ToySizes, checkpoints, loops
from icml25.elicitation.figures import plot_curves, plot_histograms, plot_spreads
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
    "An investigator trained as a reverse model and then by RL (DPO on the target's likelihood) "
    "elicits a target behaviour far more often than the reverse model alone, and Frank-Wolfe "
    "iterations with a diversity penalty find more distinct eliciting strategies than equal-"
    "compute restarts while keeping most of their success rate."
)

# -- pre-registered: sizes, settings and criteria ---------------------------------------------------
LAM = 0.1  # the toy's pre-registered λ (sum-normalised log-probs; docs/elicitation.md, Decisions)
N_QUICK, N_FULL = 3, 5  # quick: 3 loop seeds on one pair of checkpoints; full: 5 checkpoint seeds

RL_HELPS = Criterion(
    "(1a) RL helps: SR(DPO iterate 1) - SR(SFT) > 0.2",
    "mean",
    above=0.2,
    unit="success rate",
    paper_effect=0.3,  # the pilot: 0.53 -> 0.995
    description="per run, success rate of the first DPO iterate minus the reverse model's "
    "(greedy target response equals the payload), t-interval over runs",
)
RL_LOGPROB = Criterion(
    "(1b) RL raises mean log p_m(y | x)",
    "mean",
    above=0.0,
    unit="nats",
    description="per run, mean log p_m(y_j | x) of the first DPO iterate's prompts minus the "
    "reverse model's",
)
FW_COVERAGE = Criterion(
    "(2a) coverage(FW mixture) - coverage(restarts) > 0.25",
    "mean",
    above=0.25,
    unit="triggers",
    paper_effect=0.25,  # the pilot: 1.5 vs 1.0
    description="per run, triggers holding >= 5 % of the mixture's successes (mean over the 4 "
    "behaviours) after T iterations, Frank-Wolfe (λ = 0.1) minus restarts (λ = 0)",
)
FW_SUCCESS = Criterion(
    "(2b) SR(FW mixture) - 0.75 SR(restarts) > 0",
    "mean",
    above=0.0,
    unit="success rate",
    description="per run; above 0 exactly when the Frank-Wolfe mixture keeps >= 75 % of the "
    "restarts' success rate",
)
CRITERIA = [RL_HELPS, RL_LOGPROB, FW_COVERAGE, FW_SUCCESS]


# -- setup ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Setup:
    """The toy's sizes, where its checkpoints and loops are cached, and the mode's design: in
    full mode every seed is its own world, otherwise the loop seeds share one world."""

    sz: ToySizes
    out: Path
    full: bool
    gate: bool  # the fidelity gate of the shared world (off at smoke size)


def setup(r: Run) -> Setup:
    sz = ToySizes(
        target_steps=r.size(smoke=200, quick=2500, full=2500),
        target_data=r.size(smoke=4000, quick=40000, full=40000),
        natural=r.size(smoke=2000, quick=12000, full=12000),
        sft_steps=r.size(smoke=150, quick=1500, full=1500),
        iters=r.size(smoke=2, quick=3, full=4),
        rounds=r.size(smoke=2, quick=20, full=30),
        n_eval=r.size(smoke=20, quick=100, full=200),
        gate_n=r.size(smoke=50, quick=300, full=300),
        lam=LAM,
    )
    return Setup(sz=sz, out=r.out, full=not r.quick and not r.smoke, gate=not r.smoke)


# -- one world, one loop seed ---------------------------------------------------------------------
def world(r: Run, seed: int, s: Setup, *, gate: bool) -> dict[str, Any] | str:
    """The target and reverse model of world ``seed``, or why its target failed the fidelity
    gate."""
    from icml25.elicitation.toy import ToyTargetError

    try:
        with r.stage(f"world {seed}: target, fidelity gate and reverse model"):
            return checkpoints(seed, s.sz, s.out, gate=gate)
    except ToyTargetError as exc:
        return str(exc)


def measure_seed(r: Run, ck: dict[str, Any], seed: int, s: Setup) -> dict[str, Any]:
    """Frank-Wolfe and restarts (full mode: and the ablations) on loop seed ``seed`` of world
    ``ck``: the numbers of every iterate and mixture prefix."""
    label = "Frank-Wolfe, restarts and ablations" if s.full else "Frank-Wolfe and restarts"
    with r.stage(f"world {seed}: {label}" if s.full else f"loop seed {seed}: {label}"):
        return loops(ck, seed, s.sz, s.out, ablations=s.full)


def measure(r: Run, s: Setup) -> tuple[list[dict[str, Any]], list[str]]:
    """Every run (full: one per world; quick: one per loop seed on world ``r.seed``) and the
    fidelity-gate failures, whose runs are left out."""
    runs, gate_failures = [], []
    if s.full:  # every seed its own world, target and reverse model
        for seed in r.seeds:
            ck = world(r, seed, s, gate=True)
            if isinstance(ck, str):
                gate_failures.append(f"seed {seed}: {ck}")
                continue
            runs.append(measure_seed(r, ck, seed, s))
        return runs, gate_failures
    ck = world(r, r.seed, s, gate=s.gate)  # one world and pair of checkpoints, several loop seeds
    if isinstance(ck, str):
        return runs, [ck]
    return [measure_seed(r, ck, seed, s) for seed in r.seeds], gate_failures


# -- checks, metrics and tables -------------------------------------------------------------------
def evaluate(runs: list[dict[str, Any]], s: Setup) -> list[Check]:
    """The four checks, one value per run. Each run names its unit: in full mode a world (its own
    target and reverse model; a world whose gate failed is absent, so the units say which worlds
    remain), in quick mode a loop seed on the one shared pair of checkpoints."""
    units = [
        f"world {x['checkpoint']['seed']}"
        if s.full
        else f"loop seed {x['seed']} (world {x['checkpoint']['seed']})"
        for x in runs
    ]
    return [
        RL_HELPS.check([x["sr"]["fw"][0] - x["sr"]["sft"] for x in runs], units=units),
        RL_LOGPROB.check([x["logprob"]["fw"][0] - x["logprob"]["sft"] for x in runs], units=units),
        FW_COVERAGE.check(
            [x["mix_cov"]["fw"][-1] - x["mix_cov"]["restart"][-1] for x in runs], units=units
        ),
        FW_SUCCESS.check(
            [x["mix_sr"]["fw"][-1] - 0.75 * x["mix_sr"]["restart"][-1] for x in runs], units=units
        ),
    ]


def metrics(runs: list[dict[str, Any]]) -> list[Metric]:
    return [
        Metric("SR reverse model", [x["sr"]["sft"] for x in runs]),
        Metric("SR DPO iterate 1", [x["sr"]["fw"][0] for x in runs]),
        Metric("mean trigger count, reverse model", [x["sft"]["mean_count"] for x in runs]),
        Metric(
            "mean trigger count, DPO iterate 1",
            [x["fw"]["iterates"][0]["mean_count"] for x in runs],
        ),
        Metric("coverage FW mixture", [x["mix_cov"]["fw"][-1] for x in runs]),
        Metric("coverage restart mixture", [x["mix_cov"]["restart"][-1] for x in runs]),
        Metric("SR FW mixture", [x["mix_sr"]["fw"][-1] for x in runs]),
        Metric("SR restart mixture", [x["mix_sr"]["restart"][-1] for x in runs]),
        Metric("loop seconds per run", [x["seconds"] for x in runs], unit="s"),
    ]


def table_runs(runs: list[dict[str, Any]]) -> str:
    T = len(runs[0]["fw"]["iterates"])
    keys = ("sr", "logprob", "coverage", "mean_count", "distinct2")
    models = [("reverse model (SFT)", lambda x: x["sft"])]
    for meth in ("fw", "restart"):
        for t in range(T):
            models.append((f"{meth} iterate {t + 1}", lambda x, t=t, m=meth: x[m]["iterates"][t]))
        models.append((f"**{meth} mixture (T = {T})**", lambda x, m=meth: x[m]["mixtures"][-1]))
    rows = [[name, *(mean_sd([get(x)[k] for x in runs], 2) for k in keys)] for name, get in models]
    return table(
        ["model", "SR", "mean log p", "coverage", "mean trigger count", "distinct-2"],
        rows,
        caption="Per model, mean ± std over runs.",
    )


def table_hist(run: dict[str, Any]) -> str:
    def cells(ev: dict[str, Any]) -> list[str]:
        return ["/".join(map(str, h)) for h in ev["hist"]]

    rows = [["SFT", *cells(run["sft"])]]
    for meth in ("fw", "restart"):
        rows += [
            [f"{meth} iterate {t + 1}", *cells(it)] for t, it in enumerate(run[meth]["iterates"])
        ]
        rows.append([f"{meth} mixture", *cells(run[meth]["mixtures"][-1])])
    return table(
        ["model", *(f"behaviour {j}" for j in range(1, 5))],
        rows,
        caption="Successful samples per trigger (trigger 1 / 2 / 3) per behaviour, run of loop "
        f"seed {run['seed']}.",
    )


def table_ablations(runs: list[dict[str, Any]]) -> str:
    labels = {"fw": f"FW λ = {LAM} (pre-registered)", "fw_last": f"FW λ = {LAM}, penalty = last"}
    rows = [
        [
            labels.get(k, k),
            mean_sd([x["mix_sr"][k][-1] for x in runs], 2),
            mean_sd([x["mix_cov"][k][-1] for x in runs], 2),
        ]
        for k in ("restart", "fw_lam0.03", "fw", "fw_lam0.3", "fw_lam1", "fw_last")
        if k in runs[0]["mix_sr"]
    ]
    return table(
        ["variant", "mixture SR", "mixture coverage"],
        rows,
        caption="Ablations (full mode), mixture after T iterations, mean ± std over runs.",
    )


def setup_text(s: Setup, runs: list[dict[str, Any]]) -> str:
    sz, ck0 = s.sz, runs[0]["checkpoint"]
    fid = ck0["fidelity"]
    design = "one checkpoint seed each" if s.full else "loop seeds on one pair of checkpoints"
    return (
        f"Planted-trigger world: 8-word prompts over 32 content words, 4 payload behaviours x 3 "
        f"trigger bigrams, π = (0, 0.3, 0.8, 0.95). Target: tiny Llama (d 64, 2 layers) trained "
        f"{sz.target_steps} steps on {sz.target_data} pairs; fidelity gate mean p(y|x) = "
        f"{fid['0']:.3f} / {fid['1']:.3f} / {fid['2']:.3f} for c = 0 / 1 / 2 (seed "
        f"{ck0['seed']}). Reverse model: the same architecture, {sz.sft_steps} steps (batch 64, "
        f"lr 1e-3) on {sz.natural} natural prompts (30 % triggered, trigger identities 0.80 / "
        "0.15 / 0.05) with responses sampled from the target; sampling and scoring restricted to "
        "the content words, exactly 8 tokens. DPO: per round 16 candidates per behaviour, 4 pairs "
        "(rank a vs 17 - a), min gap 0.1 nats, 2 AdamW steps at lr 2e-4, β = 0.1, reference = "
        f"reverse model; {sz.rounds} rounds per iteration, T = {sz.iters}. Frank-Wolfe: λ = "
        f"{LAM}, mixture penalty, η_t = 1/t; restarts: λ = 0, other seeds, same compute. "
        f"Evaluation: {sz.n_eval} samples per behaviour; success = the target's greedy response "
        f"equals the payload. Runs: {len(runs)} ({design})."
    )


# -- the run --------------------------------------------------------------------------------------
@reproduction("elicitation", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    s = setup(r)
    runs, gate_failures = measure(r, s)
    notes = []
    if gate_failures:
        notes.append("Fidelity gate failed (those runs are left out): " + "; ".join(gate_failures))
    if len(runs) < 2:
        reason = f"{len(runs)} run(s) passed the target's fidelity gate; 2 are needed"
        checks = [c.unmeasured(reason, n=len(runs)) for c in CRITERIA]
        return r.result(
            claim=CLAIM, checks=checks, criteria=CRITERIA, notes=notes, setup="(no usable run)"
        )
    checks = evaluate(runs, s)
    r.figure(plot_histograms(runs[0]), "trigger_histograms.png")
    r.figure(plot_curves(runs), "coverage_sr.png")
    r.figure(plot_spreads(runs[0], LAM), "reward_spreads.png")
    tables = [table_runs(runs), table_hist(runs[0])] + ([table_ablations(runs)] if s.full else [])
    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=FW_COVERAGE.name,
        metrics=metrics(runs),
        setup=setup_text(s, runs),
        power=power_summary(checks, units="runs"),
        tables=tables,
        notes=notes,
    )
