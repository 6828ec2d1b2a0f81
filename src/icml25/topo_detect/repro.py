"""Topological signatures of adversaries, reproduced offline (docs/topo_detect.md, "Reproduction").

Model: a two-tower alignment model on scikit-learn digits (image MLP, text projection of the real
all-MiniLM-L6-v2 embeddings of "a handwritten digit {zero..nine}", CLIP's zero-shot objective),
attacked by PGD-L-inf. Claim 1: the TP and MK losses between the image cloud and its predicted-class
text cloud change monotonically with the fraction of adversarial images in a batch. Claim 2: MMD
tests whose kernel also sees the per-sample topological features (§6) detect a half-adversarial
test set more often than the same tests without them, at a valid type-I error, and more often
than the same tests with non-topological neighbourhood features (k-NN distances, LID) computed in
the same chunks in their place (the control: does the topology add anything?).

The module reads: claim and criteria -> ``setup`` (the mode's sizes) -> ``measure_seed`` (one
model and attack: its signature curve and detection trials) -> ``evaluate`` (one line per
criterion, on the trials pooled over the seeds) -> ``run``. The experiment (model, attack, tests,
trials, sweep) is in ``experiment.py``, the figures in ``figures.py``; the fixed discussion
(deviations, power) is in docs/topo_detect.md.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch

from icml25.report import (
    Check,
    Criterion,
    Metric,
    ReproResult,
    Run,
    power_summary,
    reproduction,
    table,
)
from icml25.topo_detect.experiment import (
    CONTROL_TESTS,
    CONTROLS,
    EPS,
    N_BATCH,
    N_PERM,
    N_TEST,
    N_TRAIN,
    Q_ADV,
    Setting,
    best_control,
    curve,
    detection_trials,
    sweep,
    trained_tests,
)
from icml25.topo_detect.figures import plot_power, plot_signature_curve
from icml25.topo_detect.mmd import binomial_upper
from icml25.topo_detect.signatures import FRACTIONS

CLAIM = (
    "The TP and MK topological losses between image and text embeddings change monotonically "
    "with the fraction of adversarial images, and MMD tests that add the back-propagated "
    "topological signatures detect adversarial data better than the same tests without them."
)

# -- pre-registered: seeds, sizes and criteria ------------------------------------------------------
#: seed count (quick, full): model/attack seeds; each seed runs the whole pipeline
SEEDS = (3, 3)
#: the experiment's design (experiment.py): EPS, N_BATCH (claim 1), N_TEST, Q_ADV, N_PERM
#: (claim 2), N_TRAIN (the trained kernels' split), CONTROLS and CONTROL_TESTS (check 2d)
BATCHES = 20  # claim 1: batches per fraction
TRIALS = 100  # claim 2 trials under H0 and under H1 per seed (docs/topo_detect.md: power)
#: the tests the checks use (their features: attribution, TP, chunks of 50, on the pooled sample)
TESTS = ("G_emb", "G_raw", "SA", "G_topo", "G_emb*G_topo", "SA*G_topo")
#: report only, both modes: the gradient-mode signatures (autograd of the chunk's TP loss)
GRAD_TESTS = ("G_topo[grad]", "G_emb*G_topo[grad]", "SA*G_topo[grad]")
#: report only, full mode: MK-gradient and alpha = 2 signatures, the per-group negative control
#: (signatures computed separately on S_P and S_Q: invalid by design) and the trained kernels
EXTRA_TESTS = ("G_emb*G_topo[MK grad]", "G_emb*G_topo[alpha 2]", "G_topo[per group]")
TRAINED_TESTS = ("MMD-D", "MMD-D*G_topo", "SAMMD", "SAMMD*G_topo")
SWEEP_EPS = (0.05, 0.1, 0.2)  # full mode, report only: every eps
SWEEP_Q = (0.25, 0.5, 1.0)
SWEEP_TRIALS = 50

MONO_TP = Criterion(
    "1a TP loss monotone in the adversarial fraction",
    "exact",
    above=0.9,
    description="|Spearman rho| of (fraction, batch-mean TP) over the 11 fractions, computed per "
    "seed; the check takes the smallest over the seeds (either direction counts as monotone)",
)
MONO_MK = Criterion(
    "1b MK loss monotone in the adversarial fraction",
    "exact",
    above=0.9,
    description="as 1a for the MK loss (sigma 0.1)",
)
TYPE_I = Criterion(
    "2a type-I error within the binomial band",
    "exact",
    below=0.0,
    description="worst valid test's rejection rate under H0 (two disjoint clean samples, all "
    "seeds pooled) minus the 99th percentile of Binomial(T, 0.05) / T for its T trials (0.08 at "
    "T = 300); every test but the per-group negative control",
)
POWER_SA = Criterion(
    "2b power(SA*G_topo) - power(SA) > 0",
    "paired",
    above=0.0,
    over="trials",
    description="rejections under H1 (S_Q half adversarial), paired by trial (same data), all seeds",
)
POWER_G = Criterion(
    "2c power(G_emb*G_topo) - power(G_emb) > 0",
    "paired",
    above=0.0,
    over="trials",
    description="as 2b for the embedding Gaussian",
)
POWER_CONTROL = Criterion(
    "2d power(SA*G_topo) - power(SA*best control) > 0",
    "paired",
    above=0.0,
    over="trials",
    description="rejections under H1, paired by trial (same data, same chunks), all seeds: the "
    "key test against the same test with a non-topological feature (SA*G_knn: 1-NN and mean "
    "3-NN distances; SA*G_lid: LID, k = 10) in place of the topological one, whichever of the "
    "two has the higher power; held means the topology adds detection power that local "
    "neighbourhood distances do not",
)
CRITERIA = [MONO_TP, MONO_MK, TYPE_I, POWER_SA, POWER_G, POWER_CONTROL]


# -- setup ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Setup:
    """The mode's sizes, shared by every seed (each seed trains its own model)."""

    batches: int
    trials: int
    fractions: tuple[float, ...]
    epochs: int
    kernel_epochs: int | None  # None: each trained test's paper default
    full: bool
    sweep_trials: int | None
    sweep_eps: tuple[float, ...] | None
    sweep_q: tuple[float, ...] | None


