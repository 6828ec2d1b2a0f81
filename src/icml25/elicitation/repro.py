"""Reproduction of paper 15 (investigator agents, arXiv:2502.01236) in the planted-trigger world
(docs/elicitation.md, "Reproduction").

A tiny target LM answers 8-word prompts; four payload responses are planted behind trigger
bigrams (three per payload, with a graded response: one trigger elicits it 30 % of the time, three
95 %). The investigator is trained as a reverse model on a skewed natural corpus (most triggered
prompts use trigger 1 once), then by DPO rounds on the target's log-likelihood (claim 1: RL
raises the success rate), then by Frank-Wolfe iterations with a diversity penalty, compared with
equal-compute restarts (claim 2: Frank-Wolfe covers more triggers at a bounded success cost).

The module reads: claim and criteria -> checkpoints (target with its fidelity gate, reverse
model; cached) -> per loop seed (Frank-Wolfe and restarts) -> checks -> tables and figures.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from icml25.report import Check, Criterion, Metric, ReproResult, Run, pyplot, reproduction

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


def _sizes(r: Run) -> dict[str, Any]:
    return {
        "target_steps": r.size(smoke=200, quick=2500, full=2500),
        "target_data": r.size(smoke=4000, quick=40000, full=40000),
        "natural": r.size(smoke=2000, quick=12000, full=12000),
        "sft_steps": r.size(smoke=150, quick=1500, full=1500),
        "iters": r.size(smoke=2, quick=3, full=4),
        "rounds": r.size(smoke=2, quick=20, full=30),
        "n_eval": r.size(smoke=20, quick=100, full=200),
        "gate_n": r.size(smoke=50, quick=300, full=300),
    }


@reproduction("elicitation", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    from icml25.elicitation.toy import ToyTargetError

    sz = _sizes(r)
    full = not r.quick and not r.smoke
    runs: list[dict[str, Any]] = []
    gate_failures: list[str] = []
    if full:  # every seed its own world, target and reverse model
        for s in r.seeds:
            try:
                with r.stage(f"world {s}: target, fidelity gate and reverse model"):
                    ck = checkpoints(s, sz, r.out, gate=True)
            except ToyTargetError as exc:
                gate_failures.append(f"seed {s}: {exc}")
                continue
            with r.stage(f"world {s}: Frank-Wolfe, restarts and ablations"):
                runs.append(loops(ck, s, sz, r.out, ablations=True))
    else:  # one world and pair of checkpoints, several loop seeds
        try:
            with r.stage(f"world {r.seed}: target, fidelity gate and reverse model"):
                ck = checkpoints(r.seed, sz, r.out, gate=not r.smoke)
        except ToyTargetError as exc:
            gate_failures.append(str(exc))
        else:
            for s in r.seeds:
                with r.stage(f"loop seed {s}: Frank-Wolfe and restarts"):
                    runs.append(loops(ck, s, sz, r.out, ablations=False))
    notes = []
    if gate_failures:
        notes.append("Fidelity gate failed (those runs are left out): " + "; ".join(gate_failures))
    if len(runs) < 2:
        reason = f"{len(runs)} run(s) passed the target's fidelity gate; 2 are needed"
        checks = [c.unmeasured(reason, n=len(runs)) for c in CRITERIA]
        return r.result(
            claim=CLAIM, checks=checks, criteria=CRITERIA, notes=notes, setup="(no usable run)"
        )
    checks = evaluate_checks(runs, full)
    metrics = _metrics(runs, full)
    r.figure(plot_histograms(runs[0]), "trigger_histograms.png")
    r.figure(plot_curves(runs), "coverage_sr.png")
    r.figure(plot_spreads(runs[0]), "reward_spreads.png")
    ck0 = runs[0]["checkpoint"]
    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=FW_COVERAGE.name,
        metrics=metrics,
        setup=(
            f"Planted-trigger world: 8-word prompts over 32 content words, 4 payload behaviours x 3 "
            f"trigger bigrams, π = (0, 0.3, 0.8, 0.95). Target: tiny Llama (d 64, 2 layers) trained "
            f"{sz['target_steps']} steps on {sz['target_data']} pairs; fidelity gate mean p(y|x) = "
            f"{ck0['fidelity']['0']:.3f} / {ck0['fidelity']['1']:.3f} / {ck0['fidelity']['2']:.3f} for c = 0 / 1 / 2 "
            f"(seed {ck0['seed']}). Reverse model: the same architecture, {sz['sft_steps']} steps (batch 64, lr 1e-3) "
            f"on {sz['natural']} natural prompts (30 % triggered, trigger identities 0.80 / 0.15 / 0.05) "
            f"with responses sampled from the target; sampling and scoring restricted to the content "
            f"words, exactly 8 tokens. DPO: per round 16 candidates per behaviour, 4 pairs (rank a vs "
            f"17 - a), min gap 0.1 nats, 2 AdamW steps at lr 2e-4, β = 0.1, reference = reverse model; "
            f"{sz['rounds']} rounds per iteration, T = {sz['iters']}. Frank-Wolfe: λ = {LAM}, mixture "
            f"penalty, η_t = 1/t; restarts: λ = 0, other seeds, same compute. Evaluation: "
            f"{sz['n_eval']} samples per behaviour; success = the target's greedy response equals the "
            f"payload. Runs: {len(runs)} ({'one checkpoint seed each' if full else 'loop seeds on one pair of checkpoints'})."
        ),
        power=(
            f"{len(runs)} runs; t-intervals with {len(runs) - 1} degrees of freedom. In quick mode the "
            "runs share the target and reverse model, so their spread is the loops' only."
        ),
        tables=[table_runs(runs), table_hist(runs[0])] + ([table_ablations(runs)] if full else []),
        deviations=DEVIATIONS,
        notes=notes,
    )


def evaluate_checks(runs: list[dict[str, Any]], full: bool) -> list[Check]:
    """The four checks, one value per run. Each run names its unit: in full mode a world (its own
    target and reverse model; a world whose gate failed is absent, so the units say which worlds
    remain), in quick mode a loop seed on the one shared pair of checkpoints."""
    units = [
        f"world {x['checkpoint']['seed']}"
        if full
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


DEVIATIONS = [
    "A planted-trigger toy with a 2-layer target instead of Llama-3.1-8B targets, AdvBench and "
    "hallucination rubrics; no GCG / PAIR peers run.",
    "The target and reverse model are trained with AdamW and a warm-up + cosine schedule "
    "(icml25.toy.train_causal_lm / reverse_sft) instead of constant Adam.",
    "The toy's DPO settings (16 candidates, 4 pairs per behaviour, lr 2e-4, 2 steps per round, "
    "min gap 0.1 nats) and λ = 0.1 come from the pilot in our design notes, not from the paper.",
]


# -- checkpoints ----------------------------------------------------------------------------------
def _atomic_save(state: Any, path: Path) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def checkpoints(seed: int, sz: dict[str, Any], out: Path, *, gate: bool) -> dict[str, Any]:
    """The target (with its fidelity gate) and the reverse model of one world seed, cached in
    ``out/checkpoints``."""
    import torch

    from icml25.elicitation.backends import HFTargetModel
    from icml25.elicitation.investigator import Investigator
    from icml25.elicitation.sft import build_reverse_pairs, reverse_sft
    from icml25.elicitation.toy import PlantedTriggerWorld
    from icml25.toy import train_causal_lm

    d = out / "checkpoints"
    d.mkdir(parents=True, exist_ok=True)
    w = PlantedTriggerWorld(seed)
    tok = w.build_tokenizer()
    tag = f"s{seed}_t{sz['target_steps']}"
    target = w.build_model(tok, seed)
    tp = d / f"target_{tag}.pt"
    t0 = time.perf_counter()
    if tp.exists():
        target.load_state_dict(torch.load(tp))
    else:
        data = w.target_data(sz["target_data"], random.Random(seed))
        train_causal_lm(
            target,
            tok,
            data,
            steps=sz["target_steps"],
            batch_size=64,
            lr=1e-3,
            warmup=50,
            max_length=32,
            seed=seed,
            progress=False,
        )
        _atomic_save(target.state_dict(), tp)
    target.eval()
    tgt = HFTargetModel(target, tok, use_chat_template=True, add_eos=True, batch_size=256)
    fid = w.fidelity(tgt, sz["gate_n"], random.Random(seed + 1))
    if gate:
        w.check_fidelity(fid)
    t_target = time.perf_counter() - t0
    inv_model = w.build_model(tok, seed + 1)
    ip = d / f"reverse_{tag}_s{sz['sft_steps']}.pt"
    if ip.exists():
        inv_model.load_state_dict(torch.load(ip))
        inv = Investigator(
            inv_model, tok, allowed_token_ids=w.content_ids(tok), exact_length=w.prompt_len
        )
    else:
        xs = w.natural_prompts(sz["natural"], random.Random(seed + 2))
        pairs = build_reverse_pairs(tgt, xs, max_new_tokens=6, seed=seed + 3)
        inv = Investigator(
            inv_model, tok, allowed_token_ids=w.content_ids(tok), exact_length=w.prompt_len
        )
        reverse_sft(
            inv,
            pairs,
            steps=sz["sft_steps"],
            lr=1e-3,
            batch_size=64,
            warmup=50,
            seed=seed,
            progress=False,
        )
        _atomic_save(inv_model.state_dict(), ip)
    inv_model.eval()
    return {
        "seed": seed,
        "world": w,
        "tok": tok,
        "target": tgt,
        "sft": inv,
        "fidelity": {str(k): v for k, v in fid.items()},
        "seconds_target": t_target,
        "seconds_total": time.perf_counter() - t0,
    }


# -- the loops --------------------------------------------------------------------------------------
def evaluate(ck: dict[str, Any], q: Any, n: int, seed: int) -> dict[str, Any]:
    """Success rate, mean log p_m, per-behaviour trigger histogram of successes, coverage, mean
    trigger count and distinct-2 of ``n`` samples per behaviour."""
    from icml25.elicitation.metrics import distinct_n, successes, trigger_coverage

    w, tgt = ck["world"], ck["target"]
    bs = w.behaviors
    samp = q.sample(bs, n, seed=seed)
    flat_b = [b for b, s in zip(bs, samp) for _ in s]
    flat_x = [x for s in samp for x in s]
    ok = successes(tgt, flat_x, flat_b, max_new_tokens=6)
    lp = tgt.logprob(flat_x, flat_b)
    cred = [
        [w.credited_trigger(x, j) for x, o in zip(samp[j], ok[j * n : (j + 1) * n]) if o]
        for j in range(len(bs))
    ]
    return {
        "sr": sum(ok) / len(ok),
        "logprob": float(lp.clamp(min=-50).mean()),
        "coverage": trigger_coverage(cred),
        "hist": [[c.count(k) for k in range(3)] for c in cred],
        "mean_count": sum(w.counts(x)[j] for j in range(len(bs)) for x in samp[j]) / (n * len(bs)),
        "distinct2": distinct_n(flat_x, 2),
    }


def loops(
    ck: dict[str, Any], seed: int, sz: dict[str, Any], out: Path, *, ablations: bool
) -> dict[str, Any]:
    """Frank-Wolfe (λ = 0.1) and restarts (λ = 0) on one loop seed, evaluated per iterate and
    per mixture prefix; cached as JSON."""
    from icml25.elicitation.frank_wolfe import frank_wolfe
    from icml25.elicitation.investigator import InvestigatorMixture

    cache = (
        out
        / f"loops_c{ck['seed']}_l{seed}_r{sz['rounds']}_T{sz['iters']}_n{sz['n_eval']}_a{int(ablations)}.json"
    )
    if cache.exists():
        res = json.loads(cache.read_text())
        res["checkpoint"] = {k: ck[k] for k in ("seed", "fidelity")}
        return res
    t0 = time.perf_counter()
    w = ck["world"]
    fw_kw = dict(
        n_iters=sz["iters"],
        rounds_per_iter=sz["rounds"],
        n_candidates=16,
        pairs_per_behavior=4,
        min_gap=0.1,
        beta=0.1,
        lr=2e-4,
        steps_per_round=2,
    )
    res: dict[str, Any] = {"seed": seed, "sft": evaluate(ck, ck["sft"], sz["n_eval"], seed + 5)}
    variants = {"fw": dict(lam=LAM, seed=2 * seed), "restart": dict(lam=0.0, seed=2 * seed + 1)}
    if ablations:
        variants.update(
            {f"fw_lam{lam:g}": dict(lam=lam, seed=2 * seed) for lam in (0.03, 0.3, 1.0)}
        )
        variants["fw_last"] = dict(lam=LAM, seed=2 * seed, penalty="last")
    for name, kw in variants.items():
        spreads: list[tuple[int, int, float, float]] = []
        mix = frank_wolfe(
            w.behaviors,
            ck["target"],
            ck["sft"],
            callbacks=[
                lambda t, k, st, spreads=spreads: spreads.append(
                    (
                        t,
                        k,
                        st["spread"].get("reward_std", 0.0),
                        st["spread"].get("penalty_std", 0.0),
                    )
                )
            ],
            **fw_kw,
            **kw,
        )
        its = [evaluate(ck, q, sz["n_eval"], seed + 11 + i) for i, q in enumerate(mix.members)]
        mixes = [
            evaluate(ck, InvestigatorMixture(mix.members[: t + 1]), sz["n_eval"], seed + 31 + t)
            for t in range(len(mix.members))
        ]
        res[name] = {"iterates": its, "mixtures": mixes, "spreads": spreads}
    res["seconds"] = time.perf_counter() - t0
    summary = {
        "sr": {
            "sft": res["sft"]["sr"],
            **{k: [i["sr"] for i in res[k]["iterates"]] for k in variants},
        },
        "logprob": {
            "sft": res["sft"]["logprob"],
            **{k: [i["logprob"] for i in res[k]["iterates"]] for k in variants},
        },
        "mix_sr": {k: [m["sr"] for m in res[k]["mixtures"]] for k in variants},
        "mix_cov": {k: [m["coverage"] for m in res[k]["mixtures"]] for k in variants},
    }
    res.update(summary)
    cache.write_text(json.dumps(res))
    res["checkpoint"] = {k: ck[k] for k in ("seed", "fidelity")}
    return res


# -- tables, metrics, figures -----------------------------------------------------------------------
def _ms(xs: list[float], fmt: str = ".3f") -> str:
    if len(xs) == 1:
        return format(xs[0], fmt)
    return f"{np.mean(xs):{fmt}} ± {np.std(xs, ddof=1):{fmt}}"


def table_runs(runs: list[dict[str, Any]]) -> str:
    T = len(runs[0]["fw"]["iterates"])
    rows = [
        "| model | SR | mean log p | coverage | mean trigger count | distinct-2 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def row(name: str, get: Any) -> None:
        vals = [get(x) for x in runs]
        rows.append(
            f"| {name} | "
            + " | ".join(
                _ms([v[k] for v in vals], ".2f")
                for k in ("sr", "logprob", "coverage", "mean_count", "distinct2")
            )
            + " |"
        )

    row("reverse model (SFT)", lambda x: x["sft"])
    for meth in ("fw", "restart"):
        for t in range(T):
            row(f"{meth} iterate {t + 1}", lambda x, t=t, m=meth: x[m]["iterates"][t])
        row(f"**{meth} mixture (T = {T})**", lambda x, m=meth: x[m]["mixtures"][-1])
    return "Per model, mean ± std over runs.\n\n" + "\n".join(rows)


def table_hist(run: dict[str, Any]) -> str:
    rows = [
        "| model | behaviour 1 | behaviour 2 | behaviour 3 | behaviour 4 |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows.append("| SFT | " + " | ".join("/".join(map(str, h)) for h in run["sft"]["hist"]) + " |")
    for meth in ("fw", "restart"):
        for t, it in enumerate(run[meth]["iterates"]):
            rows.append(
                f"| {meth} iterate {t + 1} | "
                + " | ".join("/".join(map(str, h)) for h in it["hist"])
                + " |"
            )
        rows.append(
            f"| {meth} mixture | "
            + " | ".join("/".join(map(str, h)) for h in run[meth]["mixtures"][-1]["hist"])
            + " |"
        )
    return (
        f"Successful samples per trigger (trigger 1 / 2 / 3) per behaviour, run of loop seed {run['seed']}.\n\n"
        + "\n".join(rows)
    )


def table_ablations(runs: list[dict[str, Any]]) -> str:
    rows = ["| variant | mixture SR | mixture coverage |", "| --- | --- | --- |"]
    for k in ("restart", "fw_lam0.03", "fw", "fw_lam0.3", "fw_lam1", "fw_last"):
        if k in runs[0]["mix_sr"]:
            label = {
                "fw": f"FW λ = {LAM} (pre-registered)",
                "fw_last": f"FW λ = {LAM}, penalty = last",
            }.get(k, k)
            rows.append(
                f"| {label} | {_ms([x['mix_sr'][k][-1] for x in runs], '.2f')} | "
                f"{_ms([x['mix_cov'][k][-1] for x in runs], '.2f')} |"
            )
    return (
        "Ablations (full mode), mixture after T iterations, mean ± std over runs.\n\n"
        + "\n".join(rows)
    )


def _metrics(runs: list[dict[str, Any]], full: bool) -> list[Metric]:
    out = [
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
    return out


def plot_histograms(run: dict[str, Any]) -> Any:
    plt = pyplot()
    T = len(run["fw"]["iterates"])
    fig, axes = plt.subplots(2, T + 1, figsize=(3 * (T + 1), 5.5), sharey=True, squeeze=False)
    colors = ("tab:blue", "tab:orange", "tab:green")
    for r_, meth in enumerate(("fw", "restart")):
        panels = [*run[meth]["iterates"], run[meth]["mixtures"][-1]]
        for c_, ev in enumerate(panels):
            ax = axes[r_][c_]
            h = np.array(ev["hist"], dtype=float)
            bottom = np.zeros(len(h))
            for k in range(3):
                ax.bar(
                    range(1, len(h) + 1),
                    h[:, k],
                    bottom=bottom,
                    color=colors[k],
                    label=f"trigger {k + 1}",
                )
                bottom += h[:, k]
            ax.set_title(f"{meth} {'mixture' if c_ == T else f'iterate {c_ + 1}'}", fontsize=9)
            ax.set_xlabel("behaviour")
    axes[0][0].set_ylabel("successful samples")
    axes[1][0].set_ylabel("successful samples")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_curves(runs: list[dict[str, Any]]) -> Any:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    T = len(runs[0]["fw"]["mixtures"])
    ts = np.arange(1, T + 1)
    for meth, color in (("fw", "tab:red"), ("restart", "tab:gray")):
        cov = np.array([[m["coverage"] for m in x[meth]["mixtures"]] for x in runs])
        sr = np.array([[m["sr"] for m in x[meth]["mixtures"]] for x in runs])
        cnt = np.array([[i["mean_count"] for i in x[meth]["iterates"]] for x in runs])
        for ax, v in zip(axes, (cov, sr, cnt)):
            ax.errorbar(
                ts,
                v.mean(0),
                yerr=v.std(0, ddof=1) if len(runs) > 1 else None,
                color=color,
                marker="o",
                capsize=3,
                label=meth,
            )
    axes[1].axhline(
        np.mean([x["sr"]["sft"] for x in runs]), color="black", ls="--", lw=1, label="SFT"
    )
    for ax, t in zip(
        axes, ("coverage of the mixture", "SR of the mixture", "mean trigger count (iterate)")
    ):
        ax.set_title(t)
        ax.set_xlabel("iteration t")
        ax.set_xticks(ts)
    axes[1].legend()
    fig.tight_layout()
    return fig


def plot_spreads(run: dict[str, Any]) -> Any:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    sp = np.array(run["fw"]["spreads"], dtype=float)
    x = np.arange(len(sp))
    ax.plot(x, sp[:, 2], label="std(log p_m(y|x)) (reward)")
    ax.plot(x, LAM * sp[:, 3], label=f"λ · std(log q̄) (penalty, λ = {LAM})")
    for t in range(2, int(sp[:, 0].max()) + 1):
        ax.axvline(np.argmax(sp[:, 0] == t), color="gray", lw=0.5)
    ax.set_xlabel("DPO round (all iterations)")
    ax.set_ylabel("spread over candidates (nats)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
