"""Reproduction of paper 14 (knowledge swapping) on scikit-learn's digits.

A CNN pretrained on digits 0-7 must forget {0, 1}, keep {2..7} and learn {8, 9}, training LoRA only
(r = 4 on the five hidden layers), from the identical start for every strategy. Claim: learning
before forgetting ends in a better swap than forgetting before learning (complete forgetting,
higher retention, new classes not sacrificed).

The module reads: the claim and the pre-registered criteria (docs/knowledge_swap.md, paired over seeds: (a) the swap
score S = (Acc_r + Acc_l + 100 - Acc_f) / 3 of L->F beats F->L's by more than 3 points; (b) L->F
leaves fewer forgotten classes recognised; (c) L->F's new-class accuracy is no more than 5 points
below F->L's; (d) sanity: the swap happened, Acc_f(L->F) < 20 and Acc_l(L->F) > 80) -> setup ->
per-seed measurement (pretrain once, then every strategy from the same start) -> checks -> the
full mode's sweeps and probes -> figures.
"""

from __future__ import annotations

import numpy as np

from icml25.knowledge_swap.data import (
    FORGET,
    HIDDEN,
    LEARN,
    DigitsSwapTask,
    digits_cnn,
    pretrain,
    swap_ready,
)
from icml25.knowledge_swap.metrics import accuracy_on, linear_probe_by_layer
from icml25.knowledge_swap.swap import KnowledgeSwapper
from icml25.report import Criterion, Metric, ReproResult, Run, pyplot, reproduction

CLAIM = (
    "Learning before forgetting (LoRA, then bounded gradient ascent with the learned classes "
    "protected) ends in a better knowledge swap than forgetting before learning: forgetting stays "
    "complete, retention is higher and new classes are not sacrificed."
)
LF, FL, SIM = "learn_then_forget", "forget_then_learn", "simultaneous"
SHORT = {LF: "L->F", FL: "F->L", SIM: "simultaneous"}
ACC = ("acc_r", "acc_f", "acc_l", "S")

# -- pre-registered: seeds and criteria (thresholds as planned, frozen before the first run) --

#: Seeds in quick / full mode. Quick: ~10 s per seed on one core (500 pretraining steps, 2 x 100
#: swap steps per strategy), 12 seeds fit the ~3-minute budget; full: 20 seeds for the main
#: comparison, the sweeps, anchors and probes on the first N_SWEEP / N_PROBE of them.
N_QUICK, N_FULL = 12, 20
N_SWEEP, N_PROBE = 10, 3

S_GAP = Criterion(
    "(a) S(L->F) - S(F->L) > 3",
    "paired",
    above=3.0,
    unit="points",
    description="swap score S = (Acc_r + Acc_l + 100 - Acc_f) / 3 of both orders from the same "
    "start, paired by seed",
)
FORGETS_MORE = Criterion(
    "(b) Acc_f(L->F) - Acc_f(F->L) < 0",
    "paired",
    below=0.0,
    unit="points",
    description="accuracy on the forgotten classes 0-1 (lower is better), paired by seed",
)
LEARNS_ENOUGH = Criterion(
    "(c) Acc_l(L->F) - Acc_l(F->L) > -5",
    "paired",
    above=-5.0,
    unit="points",
    description="accuracy on the new classes 8-9, paired by seed",
)
SANE_FORGET = Criterion(
    "(d) sanity: Acc_f(L->F) < 20",
    "mean",
    below=20.0,
    unit="%",
    description="the swap happened: L->F forgot classes 0-1",
)
SANE_LEARN = Criterion(
    "(d) sanity: Acc_l(L->F) > 80",
    "mean",
    above=80.0,
    unit="%",
    description="the swap happened: L->F learned classes 8-9",
)
CRITERIA = [S_GAP, FORGETS_MORE, LEARNS_ENOUGH, SANE_FORGET, SANE_LEARN]