def setup(r: Run) -> Setup:
    return Setup(
        batches=r.size(smoke=3, quick=BATCHES, full=BATCHES),
        trials=r.size(smoke=4, quick=TRIALS, full=TRIALS),
        fractions=r.size(smoke=(0.0, 0.5, 1.0), quick=FRACTIONS, full=FRACTIONS),
        epochs=r.size(smoke=5, quick=40, full=40),
        kernel_epochs=r.size(smoke=3, quick=0, full=None),
        full=not r.quick,
        sweep_trials=r.size(smoke=2, quick=None, full=SWEEP_TRIALS),
        sweep_eps=r.size(smoke=(0.2,), quick=None, full=SWEEP_EPS),
        sweep_q=r.size(smoke=(1.0,), quick=None, full=SWEEP_Q),
    )


# -- one seed -------------------------------------------------------------------------------------
def measure_seed(seed: int, s: Setup) -> dict:
    """One model and attack: accuracies, the signature curve and the detection trials (full mode:
    on the images left after the trained kernels' split, with those kernels, the alpha = 2 curve
    and the trained kernels' final J)."""
    st = Setting(seed, epochs=s.epochs)
    out = {
        "seed": seed,
        "acc": st.acc,
        "adv_acc": st.adv_acc,
        "curve": curve(st, seed, s.batches, s.fractions),
        "text_model": st.text_info["model"],
        "n_images": len(st.x),
    }
    pool, trained = None, None
    if s.full:  # a training split for the kernels, disjoint from every trial's images
        perm = torch.randperm(len(st.x), generator=torch.Generator().manual_seed(4000 + seed))
        pool = perm[2 * N_TRAIN :]
        trained, out["J"] = trained_tests(st, perm[: 2 * N_TRAIN], seed, s.kernel_epochs)
        out["curve_a2"] = curve(st, seed, s.batches, s.fractions, alpha=2.0)
    out["det"] = detection_trials(st, seed, s.trials, extra=s.full, pool=pool, trained=trained)
    return out


