"""The reproduction of paper 16 (TPO) offline, with a tiny role model behind the real prompts.

The policy is a small transformer trained to play TPO's four roles on a synthetic task (see
:mod:`icml25.tpo.tiny`); ``tpo_optimize`` runs the same code path as with a real LLM. The three
gates of our plan are pre-registered criteria on per-seed means over the held-out queries (a
t-interval over seeds): (1) the fresh candidates' mean reward at iteration D
exceeds iteration 0 by more than 0.10; (2) TPO-D2-N5 beats Best-of-15 (the same number of policy
samples) by more than 0.03; (3) TPO beats TPO with scrambled critiques by more than 0.03 (the gain
must come from the critique's content). Full mode adds the width x depth grid (one depth-5 run
per width gives every depth: see :meth:`TPOResult.best_reward_at`).

Reads as: constants (claim, criteria, sizes) -> setup (the role model) -> per-seed measurement
(:func:`measure_seed`) -> checks (:func:`tpo_checks`) -> tables and figures.
"""

from __future__ import annotations

import random
import statistics as st
import time
from functools import partial
from typing import Any

import numpy as np
import torch

from icml25.llm import CallableReward
from icml25.report import (
    Check,
    Criterion,
    Metric,
    ReproResult,
    Run,
    pyplot,
    reproduction,
    torch_threads,
)
from icml25.tpo.engine import TPOConfig, best_of_n, tpo_optimize
from icml25.tpo.tiny import (
    L,
    ScrambledCritiqueBackend,
    TinyRoleBackend,
    _noisy,
    _positions,
    _wrong,
    digit_reward,
    make_query,
    prompt_tokens,
    sample,
    train_role_model,
)

CLAIM = (
    "Iterating sample -> textual critique of the best vs the worst response -> textual gradient -> "
    "regeneration raises the reward of fresh candidates and beats Best-of-N at the same number of "
    "samples, and the gain depends on what the critique says."
)

# -- pre-registered criteria (the planned gates; thresholds fixed before any run) -----------------
# paper_effect: our planning simulation of these roles (fresh reward 0.55 -> 0.94, TPO
# 0.99, Best-of-15 and scrambled 0.88), as a distance from each threshold; the paper's own numbers
# (AlpacaEval, Arena-Hard, reward-model scores of a 70B model) are in units this task has not.
_POOLED = (
    "averaged over a seed's held-out queries; the seeds are the independent units (t-interval "
    "over the per-seed means)"
)
FRESH_GAIN = Criterion(
    "(1) fresh-candidate reward, iteration D minus iteration 0",
    "mean",
    above=0.10,
    unit="reward",
    paper_effect=0.29,
    over="seeds",
    description="TPO-D2-N5: mean reward of the fresh candidates at the last iteration minus that "
    "of the initial samples, " + _POOLED,
)
BEATS_BON = Criterion(
    "(2) TPO-D2-N5 minus Best-of-15 final reward",
    "mean",
    above=0.03,
    unit="reward",
    paper_effect=0.08,
    over="seeds",
    description="final best reward of TPO-D2-N5 minus Best-of-15 (15 policy samples each) on the "
    "same query, " + _POOLED,
)
BEATS_SCRAMBLED = Criterion(
    "(3) TPO-D2-N5 minus scrambled-critique TPO final reward",
    "mean",
    above=0.03,
    unit="reward",
    paper_effect=0.08,
    over="seeds",
    description="final best reward of TPO-D2-N5 minus TPO whose critiques flag random positions "
    "(same count) on the same query, " + _POOLED,
)
CRITERIA = [FRESH_GAIN, BEATS_BON, BEATS_SCRAMBLED]

