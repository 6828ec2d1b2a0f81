"""Contrastive-learning reproduction: ``icml25 repro contrastive``.

Part A (theory sandbox): free embeddings reach the predicted optima (Thm 5.1, 5.3/Ex. 5.4, 5.5)
and never beat the alignment bound (Thm 5.2). Part B: SimCLR on scikit-learn digits with and
without VRNS (lambda = 30): VRNS lowers the variance of negative similarities and raises
linear-probe accuracy at small batch; full mode sweeps temperature x batch.

The module reads: constants and the pre-registered criteria -> setup (Part A, the digits) ->
per-seed measurement (:func:`measure_seed`, every SimCLR run of one seed) -> checks -> figures.
"""

from __future__ import annotations

import statistics
import time

import torch

from icml25.contrastive import theory
from icml25.contrastive.augment import digits_augment
from icml25.contrastive.losses import (
    ContrastiveLoss,
    dcl_loss,
    dhel_loss,
    independent_additive_loss,
    infonce_loss,
    nt_xent_loss,
)
from icml25.contrastive.stats import embed_two_views, similarity_stats
from icml25.contrastive.train import DigitsSimCLR, linear_probe, train_simclr
from icml25.report import Check, Criterion, Metric, ReproResult, Run, pyplot, reproduction
from icml25.report.stats import detectable_effect

CLAIM = (
    "Contrastive optima follow the paper's closed forms, and in small-batch training the VRNS "
    "auxiliary loss lowers the variance of negative-pair similarities and improves linear-probe "
    "accuracy."
)

# -- constants ---------------------------------------------------------------------------------
#: Seeds (quick, full), pre-registered. Quick: 8 seeds x 2 arms x ~8 s = ~2.2 min with Part A.
#: Sized so the paired t-interval of the Q2 gain detects the paper's ~1 point with 80% power at
#: the per-seed spread measured before (sd of the gain 0.84 points over 3 seeds ->
#: detectable_effect(0.84 / 8**0.5, 8) = 0.97 points).
SEEDS = (8, 8)
STEPS = 600  # SimCLR steps per run (quick and full)
LAMBDA = 30.0  # VRNS weight (paper)
Q_CELL = (0.2, 16)  # (temperature, batch) of the quick checks Q1 / Q2
GRID_T = (0.2, 0.5, 1.0)  # full mode
GRID_B = (8, 16, 32, 128)
N_FREE = 8  # Part A: free embeddings, n = 8, d = 16
ETF = theory.etf_threshold(N_FREE)  # -1/7
VAR_LO, VAR_HI = theory.minibatch_variance_bounds(N_FREE, 4)  # Thm 5.5, m = 4