@reproduction("knowledge_swap", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    # -- setup -----------------------------------------------------------------------------------
    pre_steps = r.size(smoke=60, quick=500, full=800)
    main_steps = r.size(smoke=10, quick=100, full=150)
    strategies = (LF, FL) if r.quick else (LF, FL, SIM)

    # -- per-seed measurement ----------------------------------------------------------------------
    per_seed = r.over_seeds(lambda s: measure_seed(s, pre_steps, main_steps, strategies))
    runs = {strat: [p["runs"][strat] for p in per_seed] for strat in strategies}
    M = {strat: {k: [x["metrics"][k] for x in runs[strat]] for k in ACC} for strat in strategies}
    lf, fl = M[LF], M[FL]

    # -- checks ------------------------------------------------------------------------------------
    checks = swap_checks(lf, fl)

    metrics, tables, notes = [], [], []
    for strat in strategies:
        for k in ACC:
            metrics.append(Metric(f"{SHORT[strat]} {k}", M[strat][k], unit="%"))
    gap = list(np.array(lf["S"]) - np.array(fl["S"]))
    relapse = [
        x["stage_acc"]["learn"]["acc_f"] - x["stage_acc"]["forget"]["acc_f"] for x in runs[FL]
    ]
    metrics += [
        Metric("S(L->F) - S(F->L)", gap, unit="points"),
        Metric(
            "seeds with S(L->F) - S(F->L) > 3",
            [float(g > 3) for g in gap],
            description="1 per seed where the gap clears the margin (reported, not tested)",
        ),
        Metric("F->L relapse (Acc_f after learn - after forget)", relapse, unit="points"),
        Metric("pretrained Acc_r", [p["pre_acc_r"] for p in per_seed], unit="%"),
        Metric("pretrained Acc_f", [p["pre_acc_f"] for p in per_seed], unit="%"),
    ]
    rows = ["| strategy | Acc_r | Acc_f | Acc_l | S |", "|---|---|---|---|---|"]
    for strat in strategies:
        cells = [f"{_mean_sd(M[strat][k])[0]:.1f} ± {_mean_sd(M[strat][k])[1]:.1f}" for k in ACC]
        rows.append(f"| {SHORT[strat]} | " + " | ".join(cells) + " |")
    tables.append(
        f"Main setting ({main_steps} steps per stage, 10% retain/forget subsets, head frozen; "
        f"mean ± sd over seeds {r.seeds}):\n\n"
        + "\n".join(rows)
        + "\n\nS gap L->F - F->L per seed: "
        + ", ".join(f"{v:+.1f}" for v in gap)
        + " points. F->L relapse of the forgotten classes after its learn stage: "
        + ", ".join(f"{v:+.1f}" for v in relapse)
        + " points."
    )
    if not all(c.held for c in checks if c.name.startswith("(d)")):
        notes.append(
            "A sanity check (d) was not held: the swap itself may not have happened (Acc_f(L->F) "
            "not surely below 20 or Acc_l(L->F) not surely above 80), so the comparison of the "
            "orders means little."
        )

    # -- full mode: sensitivity sweeps, anchors, per-layer probes ---------------------------------
    bases = {s: (p["task"], p["base"]) for s, p in zip(r.seeds, per_seed)}
    if not r.quick:
        tables.append(_sweeps(bases, r.seeds[:N_SWEEP], r.smoke, metrics))

    # -- figures -----------------------------------------------------------------------------------
    r.figure(_plot_bars(M, strategies), "swap_bars.png")
    r.figure(_plot_traj(runs, strategies, main_steps), "forget_trajectory.png")
    r.figure(_plot_norms(runs), "lora_norm_profile.png")
    if not r.quick:
        probe_table, probe_fig = _probe(bases, r.seeds[:N_PROBE], main_steps)
        tables.append(probe_table)
        r.figure(probe_fig, "knock_on_probes.png")

    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=S_GAP.name,
        metrics=metrics,
        setup=(
            f"sklearn digits 8x8 (icml25.toy.digits_split), stratified 50/50 split per seed; forget "
            f"{list(FORGET)}, retain 2-7, learn {list(LEARN)}. CNN (3 convs, 2 hidden fcs, 10-way "
            f"head) pretrained on 0-7 with 8-way logits ({pre_steps} Adam steps); head rows 8-9 "
            f"re-initialised (seeded), head and base frozen; LoRA r=4, alpha=4 on "
            f"{', '.join(HIDDEN)}. Swap: 10% subsets of retain/forget train (>= 16 each), full "
            f"learn train; AdamW lr 1e-2, wd 0.05, cosine to 1e-5 per stage (per iteration), batch "
            f"32 per set, beta 0.2/0.2, alpha 0.005, BND 105; {main_steps} steps per stage; "
            f"{len(r.seeds)} seeds {r.seeds[0]}-{r.seeds[-1]}, every strategy from the same start "
            "per seed (so the orders are compared paired by seed)."
            + (
                ""
                if r.quick
                else f" Sweeps, anchors (GS-LoRA, no-LoRA fine-tuning) on the first "
                f"{min(N_SWEEP, len(r.seeds))} seeds, per-layer probes on the first "
                f"{min(N_PROBE, len(r.seeds))}."
            )
        ),
        criterion=(
            "Every check must hold (95% intervals over seeds): (a) the S gap is above +3, (b) L->F "
            "leaves fewer forgotten classes recognised than F->L, (c) L->F's Acc_l is at most 5 "
            "points below F->L's, (d) the swap happened in L->F (mean Acc_f < 20, mean Acc_l > 80)."
        ),
        power=_power_text(checks, len(r.seeds)),
        tables=tables,
        notes=notes,
        deviations=[
            "8x8 digits and a 5-layer CNN instead of ViT-B/16 on ImageNet-100 + CUB/Pets/RESISC/"
            "PlantVillage; LoRA r=4 on every hidden layer (official: r=8 on the ViT FFNs).",
            "The cosine schedule is stepped per iteration over a stage's 100-300 steps (official: "
            "per epoch over 5 epochs).",
            "LoRA A is initialised with kaiming_uniform(a=sqrt(5)) (official sqrt(50) for 768-d ViTs).",
            "issue 17: the criteria are tested, not compared as means: (a)-(c) are paired "
            "t-intervals of the per-seed differences, (d) t-intervals of L->F's means; a claim "
            "holds only when every interval clears its threshold (the thresholds +3, 0, -5, 20 and "
            "80 are the planned ones, unchanged). (b) 'Acc_f(L->F) <= Acc_f(F->L)' becomes the strict "
            "'L->F forgets more' (the plan's 'learning afterwards revives forgotten classes in "
            "F->L'): with both orders at 0% in most seeds it reads inconclusive, not held.",
            "issue 17: the sanity check (d) is a check like the others: when it fails with "
            "confidence the claim reads 'did not hold' (before: 'inconclusive').",
            "issue 17: seeds 3 -> 12 (quick) and 10 -> 20 (full, the sweeps, anchors and probes "
            "stay on the first 10 / 3), sized from the earlier per-seed spread of the S gap (sd 6-8 "
            "points) so that a gap like the planning pilot's (+9.2) is detected in quick mode; torch "
            "runs on 1 thread (before 2).",
        ],
    )