# -- checks, metrics and tables -------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Pooled:
    """The detection trials pooled over the seeds in seed order (one value per trial)."""

    names: list[str]
    units: list[str]  # "seed s trial i", one per pooled trial
    h0: dict[str, list[float]]
    h1: dict[str, list[float]]
    type_i: dict[str, float]
    power: dict[str, float]
    worst: str  # the valid test with the highest type-I error
    bound: float  # the binomial 99% bound on the type-I error for T trials
    best: str  # the SA product of the control with the higher power

    @property
    def T(self) -> int:
        return len(self.h0["G_emb"])


def pool(runs: list[dict]) -> Pooled:
    names = list(runs[0]["det"]["H0"])
    units = [
        f"seed {x['seed']} trial {i}" for x in runs for i in range(len(x["det"]["H1"]["G_emb"]))
    ]
    h0 = {t: [v for x in runs for v in x["det"]["H0"][t]] for t in names}
    h1 = {t: [v for x in runs for v in x["det"]["H1"][t]] for t in names}
    type_i = {t: statistics.fmean(v) for t, v in h0.items()}
    power = {t: statistics.fmean(v) for t, v in h1.items()}
    valid = [t for t in names if t != "G_topo[per group]"]
    return Pooled(
        names=names,
        units=units,
        h0=h0,
        h1=h1,
        type_i=type_i,
        power=power,
        worst=max(valid, key=type_i.get),
        bound=binomial_upper(len(h0["G_emb"])),
        best=best_control("SA*", power),
    )


def evaluate(runs: list[dict], s: Setup) -> list[Check]:
    """The units: 1a/1b one curve per seed (the smallest |rho| over the seeds); 2a-2d one trial
    per value, a fresh draw of 2n images and chunks, pooled over the seeds in seed order; 2b-2d
    pair two tests on the same trial and name each (seed, trial) (a repeat is an error)."""
    p = pool(runs)
    h1, units = p.h1, p.units
    return [
        MONO_TP.check(min(abs(x["curve"]["spearman"]["tp"]) for x in runs)),
        MONO_MK.check(min(abs(x["curve"]["spearman"]["mk"]) for x in runs)),
        TYPE_I.check(p.type_i[p.worst] - p.bound).renamed(f"{TYPE_I.name} (worst: {p.worst})"),
        POWER_SA.check(h1["SA*G_topo"], h1["SA"], units=units),
        POWER_G.check(h1["G_emb*G_topo"], h1["G_emb"], units=units),
        POWER_CONTROL.check(h1["SA*G_topo"], h1[p.best], units=units).renamed(
            f"{POWER_CONTROL.name} (best control: {p.best})"
        ),
    ]


def metrics(runs: list[dict], s: Setup) -> list[Metric]:
    names = list(runs[0]["det"]["H0"])
    out = [
        Metric("clean zero-shot accuracy", [x["acc"] for x in runs]),
        Metric(f"PGD eps={EPS} accuracy", [x["adv_acc"] for x in runs]),
        Metric(
            "Spearman rho TP",
            [x["curve"]["spearman"]["tp"] for x in runs],
            description="sign: the direction of the change",
        ),
        Metric("Spearman rho MK", [x["curve"]["spearman"]["mk"] for x in runs]),
    ]
    for h, label in (("H1", "power"), ("H0", "type-I")):
        for t in names:
            values = [statistics.fmean(x["det"][h][t]) for x in runs]
            out.append(Metric(f"{label} {t}", values, description="per seed"))
    if s.full:
        out.append(
            Metric("Spearman rho TP alpha=2", [x["curve_a2"]["spearman"]["tp"] for x in runs])
        )
        out += [Metric(f"final J {t}", [x["J"][t] for x in runs]) for t in TRAINED_TESTS]
    return out


def _paired_text(a: list[float], b: list[float]) -> str:
    from icml25.report.stats import mean_t_interval

    diff = [x - y for x, y in zip(a, b)]
    if len(set(diff)) < 2:
        return f"{statistics.fmean(diff):+.2f}"
    iv = mean_t_interval(diff)
    return f"{iv.estimate:+.2f} [{iv.low:+.2f}, {iv.high:+.2f}]"