# -- criteria (pre-registered, before any number) ------------------------------------------
# Part A is deterministic optimisation and exact math: each rule of the previous version is an
# exact check of the same quantity with the same tolerance.
_A = "free unit embeddings, n = 8, d = 16, float64"
A1_POS = Criterion(
    "A1 full batch: min positive similarity (InfoNCE, SimCLR, DCL, DHEL)",
    "exact",
    above=0.999,
    description=f"Thm 5.1: the optimum aligns every positive pair; worst of the four losses at t = 0.5; {_A}",
)
A1_NEG = Criterion(
    "A1 full batch: max |s_ij + 1/7| (InfoNCE, SimCLR, DCL, DHEL)",
    "exact",
    below=1e-3,
    description="Thm 5.1: every cross-view negative at the ETF value -1/(n-1); worst entry of the four losses",
)
A2_SEP = Criterion(
    "A2 SigLIP t=5, b_paper=2: distance to the predicted optimum",
    "exact",
    below=2e-3,
    description="Thm 5.3 / Ex. 5.4: max of |mean pos - x*| and |mean neg - neg*| (predicted 0.79373, -0.23126)",
)
A2_MIS = Criterion(
    "A2 SigLIP t=5, b_paper=2: mean positive similarity (misaligned)",
    "exact",
    below=0.99,
    description="excessive separation makes perfect alignment impossible",
)
A2_EQ10 = Criterion(
    "A2 Eq. 10 decides both SigLIP settings as predicted",
    "exact",
    above=2,
    description="settings of 2 where Eq. 10 says what we expect: true at (5, 2), false at (10, 6)",
)
A2_ETF_POS = Criterion(
    "A2 ETF restored (within-view fix at t=5, b=2; t=10, b=6): min mean positive similarity",
    "exact",
    above=0.999,
    description="worst of the two settings",
)
A2_ETF_NEG = Criterion(
    "A2 ETF restored (within-view fix at t=5, b=2; t=10, b=6): max |mean neg + 1/7|",
    "exact",
    below=1e-3,
    description="worst of the two settings",
)
A3_BOUND = Criterion(
    "A3 Thm 5.2: max(gap - n/(n-1))",
    "exact",
    below=1e-9,
    description="over 2000 random configurations (n in [2, 11], d in [1, 15]) and one Adam maximisation",
)
A3_IDENTITY = Criterion(
    "A3 Thm 5.2: centred identity error",
    "exact",
    below=1e-10,
    description="max |gap - centred form| over the random configurations",
)
A4_POS = Criterion(
    "A4 fixed batches of 4: min positive similarity",
    "exact",
    above=0.999,
    description="Thm 5.5, InfoNCE and SimCLR, 3 optimisation seeds each; worst of 6 runs",
)
A4_MEAN = Criterion(
    "A4 fixed batches of 4: max |mean neg + 1/7|",
    "exact",
    below=1e-3,
    description="Thm 5.5: E[s_neg] = -1/(n-1) over all n(n-1) negatives; worst of 6 runs",
)
A4_VAR = Criterion(
    "A4 fixed batches of 4: negative-similarity variance within Thm 5.5's bounds",
    "exact",
    above=VAR_LO - 1e-9,
    below=VAR_HI + 1e-9,
    description=f"population variance over the n(n-1) negatives, bounds [{VAR_LO:.5f}, {VAR_HI:.5f}]; "
    "applied to the smallest and the largest of 6 runs",
)
# Part B: one value per seed and arm, the arms trained from the same seed -> paired designs.
Q1 = Criterion(
    "Q1 VRNS lowers negative-similarity variance (b=16, t=0.2)",
    "paired",
    above=0.0,
    paper_effect=0.0641,
    description="variance of cross-view negative similarities, SimCLR minus SimCLR+VRNS, paired by "
    "seed; paper: Table 1, CIFAR-100 batch 32, 0.1649 - 0.1008",
)
Q2 = Criterion(
    "Q2 VRNS raises linear-probe accuracy (b=16, t=0.2)",
    "paired",
    above=0.0,
    unit="pt",
    paper_effect=1.0,
    description="test accuracy on 360 digits, SimCLR+VRNS minus SimCLR, points, paired by seed; "
    "paper: about +1 point on CIFAR-100 at t = 0.07-0.5 (Fig. 3, read off the plot)",
)
F1 = Criterion(
    "F1 VRNS lowers negative-similarity variance",
    "paired",
    above=0.0,
    paper_effect=0.0641,
    description="per cell of the grid, SimCLR minus SimCLR+VRNS, paired by seed (Table 1, batch 32)",
)
F2 = Criterion(
    "F2 VRNS raises accuracy averaged over temperatures",
    "paired",
    above=0.0,
    unit="pt",
    paper_effect=1.0,
    description="per batch <= 16: per-seed mean accuracy over the three temperatures, SimCLR+VRNS "
    "minus SimCLR, points",
)
F3 = Criterion(
    "F3 SimCLR negative-similarity variance falls with batch size at equal samples seen",
    "paired",
    above=0.0,
    paper_effect=0.0144,
    description="per temperature and consecutive batch pair, both batch sizes trained on the same "
    f"{STEPS * Q_CELL[1]} samples ({STEPS} steps of batch {Q_CELL[1]}; batch b runs "
    f"{STEPS * Q_CELL[1]} / b steps), as Table 1 trains every batch size for the same epochs: "
    "variance at the smaller batch minus at the larger, paired by seed; paper: Table 1, batch "
    "32 -> 64",
)
CRITERIA = [
    A1_POS,
    A1_NEG,
    A2_SEP,
    A2_MIS,
    A2_EQ10,
    A2_ETF_POS,
    A2_ETF_NEG,
    A3_BOUND,
    A3_IDENTITY,
    A4_POS,
    A4_MEAN,
    A4_VAR,
    Q1,
    Q2,
    F1,
    F2,
    F3,
]


