"""Reproduction of paper 10 (arXiv:2412.16475) on synthetic expert/proxy worlds
(docs/proxy_feedback.md, "Reproduction").

Claim: when the proxy satisfies the sufficient conditions, proxy preferences plus a few expert
preferences (adapter-only stage 2) learn the expert's policy with far fewer expert samples than
expert data alone, and the advantage disappears when a condition (shared level sets) fails.

The module reads: claim and pre-registered criteria -> one function measuring every method on
one world and seed (stage 1 once, then each expert-sample size on nested prefixes) -> checks
(paired over seeds) -> condition diagnostics, tables and figures.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

from icml25.proxy_feedback.conditions import check_conditions
from icml25.proxy_feedback.data import sample_preferences
from icml25.proxy_feedback.evaluate import evaluate
from icml25.proxy_feedback.model import MLPPolicy, SimplexPolicy
from icml25.proxy_feedback.train import (
    fit_finetune_all,
    fit_pooled,
    fit_proxy_stage,
    fit_true_only,
    fit_true_stage,
)
from icml25.proxy_feedback.worlds import SyntheticPreferenceWorld
from icml25.report import Criterion, Metric, ReproResult, Run, pyplot, reproduction

CLAIM = (
    "When the proxy satisfies the sufficient conditions, proxy preferences plus a few expert "
    "preferences (adapter-only fine-tuning of the simplex parameterisation) learn the expert's "
    "policy with far fewer expert samples than expert data alone; the advantage disappears when "
    "the proxy does not share the expert's level sets."
)

# -- pre-registered: seeds, sizes and criteria (fixed before this version's numbers) -------------
#: 10 seeds in both modes: check 2's effect (pilot: mean 0.03, sd 0.09 over seeds) needs them
N_QUICK, N_FULL = 10, 10
N_PROXY = 8000  # proxy triples (the paper's appendix)
N_TEST = 5000
N_LLM = 3  # seeds of the LLM path (full mode; reported, not checked)
GRID_FULL = (10, 35, 100, 300, 1000, 3000)
SMALL_N, LARGE_N = 35, 300  # check 2: expert-only with 8.5x the samples vs two-stage at 35

BEATS_TRUE = Criterion(
    "hold, n=35: TV(true_only) - TV(two_stage) > 0",
    "paired",
    above=0.0,
    unit="TV",
    description="mean TV to the expert's policy on 5000 test inputs, expert-only (better of the "
    "simplex net and a plain MLP) minus two-stage, paired by seed (world, data and test inputs)",
)
BEATS_PROXY = Criterion(
    "hold, n=35: TV(proxy_only) - TV(two_stage) > 0",
    "paired",
    above=0.0,
    unit="TV",
    description="stage-1 model (adapter = identity) minus two-stage, paired by seed",
)
SAVES_SAMPLES = Criterion(
    "hold: TV(true_only@300) - TV(two_stage@35) > 0.01",
    "paired",
    above=0.01,
    unit="TV",
    description="expert-only with 300 expert triples minus two-stage with 35, paired by seed: "
    "expert-only learning needs more than 8.5x the expert samples to match",
)
VANISHES = Criterion(
    "v1_levelsets, n=1000: TV(two_stage) - TV(true_only) > 0",
    "paired",
    above=0.0,
    unit="TV",
    description="with level sets not shared, two-stage minus expert-only at n = 1000 expert "
    "triples, paired by seed: the advantage is gone",
)
CRITERIA = [BEATS_TRUE, BEATS_PROXY, SAVES_SAMPLES, VANISHES]

METHODS_QUICK = ("two_stage", "true_only", "proxy_only")
METHODS_FULL = ("two_stage", "true_only", "proxy_only", "finetune_all", "pooled")


def _worlds(r: Run) -> dict[str, dict[str, Any]]:
    """World name -> (constructor kwargs, expert sample sizes) for this mode."""
    if r.smoke:
        return {
            "hold": {"kw": {}, "ns": (35, 60)},
            "v1_levelsets": {"kw": {"scenario": "v1_levelsets"}, "ns": (80,)},
        }
    if r.quick:
        return {
            "hold": {"kw": {}, "ns": (SMALL_N, LARGE_N)},
            "v1_levelsets": {"kw": {"scenario": "v1_levelsets"}, "ns": (1000,)},
        }
    mid = (SMALL_N, LARGE_N, 1000)  # the extra worlds: enough to see the bias floor or the gain
    return {
        "hold": {"kw": {}, "ns": GRID_FULL},
        "v1_levelsets": {"kw": {"scenario": "v1_levelsets"}, "ns": GRID_FULL[:-1]},
        "v2_image": {"kw": {"scenario": "v2_image"}, "ns": mid},
        "v4_lipschitz": {"kw": {"scenario": "v4_lipschitz"}, "ns": mid},
        "hold_K20": {"kw": {"n_outputs": 20}, "ns": mid},
        "hold_dx20": {"kw": {"d_x": 20}, "ns": mid},
    }


def measure(
    world_kw: dict[str, Any],
    seed: int,
    ns: tuple[int, ...],
    *,
    methods: tuple[str, ...],
    n_proxy: int = N_PROXY,
    stage2_steps: int = 300,
    true_steps: int = 2000,
    proxy_epochs: int = 30,
    n_test: int = N_TEST,
) -> dict[str, Any]:
    """Every method on one world and seed; expert data for the sizes ``ns`` are nested
    prefixes of one sample. Returns ``{"tv": {method: {n: tv}}, "other": ..., ...}``."""
    world = SyntheticPreferenceWorld(D=2, seed=seed, **world_kw)
    g = torch.Generator().manual_seed(10_000 + seed)
    proxy = sample_preferences(world.proxy_policy, n_proxy, generator=g)
    true = sample_preferences(world.true_policy, max(ns), generator=g)

    def ev(model, use_adapter=True) -> dict[str, float]:
        gen = torch.Generator().manual_seed(20_000 + seed)  # the same test inputs for all
        return evaluate(model, world, n_test, gen, use_adapter=use_adapter)

    def fresh(cls, *args):
        torch.manual_seed(seed)
        return cls(*args)

    d_x, k = world.d_x, world.n_outputs
    base = fresh(SimplexPolicy, d_x, k, 2)
    fit_proxy_stage(base, proxy, epochs=proxy_epochs, seed=seed)
    proxy_world = _ProxyAsTruth(world)
    out: dict[str, Any] = {"tv": {m: {} for m in methods}, "all": {m: {} for m in methods}}
    po = ev(base, use_adapter=False)
    out["stage1_fit_tv"] = evaluate(
        base, proxy_world, n_test, torch.Generator().manual_seed(20_000 + seed), use_adapter=False
    )["tv"]
    out["true_only_variant"] = {}
    for n in ns:
        sub = true[:n]
        if "proxy_only" in methods:
            out["tv"]["proxy_only"][n], out["all"]["proxy_only"][n] = po["tv"], po
        if "two_stage" in methods:
            m = copy.deepcopy(base)
            fit_true_stage(m, sub, steps=stage2_steps, seed=seed)
            e = ev(m)
            out["tv"]["two_stage"][n], out["all"]["two_stage"][n] = e["tv"], e
        if "true_only" in methods:
            cands = {}
            for name, model in (
                ("simplex", fresh(SimplexPolicy, d_x, k, 2)),
                ("mlp", fresh(MLPPolicy, d_x, k)),
            ):
                fit_true_only(model, sub, steps=true_steps)
                cands[name] = ev(model)
            best = min(cands, key=lambda c: cands[c]["tv"])
            out["tv"]["true_only"][n], out["all"]["true_only"][n] = cands[best]["tv"], cands[best]
            out["true_only_variant"][n] = best
        if "finetune_all" in methods:
            m = copy.deepcopy(base)
            fit_finetune_all(m, sub, steps=true_steps)
            e = ev(m)
            out["tv"]["finetune_all"][n], out["all"]["finetune_all"][n] = e["tv"], e
        if "pooled" in methods:
            m = fresh(SimplexPolicy, d_x, k, 2)
            fit_pooled(m, proxy, sub, epochs=proxy_epochs, seed=seed)
            e = ev(m, use_adapter=False)
            out["tv"]["pooled"][n], out["all"]["pooled"][n] = e["tv"], e
    return out


class _ProxyAsTruth:
    """A world view whose 'true' policy is the proxy (to score stage 1's fit to the proxy)."""

    def __init__(self, world: SyntheticPreferenceWorld) -> None:
        self.d_x, self.true_policy, self.sample_x = world.d_x, world.proxy_policy, world.sample_x


def diagnostics(world_kw: dict[str, Any], seed: int, n: int = 5000) -> dict[str, float]:
    world = SyntheticPreferenceWorld(D=2, seed=seed, **world_kw)
    x = world.sample_x(n, torch.Generator().manual_seed(30_000 + seed), dtype=torch.float64)
    rep = check_conditions(world.true_policy, world.proxy_policy, x)
    d = {k: v for k, v in rep.to_dict().items() if isinstance(v, float)}
    d.update({f"holds_{c}": float(h) for c, h in rep.holds.items()})
    return d


@reproduction("proxy_feedback", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    worlds = _worlds(r)
    methods = METHODS_FULL if not (r.quick or r.smoke) else METHODS_QUICK
    sizes = dict(
        n_proxy=r.size(smoke=400, quick=N_PROXY, full=N_PROXY),
        stage2_steps=r.size(smoke=20, quick=300, full=500),
        true_steps=r.size(smoke=30, quick=2000, full=2000),
        proxy_epochs=r.size(smoke=2, quick=30, full=30),
        n_test=r.size(smoke=300, quick=N_TEST, full=N_TEST),
    )
    res: dict[str, list[dict]] = {}
    for name, world in worlds.items():
        res[name] = r.over_seeds(
            lambda s, world=world: measure(world["kw"], s, world["ns"], methods=methods, **sizes),
            label=f"{name}",
        )
    diag_worlds = {
        "hold": {},
        "v1_levelsets": {"scenario": "v1_levelsets"},
        "v2_image": {"scenario": "v2_image"},
        "v4_lipschitz": {"scenario": "v4_lipschitz"},
    }
    if not (r.quick or r.smoke):
        diag_worlds["hold_K20"] = {"n_outputs": 20}
    n_diag = r.size(smoke=400, quick=5000, full=5000)
    diag = {w: [diagnostics(kw, s, n_diag) for s in r.seeds] for w, kw in diag_worlds.items()}

    llm = []
    if not (r.quick or r.smoke):
        from icml25.proxy_feedback.diagnosis import run_llm_path

        llm = r.over_seeds(run_llm_path, seeds=r.seeds[:N_LLM], label="LLM path")

    def tv(world: str, method: str, n: int) -> list[float]:
        return [x["tv"][method][n] for x in res[world]]

    hold_ns = worlds["hold"]["ns"]
    small, large = hold_ns[0], hold_ns[1]
    v1_n = worlds["v1_levelsets"]["ns"][-1]
    checks = [
        BEATS_TRUE.check(tv("hold", "true_only", small), tv("hold", "two_stage", small)),
        BEATS_PROXY.check(tv("hold", "proxy_only", small), tv("hold", "two_stage", small)),
        SAVES_SAMPLES.check(tv("hold", "true_only", large), tv("hold", "two_stage", small)),
        VANISHES.check(
            tv("v1_levelsets", "two_stage", v1_n), tv("v1_levelsets", "true_only", v1_n)
        ),
    ]
    if r.smoke:
        checks = [
            c.renamed(
                c.name.replace("n=35", f"n={small}")
                .replace("@300", f"@{large}")
                .replace("@35", f"@{small}")
                .replace("n=1000", f"n={v1_n}")
            )
            for c in checks
        ]
    if "hold_K20" in res:
        checks.append(
            SAVES_SAMPLES.check(
                tv("hold_K20", "true_only", LARGE_N), tv("hold_K20", "two_stage", SMALL_N)
            ).renamed("hold, K=20: TV(true_only@300) - TV(two_stage@35) > 0.01")
        )

    every_seed = {
        "true_only": sum(
            a > b for a, b in zip(tv("hold", "true_only", small), tv("hold", "two_stage", small))
        ),
        "proxy_only": sum(
            a > b for a, b in zip(tv("hold", "proxy_only", small), tv("hold", "two_stage", small))
        ),
    }
    metrics = _metrics(res, worlds, diag)
    tables = [_table(res, worlds), _diag_table(diag)]
    if llm:
        for key, v in llm[0].items():
            vals = [x[key]["tv"] if isinstance(v, dict) else x[key] for x in llm]
            name = f"LLM: TV {key}" if isinstance(v, dict) else f"LLM: {key}"
            metrics.append(Metric(name, vals, unit="TV" if isinstance(v, dict) else "nats"))
        tables.append(_llm_table(llm))
    for name in worlds:
        r.figure(_plot_curve(name, res[name], worlds[name]["ns"]), f"tv_vs_n_{name}.png")
    r.figure(_plot_conditions(diag), "conditions.png")
    notes = [
        f"Check 1 per seed (the pre-registered 'every seed' reading): two-stage beat expert-only "
        f"in {every_seed['true_only']} of {len(r.seeds)} seeds and the proxy-only model in "
        f"{every_seed['proxy_only']} of {len(r.seeds)}.",
        "Stage 1's fit to the proxy (TV to π̃, hold): "
        + _mean_sd([x["stage1_fit_tv"] for x in res["hold"]])
        + ".",
        "Expert-only variant chosen (by test TV) over all worlds, sizes and seeds: "
        + ", ".join(f"{v} {c}" for v, c in sorted(_variant_counts(res).items()))
        + ".",
    ]
    if not (r.quick or r.smoke):
        notes.append(_matching_n(res, worlds))
    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=checks[2].name,
        metrics=metrics,
        setup=_setup(r, worlds, methods, sizes),
        criterion="Every check must hold (95% paired t-intervals over seeds, beyond the "
        "threshold). Checks 1-3 are where the conditions hold; check 4 is the predicted loss of the "
        "advantage when shared level sets (C1) fail.",
        power=(
            "The paper's appendix numbers could not be read, so no paper effect is set. A pilot "
            "(seeds 0-9) measured check 2's per-seed difference at mean 0.03, sd 0.09: with 10 "
            "seeds the paired t-interval's half-width is about 0.065, so a true margin of 0.01 + "
            "0.03 can come out inconclusive; we report that rather than change the threshold."
        ),
        tables=tables,
        notes=notes,
        deviations=_deviations(r),
    )


def _deviations(r: Run) -> list[str]:
    out = [
        "No official code; optimiser settings, restarts and the adapter regulariser are ours "
        "(docs/proxy_feedback.md, 'Decisions').",
        "Expert-only is the better of the simplex network and a plain MLP at each n, chosen by "
        "test TV (an oracle choice that favours the baseline).",
        "10 seeds in quick and full mode instead of 3 and 5: the sample-saving check is "
        "underpowered with fewer.",
        "Check 1 is judged by paired t-intervals (house rule) rather than 'in every seed'; the "
        "per-seed counts are in the notes.",
        "Stage-2 restarts run 300 steps in quick mode (500 in full).",
        "The condition diagnostics' estimators and tolerances are ours (docs/proxy_feedback.md, "
        "'Condition diagnostics').",
    ]
    if not r.quick:
        out.append(
            f"The LLM path (tiny Llama on the diagnosis text task, {N_LLM} seeds) is reported, not "
            "checked; it uses a uniform DPO reference and β = 1 (the synthetic setting's "
            "Bradley-Terry labels) and a 12-vertex bottleneck. Its PEFT LoRA comparison is in "
            "benchmarks/proxy_feedback_lora.py."
        )
    return out


def _variant_counts(res) -> dict[str, int]:
    out: dict[str, int] = {}
    for runs in res.values():
        for x in runs:
            for v in x["true_only_variant"].values():
                out[v] = out.get(v, 0) + 1
    return out


def _mean_sd(v: list[float]) -> str:
    a = np.asarray(v, dtype=float)
    sd = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return f"{a.mean():.3f} ± {sd:.3f}"


def _metrics(res, worlds, diag) -> list[Metric]:
    out = []
    for w, runs in res.items():
        for m in runs[0]["tv"]:
            for n in worlds[w]["ns"]:
                out.append(Metric(f"{w}: TV {m} @ n={n}", [x["tv"][m][n] for x in runs], unit="TV"))
        out.append(
            Metric(f"{w}: stage-1 TV to the proxy", [x["stage1_fit_tv"] for x in runs], unit="TV")
        )
    for w, ds in diag.items():
        for key in (
            "levelset_violation",
            "levelset_spearman",
            "image_gap_q99",
            "intrinsic_dim",
            "L_hat",
            "L_hat_rev",
        ):
            out.append(Metric(f"{w}: {key}", [d[key] for d in ds]))
    return out


def _table(res, worlds) -> str:
    lines = []
    for w, runs in res.items():
        ms = list(runs[0]["tv"])
        lines += [
            f"**{w}**: mean TV to π† (± sd over {len(runs)} seeds) by expert triples n",
            "",
            "| n | " + " | ".join(ms) + " |",
            "|---|" + "---|" * len(ms),
        ]
        for n in worlds[w]["ns"]:
            lines.append(
                f"| {n} | " + " | ".join(_mean_sd([x["tv"][m][n] for x in runs]) for m in ms) + " |"
            )
        lines.append("")
    return "\n".join(lines)


def _llm_table(llm) -> str:
    keys = [k for k, v in llm[0].items() if isinstance(v, dict)]
    lines = [
        f"LLM path: next-token TV to π† on 500 test prompts (mean ± sd over {len(llm)} seeds); "
        "two_stage@n = stage-2 adapter-only DPO on n expert pairs, dpo_all@n = DPO of every "
        "parameter of the SFT model on the same pairs:",
        "",
        "| model | TV | mass off the disease tokens |",
        "|---|---|---|",
    ]
    for k in keys:
        lines.append(
            f"| {k} | {_mean_sd([x[k]['tv'] for x in llm])} | "
            f"{_mean_sd([x[k]['off_mass'] for x in llm])} |"
        )
    lines.append("")
    lines.append(f"Warm-up held-out KL: {_mean_sd([x['warmup_heldout_kl'] for x in llm])} nats.")
    return "\n".join(lines)


def _diag_table(diag) -> str:
    keys = ("levelset_violation", "image_gap_q99", "intrinsic_dim", "L_hat", "L_hat_rev")
    lines = [
        "Condition diagnostics of each world (mean ± sd over world seeds; "
        "`check_conditions` on 5000 inputs):",
        "",
        "| world | " + " | ".join(keys) + " | conditions held (share of seeds) |",
        "|---|" + "---|" * (len(keys) + 1),
    ]
    for w, ds in diag.items():
        held = ", ".join(
            f"{c} {np.mean([d[f'holds_{c}'] for d in ds]):.1f}" for c in ("C1", "C2", "C3", "C4")
        )
        lines.append(
            f"| {w} | " + " | ".join(_mean_sd([d[k] for d in ds]) for k in keys) + f" | {held} |"
        )
    return "\n".join(lines)


def _matching_n(res, worlds) -> str:
    parts = []
    for w in ("hold", "hold_K20"):
        if w not in res:
            continue
        target = float(np.mean([x["tv"]["two_stage"][SMALL_N] for x in res[w]]))
        match = [
            n
            for n in worlds[w]["ns"]
            if np.mean([x["tv"]["true_only"][n] for x in res[w]]) <= target
        ]
        parts.append(
            f"{w}: expert-only first matches two-stage@35 (mean TV {target:.3f}) at "
            + (f"n = {match[0]}" if match else "no grid n (never)")
        )
    return "Smallest grid n at which expert-only matches: " + "; ".join(parts) + "."


def _setup(r: Run, worlds, methods, sizes) -> str:
    ws = "; ".join(f"{w} (n in {list(v['ns'])})" for w, v in worlds.items())
    return (
        f"Synthetic worlds (d_x = 5, K = 3, D = 2 unless named): {ws}. N = {sizes['n_proxy']} proxy "
        f"triples from π̃; expert triples from π†, nested prefixes of one sample. Methods: "
        f"{', '.join(methods)}. Stage 1: Adam 3e-3, batch 256, {sizes['proxy_epochs']} epochs; "
        f"stage 2: log-linear adapter, all 6 permutation starts x {sizes['stage2_steps']} full-batch "
        f"Adam steps (lr 1e-2, reg 1e-3); expert-only: {sizes['true_steps']} steps (Adam 3e-3, "
        f"weight decay 1e-4), better of a simplex net and a plain MLP. Metric: mean TV to π† on "
        f"{sizes['n_test']} test inputs (the same inputs for every method of a seed). Seeds "
        f"{r.seeds} (world, data, initialisation and test inputs per seed). One thread."
    )


def _plot_curve(name: str, runs: list[dict], ns: tuple[int, ...]):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for m in runs[0]["tv"]:
        a = np.array([[x["tv"][m][n] for n in ns] for x in runs])
        mu, sd = a.mean(0), a.std(0, ddof=1) if len(a) > 1 else np.zeros(len(ns))
        if m == "proxy_only":
            ax.axhline(mu[0], color="gray", ls="--", label="proxy_only")
            continue
        ax.errorbar(ns, mu, yerr=sd, marker="o", capsize=3, label=m)
    ax.set_xscale("log")
    ax.set_xlabel("expert triples n")
    ax.set_ylabel("mean TV to expert policy")
    ax.set_title(f"{name} ({len(runs)} seeds, mean ± sd)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _plot_conditions(diag):
    plt = pyplot()
    keys = (
        ("levelset_violation", "C1 level-set violation"),
        ("image_gap_q99", "C2 image gap q99"),
        ("L_hat", "C4 L_hat (log)"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    names = list(diag)
    for ax, (k, title) in zip(axes, keys):
        vals = [[d[k] for d in diag[w]] for w in names]
        mu = [float(np.mean(v)) for v in vals]
        sd = [float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for v in vals]
        ax.bar(range(len(names)), mu, yerr=sd, capsize=3, color="tab:blue")
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
        if k == "L_hat":
            ax.set_yscale("log")
    fig.tight_layout()
    return fig