def _gain_text(t: str, h1: dict) -> str:
    """The paired power gain of a product test over its base, if it has one."""
    base = {"G_topo": None, "SA*": "SA", "G_emb*": "G_emb", "MMD-D*": "MMD-D", "SAMMD*": "SAMMD"}
    ref = next((b for prefix, b in base.items() if t.startswith(prefix) and "*" in t), None)
    if ref is None or ref not in h1:
        return ""
    return f"{_paired_text(h1[t], h1[ref])} ({ref})"


def table_detection(p: Pooled) -> str:
    return table(
        ["test", "type-I error (H0)", "power (H1, q = 0.5)", "power gain [95%] over"],
        [[t, f"{p.type_i[t]:.3f}", f"{p.power[t]:.3f}", _gain_text(t, p.h1)] for t in p.names],
        caption=f"Detection (all seeds pooled, T = {p.T} per hypothesis):",
    )


def table_controls(p: Pooled) -> str:
    """Each topological test next to the same test with a control feature in its place."""
    rows = []
    for base in ("", "G_emb*", "SA*"):
        cells = [
            f"{p.power[t]:.3f} ({statistics.fmean(p.h0[t]):.3f})"
            for t in (f"{base}G_topo", *(f"{base}G_{c}" for c in CONTROLS))
        ]
        best = best_control(base, p.power)
        gain = f"{_paired_text(p.h1[f'{base}G_topo'], p.h1[best])} ({best})"
        rows.append([base or "alone", *cells, gain])
    return table(
        ["test family", "G_topo: power (type-I)", "G_knn", "G_lid", "topo - best control [95%]"],
        rows,
        caption=f"Topology against the non-topological controls (same trials, same chunks; "
        f"T = {p.T} per hypothesis; paired by trial):",
    )


def table_per_seed(runs: list[dict], best: str) -> str:
    """The power differences of checks 2b-2d seed by seed: the spread between trained models
    that the pooled trials of one check do not show."""
    pairs = (("SA*G_topo", "SA"), ("G_emb*G_topo", "G_emb"), ("SA*G_topo", best))
    rows = []
    for x in runs:
        h1 = x["det"]["H1"]
        cells = [f"{statistics.fmean(h1[a]) - statistics.fmean(h1[b]):+.2f}" for a, b in pairs]
        rows.append([x["seed"], *cells])
    return table(
        ["seed", *(f"{a} - {b}" for a, b in pairs)],
        rows,
        caption="Power differences of 2b, 2c and 2d per seed:",
    )


def table_curve(x: dict, fractions) -> str:
    c = x["curve"]
    rows = [
        [
            f"{p:g}",
            f"{c['tp']['mean'][i]:.2f}",
            f"{c['mk']['mean'][i]:.1f}",
            f"{c['pers0_x']['mean'][i]:.2f}",
            f"{c['pers1_x']['mean'][i]:.2f}",
            f"{c['pers0_y']['mean'][i]:.2f}",
        ]
        for i, p in enumerate(fractions)
    ]
    return table(
        ["fraction", "TP", "MK", "Pers_0(X)", "Pers_1(X)", "Pers_0(Y)"],
        rows,
        caption=f"Signature curve (seed {x['seed']}, batch means):",
    )


