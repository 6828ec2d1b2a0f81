"""Topological signatures of adversaries, reproduced offline (docs/topo_detect.md, "Reproduction").

Model: a two-tower alignment model on scikit-learn digits (image MLP, text projection of the real
all-MiniLM-L6-v2 embeddings of "a handwritten digit {zero..nine}", CLIP's zero-shot objective),
attacked by PGD-L-inf. Claim 1: the TP and MK losses between the image cloud and its predicted-class
text cloud change monotonically with the fraction of adversarial images in a batch. Claim 2: MMD
tests whose kernel also sees the per-sample topological features (§6) detect a half-adversarial
test set more often than the same tests without them, at a valid type-I error. The module reads:
constants and pre-registered criteria -> setup (model, attack) -> per-seed measurement -> checks
-> figures.
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from icml25.report import Criterion, Metric, ReproResult, Run, pyplot, reproduction
from icml25.topo_detect.attacks import pgd_linf
from icml25.topo_detect.losses import mk_loss, tp_loss
from icml25.topo_detect.mmd import GaussianMMD, binomial_upper
from icml25.topo_detect.models import TinyTwoTower, digit_prompt_embeddings
from icml25.topo_detect.persistence import total_persistence, vr_diagrams
from icml25.topo_detect.signatures import sample_signatures

CLAIM = (
    "The TP and MK topological losses between image and text embeddings change monotonically "
    "with the fraction of adversarial images, and MMD tests that add the back-propagated "
    "topological signatures detect adversarial data better than the same tests without them."
)
#: pre-registered seed count (quick, full): model/attack seeds; each seed runs the whole pipeline
SEEDS = (3, 3)
EPS = 0.1
FRACTIONS = tuple(round(0.1 * i, 1) for i in range(11))
N_BATCH, BATCHES = 100, 20  # claim 1
N_TEST, Q_ADV = 100, 0.5  # claim 2: n per sample, adversarial fraction of S_Q
TRIALS = 100  # claim 2 trials under H0 and under H1 (quick); sized by the spec's simulation
N_PERM = 100
TESTS = ("G_emb", "G_raw", "SA", "G_topo", "G_emb*G_topo", "SA*G_topo")
SWEEP_EPS = (0.05, 0.1, 0.2)  # full mode, report only (the spec: report every eps)
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
    description="worst test's rejection rate under H0 (two disjoint clean samples, all seeds "
    "pooled) minus the 99th percentile of Binomial(T, 0.05) / T for its T trials (0.08 at "
    "T = 300)",
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
CRITERIA = [MONO_TP, MONO_MK, TYPE_I, POWER_SA, POWER_G]


# -- setup ---------------------------------------------------------------------------------------
class Setting:
    """The trained, frozen two-tower model on the digits split, its clean and PGD test images."""

    def __init__(self, seed: int, eps: float = EPS, epochs: int = 40) -> None:
        from icml25.toy.digits import digits_split

        xtr, ytr, self.x, self.y = digits_split(0.4, seed=0, shape="flat")
        self.T, self.text_info = digit_prompt_embeddings()
        torch.manual_seed(seed)
        self.model = TinyTwoTower(32).fit(xtr, ytr, self.T, epochs=epochs, seed=seed)
        self.model.requires_grad_(False)
        self.adv = pgd_linf(self.model, self.x, self.y, self.T, eps,
                            generator=torch.Generator().manual_seed(1 + seed))  # fmt: skip
        self.E, self.E_adv = self.model.encode_image(self.x), self.model.encode_image(self.adv)
        self.Temb = self.model.encode_text_embeddings(self.T)
        self.acc = float((self.model.logits(self.x, self.T).argmax(-1) == self.y).float().mean())
        self.adv_acc = float(
            (self.model.logits(self.adv, self.T).argmax(-1) == self.y).float().mean()
        )

    def paired_text(self, e: torch.Tensor) -> torch.Tensor:
        """The text embedding of the class the model predicts (a detector knows no labels)."""
        return self.Temb[(e @ self.Temb.T).argmax(-1)]


# -- claim 1 -------------------------------------------------------------------------------------
def signature_curve(st: Setting, seed: int, batches: int, fractions=FRACTIONS) -> dict:
    rng = np.random.default_rng(seed)
    out = {k: [] for k in ("tp", "mk", "pers0_x", "pers1_x", "pers0_y")}
    for p in fractions:
        rows = {k: [] for k in out}
        for _ in range(batches):
            idx = torch.as_tensor(rng.choice(len(st.x), N_BATCH, replace=False))
            k = int(round(p * N_BATCH))
            e = torch.cat([st.E_adv[idx[:k]], st.E[idx[k:]]])
            t = st.paired_text(e)
            dx, dy = vr_diagrams(e), vr_diagrams(t)
            rows["tp"].append(float(tp_loss(dx, dy)))
            rows["mk"].append(float(mk_loss(dx, dy)))
            rows["pers0_x"].append(float(total_persistence(dx[0])))
            rows["pers1_x"].append(float(total_persistence(dx[1])))
            rows["pers0_y"].append(float(total_persistence(dy[0])))
        for key, vals in rows.items():
            out[key].append((statistics.fmean(vals), statistics.pstdev(vals)))
    return out


def spearman(x, y) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(x, y)[0])


# -- claim 2 -------------------------------------------------------------------------------------
def _tests() -> dict:
    """The tests of claim 2 as kernel products over feature maps of the pooled sample; "topo" is
    the per-sample signature computed once per trial on the pooled sample with label-independent
    chunks (the validity rule of TopologicalMMD, shared by the three topological tests)."""
    f = {k: (lambda z, k=k: z[k]) for k in ("emb", "raw", "topo")}
    return {
        "G_emb": GaussianMMD([f["emb"]], N_PERM),
        "G_raw": GaussianMMD([f["raw"]], N_PERM),
        "SA": GaussianMMD([f["emb"], f["raw"]], N_PERM),
        "G_topo": GaussianMMD([f["topo"]], N_PERM),
        "G_emb*G_topo": GaussianMMD([f["emb"], f["topo"]], N_PERM),
        "SA*G_topo": GaussianMMD([f["emb"], f["raw"], f["topo"]], N_PERM),
    }


def detection_trials(st: Setting, seed: int, trials: int, q: float = Q_ADV) -> dict:
    """Rejections per test under H0 and H1 on disjoint random test images (same data and the same
    permutations' generator stream for every test in a trial)."""
    tests = _tests()
    g = torch.Generator().manual_seed(1000 + seed)
    out = {h: {name: [] for name in tests} for h in ("H0", "H1")}
    n = N_TEST
    for _ in range(trials):
        for h in ("H0", "H1"):
            idx = torch.randperm(len(st.x), generator=g)[: 2 * n]
            p_idx, q_idx = idx[:n], idx[n:]
            k = int(q * n) if h == "H1" else 0
            emb = torch.cat([st.E[p_idx], st.E_adv[q_idx[:k]], st.E[q_idx[k:]]])
            raw = torch.cat([st.x[p_idx], st.adv[q_idx[:k]], st.x[q_idx[k:]]])
            topo = sample_signatures(emb, st.paired_text(emb), generator=g)  # pooled
            S_P = {"emb": emb[:n], "raw": raw[:n], "topo": topo[:n]}
            S_Q = {"emb": emb[n:], "raw": raw[n:], "topo": topo[n:]}
            for name, test in tests.items():
                out[h][name].append(float(test.test(S_P, S_Q, generator=g).reject))
    return out


# -- the reproduction ----------------------------------------------------------------------------
@reproduction("topo_detect", seeds=SEEDS, smoke_seeds=2)
def run(r: Run) -> ReproResult:
    batches = r.size(smoke=3, quick=BATCHES, full=BATCHES)
    trials = r.size(smoke=4, quick=TRIALS, full=TRIALS)
    fractions = r.size(smoke=(0.0, 0.5, 1.0), quick=FRACTIONS, full=FRACTIONS)
    epochs = r.size(smoke=5, quick=40, full=40)
    settings = {}

    def measure(seed: int) -> dict:
        st = Setting(seed, epochs=epochs)
        settings[seed] = st
        return {"acc": st.acc, "adv_acc": st.adv_acc,
                "curve": signature_curve(st, seed, batches, fractions),
                "det": detection_trials(st, seed, trials)}  # fmt: skip

    runs = r.over_seeds(measure, label="model, attack, curves, tests")
    rho_tp = [spearman(fractions, [m for m, _ in x["curve"]["tp"]]) for x in runs]
    rho_mk = [spearman(fractions, [m for m, _ in x["curve"]["mk"]]) for x in runs]
    h0 = {t: [v for x in runs for v in x["det"]["H0"][t]] for t in TESTS}
    h1 = {t: [v for x in runs for v in x["det"]["H1"][t]] for t in TESTS}
    type_i = {t: statistics.fmean(v) for t, v in h0.items()}
    power = {t: statistics.fmean(v) for t, v in h1.items()}
    worst = max(type_i, key=type_i.get)
    bound = binomial_upper(len(h0["G_emb"]))
    checks = [
        MONO_TP.check(min(abs(v) for v in rho_tp)),
        MONO_MK.check(min(abs(v) for v in rho_mk)),
        TYPE_I.check(type_i[worst] - bound).renamed(f"{TYPE_I.name} (worst: {worst})"),
        POWER_SA.check(h1["SA*G_topo"], h1["SA"]),
        POWER_G.check(h1["G_emb*G_topo"], h1["G_emb"]),
    ]
    metrics = [
        Metric("clean zero-shot accuracy", [x["acc"] for x in runs]),
        Metric(f"PGD eps={EPS} accuracy", [x["adv_acc"] for x in runs]),
        Metric("Spearman rho TP", rho_tp, description="sign: the direction of the change"),
        Metric("Spearman rho MK", rho_mk),
        *(Metric(f"power {t}", power[t]) for t in TESTS),
        *(Metric(f"type-I {t}", type_i[t]) for t in TESTS),
    ]
    table = ["| test | type-I error (H0) | power (H1, q = 0.5) |", "|---|---|---|"]
    table += [f"| {t} | {type_i[t]:.3f} | {power[t]:.3f} |" for t in TESTS]
    curve = runs[0]["curve"]
    ctab = [
        "| fraction | TP | MK | Pers_0(X) | Pers_1(X) | Pers_0(Y) |",
        "|---|---|---|---|---|---|",
    ]
    for i, p in enumerate(fractions):
        ctab.append(f"| {p:g} | {curve['tp'][i][0]:.2f} | {curve['mk'][i][0]:.1f} | "
                    f"{curve['pers0_x'][i][0]:.2f} | {curve['pers1_x'][i][0]:.2f} | {curve['pers0_y'][i][0]:.2f} |")  # fmt: skip
    tables = ["Detection (all seeds pooled):\n\n" + "\n".join(table),
              f"Signature curve (seed {r.seeds[0]}, batch means):\n\n" + "\n".join(ctab)]  # fmt: skip
    if not r.quick:
        tables.append(_sweep(r, epochs))
    r.figure(_plot_curve(runs, fractions), "signature_vs_fraction.png")
    r.figure(_plot_power(type_i, power, bound), "power_table.png")
    st0 = settings[r.seeds[0]]
    return r.result(
        claim=CLAIM,
        checks=checks,
        metrics=metrics,
        criteria=CRITERIA,
        key_check=POWER_SA.name,
        setup=(
            "sklearn digits (/16, stratified 60/40 split, 1078/719), TinyTwoTower d = 32 (image MLP "
            f"64-256-256-32, text Linear(384, 32) on {st0.text_info['model']} prompt embeddings), 40 "
            f"epochs Adam 1e-3 batch 64; PGD-Linf eps = {EPS}, 20 steps, step eps/4, random start. "
            f"Claim 1: batches of {N_BATCH}, {batches} per fraction, predicted-class pairing, dims (0, "
            f"1), alpha 1, sigma 0.1. Claim 2: n = {N_TEST} per sample, q = {Q_ADV}, {trials} trials "
            f"under H0 and H1 per seed, {N_PERM} permutations, alpha 0.05, median bandwidths on the "
            f"pooled sample, topological features by attribution (TP, chunks of 50) on the pooled "
            f"sample; seeds {r.seeds}."
        ),
        tables=tables,
        notes="",
        power=(
            f"Claim 2 uses {TRIALS} trials per hypothesis and seed: at the spec's pilot powers (0.26 "
            "vs 0.06) a paired interval on the difference excludes 0 with probability about 0.98 "
            "at T = 100 per seed (the spec's simulation); pooled over 3 seeds, more. The paper "
            "quotes no numbers we could read."
        ),
        deviations=[
            "Digits and a two-tower MLP stand in for CLIP/BLIP on natural images; the text tower "
            "projects fixed all-MiniLM-L6-v2 prompt embeddings (shipped as package data).",
            "The per-sample back-propagation (§6) is our reconstruction (attribution of each "
            "persistence pair to the vertices of its critical edges); the paper's exact algorithm "
            "was not readable.",
            "Claim 2's kernels are untrained (median bandwidths); the trained MMD-D and SAMMD of "
            "the spec's full mode are not built yet.",
            "Full mode adds a report-only sweep over eps in (0.05, 0.1, 0.2) and q in (0.25, "
            "0.5, 1.0) with 50 trials per seed; MK-based features, alpha = 2 and the per-group "
            "negative control are not built yet.",
        ],
    )


def _sweep(r: Run, epochs: int) -> str:
    """Power of every test and the two topological gains per (eps, q), report only."""
    from icml25.report.stats import mean_t_interval

    trials = r.size(smoke=2, quick=None, full=SWEEP_TRIALS)
    eps_list = r.size(smoke=(0.2,), quick=None, full=SWEEP_EPS)
    q_list = r.size(smoke=(1.0,), quick=None, full=SWEEP_Q)
    lines = ["| eps | q | G_raw | SA | SA*G_topo | gain over SA [95%] | G_emb | G_emb*G_topo | gain over G_emb [95%] | worst type-I |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for eps in eps_list:
        sts = [Setting(s, eps=eps, epochs=epochs) for s in r.seeds]
        for q in q_list:
            det = [detection_trials(st, s, trials, q) for st, s in zip(sts, r.seeds)]
            h1 = {t: [v for d in det for v in d["H1"][t]] for t in TESTS}
            h0 = {t: [v for d in det for v in d["H0"][t]] for t in TESTS}
            pw = {t: statistics.fmean(v) for t, v in h1.items()}

            def gain(a, b, h1=h1):
                diff = [x - y for x, y in zip(h1[a], h1[b])]
                if len(set(diff)) < 2:
                    return f"{statistics.fmean(diff):+.2f}"
                iv = mean_t_interval(diff)
                return f"{iv.estimate:+.2f} [{iv.low:+.2f}, {iv.high:+.2f}]"

            worst = max(statistics.fmean(v) for v in h0.values())
            lines.append(f"| {eps:g} | {q:g} | {pw['G_raw']:.2f} | {pw['SA']:.2f} | {pw['SA*G_topo']:.2f} | "
                         f"{gain('SA*G_topo', 'SA')} | {pw['G_emb']:.2f} | {pw['G_emb*G_topo']:.2f} | "
                         f"{gain('G_emb*G_topo', 'G_emb')} | {worst:.3f} |")  # fmt: skip
    return (
        f"Sweep (report only; {trials} trials per hypothesis and seed, seeds {r.seeds}; powers "
        "pooled over seeds):\n\n" + "\n".join(lines)
    )


def _plot_curve(runs, fractions):
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.2))
    for ax, key, label in zip(
        axes, ("tp", "mk", "pers0_x", "pers1_x"), ("L_TP", "L_MK", "Pers_0(X)", "Pers_1(X)")
    ):
        for i, x in enumerate(runs):
            m = [a for a, _ in x["curve"][key]]
            s = [b for _, b in x["curve"][key]]
            ax.errorbar(fractions, m, yerr=s, marker="o", ms=3, label=f"seed {i}")
        ax.set_xlabel("adversarial fraction")
        ax.set_title(label)
    axes[0].legend(fontsize=7)
    return fig


def _plot_power(type_i, power, bound):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    xs = range(len(TESTS))
    ax.bar(xs, [power[t] for t in TESTS], label="power (H1)")
    ax.scatter(
        xs, [type_i[t] for t in TESTS], color="k", marker="x", label="type-I error (H0)", zorder=3
    )
    ax.axhline(bound, ls="--", color="r", lw=1, label="type-I bound")
    ax.set_xticks(list(xs), TESTS, rotation=20, fontsize=8)
    ax.legend(fontsize=7)
    return fig