# -- sizes ---------------------------------------------------------------------------------------
# quick: one role model for the run; full: one per seed (docs/tpo.md). Training steps and query counts
# are below the planned (1500/4000 steps, 100/400 queries) to fit the budget on 2 cores; the role
# model meets its quality bars well before (docs/tpo.md has the learning curve). Seeds: 3 / 5.
QUICK = {"steps": 800, "queries": 50, "grid_queries": 0}
FULL = {"steps": 1500, "queries": 120, "grid_queries": 40}
SMOKE = {"steps": 30, "queries": 4, "grid_queries": 2}
N_SEEDS = (3, 5)
TRAIN_THREADS = 2
WIDTHS, MAX_DEPTH = (5, 10, 15, 20), 5
BARS = {"gen": (0.48, 0.62), "critic": (0.85, 1.0), "copy": (0.95, 1.0)}
#: policy samples per query of every compared method
SAMPLES = {
    "BoN-5": 5,
    "BoN-15": 15,
    "BoN-30": 30,
    "BoN-60": 60,
    "TPO-D2-N5": 15,
    "TPO scrambled critiques": 15,
    "revision-D2-N5": 15,
    "TPO-D2-N5 seed increment": 15,
}
# candidates at temperature 1: the tiny policy's learned distribution is the noisy
# ("unaligned") generator; 0.7 would sharpen it towards the answer (see docs)
CONFIG = TPOConfig(width=5, depth=2, temperature=1.0, top_p=1.0)