def table_sweep(rows: list[dict], s: Setup, seeds: list[int]) -> str:
    """Power of the checked tests, the two topological gains and the gain over the best control
    per (eps, q), report only."""
    lines = []
    for row in rows:
        h0, h1 = row["H0"], row["H1"]
        pw = {t: statistics.fmean(v) for t, v in h1.items()}
        best = best_control("SA*", pw)
        worst = max(statistics.fmean(v) for v in h0.values())
        lines.append(
            [
                f"{row['eps']:g}",
                f"{row['q']:g}",
                f"{pw['G_raw']:.2f}",
                f"{pw['SA']:.2f}",
                f"{pw['SA*G_topo']:.2f}",
                _paired_text(h1["SA*G_topo"], h1["SA"]),
                f"{pw['G_emb']:.2f}",
                f"{pw['G_emb*G_topo']:.2f}",
                _paired_text(h1["G_emb*G_topo"], h1["G_emb"]),
                f"{pw[best]:.2f} ({best})",
                _paired_text(h1["SA*G_topo"], h1[best]),
                f"{worst:.3f}",
            ]
        )
    columns = ["eps", "q", "G_raw", "SA", "SA*G_topo", "gain over SA [95%]", "G_emb"]
    columns += ["G_emb*G_topo", "gain over G_emb [95%]", "SA*best control"]
    columns += ["SA*G_topo - it [95%]", "worst type-I"]
    return table(
        columns,
        lines,
        caption=f"Sweep (report only; {s.sweep_trials} trials per hypothesis and seed, seeds "
        f"{seeds}; powers pooled over seeds):",
    )


def setup_text(s: Setup, runs: list[dict], seeds: list[int]) -> str:
    x0 = runs[0]
    text = (
        "sklearn digits (/16, stratified 60/40 split, 1078/719), TinyTwoTower d = 32 (image MLP "
        f"64-256-256-32, text Linear(384, 32) on {x0['text_model']} prompt embeddings), 40 "
        f"epochs Adam 1e-3 batch 64; PGD-Linf eps = {EPS}, 20 steps, step eps/4, random start. "
        f"Claim 1: batches of {N_BATCH}, {s.batches} per fraction, predicted-class pairing, dims "
        f"(0, 1), alpha 1, sigma 0.1. Claim 2: n = {N_TEST} per sample, q = {Q_ADV}, {s.trials} "
        f"trials under H0 and H1 per seed, {N_PERM} permutations, alpha 0.05, median bandwidths "
        "on the pooled sample, topological features by attribution (TP, chunks of 50) on the "
        "pooled sample; controls: the same tests with 1-NN and mean 3-NN distances (G_knn) or "
        "the MLE local intrinsic dimension with k = 10 (G_lid) of the embeddings, computed in "
        f"the same chunks, in place of the topological features; seeds {seeds}. Units: a seed "
        "for 1a/1b, a trial (a fresh draw of 2n images and chunks) for 2a-2d, each counted "
        "once, pooled over the seeds."
    )
    if s.full:
        text += (
            f" Full mode: trials draw from the {x0['n_images'] - 2 * N_TRAIN} test images left "
            f"after a {N_TRAIN} + {N_TRAIN} training split for the trained kernels (MMD-D: "
            "Adam 5e-5, SAMMD: Adam 2e-4, 1000 full-batch epochs each, the papers' settings)."
        )
    return text


# -- the run --------------------------------------------------------------------------------------
@reproduction("topo_detect", seeds=SEEDS, smoke_seeds=2)
def run(r: Run) -> ReproResult:
    s = setup(r)
    runs = r.over_seeds(lambda seed: measure_seed(seed, s), label="model, attack, curves, tests")
    checks = evaluate(runs, s)
    p = pool(runs)
    tables = [
        table_detection(p),
        table_controls(p),
        table_per_seed(runs, p.best),
        table_curve(runs[0], s.fractions),
    ]
    if s.full:  # report only: (eps, q) sweep, a fresh model and attack per seed and eps
        shown = (*TESTS, *CONTROL_TESTS)
        rows = sweep(r.seeds, s.sweep_eps, s.sweep_q, s.sweep_trials, s.epochs, shown)
        tables.append(table_sweep(rows, s, r.seeds))
    r.figure(plot_signature_curve(runs, s.fractions), "signature_vs_fraction.png")
    power_fig = plot_power(p.type_i, p.power, p.bound, p.names, TESTS, CONTROL_TESTS)
    r.figure(power_fig, "power_table.png")
    return r.result(
        claim=CLAIM,
        checks=checks,
        metrics=metrics(runs, s),
        criteria=CRITERIA,
        key_check=POWER_SA.name,
        setup=setup_text(s, runs, r.seeds),
        tables=tables,
        power=power_summary(checks, units="trials"),
    )