def swap_checks(lf: dict, fl: dict) -> list:
    """The pre-registered checks from the per-seed metrics of L->F (``lf``) and F->L (``fl``):
    dicts of ``acc_r``, ``acc_f``, ``acc_l``, ``S`` lists, one value per seed."""
    return [
        S_GAP.check(lf["S"], fl["S"]),
        FORGETS_MORE.check(lf["acc_f"], fl["acc_f"]),
        LEARNS_ENOUGH.check(lf["acc_l"], fl["acc_l"]),
        SANE_FORGET.check(lf["acc_f"]),
        SANE_LEARN.check(lf["acc_l"]),
    ]


def _power_text(checks: list, n: int) -> str:
    det = {c.name: c.detectable for c in checks}
    return (
        "The paper's own numbers could not be read (docs/knowledge_swap.md), so no paper effect is set; the seed "
        "counts are sized on this reproduction's earlier runs. (a): the per-seed S gap spread "
        "about 6-8 points (sd), so 12 seeds detect with 80% power a true gap about 6 points above "
        "the +3 margin, i.e. a gap of about +9, the planning pilot's +9.2. The earlier measured means "
        "(+6.1 quick and +7.4 in the issue's run, +4.6 full) lie only 1.6-4.4 points above the "
        "margin: detecting those needs about 19-120 seeds, more than the ~3-minute quick budget "
        "(about 10 s per seed) allows, so an inconclusive (a) at that size is expected and is "
        "not evidence against the claim. (b): in most seeds both orders end at Acc_f = 0; F->L's "
        "residues (full run: -9.2 points mean, sd 13.9) need about 20 seeds to be detected, and "
        "with 100 steps per stage (quick) F->L rarely relapses, so (b) is expected to be "
        "inconclusive in quick mode. Planned for full mode (20 seeds, 150 steps per stage), at the "
        "earlier spread: (a) would detect about 4 points above the margin (a gap of about +7), "
        "(b) about 9 points. Measured in this run "
        f"({n} seeds): (a) detects a distance of {_f(det[S_GAP.name])} points from the margin, "
        f"(b) a difference of {_f(det[FORGETS_MORE.name])} points."
    )


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def measure_seed(seed: int, pre_steps: int, main_steps: int, strategies) -> dict:
    """One seed: the task split, the pretrained base, and every strategy's swap from the same
    start (metrics, Acc_f trajectory, stage records, per-layer LoRA changes)."""
    task = DigitsSwapTask(seed)
    base = pretrain(digits_cnn(seed), task, pre_steps, seed)
    return {
        "task": task,
        "base": base,
        "pre_acc_r": accuracy_on(base, task.retain_test),
        "pre_acc_f": accuracy_on(base, task.forget_test),
        "runs": {strat: _swap(base, task, seed, strat, main_steps) for strat in strategies},
    }