def role_quality(model, n: int = 200, seed: int = 0) -> dict[str, float]:
    """Generator per-digit accuracy (temperature 1, as candidates are sampled), critic
    per-position accuracy against the true wrong set (greedy, and sampled at the feedback
    temperature 0.7 that TPO uses), updater copy rate of unflagged digits (quality bars: 0.55 +/-
    0.07, >= 0.85, >= 0.95), and the updater's fix rate at flagged wrong digits (the training
    data's rate is 0.55; no bar)."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    gen, crit, crit_t, copy, fix = [], [], [], [], []
    for _ in range(n):
        q = [rng.randrange(10) for _ in range(L)]
        tgt = [(q[L - 1 - i] + 1) % 10 for i in range(L)]
        d = [
            int(w)
            for w in sample(model, prompt_tokens("gen", q), 1, 1.0, 1.0, generator=g)[0]
            if w.isdigit()
        ]
        gen.append(sum(1 for i in range(min(L, len(d))) if d[i] == tgt[i]) / L)
        c, r = _noisy(tgt, rng.random() * 0.8, rng), _noisy(tgt, rng.random() * 0.8, rng)
        if len(_wrong(c, tgt)) > len(_wrong(r, tgt)):
            c, r = r, c
        wrong = set(_wrong(c, tgt))
        for temp, acc in ((0.0, crit), (0.7, crit_t)):
            pos = set(
                _positions(
                    sample(model, prompt_tokens("loss", q, c, r), 1, temp, 1.0, generator=g)[0]
                )
            )
            acc.append(sum(1 for i in range(L) if (i in pos) == (i in wrong)) / L)
        # copy: unflagged digits kept under flags drawn independently of correctness (an updater
        # that fixes wrong digits on its own, ignoring the instruction, fails this); fix: the
        # flagged wrong digits that come back right under the exact instruction
        flags = sorted(i for i in range(L) if rng.random() < 0.5)
        for fl, kind in ((flags, "copy"), (sorted(wrong), "fix")):
            d = [
                int(w)
                for w in sample(
                    model, prompt_tokens("upd", q, c, positions=fl), 1, 1.0, 1.0, generator=g
                )[0]
                if w.isdigit()
            ]
            if len(d) != L:
                continue
            if kind == "copy":
                copy += [d[i] == c[i] for i in range(L) if i not in fl]
            else:
                fix += [d[i] == tgt[i] for i in wrong]
    return {
        "gen": st.mean(gen),
        "critic": st.mean(crit),
        "critic at T=0.7": st.mean(crit_t),
        "copy": sum(copy) / max(1, len(copy)),
        "fix": sum(fix) / max(1, len(fix)),
    }


def _curves(res, depth: int) -> tuple[list[float], list[float]]:
    """Mean reward of the fresh candidates and the best-so-far reward per iteration (0 = the
    initial samples), for one query."""
    fresh = [st.mean([e.reward for e in res.cache if e.iteration == -1])]
    for it in res.iterations[:depth]:
        fresh.append(st.mean(it.new_rewards) if it.new_rewards else float("nan"))
    best = [res.best_reward_at(d) for d in range(len(res.iterations[:depth]) + 1)]
    return fresh, best


# -- setup and per-seed measurement --------------------------------------------------------------


def measure_seed(model, seed: int, size: dict[str, int], *, grid: bool) -> dict[str, Any]:
    """Every method on the same ``size["queries"]`` held-out queries of ``seed`` with the role
    model ``model``: per-query final rewards (``best``) and exact solves, per-query fresh and
    best-so-far curves of the TPO variants, seconds per query, and (``grid``) the width x depth
    grid with its Best-of-N curve."""
    cfg = CONFIG
    reward = CallableReward(digit_reward)
    rev = TPOConfig(**{**cfg.__dict__, "mode": "revision"})
    # report only: a new seed on every seeded call instead of the official fixed 7
    inc = TPOConfig(**{**cfg.__dict__, "seed_policy": "increment"})
    backend = TinyRoleBackend(model)
    scrambled = ScrambledCritiqueBackend(backend, seed=seed)
    rng = random.Random(10_000 + seed)
    queries = [make_query([rng.randrange(10) for _ in range(L)]) for _ in range(size["queries"])]
    runs = {
        f"BoN-{k}": partial(best_of_n, backend=backend, reward=reward, n=k, config=cfg)
        for k in (5, 15, 30, 60)
    }
    runs["TPO-D2-N5"] = partial(tpo_optimize, backend=backend, reward=reward, config=cfg)
    runs["TPO scrambled critiques"] = partial(
        tpo_optimize, backend=scrambled, reward=reward, config=cfg
    )
    runs["revision-D2-N5"] = partial(tpo_optimize, backend=backend, reward=reward, config=rev)
    runs["TPO-D2-N5 seed increment"] = partial(
        tpo_optimize, backend=backend, reward=reward, config=inc
    )
    out: dict[str, Any] = {"best": {}, "exact": {}, "secs": {}, "fresh": {}, "best curve": {}}
    for name, fn in runs.items():
        t = time.perf_counter()
        rs = [fn(q) for q in queries]
        out["secs"][name] = (time.perf_counter() - t) / max(1, len(queries))
        out["best"][name] = [float(r.best_reward) for r in rs]
        out["exact"][name] = [float(r.best_reward == 1.0) for r in rs]
        if not name.startswith("BoN"):
            fr, be = zip(*(_curves(r, cfg.depth) for r in rs))
            out["fresh"][name] = [list(c) for c in fr]
            out["best curve"][name] = [list(c) for c in be]
    out["grid"] = out["bon curve"] = None
    if grid and size["grid_queries"]:
        gq = queries[: size["grid_queries"]]
        g = np.zeros((len(WIDTHS), MAX_DEPTH + 1))
        for wi, w in enumerate(WIDTHS):
            c = TPOConfig(**{**cfg.__dict__, "width": w, "depth": MAX_DEPTH})
            rs = [tpo_optimize(q, backend, reward, c) for q in gq]
            g[wi] = [np.mean([r.best_reward_at(d) for r in rs]) for d in range(MAX_DEPTH + 1)]
        kmax = max(WIDTHS) * (MAX_DEPTH + 1)
        bon = [best_of_n(q, backend, reward, kmax, cfg) for q in gq]
        out["grid"] = g
        # any prefix of k i.i.d. samples is a Best-of-k draw
        out["bon curve"] = np.mean(
            [np.maximum.accumulate([e.reward for e in r.cache]) for r in bon], 0
        )
    return out


def fresh_gains(m: dict[str, Any]) -> list[float]:
    """Per query of one seed: TPO-D2-N5's fresh-candidate reward at the last iteration minus at
    iteration 0 (queries whose last iteration parsed no candidate have none and are left out)."""
    gains = [c[-1] - c[0] for c in m["fresh"]["TPO-D2-N5"]]
    return [g for g in gains if np.isfinite(g)]


def _per_seed_means(runs, per_query) -> list[float]:
    """One value per seed: the mean over that seed's held-out queries of ``per_query(m)``."""
    return [float(np.mean(per_query(m))) for m in runs]


def _diff(a: str, b: str):
    return lambda m: np.subtract(m["best"][a], m["best"][b]).tolist()


# -- checks --------------------------------------------------------------------------------------


def tpo_checks(runs: list[dict[str, Any]], seeds: list[int]) -> list[Check]:
    """The three pre-registered criteria on the per-seed measurements of :func:`measure_seed`."""
    return [
        FRESH_GAIN.check(_per_seed_means(runs, fresh_gains)),
        BEATS_BON.check(_per_seed_means(runs, _diff("TPO-D2-N5", "BoN-15"))),
        BEATS_SCRAMBLED.check(_per_seed_means(runs, _diff("TPO-D2-N5", "TPO scrambled critiques"))),
    ]


