"""Reproduction of paper 08 (DPS, arXiv:2412.12722) with the DigitsVLM stand-in
(docs/dps.md, "Reproduction").

Claim: DPS lowers the success of crop-sensitive vision attacks while keeping clean accuracy close
to the undefended model, unlike majority voting over crops, which pays a large clean-accuracy
price. A digits classifier answers through the real chat pipeline (``DigitsVLM``); universal
corner patches crafted on a surrogate (black-box transfer) attack it; DPS with a centre crop
(``K = 1``), crop voting and the undefended model are compared on the same images.

The module reads: claim and criteria -> ``setup`` (sizes and the shared attacker) ->
``measure_seed`` (every defence on one seed's clean and attacked images) -> ``build_checks``
(one line per criterion, the test image as the unit) -> ``metrics`` -> ``run``. The experiment is
in ``experiment.py``, the figures in ``figures.py``; the fixed discussion (deviations, the unit)
is in docs/dps.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from icml25.dps.experiment import ATTACKS, LABELS, measure, sweep_names, train_attacker
from icml25.dps.figures import plot_bars, plot_confidence, plot_lam
from icml25.report import (
    Check,
    Criterion,
    Metric,
    ReproResult,
    Run,
    power_summary,
    reproduction,
    stats,
    table,
)

CLAIM = (
    "DPS lowers the success of crop-sensitive vision attacks while keeping clean accuracy close to "
    "the undefended model, unlike majority voting over crops, which costs clean accuracy."
)

# -- pre-registered: seeds, sizes and criteria ------------------------------------------------------
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


# -- setup ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """What every seed shares: the sizes, the mode, the run folder (the models' cache) and the
    black-box attacker (surrogates, patches and, in full mode, transfer PGD)."""

    sizes: dict[str, Any]
    full: bool
    out: Path
    attacker: dict[str, Any]

    @property
    def n_test(self) -> int:
        return self.sizes["n_test"] or len(self.attacker["data"]["test"][1])


def setup(r: Run) -> Setup:
    sz = {
        "target_steps": r.size(smoke=60, quick=500, full=1500),
        "surrogate_steps": r.size(smoke=60, quick=500, full=1500),
        "n_surrogates": r.size(smoke=1, quick=1, full=2),
        "patch_steps": r.size(smoke=10, quick=150, full=300),
        "n_test": r.size(smoke=40 if r.quick else SMOKE_FULL_N_TEST, quick=300, full=None),
    }
    full = not r.quick
    with r.stage("training or loading the attacker (surrogates, patches)"):
        attacker = train_attacker(sz, r.out, full)
    return Setup(sizes=sz, full=full, out=r.out, attacker=attacker)


# -- one seed -------------------------------------------------------------------------------------
def measure_seed(seed: int, s: Setup) -> dict[str, Any]:
    """Every defence on the clean and attacked test images of one seed: per-image outcomes, keyed
    ``<defence>_<condition>`` (``experiment.measure``)."""
    return measure(seed, s.sizes, s.out, s.attacker, s.full)


# -- checks and metrics ---------------------------------------------------------------------------
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


def metrics(per_seed: list[dict[str, Any]], full: bool) -> list[Metric]:
    def pct(key: str) -> list[float]:
        return [float(np.mean(p[key])) * 100 for p in per_seed]

    names = [n for n in (*LABELS, *sweep_names()) if f"{n}_clean" in per_seed[0]]
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


# -- tables and text ------------------------------------------------------------------------------
def seed_cluster_table(per_seed: list[dict[str, Any]]) -> str:
    """Full mode's sensitivity to the trained model: every check recomputed with the seeds (each
    its own defended model) as clusters, a cluster-robust t on ``k - 1`` df. It leaves out the
    variance of the shared test images, as the image clusters leave out that of the models."""
    rows = []
    for c, v, _, seeds in _check_values(per_seed, True):
        ch = c.check(v, seeds)
        rows.append([c.name, f"{ch.estimate:.3g} [{ch.low:.3g}, {ch.high:.3g}]", ch.verdict])
    return table(
        ["check", "estimate [95% interval]", "verdict"],
        rows,
        caption="Sensitivity (reported, not the verdict): seeds as clusters, i.e. the trained "
        "model as the unit (cluster-robust t, seeds - 1 df)",
    )


def setup_text(s: Setup, seeds: list[int]) -> str:
    return (
        f"DigitsVLM stand-in (digits 32x32, split 56/14/30 with random_state 0); sizes {s.sizes}; "
        f"seeds {seeds}. "
        + (
            "Each seed trains its own defended model and draws its own crops; the attacker "
            "(surrogates, patches, transfer PGD) and the full test split are shared."
            if s.full
            else "One defended model and one surrogate; each seed draws its own 300 test images, "
            "patch corners and crops."
        )
        + " The independent unit is the test image: every check averages an image's values over "
        "the seeds that evaluated it and resamples the images, each counted once (docs/dps.md, "
        "'Reproduction')."
    )


# -- the run --------------------------------------------------------------------------------------
@reproduction("dps", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    s = setup(r)
    per_seed = []
    for seed in r.seeds:
        with r.stage(f"seed {seed}: defences on {s.n_test} clean and attacked images"):
            per_seed.append(measure_seed(seed, s))
    checks = build_checks(per_seed, s.full)
    r.figure(plot_bars(per_seed, s.full), "accuracy_bars.png")
    r.figure(plot_confidence(per_seed), "max_probability.png")
    if s.full:
        r.figure(plot_lam(per_seed), "accuracy_vs_lam.png")
    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=DPS_ROBUST.name,
        metrics=metrics(per_seed, s.full),
        setup=setup_text(s, r.seeds),
        power=power_summary(checks),
        tables=[seed_cluster_table(per_seed)] if s.full else [],
    )


__all__ = ["CRITERIA", "run"]
