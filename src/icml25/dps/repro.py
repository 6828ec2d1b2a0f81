"""Reproduction of paper 08 (DPS, arXiv:2412.12722) with the DigitsVLM stand-in
(docs/dps.md, "Reproduction").

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

from icml25.report import Check, Criterion, Metric, ReproResult, Run, pyplot, reproduction, stats

CLAIM = (
    "DPS lowers the success of crop-sensitive vision attacks while keeping clean accuracy close to "
    "the undefended model, unlike majority voting over crops, which costs clean accuracy."
)
N_QUICK, N_FULL = 3, 5
SMOKE_FULL_N_TEST = 16  # full mode at smoke size: the first 16 test images in every seed
# the unit is the test image: each image's values are averaged over the seeds that evaluated it
PER_IMAGE = "; each image counted once (its mean over the seeds that evaluated it)"

VALID = Criterion(
    "(a) validity: vanilla clean - robust accuracy > 15 points",
    "bootstrap",
    above=15.0,
    unit="points",
    over="images",
    description="per image, 100 x (clean correct - patched correct) for the undefended model"
    + PER_IMAGE,
)
DPS_ROBUST = Criterion(
    "(b1) DPS robust accuracy - vanilla > 5 points",
    "bootstrap",
    above=5.0,
    unit="points",
    over="images",
    description="per patched image, 100 x (DPS correct - vanilla correct)" + PER_IMAGE,
)
DPS_ASR = Criterion(
    "(b2) misleading ASR: DPS - 0.75 x vanilla < 0",
    "bootstrap",
    below=0.0,
    over="images",
    description="per image the undefended model answers correctly when clean, DPS misled - 0.75 x "
    "vanilla misled: below 0 exactly when the relative reduction exceeds 0.25" + PER_IMAGE,
)
DPS_CLEAN = Criterion(
    "(c) clean accuracy: DPS - vanilla > -3 points",
    "bootstrap",
    above=-3.0,
    unit="points",
    over="images",
    description="per clean image, 100 x (DPS correct - vanilla correct)" + PER_IMAGE,
)
VS_VOTE = Criterion(
    "(d) clean accuracy: DPS - crop vote > 10 points",
    "bootstrap",
    above=10.0,
    unit="points",
    over="images",
    description="per clean image, 100 x (DPS correct - crop-vote correct)" + PER_IMAGE,
)
SMOOTH_ROBUST = Criterion(
    "(f) patched accuracy: DPS - SmoothVLM > 0 points",
    "bootstrap",
    above=0.0,
    unit="points",
    over="images",
    description="full mode; per patched image, 100 x (DPS correct - SmoothVLM "
    "correct): the planned anchor (pilot 77.6 vs 61.9)" + PER_IMAGE,
)
SMOOTH_CLEAN = Criterion(
    "(g) clean accuracy: DPS - SmoothVLM > -3 points",
    "bootstrap",
    above=-3.0,
    unit="points",
    over="images",
    description="full mode; per clean image, 100 x (DPS correct - SmoothVLM "
    "correct): the planned anchor (pilot 94.4 vs 96.1)" + PER_IMAGE,
)
CRITERIA = [VALID, DPS_ROBUST, DPS_ASR, DPS_CLEAN, VS_VOTE, SMOOTH_ROBUST, SMOOTH_CLEAN]
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


def _sizes(r: Run) -> dict[str, Any]:
    return {
        "target_steps": r.size(smoke=60, quick=500, full=1500),
        "surrogate_steps": r.size(smoke=60, quick=500, full=1500),
        "n_surrogates": r.size(smoke=1, quick=1, full=2),
        "patch_steps": r.size(smoke=10, quick=150, full=300),
        "n_test": r.size(smoke=40 if r.quick else SMOKE_FULL_N_TEST, quick=300, full=None),
    }


@reproduction("dps", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    sz = _sizes(r)
    full = not r.quick
    with r.stage("training or loading the attacker (surrogates, patches)"):
        attacker = _attacker(sz, r.out, full)
    per_seed = []
    for s in r.seeds:
        n = sz["n_test"] or len(attacker["data"]["test"][1])
        with r.stage(f"seed {s}: defences on {n} clean and attacked images"):
            per_seed.append(measure(s, sz, r.out, attacker, full))
    checks = build_checks(per_seed, full)
    tables = [seed_cluster_table(per_seed)] if full else []
    metrics = _metrics(per_seed, full)
    r.figure(plot_bars(per_seed, full), "accuracy_bars.png")
    r.figure(plot_confidence(per_seed), "max_probability.png")
    if full:
        r.figure(plot_lam(per_seed), "accuracy_vs_lam.png")
    setup = (
        f"DigitsVLM stand-in (digits 32x32, split 56/14/30 with random_state 0); sizes {sz}; seeds {r.seeds}. "
        + (
            "Each seed trains its own defended model and draws its own crops; the attacker (surrogates, patches, "
            "transfer PGD) and the full test split are shared."
            if full
            else "One defended model and one surrogate; each seed draws its own 300 test images, patch corners and "
            "crops."
        )
        + " The independent unit is the test image: every check averages an image's values over the seeds "
        "that evaluated it and resamples the images, each counted once (docs/dps.md, 'Reproduction')."
    )
    deviations = [
        "A digits classifier behind the chat protocol (DigitsVLM) instead of Qwen-VL / GPT-4o-mini / Gemini; a rule "
        "helper instead of gpt-4o-mini; misleading (label-flip) attacks only, no jailbreak sets or GPT-4o judge.",
        "Full mode keeps the data split and the attacker fixed across seeds (the design varies the split per seed); "
        "training a fresh attacker per seed would need about 50 minutes on 2 cores.",
    ]
    if not full:
        deviations.append(
            "Quick mode runs the patch attack against vanilla, DPS-centre and crop vote only; full "
            "mode adds transfer and white-box PGD, SmoothVLM, DPS with random crops and the fusion, "
            "lam and tau_unsure sweeps."
        )
    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=DPS_ROBUST.name,
        metrics=metrics,
        setup=setup,
        deviations=deviations,
        tables=tables,
    )


def _check_values(
    per_seed: list[dict[str, Any]], full: bool
) -> list[tuple[Criterion, np.ndarray, list[int], list[int]]]:
    """Each criterion with its per-value data, the test-image id and the seed of every value
    (seed-major, in each seed's image order)."""
    images = [i for p in per_seed for i in p["image"]]
    seeds = [p["seed"] for p in per_seed for _ in p["image"]]

    def cat(key: str) -> np.ndarray:
        bad = [p["seed"] for p in per_seed if len(p[key]) != len(p["image"])]
        if bad:
            raise ValueError(
                f"dps reproduction: seeds {bad} have {key!r} values that do not align with their "
                "image ids (one outcome per image is needed to count each image once)"
            )
        return np.array([v for p in per_seed for v in p[key]], dtype=np.float64)

    van_c, van_a, dps_c, dps_a, vote_c = (
        cat(k) for k in ("van_clean", "van_adv", "dps_clean", "dps_adv", "vote_clean")
    )
    # (b2) is on the images the undefended model answers correctly when clean
    mask = van_c.astype(bool)
    mis_d, mis_v = cat("dps_adv_misled"), cat("van_adv_misled")
    sub_images = [i for i, m in zip(images, mask) if m]
    sub_seeds = [s for s, m in zip(seeds, mask) if m]
    out = [
        (VALID, 100 * (van_c - van_a), images, seeds),
        (DPS_ROBUST, 100 * (dps_a - van_a), images, seeds),
        (DPS_ASR, (mis_d - 0.75 * mis_v)[mask], sub_images, sub_seeds),
        (DPS_CLEAN, 100 * (dps_c - van_c), images, seeds),
        (VS_VOTE, 100 * (dps_c - vote_c), images, seeds),
    ]
    if full:
        out += [
            (SMOOTH_ROBUST, 100 * (dps_a - cat("smooth_adv")), images, seeds),
            (SMOOTH_CLEAN, 100 * (dps_c - cat("smooth_clean")), images, seeds),
        ]
    return out


def per_image(values: np.ndarray, images: list[int]) -> tuple[list[int], list[float]]:
    """Each image's mean over the values (seeds) it has, images in order of first appearance."""
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for v, i in zip(values, images):
        sums[i] = sums.get(i, 0.0) + float(v)
        counts[i] = counts.get(i, 0) + 1
    return list(sums), [sums[i] / counts[i] for i in sums]


def build_checks(per_seed: list[dict[str, Any]], full: bool) -> list[Check]:
    """The pre-registered checks with the test image as the independent unit (docs/dps.md,
    "Reproduction"): the claim is about attacked images under a given model, so each image's
    outcomes are averaged over the seeds that evaluated it (quick mode: overlapping draws; full
    mode: every image in every seed), and the images, each counted once, are resampled."""
    checks = []
    for c, v, images, _ in _check_values(per_seed, full):
        ids, means = per_image(v, images)
        if len(ids) < stats.MIN_BOOTSTRAP_ITEMS:
            checks.append(c.unmeasured(f"only {len(ids)} images qualify", n=len(ids)))
        else:
            checks.append(c.check(means, units=ids))
    return checks


def seed_cluster_table(per_seed: list[dict[str, Any]]) -> str:
    """Full mode's sensitivity to the trained model: every check recomputed with the seeds (each
    its own defended model) as clusters, a cluster-robust t on ``k - 1`` df. It leaves out the
    variance of the shared test images, as the image clusters leave out that of the models."""
    rows = [
        "Sensitivity (reported, not the verdict): seeds as clusters, i.e. the trained model as the "
        "unit (cluster-robust t, seeds - 1 df)",
        "",
        "| check | estimate [95% interval] | verdict |",
        "| --- | --- | --- |",
    ]
    for c, v, _, seeds in _check_values(per_seed, True):
        ch = c.check(v, seeds)
        rows.append(
            f"| {c.name} | {ch.estimate:.3g} [{ch.low:.3g}, {ch.high:.3g}] | {ch.verdict} |"
        )
    return "\n".join(rows)


def _metrics(per_seed: list[dict[str, Any]], full: bool) -> list[Metric]:
    def pct(key: str) -> list[float]:
        return [float(np.mean(p[key])) * 100 for p in per_seed]

    names = [n for n in (*LABELS, *_sweep_names()) if f"{n}_clean" in per_seed[0]]
    out = []
    for n in names:
        label = LABELS.get(n, n)
        out.append(Metric(f"{label} clean accuracy", pct(f"{n}_clean"), unit="%"))
        for att in ATTACKS:
            suffix = "adv" if att == "patch" else att
            if f"{n}_{suffix}" not in per_seed[0]:
                continue
            out.append(Metric(f"{label} accuracy under {att}", pct(f"{n}_{suffix}"), unit="%"))
            out.append(
                Metric(f"{label} targeted ASR under {att}", pct(f"{n}_{suffix}_targeted"), unit="%")
            )
    for att in ("clean", *ATTACKS):
        if f"maxp_{att}" in per_seed[0]:
            out.append(
                Metric(
                    f"mean max-probability, {att}",
                    [float(np.mean(p[f"maxp_{att}"])) for p in per_seed],
                )
            )
    return out


def _sweep_names() -> list[str]:
    return ["dps_random1", *(f"dps_bonus_lam{lam:g}" for lam in LAMS), "dps_tau0.35"]


def _load_or_train(path: Path, width: int, train: Any) -> Any:
    import torch

    from icml25.dps.standin import DigitsCNN

    if path.exists():
        m = DigitsCNN(width)
        m.load_state_dict(torch.load(path))
        return m.eval()
    m = train()
    torch.save(m.state_dict(), path)
    return m


def _attacker(sz: dict[str, Any], out: Path, full: bool) -> dict[str, Any]:
    """The black-box attacker, shared by every seed: surrogates, one universal patch per target
    class and (full mode) transfer PGD on the test split; everything cached in the run folder."""
    import torch

    from icml25.dps.attacks import pgd_linf, universal_patch
    from icml25.dps.standin import digits32, train_classifier

    d = digits32(0)
    sur = [
        _load_or_train(
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

    from icml25.dps import DPSDefense, LabelJudge, crop_vote, smooth_vlm, to_pil, vanilla
    from icml25.dps.attacks import apply_patch, pgd_linf
    from icml25.dps.standin import DigitsVLM, confusion_matrix, train_classifier

    t0 = time.perf_counter()
    d = attacker["data"]
    model_seed = seed if full else 0  # quick mode: one defended model, seeds vary the images
    target = _load_or_train(
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


def plot_bars(per_seed: list[dict[str, Any]], full: bool) -> Any:
    plt = pyplot()
    names = [n for n in LABELS if f"{n}_clean" in per_seed[0]]
    conds = [("clean", "clean"), ("adv", "patch")] + (
        [("pgd_transfer", "PGD transfer"), ("pgd_white", "PGD white-box")] if full else []
    )
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.6))
    x = np.arange(len(names))
    w = 0.8 / len(conds)
    for k, (cond, label) in enumerate(conds):
        vals = np.array([[np.mean(p[f"{n}_{cond}"]) * 100 for n in names] for p in per_seed])
        ax.bar(
            x + (k - (len(conds) - 1) / 2) * w,
            vals.mean(0),
            w,
            yerr=vals.std(0, ddof=1) if len(per_seed) > 1 else None,
            capsize=2,
            label=label,
        )
    ax.set_xticks(x, [LABELS[n] for n in names])
    ax.set_ylabel("accuracy (%), mean and s.d. over seeds")
    ax.legend(fontsize=8, ncol=len(conds))
    fig.tight_layout()
    return fig


def plot_confidence(per_seed: list[dict[str, Any]]) -> Any:
    """The defended model's max-probability on clean and attacked images (pooled over seeds)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    bins = np.linspace(0, 1, 26)
    for cond in ("clean", *ATTACKS):
        if f"maxp_{cond}" in per_seed[0]:
            v = [x for p in per_seed for x in p[f"maxp_{cond}"]]
            ax.hist(
                v, bins=bins, histtype="step", density=True, label=f"{cond} (mean {np.mean(v):.2f})"
            )
    ax.set_xlabel("max class probability of the defended model")
    ax.set_ylabel("density")
    ax.set_yscale("log")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot_lam(per_seed: list[dict[str, Any]]) -> Any:
    """DPS-centre accuracy against the bonus weight lam, with the Bayes rule as reference lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for cond, label, color in (("clean", "clean", "C0"), ("adv", "patch", "C1")):
        vals = np.array(
            [[np.mean(p[f"dps_bonus_lam{lam:g}_{cond}"]) * 100 for lam in LAMS] for p in per_seed]
        )
        ax.errorbar(
            LAMS,
            vals.mean(0),
            yerr=vals.std(0, ddof=1),
            marker="o",
            capsize=3,
            color=color,
            label=f"bonus, {label}",
        )
        bayes = np.mean([np.mean(p[f"dps_{cond}"]) * 100 for p in per_seed])
        ax.axhline(bayes, ls="--", color=color, label=f"Bayes, {label}")
        van = np.mean([np.mean(p[f"van_{cond}"]) * 100 for p in per_seed])
        ax.axhline(van, ls=":", color=color, label=f"vanilla, {label}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("lam (bonus per matching hint)")
    ax.set_ylabel("DPS-centre accuracy (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


__all__ = ["CRITERIA", "run"]