@reproduction("tpo", seeds=N_SEEDS, smoke_seeds=2)
def run(r: Run) -> ReproResult:
    size = r.size(smoke=SMOKE, quick=QUICK, full=FULL)
    # quick (and smoke): one role model for every seed; full: one per seed (docs/tpo.md)
    one_model = r.quick or r.smoke
    models: dict[int, Any] = {}
    quality: list[dict[str, float]] = []

    def measure(s: int) -> dict[str, Any]:
        key = r.seeds[0] if one_model else s
        if key not in models:
            # the role model's training is matmul-bound (d = 128, 128 x 29 tokens a step): it
            # takes both cores; the decoding after it is dispatch-bound and keeps one
            with torch_threads(TRAIN_THREADS):
                models[key] = train_role_model(size["steps"], seed=key).model
            quality.append(role_quality(models[key], 60 if r.smoke else 300, seed=key))
        return measure_seed(models[key], s, size, grid=not r.quick)

    runs = r.over_seeds(measure)
    seeds = list(r.seeds)
    checks = tpo_checks(runs, seeds)

    # -- reported metrics (one value per seed) ---------------------------------------------------
    per_seed = {n: [float(np.mean(m["best"][n])) for m in runs] for n in SAMPLES}
    exact = {n: [float(np.mean(m["exact"][n])) for m in runs] for n in SAMPLES}
    metrics = [Metric(n, v, unit="reward") for n, v in per_seed.items()]
    metrics += [Metric(f"{n} exact", v) for n, v in exact.items()]
    metrics.append(
        Metric(
            "fresh reward gain (iteration D - 0)", [float(np.mean(fresh_gains(m))) for m in runs]
        )
    )
    metrics.append(
        Metric(
            "TPO-D2-N5 - BoN-15", np.subtract(per_seed["TPO-D2-N5"], per_seed["BoN-15"]).tolist()
        )
    )
    metrics.append(
        Metric(
            "TPO-D2-N5 - scrambled",
            np.subtract(per_seed["TPO-D2-N5"], per_seed["TPO scrambled critiques"]).tolist(),
        )
    )
    qkeys = list(quality[0])
    metrics += [Metric(f"role model {k}", [q[k] for q in quality]) for k in qkeys]
    dropped = sum(len(m["fresh"]["TPO-D2-N5"]) - len(fresh_gains(m)) for m in runs)

    # -- tables ----------------------------------------------------------------------------------
    secs = {n: [m["secs"][n] for m in runs] for n in SAMPLES}
    rows = [
        "| method | policy samples | final reward (mean ± sd over seeds) | exact solves | ms per query |",
        "|---|---|---|---|---|",
    ]
    for name, k in SAMPLES.items():
        v = per_seed[name]
        rows.append(
            f"| {name} | {k} | {np.mean(v):.3f} ± {np.std(v, ddof=1) if len(v) > 1 else 0:.3f} | "
            f"{np.mean(exact[name]):.2f} | {1000 * np.mean(secs[name]):.0f} |"
        )
    qmean = {k: float(np.mean([q[k] for q in quality])) for k in qkeys}
    qrow = "; ".join(f"{k} {v:.3f}" for k, v in qmean.items())
    # per-seed mean curves (mean over queries), then the mean over seeds
    curves = {
        kind: {
            n: [np.nanmean(np.array(m[kind][n]), 0).tolist() for m in runs] for n in runs[0][kind]
        }
        for kind in ("fresh", "best curve")
    }

    def _curve_text(kind):
        return "; ".join(
            f"{n}: " + " -> ".join(f"{x:.3f}" for x in np.array(c).mean(0))
            for n, c in curves[kind].items()
        )

    tables = [
        "Final best reward on held-out queries (ms per query: wall-clock on this machine, "
        "the tiny model's calls plus the loop):\n\n" + "\n".join(rows),
        "Fresh-candidate reward per iteration (0 = initial samples): "
        + _curve_text("fresh")
        + "\n\nBest-so-far reward per iteration: "
        + _curve_text("best curve")
        + f"\n\nRole model quality (quality bars: gen 0.55 ± 0.07, critic >= 0.85, copy >= 0.95): {qrow}.",
    ]

    # -- figures ---------------------------------------------------------------------------------
    r.figure(_plot_iter(curves), "reward_vs_iteration.png")
    r.figure(_plot_bon(per_seed), "tpo_vs_bon.png")
    grid = [m["grid"] for m in runs if m["grid"] is not None]
    if grid:
        G, B = np.mean(grid, 0), np.mean([m["bon curve"] for m in runs if m["grid"] is not None], 0)
        head = "| width \\ depth | " + " | ".join(str(d) for d in range(MAX_DEPTH + 1)) + " |"
        lines = [head, "|---" * (MAX_DEPTH + 2) + "|"]
        for wi, w in enumerate(WIDTHS):
            cells = []
            for d in range(MAX_DEPTH + 1):
                k = w * (d + 1)
                cells.append(f"{G[wi, d]:.3f} (BoN-{k} {B[k - 1]:.3f})")
            lines.append(f"| {w} | " + " | ".join(cells) + " |")
        tables.append(
            f"Width x depth (mean over {len(grid)} seeds x {size['grid_queries']} queries; TPO "
            "final reward, in brackets Best-of-N with the same number of samples N(D+1)):\n\n"
            + "\n".join(lines)
        )
        for wi, w in enumerate(WIDTHS):
            metrics.append(Metric(f"TPO width {w} depth 5", [float(g[wi, -1]) for g in grid]))
        r.figure(_plot_grid(G, B), "width_depth.png")

    # -- notes -----------------------------------------------------------------------------------
    notes = []
    missed = [k for k, (lo, hi) in BARS.items() if not lo <= qmean[k] <= hi]
    if missed:
        notes.append(
            f"The trained role model misses the planned quality bars for {', '.join(missed)} (see the "
            "table): the gates then test a different model than intended."
        )
    if dropped:
        notes.append(
            f"{dropped} queries had no parsed candidate at the last iteration and are left out of "
            "check (1)."
        )
    if one_model and len(seeds) > 1:
        notes.append(
            "Quick mode trains one role model for all seeds, so the seed-to-seed spread in the "
            "intervals is that of the query sets and the sampling, not of retraining (full mode "
            "trains one model per seed)."
        )
    inc_mean, tpo_mean = (
        np.mean(per_seed["TPO-D2-N5 seed increment"]),
        np.mean(per_seed["TPO-D2-N5"]),
    )
    notes.append(
        f"Seeds: as in the official code, candidate generation and the update are seeded (7) and "
        f"the loss and gradient calls are not; drawing a new seed for every seeded call "
        f"(seed_policy='increment', report only) gives {inc_mean:.3f} vs {tpo_mean:.3f}."
    )
    notes.append(
        "TPO vs revision: in this task the critic is a verifier (it finds the wrong digits from "
        "the query and the chosen response alone), so the rejected response adds little; the "
        "difference between the two modes is not a finding about the paper's contrastive loss."
    )
    # pre-registered sizing: the full run of docs/tpo.md had a per-seed sd of 0.018 for check
    # (2), so 3 seeds detect about 0.07 and 5 seeds about 0.04 above the threshold against the
    # expected 0.08 (a planning simulation): say so where this run fell short
    weak = [c for c in checks if c.underpowered]
    power = (
        f"With {len(seeds)} seed(s) x {size['queries']} queries, "
        + "; ".join(
            f"{c.name.split(')')[0]}) detects only >= {c.detectable:.3f} above its threshold with "
            f"80% power (expected effect from our planning simulation: {c.criterion.paper_effect:.2f})"
            for c in weak
        )
        + "."
        if weak
        else ""
    )
    return r.result(
        claim=CLAIM,
        checks=checks,
        metrics=metrics,
        criteria=CRITERIA,
        key_check=BEATS_BON.name,
        setup=(
            f"Task: 'solve: d0..d5' -> reverse and add 1 mod 10; reward = correct fraction minus a "
            f"length penalty. Role model: 3-layer, 128-wide transformer trained {size['steps']} "
            f"steps (batch 128, AdamW 1e-3, cosine) on the four roles (generator noise 0.5, critic "
            f"label noise 0.1, updater re-draws flagged digits with noise 0.5), "
            f"{'one model for all seeds' if one_model else 'one model per seed'}, behind "
            f"TinyRoleBackend reading the real TPO prompts. {size['queries']} held-out queries per "
            f"seed, seeds {seeds}; candidates sampled at temperature 1, feedback at 0.7 / top-p "
            f"0.99 (official); seed 7 on candidate generation and update calls, none on loss and "
            f"gradient calls (official). The role model trains with {TRAIN_THREADS} torch threads; "
            "decoding (cached keys and values) runs on one."
        ),
        tables=tables,
        notes=notes,
        power=power,
        deviations=[
            "A trained tiny role model on a synthetic task stands in for Llama-3.1-70B and a "
            "neural reward model; the reward is programmatic.",
            "Candidates are sampled at temperature 1 (official 0.7), so that the tiny policy is the "
            "intended noisy generator.",
            f"Training steps {size['steps']} (planned {'1500' if r.quick else '4000'}) and "
            f"{size['queries']} queries per seed (planned {'100' if r.quick else '400'}) to fit the "
            "time budget on 2 cores; the role model meets its bars by ~750 steps.",
            "Training examples are drawn fresh every step instead of from a fixed 60k/150k set.",
            "issue 17: the gates were thresholds on the means over seeds; they are now 95% "
            "t-intervals over the per-seed means, with the same thresholds (0.10, 0.03, 0.03), "
            "seeds (3 quick, 5 full) and query counts. (A two-stage bootstrap over queries "
            "within seeds was considered and dropped before any run: with 3 seeds its interval "
            "cannot leave the range of the seed means.) In quick mode the seeds share one role "
            "model, so their spread is that of sampling and query sets, not of retraining.",
            f"The role model's training runs on {TRAIN_THREADS} torch threads and the rest on one "
            "(the harness's setting).",
        ],
    )


