"""The offline experiment behind ``icml25 repro dps`` (docs/dps.md, "Reproduction").

A digits classifier answers through the real chat pipeline (:class:`~icml25.dps.standin.DigitsVLM`).
The black-box attacker (:func:`train_attacker`: surrogate classifiers, one universal corner patch
per target class and, in full mode, transfer PGD) is shared by every seed; :func:`measure` trains
or loads one seed's defended model and runs every defence (vanilla, DPS with a centre crop, crop
voting; full mode adds DPS with random crops, SmoothVLM and the sweeps) on the clean and attacked
test images, returning per-image outcomes. torch is imported inside the functions, as the package
itself does not import it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ATTACKS",
    "LABELS",
    "LAMS",
    "TAU_SWEEP",
    "load_or_train",
    "measure",
    "sweep_names",
    "train_attacker",
]

LAMS = (0.5, 1.0, 2.0, 4.0)  # the bonus-fusion weights swept in full mode
TAU_SWEEP = 0.35  # the uncertain-reply threshold swept in full mode (0 is the default)
ATTACKS = ("patch", "pgd_transfer", "pgd_white")
LABELS = {
    "van": "vanilla",
    "dps": "DPS centre",
    "vote": "crop vote",
    "dps_random3": "DPS random K=3",
    "smooth": "SmoothVLM",
}


def sweep_names() -> list[str]:
    """The sweeps of full mode, evaluated on clean and patched images only."""
    return ["dps_random1", *(f"dps_bonus_lam{lam:g}" for lam in LAMS), "dps_tau0.35"]


def load_or_train(path: Path, width: int, train: Any) -> Any:
    """The classifier saved at ``path`` (width ``width``), or ``train()``'s, saved there."""
    import torch

    from icml25.dps.standin import DigitsCNN

    if path.exists():
        m = DigitsCNN(width)
        m.load_state_dict(torch.load(path))
        return m.eval()
    m = train()
    torch.save(m.state_dict(), path)
    return m


def train_attacker(sz: dict[str, Any], out: Path, full: bool) -> dict[str, Any]:
    """The black-box attacker, shared by every seed: surrogates, one universal patch per target
    class and (full mode) transfer PGD on the test split; everything cached in the run folder."""
    import torch

    from icml25.dps.attacks import pgd_linf, universal_patch
    from icml25.dps.standin import digits32, train_classifier

    d = digits32(0)
    sur = [
        load_or_train(
            out / f"surrogate_{k}_{sz['surrogate_steps']}.pt",
            24,
            lambda k=k: train_classifier(
                *d["train"], steps=sz["surrogate_steps"], width=24, seed=1000 + k
            ),
        )
        for k in range(sz["n_surrogates"])
    ]
    ppath = out / f"patches_{sz['n_surrogates']}_{sz['patch_steps']}.pt"
    if ppath.exists():
        patches = torch.load(ppath)
    else:
        gen = torch.Generator().manual_seed(0)
        patches = {
            t: universal_patch(
                sur, d["train"][0], t, size=8, steps=sz["patch_steps"], generator=gen
            )
            for t in range(10)
        }
        torch.save(patches, ppath)
    res: dict[str, Any] = {"surrogates": sur, "patches": patches, "data": d}
    if full:
        xt, yt = d["test"]
        tpath = out / f"pgd_transfer_{sz['n_surrogates']}_{sz['surrogate_steps']}.pt"
        if tpath.exists():
            res["pgd_transfer"] = torch.load(tpath)
        else:
            res["pgd_transfer"] = pgd_linf(sur, xt, (yt + 1) % 10, eps=0.15, step=0.02, steps=20)
            torch.save(res["pgd_transfer"], tpath)
    return res