# -- setup: Part A (deterministic) and the digits ----------------------------------------------
def part_a(steps: int, d: int = 16) -> tuple[dict, list[str]]:
    """The theory sandbox of docs/contrastive.md, part A; returns (measured quantities, table rows)."""
    n = N_FREE
    thr = ETF
    rows = [
        "| setting | pos mean | neg mean | predicted | within tolerance |",
        "|---|---|---|---|---|",
    ]
    off = ~torch.eye(n, dtype=torch.bool)
    m: dict = {"a1_pos_min": 1.0, "a1_neg_dev": 0.0}
    for name, fn in (
        ("InfoNCE", infonce_loss),
        ("SimCLR", nt_xent_loss),
        ("DCL", dcl_loss),
        ("DHEL", dhel_loss),
    ):
        U, V = theory.optimize_embeddings(
            lambda a, b, fn=fn: fn(a, b, 0.5, validate=False), n, d, steps=steps
        )
        S = U @ V.T
        pos_min, neg_dev = float(S.diagonal().min()), float((S[off] - thr).abs().max())
        m["a1_pos_min"] = min(m["a1_pos_min"], pos_min)
        m["a1_neg_dev"] = max(m["a1_neg_dev"], neg_dev)
        good = pos_min >= 0.999 and neg_dev <= 1e-3
        rows.append(
            f"| {name} t=0.5 | {float(S.diagonal().mean()):.5f} | {float(S[off].mean()):.5f} | 1, {thr:.5f} | {good} |"
        )
    eq10_right, etf_pos, etf_dev = 0, 1.0, 0.0
    for t, b, expect_sep in ((5.0, 2.0, True), (10.0, 6.0, False)):
        phi, psi = theory.siglip_phi_psi(n, t, b)
        cond = theory.siglip_excessive_separation(n, t, b)
        eq10_right += int(cond == expect_sep)
        pred = theory.predicted_ind_add_optimum(phi, psi, n)
        U, V = theory.optimize_embeddings(
            lambda a, c, phi=phi, psi=psi: independent_additive_loss(
                a, c, phi, psi, 1, 0, validate=False
            ),
            n,
            d,
            steps=steps,
        )
        S = U @ V.T
        pos, neg = float(S.diagonal().mean()), float(S[off].mean())
        if expect_sep:
            m["a2_sep_dist"] = max(abs(pos - pred[0]), abs(neg - pred[1]))
            m["a2_sep_pos"] = pos
            good = cond and m["a2_sep_dist"] <= 2e-3 and pos < 0.99
        else:
            etf_pos, etf_dev = min(etf_pos, pos), max(etf_dev, abs(neg - thr))
            good = (not cond) and pos >= 0.999 and abs(neg - thr) <= 1e-3
        rows.append(
            f"| SigLIP t={t:g} b_paper={b:g} (Eq. 10 {cond}) | {pos:.5f} | {neg:.5f} | "
            f"{pred[0]:.5f}, {pred[1]:.5f} | {good} |"
        )
        if expect_sep:  # the within-view fix (c2 = 1) restores alignment
            U, V = theory.optimize_embeddings(
                lambda a, c, phi=phi, psi=psi: independent_additive_loss(
                    a, c, phi, psi, 1, 1, validate=False
                ),
                n,
                d,
                steps=steps,
            )
            S = U @ V.T
            pos, neg = float(S.diagonal().mean()), float(S[off].mean())
            etf_pos, etf_dev = min(etf_pos, pos), max(etf_dev, abs(neg - thr))
            good = pos >= 0.999 and abs(neg - thr) <= 1e-3
            rows.append(
                f"| SigLIP + within-view t={t:g} b_paper={b:g} | {pos:.5f} | {neg:.5f} | 1, {thr:.5f} | {good} |"
            )
    m.update(a2_eq10_right=eq10_right, a2_etf_pos_min=etf_pos, a2_etf_neg_dev=etf_dev)
    g = torch.Generator().manual_seed(0)
    worst, ident = -1e9, 0.0
    for _ in range(2000):
        nn_ = int(torch.randint(2, 12, (1,), generator=g))
        dd = int(torch.randint(1, 16, (1,), generator=g))
        U = torch.nn.functional.normalize(
            torch.randn(nn_, dd, generator=g, dtype=torch.float64), dim=-1
        )
        V = torch.nn.functional.normalize(
            torch.randn(nn_, dd, generator=g, dtype=torch.float64), dim=-1
        )
        gap, centred = theory.alignment_gap(U, V)
        worst = max(worst, gap - nn_ / (nn_ - 1))
        ident = max(ident, abs(gap - centred))
    U, V = theory.optimize_embeddings(
        lambda a, b: (
            -((a * b).sum(-1).mean() - (a @ b.T)[~torch.eye(a.shape[0], dtype=torch.bool)].mean())
        ),
        6,
        8,
        steps=max(200, steps // 4),
    )
    gap, _ = theory.alignment_gap(U, V)
    worst = max(worst, gap - 6 / 5)
    m.update(a3_gap=worst, a3_identity=ident)
    rows.append(
        f"| Thm 5.2: max(gap - n/(n-1)) over 2000 random + 1 maximised | {worst:.2e} | identity err {ident:.1e} | <= 1e-9 | {worst <= 1e-9 and ident <= 1e-10} |"
    )
    pos_min, mean_dev, variances = 1.0, 0.0, []
    for name, fn in (("InfoNCE", infonce_loss), ("SimCLR", nt_xent_loss)):
        for seed in range(3):
            U, V = theory.optimize_embeddings(
                lambda a, b, fn=fn: fn(a, b, 0.5, validate=False),
                n,
                d,
                steps=steps,
                seed=seed,
                partition=4,
            )
            S = U @ V.T
            neg = S[off]
            var = float(neg.var(unbiased=False))
            pos_min = min(pos_min, float(S.diagonal().min()))
            mean_dev = max(mean_dev, abs(float(neg.mean()) - thr))
            variances.append(var)
            good = (
                float(S.diagonal().min()) >= 0.999
                and abs(float(neg.mean()) - thr) <= 1e-3
                and VAR_LO - 1e-9 <= var <= VAR_HI + 1e-9
            )
            rows.append(
                f"| Thm 5.5 {name} m=4 seed {seed} | {float(S.diagonal().mean()):.5f} | "
                f"{float(neg.mean()):.5f} (var {var:.4f}) | var in [{VAR_LO:.5f}, {VAR_HI:.5f}] | {good} |"
            )
    m.update(a4_pos_min=pos_min, a4_mean_dev=mean_dev, a4_variances=variances)
    return m, rows


def part_a_checks(m: dict) -> list[Check]:
    """Part A's exact checks from :func:`part_a`'s measurements."""
    return [
        A1_POS.check(m["a1_pos_min"]),
        A1_NEG.check(m["a1_neg_dev"]),
        A2_SEP.check(m["a2_sep_dist"]),
        A2_MIS.check(m["a2_sep_pos"]),
        A2_EQ10.check(m["a2_eq10_right"]),
        A2_ETF_POS.check(m["a2_etf_pos_min"]),
        A2_ETF_NEG.check(m["a2_etf_neg_dev"]),
        A3_BOUND.check(m["a3_gap"]),
        A3_IDENTITY.check(m["a3_identity"]),
        A4_POS.check(m["a4_pos_min"]),
        A4_MEAN.check(m["a4_mean_dev"]),
        A4_VAR.check(min(m["a4_variances"])).renamed(f"{A4_VAR.name} (smallest of 6)"),
        A4_VAR.check(max(m["a4_variances"])).renamed(f"{A4_VAR.name} (largest of 6)"),
    ]


def load_digits_split():
    """Our split: stratified, test_size = 0.2, random_state = 0 (1437 train / 360 test),
    images (N, 1, 8, 8) in [0, 1]; the shared loader of :mod:`icml25.toy`."""
    from icml25.toy import digits_split

    return digits_split(0.2, seed=0, shape="image")


# -- per-seed measurement ----------------------------------------------------------------------
def run_simclr(batch: int, temperature: float, vrns: float, seed: int, steps: int, data) -> dict:
    """One SimCLR run on digits; returns probe accuracy and negative-similarity statistics."""
    xtr, ytr, xte, yte = data
    torch.manual_seed(seed)
    model = DigitsSimCLR()
    loss = ContrastiveLoss("simclr", temperature, vrns_weight=vrns, n_train=len(xtr))
    t0 = time.perf_counter()
    train_simclr(model, xtr, digits_augment, loss=loss, batch_size=batch, steps=steps, seed=seed)
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        ftr, fte = model(xtr)[0], model(xte)[0]
    acc = linear_probe(ftr, ytr, fte, yte)
    U, V = embed_two_views(model, xtr, digits_augment, torch.Generator().manual_seed(123))
    st = similarity_stats(U, V)
    S = torch.nn.functional.normalize(U, dim=-1) @ torch.nn.functional.normalize(V, dim=-1).T
    neg = S[~torch.eye(len(S), dtype=torch.bool)]
    return {
        "acc": acc,
        "neg_var": st.neg_var,
        "neg_mean": st.neg_mean,
        "pos_mean": st.pos_mean,
        "seconds": seconds,
        "neg_sample": neg[
            torch.randperm(neg.numel(), generator=torch.Generator().manual_seed(0))[:20000]
        ],
    }


def matched_steps(batch: int, steps: int) -> int:
    """Steps that give batch ``batch`` the samples of ``steps`` steps at the quick cell's batch
    (F3 compares batch sizes at equal samples seen, as the paper's equal-epoch Table 1 does)."""
    samples = steps * Q_CELL[1]
    if samples % batch:
        raise ValueError(f"batch {batch} does not divide the F3 sample budget {samples}")
    return samples // batch


def measure_seed(seed: int, cells, steps: int, data, matched: bool = False) -> dict:
    """Every run of one seed: ``{(t, batch, lambda): run_simclr(...)}`` for both arms of every
    (temperature, batch) cell; with ``matched``, also SimCLR at equal samples seen,
    ``{(t, batch, "matched"): ...}`` (the batch-16 cell is its own equal-samples run)."""
    out = {
        (t, b, lam): run_simclr(b, t, lam, seed, steps, data)
        for t, b in cells
        for lam in (0.0, LAMBDA)
    }
    if matched:
        for t, b in cells:
            out[(t, b, "matched")] = (
                out[(t, b, 0.0)]
                if b == Q_CELL[1]
                else run_simclr(b, t, 0.0, seed, matched_steps(b, steps), data)
            )
    return out


# -- checks ------------------------------------------------------------------------------------
def quick_checks(base: list[dict], vr: list[dict]) -> list[Check]:
    """Q1 and Q2 from the per-seed runs of the two arms at the quick cell (same seeds, same
    order): ``base`` is SimCLR, ``vr`` SimCLR + VRNS."""
    return [
        Q1.check([a["neg_var"] for a in base], [v["neg_var"] for v in vr]),
        Q2.check([100 * v["acc"] for v in vr], [100 * a["acc"] for a in base]),
    ]


def full_checks(runs: dict, grid_t, grid_b) -> list[Check]:
    """F1 per cell, F2 per batch <= 16, F3 per temperature and consecutive batch pair."""
    checks = []
    for t in grid_t:
        for b in grid_b:
            base, vr = runs[(t, b, 0.0)], runs[(t, b, LAMBDA)]
            checks.append(
                F1.check([a["neg_var"] for a in base], [v["neg_var"] for v in vr]).renamed(
                    f"{F1.name} (t={t:g}, b={b})"
                )
            )
    for b in (b for b in grid_b if b <= 16):

        def over_t(lam: float, b: int = b) -> list[float]:
            per_t = [[100 * r["acc"] for r in runs[(t, b, lam)]] for t in grid_t]
            return [statistics.fmean(vals) for vals in zip(*per_t)]

        checks.append(F2.check(over_t(LAMBDA), over_t(0.0)).renamed(f"{F2.name} (b={b})"))
    for t in grid_t:
        for b1, b2 in zip(grid_b, grid_b[1:]):
            checks.append(
                F3.check(
                    [r["neg_var"] for r in runs[(t, b1, "matched")]],
                    [r["neg_var"] for r in runs[(t, b2, "matched")]],
                ).renamed(f"{F3.name} (t={t:g}, b={b1}->{b2})")
            )
    return checks


# -- the reproduction --------------------------------------------------------------------------
@reproduction("contrastive", seeds=SEEDS, smoke_seeds=2)
def run(r: Run) -> ReproResult:
    """Part A (theory sandbox) and Part B (SimCLR on digits with and without VRNS)."""
    # setup
    a_steps = r.size(smoke=150, quick=2000, full=4000)
    steps = r.size(smoke=30, quick=STEPS, full=STEPS)
    part_a_values, rows = part_a(a_steps)
    data = load_digits_split()
    delta = theory.etf_threshold(len(data[0]))
    if r.quick:
        grid_t, grid_b = [Q_CELL[0]], [Q_CELL[1]]
    else:  # a smoke-sized full run keeps a small grid that still exercises F1-F3
        grid_t, grid_b = r.size(smoke=([0.2, 1.0], [8, 16]), quick=None, full=(GRID_T, GRID_B))
        grid_t, grid_b = list(grid_t), list(grid_b)
    cells = [(t, b) for t in grid_t for b in grid_b]

    # per-seed measurement
    per_seed = r.over_seeds(
        lambda s: measure_seed(s, cells, steps, data, matched=not r.quick), label="SimCLR runs"
    )
    runs = {key: [m[key] for m in per_seed] for key in per_seed[0]}
    base, vr = runs[(*Q_CELL, 0.0)], runs[(*Q_CELL, LAMBDA)]

    # checks
    checks = [*part_a_checks(part_a_values), *quick_checks(base, vr)]
    if not r.quick:
        checks += full_checks(runs, grid_t, grid_b)
    gains = [100 * (v["acc"] - a["acc"]) for a, v in zip(base, vr)]
    metrics = [
        Metric("Q1 neg variance SimCLR", [x["neg_var"] for x in base]),
        Metric("Q1 neg variance SimCLR+VRNS", [x["neg_var"] for x in vr]),
        Metric(
            "Q1 seeds where VRNS lowered the variance",
            sum(v["neg_var"] < a["neg_var"] for a, v in zip(base, vr)),
            description=f"of {len(base)} seeds",
        ),
        Metric("Q2 probe accuracy SimCLR", [x["acc"] for x in base]),
        Metric("Q2 probe accuracy SimCLR+VRNS", [x["acc"] for x in vr]),
        Metric("Q2 accuracy gain (points)", gains, unit="pt", description="paired by seed"),
        Metric(
            "Q2 seeds where VRNS raised accuracy",
            sum(g > 0 for g in gains),
            description=f"of {len(gains)} seeds",
        ),
        Metric("neg mean SimCLR", [x["neg_mean"] for x in base]),
        Metric(
            "neg mean SimCLR+VRNS",
            [x["neg_mean"] for x in vr],
            description=f"VRNS pulls towards delta = {delta:.5f}",
        ),
        Metric(
            "training time +VRNS / base",
            [v["seconds"] / a["seconds"] for a, v in zip(base, vr)],
            description="per seed; whole loop incl. augmentation",
        ),
    ]
    tables = ["Part A, free embeddings (n = 8, d = 16):\n\n" + "\n".join(rows)]
    if not r.quick:
        tables.append(_grid_table(runs, grid_t, grid_b, len(r.seeds), steps))

    # figures
    r.figure(_plot_theory(rows), "theory_similarities.png")
    r.figure(_plot_hist(base, vr, delta), "neg_sim_hist.png")
    r.figure(_plot_grid(runs, grid_t, grid_b), "acc_vs_temperature.png")

    q2 = checks[[c.name for c in checks].index(Q2.name)]
    return r.result(
        claim=CLAIM,
        checks=checks,
        metrics=metrics,
        criteria=CRITERIA,
        key_check=Q2.name,
        setup=(
            f"Part A: free unit embeddings (n=8, d=16), Adam 0.05, cosine, {a_steps} steps, float64. "
            f"Part B: SimCLR (NT-Xent) on sklearn digits ({len(data[0])} train / {len(data[2])} test, "
            "icml25.toy.digits_split), "
            f"MLP encoder, Adam 1e-3, {steps} steps, temperatures {grid_t}, batches {grid_b}, "
            f"lambda in {{0, {LAMBDA:g}}}, delta = -1/(n_train-1), seeds {r.seeds} (both arms of a "
            "seed share the initialisation and the augmentation generator); logistic-regression "
            "probe on L2-normalised backbone features."
        ),
        tables=tables,
        notes=_notes(checks),
        power=_power(q2),
        deviations=[
            "sklearn 8x8 digits with an MLP and tensor augmentations instead of CIFAR/ImageNet "
            "with ResNets and image augmentations; budgets in steps, not epochs (docs/contrastive.md).",
            "issue 19: F3 compares batch sizes at equal samples seen (the batch-16 budget of "
            f"{STEPS} steps, {STEPS * Q_CELL[1]} samples; batch 8 runs {2 * STEPS} steps, 32 runs "
            f"{STEPS // 2}, 128 runs {STEPS * Q_CELL[1] // 128}), as the paper's Table 1 trains "
            "every batch size for the same epochs; at equal steps a smaller batch also sees fewer "
            "samples, which confounds the two. The equal-steps variances stay in the grid table "
            "without a verdict. The noise margin is the paired 95% interval over the seeds.",
            "issue 17: Q1 ('lower for every seed') is now a paired t-interval of the per-seed "
            "variance difference SimCLR - SimCLR+VRNS > 0; the count of seeds is a metric.",
            "issue 17: Q2 ('mean accuracy higher') is now a paired t-interval of the per-seed "
            "accuracy gain in points > 0: held only when the whole 95% interval is above 0.",
            "issue 17: seeds 3 -> 8 in quick and in full mode, sized from the earlier per-seed "
            "spread of the Q2 gain (sd 0.84 points over 3 seeds) so that a gain of the paper's "
            "size (about 1 point) is detected with 80% power; the full grid runs the same 8 seeds "
            "per cell (192 runs instead of 72).",
            "issue 17: F1 ('every cell') is one paired test per cell; F2 (temperature-averaged "
            "VRNS accuracy >= SimCLR for batch <= 16) is a paired test of the per-seed "
            "temperature-averaged gain > 0 per batch (strict: the old rule allowed equality); F3 "
            "(mean variance strictly decreasing in batch) is a paired test per temperature and "
            "consecutive batch pair, paired by seed (the same initialisation seed).",
            "issue 17: Part A's pass/fail rules are exact checks of the same quantities with the "
            "same tolerances; A2's 's_pos < 0.99' is compared inclusively (<=), as every exact "
            "check is.",
        ],
    )


def _notes(checks: list[Check]) -> str:
    bad = [c.name for c in checks if not c.held]
    if not bad:
        return ""
    return "Checks that did not hold or were inconclusive: " + "; ".join(bad) + "."


def _power(q2: Check) -> str:
    pe = Q2.paper_effect
    det = q2.detectable
    planned = detectable_effect(0.84 / SEEDS[0] ** 0.5, SEEDS[0])
    text = (
        f"Q2 (the key check) was sized for the paper's gain of about {pe:g} point: {SEEDS[0]} seeds "
        f"detect {planned:.2f} points with 80% power at the earlier per-seed sd of 0.84 points. "
    )
    if det is not None:
        verdict = "enough" if det <= pe else "not enough: this run is underpowered for it"
        text += (
            f"With this run's spread ({q2.n} seeds) the detectable gain is {det:.2f} points, "
            f"{verdict}. "
        )
    return text + (
        "Smaller paper effects, e.g. ImageNet-100's +0.14 points at t = 0.2 (Table 4), are not "
        "detectable at this size."
    )


def _grid_table(runs: dict, grid_t, grid_b, n_seeds: int, steps: int) -> str:
    head = (
        "| t | batch | acc SimCLR | acc +VRNS | diff (pt) | var SimCLR | var +VRNS | "
        "steps at equal samples | var SimCLR, equal samples |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for t_ in grid_t:
        for b_ in grid_b:
            a_, v_ = runs[(t_, b_, 0.0)], runs[(t_, b_, LAMBDA)]
            ma = statistics.fmean(x["acc"] for x in a_)
            mv = statistics.fmean(x["acc"] for x in v_)
            lines.append(
                f"| {t_} | {b_} | {100 * ma:.2f} | {100 * mv:.2f} | {100 * (mv - ma):+.2f} | "
                f"{statistics.fmean(x['neg_var'] for x in a_):.4f} | "
                f"{statistics.fmean(x['neg_var'] for x in v_):.4f} | "
                f"{matched_steps(b_, steps)} | "
                f"{statistics.fmean(x['neg_var'] for x in runs[(t_, b_, 'matched')]):.4f} |"
            )
    return (
        f"Full grid ({n_seeds} seeds each, {steps} steps; the last two columns: SimCLR trained on "
        f"the same {steps * Q_CELL[1]} samples at every batch size, which F3 compares):\n\n"
        + "\n".join(lines)
    )


# -- figures -----------------------------------------------------------------------------------
def _plot_theory(rows: list[str]):
    plt = pyplot()
    labels, pos, neg = [], [], []
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        try:
            p_, n_ = float(cells[1]), float(cells[2].split()[0])
        except ValueError:
            continue
        labels.append(cells[0][:28])
        pos.append(p_)
        neg.append(n_)
    fig, ax = plt.subplots(figsize=(9, 4))
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], pos, 0.4, label="mean positive similarity")
    ax.bar([x + 0.2 for x in xs], neg, 0.4, label="mean negative similarity")
    ax.axhline(-1 / 7, color="k", ls=":", lw=0.8, label="-1/(n-1)")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=6)
    ax.legend(fontsize=7)
    ax.set_title("free embeddings reach the predicted optima (n = 8)")
    return fig