def _plot_iter(curves):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, kind, label in (
        (axes[0], "fresh", "mean reward of fresh candidates"),
        (axes[1], "best curve", "best-so-far reward"),
    ):
        for name, c in curves[kind].items():
            arr = np.array(c)
            ax.errorbar(range(arr.shape[1]), arr.mean(0), yerr=arr.std(0), label=name, capsize=3)
        ax.set_xlabel("TPO iteration (0 = initial samples)")
        ax.set_ylabel(label)
        ax.set_xticks(range(np.array(next(iter(curves[kind].values()))).shape[1]))
    axes[0].legend(fontsize=7)
    return fig


def _plot_bon(per_seed):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ks = [5, 15, 30, 60]
    ax.errorbar(
        ks,
        [np.mean(per_seed[f"BoN-{k}"]) for k in ks],
        yerr=[np.std(per_seed[f"BoN-{k}"]) for k in ks],
        fmt="o-",
        capsize=3,
        label="Best-of-N",
    )
    for name, marker in (
        ("TPO-D2-N5", "*"),
        ("TPO scrambled critiques", "x"),
        ("revision-D2-N5", "s"),
    ):
        ax.errorbar(
            [15],
            [np.mean(per_seed[name])],
            yerr=[np.std(per_seed[name])],
            fmt=marker,
            ms=10,
            capsize=3,
            label=name,
        )
    ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("policy samples per query")
    ax.set_ylabel("final best reward")
    ax.legend(fontsize=7)
    return fig


def _plot_grid(G: np.ndarray, B: np.ndarray):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    im = axes[0].imshow(G, aspect="auto", cmap="viridis")
    axes[0].set_xticks(range(MAX_DEPTH + 1))
    axes[0].set_yticks(range(len(WIDTHS)), [str(w) for w in WIDTHS])
    axes[0].set_xlabel("depth D")
    axes[0].set_ylabel("width N")
    for wi in range(len(WIDTHS)):
        for d in range(MAX_DEPTH + 1):
            axes[0].text(d, wi, f"{G[wi, d]:.2f}", ha="center", va="center", fontsize=7, color="w")
    fig.colorbar(im, ax=axes[0], label="TPO final reward")
    ks = np.arange(1, len(B) + 1)
    axes[1].plot(ks, B, "k-", label="Best-of-N")
    for wi, w in enumerate(WIDTHS):
        axes[1].plot([w * (d + 1) for d in range(MAX_DEPTH + 1)], G[wi], "o-", label=f"TPO N={w}")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("policy samples per query, N(D+1)")
    axes[1].set_ylabel("final best reward")
    axes[1].legend(fontsize=7)
    return fig
