"""Reproduction of paper 08 (DPS, arXiv:2412.12722) with the DigitsVLM stand-in
(docs/dps.md, "Reproduction"; the full mode's design is still being completed).

Claim: DPS lowers the success of crop-sensitive vision attacks while keeping clean accuracy close
to the undefended model, unlike majority voting over crops, which pays a large clean-accuracy
price. A digits classifier answers through the real chat pipeline (``DigitsVLM``); universal
corner patches crafted on a surrogate (black-box transfer) attack it; DPS with a centre crop
(``K = 1``), crop voting and the undefended model are compared on the same images.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from icml25.report import Criterion, Metric, ReproResult, Run, pyplot, reproduction

CLAIM = (
    "DPS lowers the success of crop-sensitive vision attacks while keeping clean accuracy close to "
    "the undefended model, unlike majority voting over crops, which costs clean accuracy."
)
N_QUICK, N_FULL = 3, 5

VALID = Criterion("(a) validity: vanilla clean - robust accuracy > 15 points", "bootstrap", above=15.0,
                  unit="points", over="images",
                  description="per image, 100 x (clean correct - patched correct) for the undefended model")  # fmt: skip
DPS_ROBUST = Criterion("(b1) DPS robust accuracy - vanilla > 5 points", "bootstrap", above=5.0, unit="points",
                       over="images", description="per patched image, 100 x (DPS correct - vanilla correct)")  # fmt: skip
DPS_ASR = Criterion("(b2) misleading ASR: DPS - 0.75 x vanilla < 0", "bootstrap", below=0.0, over="images",
                    description="per image the undefended model answers correctly when clean, DPS misled - 0.75 x "
                    "vanilla misled: below 0 exactly when the relative reduction exceeds 0.25")  # fmt: skip
DPS_CLEAN = Criterion("(c) clean accuracy: DPS - vanilla > -3 points", "bootstrap", above=-3.0, unit="points",
                      over="images", description="per clean image, 100 x (DPS correct - vanilla correct)")  # fmt: skip
VS_VOTE = Criterion("(d) clean accuracy: DPS - crop vote > 10 points", "bootstrap", above=10.0, unit="points",
                    over="images", description="per clean image, 100 x (DPS correct - crop-vote correct)")  # fmt: skip
CRITERIA = [VALID, DPS_ROBUST, DPS_ASR, DPS_CLEAN, VS_VOTE]


def _sizes(r: Run) -> dict[str, Any]:
    return {"target_steps": r.size(smoke=60, quick=500, full=1500), "surrogate_steps": r.size(smoke=60, quick=500, full=1500),
            "n_surrogates": r.size(smoke=1, quick=1, full=2), "patch_steps": r.size(smoke=10, quick=150, full=300),
            "n_test": r.size(smoke=40, quick=300, full=None)}  # fmt: skip


@reproduction("dps", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    sz = _sizes(r)
    full = not r.quick and not r.smoke
    shared = _models(0 if not full else None, sz, r.out) if not full else None
    per_seed = [measure(s, sz, r.out, shared, full) for s in r.seeds]
    clusters = [p["seed"] for p in per_seed for _ in p["van_clean"]] if len(per_seed) >= 5 else None

    def cat(key: str) -> list[float]:
        return [v for p in per_seed for v in p[key]]

    van_c, van_a, dps_c, dps_a, vote_c = (np.array(cat(k)) for k in ("van_clean", "van_adv", "dps_clean", "dps_adv",
                                                                       "vote_clean"))  # fmt: skip
    mask = np.array(cat("van_clean_correct"), dtype=bool)
    mis_d, mis_v = np.array(cat("dps_misled")), np.array(cat("van_misled"))
    sub_clusters = None if clusters is None else [c for c, m in zip(clusters, mask) if m]
    checks = [
        VALID.check(100 * (van_c - van_a), clusters),
        DPS_ROBUST.check(100 * (dps_a - van_a), clusters),
        DPS_ASR.check((mis_d - 0.75 * mis_v)[mask], sub_clusters),
        DPS_CLEAN.check(100 * (dps_c - van_c), clusters),
        VS_VOTE.check(100 * (dps_c - vote_c), clusters),
    ]
    metrics = [Metric(f"{name} ({k})", [float(np.mean(p[k])) * 100 for p in per_seed], unit="%")
               for name, k in (("vanilla clean", "van_clean"), ("vanilla patched", "van_adv"),
                               ("DPS clean", "dps_clean"), ("DPS patched", "dps_adv"),
                               ("crop vote clean", "vote_clean"), ("crop vote patched", "vote_adv"))]  # fmt: skip
    for att in ("pgd_transfer", "pgd_white") if "van_pgd_transfer" in per_seed[0] else ():
        for name in ("van", "dps", "vote"):
            metrics.append(
                Metric(
                    f"{name} accuracy under {att}",
                    [float(np.mean(p[f"{name}_{att}"])) * 100 for p in per_seed],
                    unit="%",
                )
            )
            metrics.append(Metric(f"{name} targeted ASR under {att}",
                                  [float(np.mean(p[f"{name}_{att}_targeted"])) * 100 for p in per_seed], unit="%"))  # fmt: skip
    metrics += [Metric("mean max-probability, clean", [p["maxp_clean"] for p in per_seed]),
                Metric("mean max-probability, patched", [p["maxp_adv"] for p in per_seed])]  # fmt: skip
    r.figure(plot_bars(per_seed), "accuracy_bars.png")
    return r.result(claim=CLAIM, checks=checks, criteria=CRITERIA, key_check=DPS_ROBUST.name, metrics=metrics,
                    setup=f"DigitsVLM stand-in; sizes {sz}; seeds {r.seeds}.",
                    deviations=["Quick mode runs the patch attack only; full mode adds transfer and white-box PGD, SmoothVLM "
                                "and DPS with three random crops. The design's fusion, lam and tau_unsure sweeps are not "
                                "run yet.", "A digits classifier behind the chat protocol (DigitsVLM) instead of "
                                "Qwen-VL / GPT-4o-mini / Gemini; a rule helper instead of gpt-4o-mini."])  # fmt: skip


def _models(seed: int | None, sz: dict[str, Any], out: Path) -> dict[str, Any]:
    """The surrogate classifiers (cached)."""
    import torch

    from icml25.dps.standin import digits32, train_classifier

    d = digits32(0)
    sur = []
    for k in range(sz["n_surrogates"]):
        path = out / f"surrogate_{k}_{sz['surrogate_steps']}.pt"
        if path.exists():
            from icml25.dps.standin import DigitsCNN

            m = DigitsCNN(24)
            m.load_state_dict(torch.load(path))
            sur.append(m.eval())
        else:
            m = train_classifier(*d["train"], steps=sz["surrogate_steps"], width=24, seed=1000 + k)
            torch.save(m.state_dict(), path)
            sur.append(m)
    return {"surrogates": sur}


def measure(
    seed: int, sz: dict[str, Any], out: Path, shared: dict[str, Any] | None, full: bool
) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from icml25.dps import DPSDefense, LabelJudge, crop_vote, smooth_vlm, to_pil, vanilla
    from icml25.dps.attacks import apply_patch, pgd_linf, universal_patch
    from icml25.dps.standin import (
        DigitsCNN,
        DigitsVLM,
        confusion_matrix,
        digits32,
        train_classifier,
    )

    t0 = time.perf_counter()
    split_seed = seed if full else 0
    d = digits32(split_seed)
    path = out / f"target_s{split_seed}_{sz['target_steps']}.pt"
    if path.exists():
        target = DigitsCNN(32)
        target.load_state_dict(torch.load(path))
        target.eval()
    else:
        target = train_classifier(*d["train"], steps=sz["target_steps"], seed=split_seed)
        torch.save(target.state_dict(), path)
    xv, yv = d["val"]
    with torch.no_grad():
        crops = F.interpolate(
            xv[:, :, 8:24, 8:24], size=(32, 32), mode="bilinear", align_corners=False
        )
    vlm = DigitsVLM(target, confusion_matrix(target, crops, yv))
    sur = (shared or _models(seed, sz, out))["surrogates"]
    xt, yt = d["test"]
    rng = np.random.default_rng(seed)
    if sz["n_test"] is not None and sz["n_test"] < len(yt):
        idx = np.sort(rng.choice(len(yt), sz["n_test"], replace=False))
        xt, yt = xt[idx], yt[idx]
    # one patch set per checkpoint seed, cached (quick mode shares it across its evaluation seeds:
    # the patch work dominated the first draft's 382 s)
    patch_seed = seed if full else 0
    ppath = out / f"patches_s{patch_seed}_{sz['patch_steps']}.pt"
    if ppath.exists():
        patches = torch.load(ppath)
    else:
        gen = torch.Generator().manual_seed(patch_seed)
        patches = {t: universal_patch(sur, d["train"][0], t, size=8, steps=sz["patch_steps"], generator=gen)
                   for t in range(10)}  # fmt: skip
        torch.save(patches, ppath)
    targets = (yt + 1) % 10
    attacks = {
        "patch": torch.cat(
            [apply_patch(xt[i : i + 1], patches[int(targets[i])], i % 4) for i in range(len(yt))]
        )
    }
    if full:  # quick mode: the patch attack only (its evaluation dominates the budget)
        attacks["pgd_transfer"] = pgd_linf(sur, xt, targets, eps=0.15, step=0.02, steps=20)
        attacks["pgd_white"] = pgd_linf(target, xt, targets, eps=0.1, step=0.02, steps=10)
    judge = LabelJudge()
    q = "Which digit is shown in the image?"
    dps = DPSDefense(vlm, crop="center", seed=seed)
    defences = {
        "van": lambda img, k: vanilla(vlm, img, q),
        "dps": lambda img, k: dps.respond(img, q, seed=seed * 10_000 + k).final,
        "vote": lambda img, k: crop_vote(vlm, img, q, seed=seed * 10_000 + k),
    }
    if full:
        dps3 = DPSDefense(vlm, crop="random", n_agents=3, seed=seed)
        defences["dps_random3"] = lambda img, k: dps3.respond(img, q, seed=seed * 10_000 + k).final
        defences["smooth"] = lambda img, k: smooth_vlm(vlm, img, q, seed=seed * 10_000 + k)
    res: dict[str, Any] = {"seed": seed}
    clean_pred = {
        name: [judge(fn(to_pil(xt[i, 0]), i)) for i in range(len(yt))]
        for name, fn in defences.items()
    }
    y = [int(v) for v in yt]
    t = [int(v) for v in targets]
    for name, preds in clean_pred.items():
        res[f"{name}_clean"] = [float(p == yy) for p, yy in zip(preds, y)]
    res["van_clean_correct"] = [p == yy for p, yy in zip(clean_pred["van"], y)]
    for att, xa in attacks.items():
        suffix = "adv" if att == "patch" else att
        for name, fn in defences.items():
            preds = [judge(fn(to_pil(xa[i, 0]), i)) for i in range(len(yt))]
            res[f"{name}_{suffix}"] = [float(p == yy) for p, yy in zip(preds, y)]
            res[f"{name}_{suffix}_targeted"] = [float(p == tt) for p, tt in zip(preds, t)]
            res[f"{name}_{suffix}_misled"] = [
                float(p is not None and p != yy) for p, yy in zip(preds, y)
            ]
    res["van_misled"], res["dps_misled"] = res["van_adv_misled"], res["dps_adv_misled"]
    with torch.no_grad():
        res["maxp_clean"] = float(torch.softmax(target(xt), -1).max(-1).values.mean())
        for att, xa in attacks.items():
            res[f"maxp_{att}"] = float(torch.softmax(target(xa), -1).max(-1).values.mean())
    res["maxp_adv"] = res["maxp_patch"]
    res["seconds"] = time.perf_counter() - t0
    return res


def plot_bars(per_seed: list[dict[str, Any]]) -> Any:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [("vanilla", "van"), ("DPS centre", "dps"), ("crop vote", "vote")]
    x = np.arange(len(names))
    for k, (cond, label) in enumerate((("clean", "clean"), ("adv", "patched"))):
        vals = np.array([[np.mean(p[f"{n}_{cond}"]) * 100 for _, n in names] for p in per_seed])
        ax.bar(x + (k - 0.5) * 0.38, vals.mean(0), 0.38, yerr=vals.std(0, ddof=1) if len(per_seed) > 1 else None,
               capsize=3, label=label)  # fmt: skip
    ax.set_xticks(x, [n for n, _ in names])
    ax.set_ylabel("accuracy (%)")
    ax.legend()
    fig.tight_layout()
    return fig


__all__ = ["CRITERIA", "run"]