def _swap(
    base,
    task,
    seed,
    strategy,
    steps,
    train_head=False,
    track_every=10,
    learn=True,
    forget=True,
    lora=True,
):
    """One swap from the shared start; returns metrics, the Acc_f trajectory and stage records.
    ``lora=False``: the hidden layers' own weights train (full fine-tuning baseline, alpha = 0)."""
    model = swap_ready(base, seed, lora=lora)
    groups = None if lora else [list(getattr(model, n).parameters()) for n in HIDDEN]
    traj, stage_acc, snaps = [], {}, {}

    def record(ev):
        if ev["kind"] == "step" and ev["step"] % track_every == 0:
            traj.append((ev["step"], accuracy_on(model, task.forget_test)))
        if ev["kind"] == "stage_end":
            stage_acc[ev["stage"]] = {
                "acc_r": accuracy_on(model, task.retain_test),
                "acc_f": accuracy_on(model, task.forget_test),
                "acc_l": accuracy_on(model, task.learn_test),
            }
            snaps[ev["stage"]] = [[p.detach().clone() for p in g] for g in ev["swapper"].groups]

    sw = KnowledgeSwapper(
        model,
        groups,
        strategy=strategy,
        alpha=0.005 if lora else 0.0,
        epochs_per_stage=1,
        steps_per_epoch=steps,
        batch_size=32,
        schedule_step="iteration",  # the CPU repro steps the cosine per iteration (docs/knowledge_swap.md)
        seed=seed,
        callbacks=[record],
        train_head=train_head,
        head=model.head if train_head else None,
        n_old=8 if train_head else None,
    )
    start = [[p.detach().clone() for p in g] for g in sw.groups]
    sw.fit(
        task.retain_train,
        task.forget_train if forget else None,
        task.learn_train if learn else None,
    )
    m = sw.evaluate(task.retain_test, task.forget_test, task.learn_test)
    m["S"] = (m["acc_r"] + m["acc_l"] + 100 - m["acc_f"]) / 3
    # per-layer norm of what each stage changed (the knock-on profile)
    moved, prev = {}, start
    for stage, _ in sw.history.stage_norms:
        now = snaps[stage]
        moved[stage] = [
            float(sum(((a - b) ** 2).sum() for a, b in zip(ga, gb)) ** 0.5)
            for ga, gb in zip(now, prev)
        ]
        prev = now
    return {"metrics": m, "traj": traj, "stage_acc": stage_acc, "moved": moved, "model": model}