def _plot_hist(base: list[dict], vr: list[dict], delta: float):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.hist(base[0]["neg_sample"].numpy(), bins=80, alpha=0.6, density=True, label="SimCLR")
    ax.hist(vr[0]["neg_sample"].numpy(), bins=80, alpha=0.6, density=True, label="SimCLR + VRNS")
    ax.axvline(delta, color="k", ls=":", label="-1/(n-1)")
    ax.set_xlabel("cross-view negative similarity")
    ax.legend()
    return fig


def _plot_grid(runs: dict, grid_t, grid_b):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for bb in grid_b:
        for lam, style in ((0.0, "--"), (LAMBDA, "-")):
            a.plot(
                grid_t,
                [statistics.fmean(x["acc"] for x in runs[(t, bb, lam)]) for t in grid_t],
                style,
                marker="o",
                label=f"b={bb} {'+VRNS' if lam else 'SimCLR'}",
            )
    a.set_xlabel("temperature")
    a.set_ylabel("probe accuracy")
    a.legend(fontsize=6)
    for t in grid_t:
        for lam, style in ((0.0, "--"), (LAMBDA, "-")):
            b.plot(
                grid_b,
                [statistics.fmean(x["neg_var"] for x in runs[(t, bb, lam)]) for bb in grid_b],
                style,
                marker="o",
                label=f"t={t} {'+VRNS' if lam else 'SimCLR'}",
            )
    b.set_xscale("log", base=2)
    b.set_xlabel("batch size")
    b.set_ylabel("negative-similarity variance")
    b.legend(fontsize=6)
    fig.suptitle("SimCLR on digits, with and without VRNS")
    return fig
