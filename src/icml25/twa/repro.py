"""Reproduction of paper 12 (TWA) on the synthetic language pair (docs/twa.md "Reproduction").

A small causal LM, trained on translations with a systematic error profile (it confuses the
stems of half of the confusion pairs most of the time, and sometimes flips numbers or keeps an
A N order), is fine-tuned on MQM-style span annotations of four OTHER systems' translations.
Claim: TWA lowers the model's MQM-style penalty more than Filter + SFT (SFT on the translations
without annotated errors) and DPO (pairs of translations of the same source), and lowers it below
the base model's.

The module reads: the claim and the pre-registered criteria -> ``setup`` (sizes, and in quick
mode the one shared base model) -> ``measure_seed`` (annotated data, every method from the same
base, greedy decoding of held-out sources, evaluation annotator: ``run_methods`` in
``experiment.py``) -> ``evaluate`` (paired over seeds: each seed's fine-tuned models are one
independent unit, represented by their mean over its held-out segments or training spans) ->
``metrics`` and the table -> ``run``. Figures are in ``figures.py``; the fixed discussion
(deviations, how the seeds resolve a difference, the calibration run) is in docs/twa.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from icml25.report import (
    Check,
    Criterion,
    Metric,
    ReproResult,
    Run,
    power_summary,
    reproduction,
    table,
)
from icml25.twa.experiment import build_base, run_methods
from icml25.twa.figures import INSPAN_KEYS, plot_inspan, plot_penalty

CLAIM = (
    "Fine-tuning a translation model with TWA on span-annotated translations of other systems "
    "lowers its MQM-style error penalty more than Filter + SFT on the error-free translations "
    "and DPO on pairs from the same annotations, and below the base model's."
)
MAIN = ("base", "sft_all", "filter_sft", "dpo", "twa")
ABLATIONS = ("twa_token_ul", "twa_all_nonerror", "twa_seq", "twa_uniform_weights")

# -- pre-registered: seeds and criteria (fixed before the numbers of this version) ---------------

#: quick: one base model (task seed 0) and 3 seeds of annotated data and fine-tuning order;
#: full: 5 seeds, each with its own base model and task
N_QUICK, N_FULL = 3, 5
N_EVAL = 300  # held-out sources per seed

GAIN = {
    b: Criterion(
        f"penalty({b}) - penalty(twa) > 0",
        "paired",
        above=0.0,
        unit="penalty",
        over="seeds",
        description=f"mean MQM-style penalty of the greedy translations of the held-out sources, "
        f"{b} minus TWA, paired by seed: one difference per seed (its fine-tuned models are the "
        "independent unit; the segments of a seed share them, and in quick mode the seeds share "
        "the base model and the held-out sources)",
    )
    for b in ("filter_sft", "dpo", "base")
}
WHAT_STEM = Criterion(
    "inside agreement spans: d logp(correct stem) span-UL - token-UL > 0",
    "paired",
    above=0.0,
    unit="nats",
    over="seeds",
    description="change of the teacher-forced log-probability of the CORRECT stem inside "
    "training spans of the agreement type (fine-tuned minus base), averaged over each seed's "
    "spans, TWA with span-level minus TWA with token-level unlikelihood, paired by seed (the "
    "spans of a seed share its base and fine-tuned models; full mode)",
)
WHAT_SUFFIX = Criterion(
    "inside agreement spans: d logp(wrong suffix) under span-UL < 0",
    "mean",
    below=0.0,
    unit="nats",
    over="seeds",
    description="change of the log-probability of the WRONG suffix in the same spans under TWA "
    "(fine-tuned minus base), averaged over each seed's spans, one value per seed (full mode)",
)
CRITERIA = [*GAIN.values(), WHAT_STEM, WHAT_SUFFIX]


# -- setup -----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Setup:
    """What every seed shares: the sizes, the methods, the seeds, and in quick mode the one base
    model (task seed 0) all seeds fine-tune; full mode trains a base and a task per seed."""

    base_steps: int
    n_base: int
    n_src: int
    epochs: int
    n_eval: int
    full: bool
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    shared_base: tuple[Any, ...] | None  # (task, tokenizer, model, seconds to build)


def setup(r: Run) -> Setup:
    base_steps = r.size(smoke=40, quick=800, full=1500)
    n_base = r.size(smoke=500, quick=12_000, full=20_000)
    return Setup(
        base_steps=base_steps,
        n_base=n_base,
        n_src=r.size(smoke=40, quick=800, full=2000),
        epochs=r.size(smoke=1, quick=1, full=2),
        n_eval=r.size(smoke=30, quick=N_EVAL, full=N_EVAL),
        full=not r.quick,
        methods=MAIN + (() if r.quick else ABLATIONS),
        seeds=tuple(r.seeds),
        shared_base=build_base(0, n_base, base_steps) if r.quick else None,
    )


# -- one seed --------------------------------------------------------------------------------------
def measure_seed(seed: int, s: Setup) -> dict:
    """One seed: its base (the shared one in quick mode), then every method fine-tuned from it
    and evaluated (:func:`~icml25.twa.experiment.run_methods`)."""
    task, tok, base, t_base = s.shared_base or build_base(seed, s.n_base, s.base_steps)
    out = run_methods(task, tok, base, seed, s.n_src, s.epochs, s.n_eval, s.methods)
    return out | {"base_seconds": t_base}


# -- checks ----------------------------------------------------------------------------------------
def evaluate(per_seed: list[dict], s: Setup) -> list[Check]:
    """The three penalty checks, and in full mode the two "what to penalize" checks."""
    seeds = list(s.seeds)
    checks = gain_checks(per_seed, seeds)
    return checks + (inspan_checks(per_seed, seeds) if s.full else [])


def gain_checks(per_seed: list[dict], seeds: list[int]) -> list[Check]:
    """The three penalty checks (Filter + SFT, DPO, base minus TWA), paired over seeds: each
    seed contributes one value per method, its mean penalty over the held-out segments."""
    units = [f"seed {s}" for s in seeds]
    mean = {
        m: [float(np.mean(p["penalty"][m])) for p in per_seed]
        for m in ("filter_sft", "dpo", "base", "twa")
    }
    return [GAIN[b].check(mean[b], mean["twa"], units=units) for b in ("filter_sft", "dpo", "base")]


def inspan_checks(per_seed: list[dict], seeds: list[int]) -> list[Check]:
    """The two "what to penalize" checks, paired over seeds: each seed's agreement spans are
    averaged first (they share that seed's base and fine-tuned models); a seed without such
    spans has nothing to contribute, and with none at all the checks are unmeasured."""
    have = [(s, p["inspan"]) for s, p in zip(seeds, per_seed) if p["inspan"]["stem_span"]]
    if not have:
        why = "no training span of the agreement type was found in any seed"
        return [WHAT_STEM.unmeasured(why), WHAT_SUFFIX.unmeasured(why)]
    units = [f"seed {s}" for s, _ in have]
    mean = {
        k: [float(np.mean(d[k])) for _, d in have]
        for k in ("stem_span", "stem_token", "suffix_span")
    }
    return [
        WHAT_STEM.check(mean["stem_span"], mean["stem_token"], units=units),
        WHAT_SUFFIX.check(mean["suffix_span"], units=units),
    ]


# -- metrics and the table -------------------------------------------------------------------------
def metrics(per_seed: list[dict], s: Setup) -> list[Metric]:
    out = []
    for m in s.methods:
        out.append(Metric(f"penalty {m}", [float(np.mean(p["penalty"][m])) for p in per_seed]))
        out.append(Metric(f"exact match {m}", [p["exact"][m] for p in per_seed]))
    out.append(
        Metric("error-free share of the annotated data", [p["error_free"] for p in per_seed])
    )
    if s.full:
        for k in INSPAN_KEYS:
            out.append(
                Metric(
                    f"inspan d logp {k}",
                    [float(np.mean(p["inspan"][k])) for p in per_seed],
                    unit="nats",
                )
            )
    return out


def table_penalty(per_seed: list[dict], s: Setup) -> str:
    rows = []
    for m in s.methods:
        per = [float(np.mean(p["penalty"][m])) for p in per_seed]
        ex = [p["exact"][m] for p in per_seed]
        maj = np.mean([p["major"][m] for p in per_seed])
        mnr = np.mean([p["minor"][m] for p in per_seed])
        sd = np.std(per, ddof=1) if len(per) > 1 else 0
        rows.append(
            [m, f"{np.mean(per):.3f} ({sd:.3f})", f"{np.mean(ex):.3f}", f"{maj:.2f} / {mnr:.2f}"]
        )
    return table(
        [
            "method",
            "mean penalty (sd over seeds)",
            "exact match",
            "Major / Minor errors per segment",
        ],
        rows,
        caption=f"Greedy translations of {s.n_eval} held-out sources per seed, evaluation "
        f"annotator (penalty 5 per Major, 1 per Minor, 25 for a non-translation), seeds "
        f"{list(s.seeds)}:",
    )


def setup_text(s: Setup) -> str:
    return (
        f"Synthetic language pair (24 lemmas, agreement, A N -> N A), word-level tokenizer. Base: "
        f"Llama-style causal LM (2 layers, d = 128) trained {s.base_steps} steps (AdamW 1e-3, batch "
        f"64) on {s.n_base} gold translations corrupted by its error profile (stem confusion 0.6 on "
        "half of the confusion pairs, number flip 0.15, kept A N order 0.30); "
        + ("one base and task per seed. " if s.full else "one base for all seeds (task seed 0). ")
        + f"Fine-tuning data per seed: {s.n_src} fresh sources x 4 other systems (error rates x "
        "0.5/1/1.5/2), annotated at word level (at most 3 errors, 15% missed) as MQM TSV rows "
        f"read by load_mqm_tsv. Every method from the same base: AdamW 2e-4, batch 32, clip 1.0, "
        f"{s.epochs} epoch(s); DPO beta 0.1, reference = base, <= 3 pairs per source. Evaluation: "
        f"greedy decoding of {s.n_eval} held-out sources, scored by the evaluation annotator."
    )


# -- the run ---------------------------------------------------------------------------------------
@reproduction("twa", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    s = setup(r)
    per_seed = r.over_seeds(lambda seed: measure_seed(seed, s), label="TWA and baselines")
    checks = evaluate(per_seed, s)
    r.figure(plot_penalty(s.methods, per_seed), "penalty_bars.png")
    if s.full:
        r.figure(plot_inspan(per_seed), "inspan_logprob_delta.png")
    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=GAIN["dpo"].name,
        metrics=metrics(per_seed, s),
        setup=setup_text(s),
        power=power_summary(checks),
        tables=[table_penalty(per_seed, s)],
    )