def _mean_sd(v):
    v = np.asarray(v, dtype=float)
    return v.mean(), (v.std(ddof=1) if len(v) > 1 else 0.0)


def _sweeps(bases, seeds, smoke, metrics) -> str:
    """Full mode: one factor at a time around the main setting, L->F vs F->L (+ GS-LoRA)."""
    rows = [
        "| setting | L->F (Acc_r / Acc_f / Acc_l, S) | F->L (Acc_r / Acc_f / Acc_l, S) | S gap |",
        "|---|---|---|---|",
    ]
    settings = [
        ("100 steps/stage", dict(steps=100)),
        ("300 steps/stage", dict(steps=300)),
        ("30% retain/forget subsets", dict(steps=150, frac=0.3)),
        ("train new head rows", dict(steps=150, train_head=True)),
    ]
    if smoke:
        settings = [("smoke", dict(steps=5))]
    for name, cfg in settings:
        res = {LF: [], FL: []}
        for s in seeds:
            task, base = bases[s]
            if "frac" in cfg:
                task = DigitsSwapTask(s, frac=cfg["frac"])
            for strat in (LF, FL):
                r = _swap(
                    base,
                    task,
                    s,
                    strat,
                    cfg["steps"],
                    train_head=cfg.get("train_head", False),
                    track_every=10**9,
                )
                res[strat].append(r["metrics"])
        cell = {}
        for strat in (LF, FL):
            v = {
                k: float(np.mean([m[k] for m in res[strat]]))
                for k in ("acc_r", "acc_f", "acc_l", "S")
            }
            cell[strat] = f"{v['acc_r']:.1f} / {v['acc_f']:.1f} / {v['acc_l']:.1f}, {v['S']:.1f}"
        gap = [a["S"] - b["S"] for a, b in zip(res[LF], res[FL])]
        metrics.append(Metric(f"sweep S gap: {name}", gap, unit="points"))
        rows.append(
            f"| {name} | {cell[LF]} | {cell[FL]} | {np.mean(gap):+.1f} ± {np.std(gap, ddof=1) if len(gap) > 1 else 0:.1f} |"
        )
    # GS-LoRA: forgetting only (no learn set), the anchor of the forget stage
    gs = []
    for s in seeds:
        task, base = bases[s]
        gs.append(
            _swap(base, task, s, LF, 10 if smoke else 150, learn=False, track_every=10**9)[
                "metrics"
            ]
        )
    v = {k: float(np.mean([m[k] for m in gs])) for k in ("acc_r", "acc_f")}
    rows.append(
        f"| GS-LoRA (forget only, no learn set) | Acc_r {v['acc_r']:.1f}, Acc_f {v['acc_f']:.1f} | | |"
    )
    # no LoRA: fine-tune the hidden layers on retain + gradient ascent on forget + learn, one stage
    ft = []
    for s in seeds:
        task, base = bases[s]
        one = _swap(base, task, s, SIM, 10 if smoke else 150, lora=False, track_every=10**9)
        ft.append(one["metrics"])
    v = {k: float(np.mean([m[k] for m in ft])) for k in ("acc_r", "acc_f", "acc_l", "S")}
    rows.append(
        f"| no LoRA: fine-tune + gradient ascent, simultaneous, 2 x 150 steps | "
        f"{v['acc_r']:.1f} / {v['acc_f']:.1f} / {v['acc_l']:.1f}, {v['S']:.1f} | | |"
    )
    metrics.append(Metric("no-LoRA fine-tune S", [m["S"] for m in ft], unit="%"))
    metrics.append(Metric("GS-LoRA forget-only Acc_r", [m["acc_r"] for m in gs], unit="%"))
    metrics.append(Metric("GS-LoRA forget-only Acc_f", [m["acc_f"] for m in gs], unit="%"))
    return (
        "Sensitivity (full mode, means over seeds; L->F vs F->L from the same start):\n\n"
        + "\n".join(rows)
    )