def measure(
    seed: int, sz: dict[str, Any], out: Path, attacker: dict[str, Any], full: bool
) -> dict[str, Any]:
    """Every defence on the clean and attacked test images for one seed (per-image outcomes)."""
    import torch
    import torch.nn.functional as F

    from icml25.dps import DPSDefense, crop_vote, smooth_vlm, vanilla
    from icml25.dps.attacks import apply_patch, pgd_linf
    from icml25.dps.images import to_pil
    from icml25.dps.metrics import LabelJudge
    from icml25.dps.standin import DigitsVLM, confusion_matrix, train_classifier

    t0 = time.perf_counter()
    d = attacker["data"]
    model_seed = seed if full else 0  # quick mode: one defended model, seeds vary the images
    target = load_or_train(
        out / f"target_s{model_seed}_{sz['target_steps']}.pt",
        32,
        lambda: train_classifier(*d["train"], steps=sz["target_steps"], seed=model_seed),
    )
    xv, yv = d["val"]
    with torch.no_grad():
        crops = F.interpolate(
            xv[:, :, 8:24, 8:24], size=(32, 32), mode="bilinear", align_corners=False
        )
    conf = confusion_matrix(target, crops, yv)
    vlm = DigitsVLM(target, conf)
    xt, yt = d["test"]
    idx = np.arange(len(yt))
    if sz["n_test"] is not None and sz["n_test"] < len(yt):
        # quick mode: each seed its own draw (overlapping: each image counted once in the checks);
        # full mode: the same images in every seed
        idx = (
            idx[: sz["n_test"]]
            if full
            else np.sort(np.random.default_rng(seed).choice(len(yt), sz["n_test"], replace=False))
        )
    xt, yt = xt[idx], yt[idx]
    targets = (yt + 1) % 10
    patches = attacker["patches"]
    attacks = {
        "patch": torch.cat(
            [apply_patch(xt[i : i + 1], patches[int(targets[i])], i % 4) for i in range(len(yt))]
        )
    }
    if full:  # quick mode: the patch attack only (its evaluation dominates the budget)
        attacks["pgd_transfer"] = attacker["pgd_transfer"][idx]
        attacks["pgd_white"] = pgd_linf(target, xt, targets, eps=0.1, step=0.02, steps=10)
    judge = LabelJudge()
    q = "Which digit is shown in the image?"

    def dps_with(lvlm: Any, **kw: Any) -> Any:
        defence = DPSDefense(lvlm, seed=seed, **kw)
        return lambda img, k: defence.respond(img, q, seed=seed * 10_000 + k).final

    defences = {
        "van": lambda img, k: vanilla(vlm, img, q),
        "dps": dps_with(vlm, crop="center"),
        "vote": lambda img, k: crop_vote(vlm, img, q, seed=seed * 10_000 + k),
    }
    sweeps: dict[str, Any] = {}
    if full:
        defences["dps_random3"] = dps_with(vlm, crop="random", n_agents=3)
        defences["smooth"] = lambda img, k: smooth_vlm(vlm, img, q, seed=seed * 10_000 + k)
        # the design's sweeps (clean and patched images only): K = 1 random crop, the bonus fusion
        # rule over lam, and the uncertain-reply threshold
        sweeps["dps_random1"] = dps_with(vlm, crop="random", n_agents=1)
        for lam in LAMS:
            sweeps[f"dps_bonus_lam{lam:g}"] = dps_with(
                DigitsVLM(target, conf, fusion="bonus", lam=lam), crop="center"
            )
        sweeps[f"dps_tau{TAU_SWEEP:g}"] = dps_with(
            DigitsVLM(target, conf, tau_unsure=TAU_SWEEP), crop="center"
        )
    y = [int(v) for v in yt]
    t = [int(v) for v in targets]
    res: dict[str, Any] = {"seed": seed, "image": [int(i) for i in idx]}  # test-split ids
    conditions = {"clean": xt, **attacks}
    for cond, xs in conditions.items():
        suffix = {"clean": "clean", "patch": "adv"}.get(cond, cond)
        names = {**defences, **(sweeps if cond in ("clean", "patch") else {})}
        for name, fn in names.items():
            preds = [judge(fn(to_pil(xs[i, 0]), i)) for i in range(len(y))]
            res[f"{name}_{suffix}"] = [float(p == yy) for p, yy in zip(preds, y)]
            if cond != "clean":
                res[f"{name}_{suffix}_targeted"] = [float(p == tt) for p, tt in zip(preds, t)]
                res[f"{name}_{suffix}_misled"] = [
                    float(p is not None and p != yy) for p, yy in zip(preds, y)
                ]
    with torch.no_grad():
        for cond, xs in conditions.items():
            res[f"maxp_{cond}"] = torch.softmax(target(xs), -1).max(-1).values.tolist()
    res["seconds"] = time.perf_counter() - t0
    return res
