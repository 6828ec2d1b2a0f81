"""The reproduction's experiment on scikit-learn's digits (docs/knowledge_swap.md, "Reproduction"):
one swap from a shared pretrained start, the full mode's sensitivity sweeps and anchors, and the
per-layer linear probes.

``repro.py`` checks the claim on what these functions return; they are usable on their own::

    task = DigitsSwapTask(0)
    base = pretrain(digits_cnn(0), task, 500, 0)
    out = swap_run(base, task, 0, LF, steps=100)   # out["metrics"]: acc_r, acc_f, acc_l, S
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from icml25.knowledge_swap.data import FORGET, HIDDEN, LEARN, DigitsSwapTask, swap_ready
from icml25.knowledge_swap.metrics import accuracy_on, linear_probe_by_layer
from icml25.knowledge_swap.swap import KnowledgeSwapper

__all__ = [
    "ACC",
    "FL",
    "LF",
    "SHORT",
    "SIM",
    "SWEEP_SETTINGS",
    "probes",
    "sensitivity",
    "swap_run",
]

LF, FL, SIM = "learn_then_forget", "forget_then_learn", "simultaneous"
SHORT = {LF: "L->F", FL: "F->L", SIM: "simultaneous"}
ACC = ("acc_r", "acc_f", "acc_l", "S")
#: the full mode's sensitivity sweeps: one factor at a time around the main setting
SWEEP_SETTINGS = (
    ("100 steps/stage", {"steps": 100}),
    ("300 steps/stage", {"steps": 300}),
    ("30% retain/forget subsets", {"steps": 150, "frac": 0.3}),
    ("train new head rows", {"steps": 150, "train_head": True}),
)


def swap_run(
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


def sensitivity(bases: Mapping[int, tuple], seeds: Sequence[int], smoke: bool) -> dict:
    """Full mode: L->F and F->L from each seed's start (``bases[seed] = (task, base)``) in every
    setting of ``SWEEP_SETTINGS`` (one 5-step setting at smoke size), then two anchors: GS-LoRA
    (forgetting only, no learn set) and fine-tuning the hidden layers without LoRA (simultaneous
    losses). Returns ``{"settings": [(name, {LF: [metrics], FL: [metrics]})], "gs_lora":
    [metrics], "no_lora": [metrics]}``, one metrics dict per seed."""
    settings = [("smoke", {"steps": 5})] if smoke else list(SWEEP_SETTINGS)
    out = {"settings": []}
    for name, cfg in settings:
        res = {LF: [], FL: []}
        for s in seeds:
            task, base = bases[s]
            if "frac" in cfg:
                task = DigitsSwapTask(s, frac=cfg["frac"])
            for strat in (LF, FL):
                r = swap_run(
                    base,
                    task,
                    s,
                    strat,
                    cfg["steps"],
                    train_head=cfg.get("train_head", False),
                    track_every=10**9,
                )
                res[strat].append(r["metrics"])
        out["settings"].append((name, res))
    # GS-LoRA: forgetting only (no learn set), the anchor of the forget stage
    gs = []
    for s in seeds:
        task, base = bases[s]
        gs.append(
            swap_run(base, task, s, LF, 10 if smoke else 150, learn=False, track_every=10**9)[
                "metrics"
            ]
        )
    # no LoRA: fine-tune the hidden layers on retain + gradient ascent on forget + learn, one stage
    ft = []
    for s in seeds:
        task, base = bases[s]
        one = swap_run(base, task, s, SIM, 10 if smoke else 150, lora=False, track_every=10**9)
        ft.append(one["metrics"])
    out["gs_lora"], out["no_lora"] = gs, ft
    return out


def probes(bases: Mapping[int, tuple], seeds: Sequence[int], steps: int) -> dict[str, list[dict]]:
    """Per-layer linear probes (classes 0, 1, 8, 9) before and after each stage of both orders:
    ``{state: [{layer: accuracy} per seed]}``, states in the order they were first reached."""
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
            found = {}

            def rec(ev, model=model, found=found, strat=strat, data=data, classes=classes):
                if ev["kind"] == "stage_end":
                    found[f"{SHORT[strat]} after {ev['stage']}"] = linear_probe_by_layer(
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
            for k, v in found.items():
                records.setdefault(k, []).append(v)
    return records