def _probe(bases, seeds, steps):
    """Per-layer linear probes (classes 0, 1, 8, 9) before and after each stage of both orders."""
    records: dict[str, list[dict]] = {}
    for s in seeds:
        task, base = bases[s]
        data = (task.x_test, task.y_test)
        classes = list(FORGET) + list(LEARN)
        start = swap_ready(base, s)
        records.setdefault("start", []).append(
            linear_probe_by_layer(start, list(HIDDEN), data, classes)
        )
        for strat in (LF, FL):
            model = swap_ready(base, s)
            probes = {}

            def rec(ev, model=model, probes=probes, strat=strat, data=data, classes=classes):
                if ev["kind"] == "stage_end":
                    probes[f"{SHORT[strat]} after {ev['stage']}"] = linear_probe_by_layer(
                        model, list(HIDDEN), data, classes
                    )

            KnowledgeSwapper(
                model,
                strategy=strat,
                epochs_per_stage=1,
                steps_per_epoch=steps,
                batch_size=32,
                schedule_step="iteration",
                seed=s,
                callbacks=[rec],
            ).fit(task.retain_train, task.forget_train, task.learn_train)
            for k, v in probes.items():
                records.setdefault(k, []).append(v)
    rows = ["| state | " + " | ".join(HIDDEN) + " |", "|---" * (len(HIDDEN) + 1) + "|"]
    for k, lst in records.items():
        rows.append(
            f"| {k} | " + " | ".join(f"{np.mean([d[n] for d in lst]):.1f}" for n in HIDDEN) + " |"
        )
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for k, lst in records.items():
        ax.plot(HIDDEN, [np.mean([d[n] for d in lst]) for n in HIDDEN], "o-", label=k)
    ax.set_ylabel("probe accuracy on classes 0,1,8,9 (%)")
    ax.set_title("per-layer linear probes (layer outputs incl. LoRA, before the ReLU)")
    ax.legend(fontsize=6)
    table = (
        "Per-layer linear probes (4-way among the forget and learn classes; held-out half of the "
        f"test split; mean over {len(seeds)} seeds):\n\n" + "\n".join(rows)
    )
    return table, fig


def _plot_bars(M, strategies):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    keys = ("acc_r", "acc_f", "acc_l")
    x = np.arange(len(keys))
    w = 0.8 / len(strategies)
    for i, strat in enumerate(strategies):
        d = M[strat]
        ax.bar(
            x + i * w,
            [np.mean(d[k]) for k in keys],
            w,
            yerr=[np.std(d[k]) for k in keys],
            capsize=3,
            label=SHORT[strat],
        )
    ax.set_xticks(x + w * (len(strategies) - 1) / 2, ["Acc_r (up)", "Acc_f (down)", "Acc_l (up)"])
    ax.set_ylabel("test accuracy (%)")
    ax.legend()
    return fig


def _plot_traj(runs, strategies, steps):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for strat in strategies:
        trajs = [x["traj"] for x in runs[strat]]
        xs = [t for t, _ in trajs[0]]
        ys = np.array([[a for _, a in tr] for tr in trajs])
        ax.plot(xs, ys.mean(0), label=SHORT[strat])
        ax.fill_between(xs, ys.min(0), ys.max(0), alpha=0.15)
    ax.axvline(steps, color="k", lw=0.5)
    ax.set_xlabel("step (the line marks the stage change)")
    ax.set_ylabel("Acc_f on the forget classes (%)")
    ax.legend()
    return fig


def _plot_norms(runs):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, strat in zip(axes, (LF, FL)):
        for stage in ("learn", "forget"):
            arr = np.array([x["moved"][stage] for x in runs[strat]])
            ax.plot(HIDDEN, arr.mean(0), "o-", label=f"{stage} stage")
        ax.set_title(SHORT[strat])
        ax.set_xlabel("layer (low to high)")
    axes[0].set_ylabel("norm of the LoRA change in the stage")
    axes[0].legend()
    return fig
