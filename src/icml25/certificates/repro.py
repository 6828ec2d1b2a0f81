"""Safety certificate reproduction on ConfoundedDriving (docs/certificates.md, "Reproduction").

Claim (paper §4, Fig. 2): a certificate built on the interventional safety value learned by
front-door causal RL from confounded offline data keeps the long-term safety probability above
``1 - eps``, while DTCBF on the offline statistics (and the unfiltered nominal) do not.

Setup: our reconstruction of the paper's driving scenario (70 states, 5 actions, a latent
road state that confounds the offline driver), ``H = 10``, ``eps = 0.2``, ``x0 = (0, 0)``, uniform
risk policy, an aggressive nominal driver (``0`` w.p. 0.3, ``+1`` w.p. 0.7). Per seed: 10,000
offline trajectories, front-door and naive fits, every controller evaluated exactly (forward
recursion over the closed-loop table) and the front-door certificate by Monte Carlo (100
simulations x 100 trajectories, the paper's protocol, counted as a proportion per seed). Full
mode sweeps confounding strength, data size and alpha, and fits the neural front-door estimator
once per seed. Only deterministic quantities are exact checks (docs/certificates.md). The module reads: constants and pre-registered
criteria -> setup -> per-seed measurement -> checks -> figures.
"""

from __future__ import annotations

import statistics

import torch

from icml25.certificates.baselines import DTCBFFilter, NominalController
from icml25.certificates.certificate import SafetyCertificate
from icml25.certificates.envs import (
    ConfoundedDrivingConfig,
    make_confounded_driving,
    safety_barrier,
    velocities,
)
from icml25.certificates.evaluate import exact_closed_loop_safety, monte_carlo_safety, progress
from icml25.certificates.qfunctions import FrontDoorFQE, NaiveFQE, SafetyQ, exact_safety_q
from icml25.report import Criterion, Metric, ReproResult, Run, pyplot, reproduction

CLAIM = (
    "A safety certificate on the interventional safety value learned by front-door causal RL "
    "from confounded offline data keeps the long-term safety probability above 1 - eps; DTCBF on "
    "the offline statistics and the nominal policy do not."
)
D = torch.float64
H, EPS = 10, 0.2
#: pre-registered seed counts (quick, full): 10 seeds give intervals over seeds of about +-0.002
#: on P_safe at the prototype's per-seed spread (0.001)
SEEDS = (10, 10)
N_TRAJ = 10_000  # offline trajectories (quick; the full sweep also 1k, 3k, 30k)
MC_SIMS, MC_TRAJ = 100, 100  # the paper's 100 x 100 rollouts
KAPPAS = (0.0, 0.25, 0.5, 0.75, 1.0)
SIZES = (1_000, 3_000, 10_000, 30_000)
ALPHAS = (0.0, 0.5, 1.0)
CONTROLLERS = ("nominal", "dtcbf_offline", "dtcbf_true", "naive", "front_door", "oracle")

# -- pre-registered criteria ---------------------------------------------------------------------
PREMISE_TRUE = Criterion(
    "1a premise: true V(x0, H) >= 1 - eps",
    "exact",
    above=1 - EPS,
    description="sanity: a fixed property of the environment (Theorem 3.2's premise)",
)
PREMISE_EST = Criterion(
    "1b premise: |V_fd(x0, H) - V(x0, H)| <= 0.03",
    "mean",
    below=0.03,
    over="seeds",
    description="absolute error of the front-door estimate of the guaranteed probability",
)
CERT_SAFE = Criterion(
    "2a front-door certificate: exact P_safe >= 1 - eps",
    "mean",
    above=1 - EPS,
    over="seeds",
    description="whole-horizon safety probability of the closed loop, exact, one value per seed",
)
CERT_GUARANTEE = Criterion(
    "2b front-door certificate: P_safe - V(x0, H) >= -0.02",
    "mean",
    above=-0.02,
    over="seeds",
    description="Theorem 3.2: the closed loop is at least as safe as the guaranteed value",
)
CERT_MC = Criterion(
    "2c front-door certificate: Monte-Carlo P_safe >= 0.78",
    "proportion",
    above=0.78,
    over="trajectories",
    description=(
        "trajectories safe on 0..H among the 100 x 100 Monte-Carlo rollouts, one count per seed "
        "(each seed's certificate is its own fit, so the seeds are the runs)"
    ),
)
NOMINAL_FAILS = Criterion(
    "3a nominal: exact P_safe < 1 - eps",
    "exact",
    below=1 - EPS,
    description="the aggressive nominal driver, unfiltered (deterministic: no data involved)",
)
DTCBF_FAILS = Criterion(
    "3b DTCBF on offline statistics: exact P_safe < 1 - eps",
    "mean",
    below=1 - EPS,
    over="seeds",
    description="the paper's baseline, fed with the confounded offline statistics",
)
BIAS_MAX = Criterion(
    "4a max |Q_fd - Q| <= 0.5 max |Q_naive - Q|",
    "mean",
    below=0.5,
    over="seeds",
    description="ratio of the largest Q errors over safe states, k and actions, per seed",
)
BIAS_MEAN = Criterion(
    "4b mean |Q_naive - Q| - mean |Q_fd - Q| > 0",
    "paired",
    above=0.0,
    over="seeds",
    description="mean absolute Q error over safe states, k and actions: naive minus front-door",
)
FEASIBLE = Criterion(
    "5 persistent feasibility: empty certified sets (alpha = 0)",
    "exact",
    below=0.0,
    description="sanity (Theorem 3.4 makes it impossible): (t, x) with no certified action, all seeds",
)
FULL_KAPPA = Criterion(
    "6 front-door P_safe >= 1 - eps",
    "mean",
    above=1 - EPS,
    over="seeds",
    description="per confounding strength kappa and data size >= 3k, alpha = 0, exact",
)
NEURAL_SAFE = Criterion(
    "7a neural front-door certificate: exact P_safe >= 1 - eps",
    "mean",
    above=1 - EPS,
    over="seeds",
    description=(
        "NeuralFrontDoorFQE on one-hot features, kappa = 1, 10k trajectories: one fit (data and "
        "initialisation) per seed, its closed loop evaluated exactly"
    ),
)
NEURAL_ERR = Criterion(
    "7b neural front-door: max |Q_nn - Q| <= 0.15",
    "mean",
    below=0.15,
    over="seeds",
    description="largest Q error over safe states, k and actions, one fit per seed",
)
CRITERIA = [
    PREMISE_TRUE,
    PREMISE_EST,
    CERT_SAFE,
    CERT_GUARANTEE,
    CERT_MC,
    NOMINAL_FAILS,
    DTCBF_FAILS,
    BIAS_MAX,
    BIAS_MEAN,
    FEASIBLE,
    FULL_KAPPA,
    NEURAL_SAFE,
    NEURAL_ERR,
]


# -- setup ---------------------------------------------------------------------------------------
class Setting:
    """The environment at one confounding strength, its exact values and fixed baselines."""

    def __init__(self, kappa: float = 1.0, nominal=None) -> None:
        self.cfg = ConfoundedDrivingConfig(kappa=kappa)
        self.mdp, self.codec = make_confounded_driving(self.cfg)
        self.x0 = self.codec.encode(*self.cfg.x0)
        self.nominal = torch.tensor(self.cfg.nominal if nominal is None else nominal, dtype=D)
        self.values = torch.tensor(self.cfg.actions, dtype=D)
        self.h, self.vel = safety_barrier(self.cfg), velocities(self.cfg)
        Q, V = exact_safety_q(self.mdp.interventional_kernel(), self.mdp.safe, H)
        self.oracle = SafetyQ(Q, V, self.mdp.safe)
        self.v_true = float(V[H, self.x0])

    def evaluate(self, controller) -> dict:
        table = controller.table(self.nominal)
        p, curve = exact_closed_loop_safety(self.mdp, table, self.x0)
        return {
            "p_safe": p,
            "curve": curve,
            "progress": progress(self.mdp, table, self.x0, self.vel),
        }

    def certificate(self, q: SafetyQ, alpha: float = 0.0) -> SafetyCertificate:
        return SafetyCertificate(q, eps=EPS, alpha=alpha, action_values=self.values)

    def q_errors(self, q: SafetyQ) -> tuple[float, float]:
        """Largest and mean |Q_hat - Q| over safe states, k = 1..H and identified actions."""
        safe = self.mdp.safe
        err = (q.Q[1:, safe] - self.oracle.Q[1:, safe]).abs()
        err = err[~torch.isnan(err)]
        return float(err.max()), float(err.mean())


def empty_sets(cert: SafetyCertificate) -> int:
    """(t, x) pairs at safe states with no certified action."""
    ks = torch.arange(cert.H, 0, -1)
    m = cert._margins[ks][:, cert.q.safe]
    return int((~(~torch.isnan(m) & (m >= -1e-12)).any(-1)).sum())


# -- per-seed measurement ------------------------------------------------------------------------
def measure_seed(st: Setting, seed: int, n_traj: int, mc: bool, alphas=(0.0,)) -> dict:
    """Fit both estimators on one seed's offline data and evaluate every controller."""
    g = torch.Generator().manual_seed(seed)
    data = st.mdp.sample_offline(n_traj, H, generator=g)
    fd = FrontDoorFQE(H, st.mdp.safe, n_actions=5, n_mediators=5).fit(data)
    naive = NaiveFQE(H, st.mdp.safe, n_actions=5).fit(data)
    out = {
        "seed": seed,
        "v_fd": fd.v(st.x0, H),
        "v_naive": naive.v(st.x0, H),
        "backoff": fd.fit_info["backoff_xmu"] + fd.fit_info["backoff_xm"],
    }
    out["err_fd"], out["err_naive"] = st.q_errors(fd), st.q_errors(naive)
    ctrls = {
        "nominal": NominalController(H, st.mdp.n_states),
        "dtcbf_offline": DTCBFFilter(data, st.h, 0.5, H, st.values),
        "dtcbf_true": DTCBFFilter(st.mdp.interventional_kernel(), st.h, 0.5, H, st.values),
    }
    for a in alphas:
        tag = "" if a == 0 else f"@{a:g}"
        ctrls["naive" + tag] = st.certificate(naive, a).as_controller()
        ctrls["front_door" + tag] = st.certificate(fd, a).as_controller()
        ctrls["oracle" + tag] = st.certificate(st.oracle, a).as_controller()
    out["eval"] = {name: st.evaluate(c) for name, c in ctrls.items()}
    out["empty"] = empty_sets(st.certificate(fd, 0.0))
    if mc:
        sim = monte_carlo_safety(
            st.mdp,
            ctrls["front_door"],
            MC_SIMS,
            MC_TRAJ,
            st.x0,
            torch.Generator().manual_seed(10_000 + seed),
            st.nominal,
        )
        # per_sim holds fractions of MC_TRAJ trajectories: back to a count of safe trajectories
        sim["safe"] = round(float(sim["per_sim"].sum()) * MC_TRAJ)
        sim["n"] = MC_SIMS * MC_TRAJ
        out["mc"] = sim
    return out


# -- checks --------------------------------------------------------------------------------------
def same_for_every_seed(values: list[float], what: str) -> float:
    """The one value of a deterministic quantity measured on every seed (the exact design is only
    for such quantities, docs/certificates.md); a ValueError if the seeds disagree."""
    if not values or any(v != values[0] for v in values):
        raise ValueError(
            f"{what} must be the same on every seed to be checked as an exact quantity, got {values}"
        )
    return values[0]


def quick_checks(st: Setting, runs: list[dict]) -> list:
    ev = [r["eval"] for r in runs]
    seeds = [f"seed {r.get('seed', i)}" for i, r in enumerate(runs)]
    checks = [
        PREMISE_TRUE.check(st.v_true),
        PREMISE_EST.check([abs(r["v_fd"] - st.v_true) for r in runs]),
        CERT_SAFE.check([e["front_door"]["p_safe"] for e in ev]),
        CERT_GUARANTEE.check([e["front_door"]["p_safe"] - st.v_true for e in ev]),
    ]
    if "mc" in runs[0]:
        safe, n = [r["mc"]["safe"] for r in runs], [r["mc"]["n"] for r in runs]
        checks.append(CERT_MC.check(safe, n, units=seeds))
    nominal = same_for_every_seed([e["nominal"]["p_safe"] for e in ev], "the nominal's P_safe")
    checks += [
        NOMINAL_FAILS.check(nominal),
        DTCBF_FAILS.check([e["dtcbf_offline"]["p_safe"] for e in ev]),
        BIAS_MAX.check([r["err_fd"][0] / r["err_naive"][0] for r in runs]),
        BIAS_MEAN.check([r["err_naive"][1] for r in runs], [r["err_fd"][1] for r in runs]),
        FEASIBLE.check(float(sum(r["empty"] for r in runs))),
    ]
    return checks


# -- the reproduction ----------------------------------------------------------------------------
@reproduction("certificates", seeds=SEEDS, smoke_seeds=2)
def run(r: Run) -> ReproResult:
    """Quick: kappa = 1, 10k trajectories; full adds the kappa x size x alpha sweep."""
    n_traj = r.size(smoke=500, quick=N_TRAJ, full=N_TRAJ)
    st = Setting(1.0)
    runs = r.over_seeds(
        lambda s: measure_seed(st, s, n_traj, mc=True, alphas=ALPHAS), label="fits and evaluations"
    )
    checks = quick_checks(st, runs)
    tables = [_controller_table(runs, "aggressive nominal (0 w.p. 0.3, +1 w.p. 0.7)")]
    uniform = Setting(1.0, nominal=[0.2] * 5)
    uni_runs = [measure_seed(uniform, s, n_traj, mc=False) for s in r.seeds[:3]]
    tables.append(_controller_table(uni_runs, "the paper's uniform nominal (report only)"))
    sweep, metrics_neural = None, []
    if not r.quick:
        sizes = r.size(smoke=(500, 1_000), quick=None, full=SIZES)
        kappas = r.size(smoke=(0.0, 1.0), quick=None, full=KAPPAS)
        sweep = _sweep(r, kappas, sizes)
        for kappa in kappas:
            for n in sizes:
                if n < 3_000 and not r.smoke:
                    continue
                vals = [x["front_door"] for x in sweep[(kappa, n, 0.0)]]
                checks.append(
                    FULL_KAPPA.check(vals).renamed(f"{FULL_KAPPA.name} (kappa={kappa:g}, n={n})")
                )
        tables.append(_sweep_table(sweep, kappas, sizes))
        steps = r.size(smoke=20, quick=None, full=2000)
        neural = r.over_seeds(lambda s: _neural(st, s, n_traj, steps), label="neural fits")
        units = [f"seed {s}" for s in r.seeds]
        checks += [
            NEURAL_SAFE.check([x["p_safe"] for x in neural], units=units),
            NEURAL_ERR.check([x["err"][0] for x in neural], units=units),
        ]
        tables.append(
            f"Neural front-door FQE (one-hot features, kappa = 1, {n_traj} trajectories, one fit "
            f"per seed, {len(neural)} seeds, {sum(x['seconds'] for x in neural):.0f} s; mean ± sd "
            f"over seeds): exact P_safe {_mean_sd(x['p_safe'] for x in neural)}, max |Q_nn - Q| "
            f"{_mean_sd(x['err'][0] for x in neural)}, mean |Q_nn - Q| "
            f"{_mean_sd(x['err'][1] for x in neural)}, V_nn(x0, H) "
            f"{_mean_sd(x['v'] for x in neural)}."
        )
        metrics_neural = [
            Metric("neural P_safe front-door", [x["p_safe"] for x in neural]),
            Metric("neural max |Q_nn - Q|", [x["err"][0] for x in neural]),
        ]
    metrics = _metrics(st, runs) + metrics_neural
    r.figure(_plot_curves(st, runs), "cert_safety_curve.png")
    r.figure(_plot_tradeoff(runs), "cert_tradeoff.png")
    if sweep is not None:
        r.figure(_plot_sweep(sweep, kappas, sizes), "cert_kappa_sweep.png")
    return r.result(
        claim=CLAIM,
        checks=checks,
        metrics=metrics,
        criteria=CRITERIA,
        key_check=CERT_SAFE.name,
        setup=(
            f"ConfoundedDriving (our reconstruction of §7, docs/certificates.md: 70 states, actions (-3..1), latent road "
            f"state confounding the offline driver, kappa = 1), H = {H}, eps = {EPS}, x0 = (0, 0), "
            f"uniform risk policy, aggressive nominal; {n_traj} offline trajectories of 10 steps per "
            f"seed, seeds {r.seeds}; tabular front-door and naive FQE; exact closed-loop evaluation "
            f"and Monte Carlo {MC_SIMS} x {MC_TRAJ} for the front-door certificate; DTCBF h = "
            "vlim - v, alpha_cbf = 0.5."
        ),
        tables=tables,
        notes=_notes(checks, runs),
        power=(
            "Every check compares against a fixed threshold; over 10 seeds the per-seed spread of "
            "P_safe (about 0.001 in the prototype) gives intervals of about +-0.001, so a shortfall "
            "of 0.01 from 1 - eps would be detected. Check 2c counts 10,000 Monte-Carlo "
            "trajectories per seed (Wilson half-width about 0.002 pooled, widened to the t-interval "
            "over seeds where that is wider). The paper reports no exact values (Fig. 2 is a "
            "plot), so no paper effect is stated."
        ),
        deviations=[
            "The environment is our reconstruction: the paper's dynamics constants, mediator and "
            "alpha_cbf are not published (docs/certificates.md).",
            "The nominal policy is aggressive (the paper: uniform); with the uniform nominal "
            "every method clears 1 - eps (reported in the second table), which makes the "
            "comparison uninformative.",
            "Checks 1a and 5 are sanity checks: 1a is a property of the environment, 5 cannot fail "
            "without a bug (Theorem 3.4).",
            "issue 46: only deterministic quantities are exact checks (1a and 3a: no data; 5: zero "
            "for every data set by Theorem 3.4, counted over every seed's fit). Check 2c, a "
            "Monte-Carlo frequency, is a proportion of safe trajectories with one count per seed "
            "(was a mean over 1000 simulations pooled across seeds, which hid that the seeds' "
            "certificates are different fits); checks 7a/7b, one neural fit before, are repeated "
            "on every seed (mean over seeds, same thresholds).",
            "Closed-loop tables hold t = 0..H-1 (the planned (H+1, X, U) shape had an unused last slice).",
        ],
    )


def _neural(st: Setting, seed: int, n_traj: int, steps: int) -> dict:
    """One fit of the neural front-door estimator on one-hot state features: the seed draws the
    offline data and the initialisation (docs/certificates.md: full mode, one fit per seed)."""
    import time

    from icml25.certificates.qfunctions import NeuralFrontDoorFQE

    data = st.mdp.sample_offline(n_traj, H, generator=torch.Generator().manual_seed(seed))
    t0 = time.perf_counter()
    net = NeuralFrontDoorFQE(
        torch.eye(st.mdp.n_states, dtype=D), 5, 5, H, st.mdp.safe, steps_per_k=steps, seed=seed
    ).fit(data)
    q = net.safety_q()
    out = st.evaluate(st.certificate(q).as_controller())
    out.update(err=st.q_errors(q), v=q.v(st.x0, H), seconds=time.perf_counter() - t0)
    return out


def _sweep(r: Run, kappas, sizes) -> dict:
    out = {}
    for kappa in kappas:
        st = Setting(kappa)
        for n in sizes:
            for a in ALPHAS:
                out[(kappa, n, a)] = []
            for s in r.seeds:
                m = measure_seed(st, s, n, mc=False, alphas=ALPHAS)
                for a in ALPHAS:
                    tag = "" if a == 0 else f"@{a:g}"
                    out[(kappa, n, a)].append(
                        {
                            "front_door": m["eval"]["front_door" + tag]["p_safe"],
                            "naive": m["eval"]["naive" + tag]["p_safe"],
                            "dtcbf_offline": m["eval"]["dtcbf_offline"]["p_safe"],
                            "progress_fd": m["eval"]["front_door" + tag]["progress"],
                            "backoff": m["backoff"],
                        }
                    )
    return out


def _mean_sd(vals) -> str:
    vals = list(vals)
    if len(vals) < 2:
        return f"{vals[0]:.3f}"
    return f"{statistics.fmean(vals):.3f} ± {statistics.stdev(vals):.3f}"


def _controller_table(runs: list[dict], label: str) -> str:
    names = list(runs[0]["eval"])
    lines = [
        f"Exact closed-loop safety, {label} (mean ± sd over {len(runs)} seeds):",
        "",
        "| controller | P_safe over 0..H | progress E[sum v_t] |",
        "|---|---|---|",
    ]
    for n in names:
        lines.append(
            f"| {n} | {_mean_sd(r['eval'][n]['p_safe'] for r in runs)} | "
            f"{_mean_sd(r['eval'][n]['progress'] for r in runs)} |"
        )
    return "\n".join(lines)


def _sweep_table(sweep: dict, kappas, sizes) -> str:
    lines = [
        "Sweep (exact P_safe, mean over seeds; alpha = 0 unless noted):",
        "",
        "| kappa | n | front-door | front-door alpha=1 | naive | DTCBF offline | backoffs |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in kappas:
        for n in sizes:
            a0, a1 = sweep[(k, n, 0.0)], sweep[(k, n, 1.0)]
            mean = lambda rows, key: statistics.fmean(x[key] for x in rows)  # noqa: E731
            lines.append(
                f"| {k:g} | {n} | {mean(a0, 'front_door'):.3f} | {mean(a1, 'front_door'):.3f} | "
                f"{mean(a0, 'naive'):.3f} | {mean(a0, 'dtcbf_offline'):.3f} | "
                f"{mean(a0, 'backoff'):.0f} |"
            )
    return "\n".join(lines)


def _metrics(st: Setting, runs: list[dict]) -> list[Metric]:
    ev = [r["eval"] for r in runs]
    out = [Metric("true V(x0, H)", st.v_true)]
    out += [Metric(f"P_safe {n}", [e[n]["p_safe"] for e in ev]) for n in ev[0]]
    out += [Metric(f"progress {n}", [e[n]["progress"] for e in ev]) for n in ev[0]]
    out += [
        Metric("V_fd(x0, H)", [r["v_fd"] for r in runs]),
        Metric("V_naive(x0, H) (claimed by the naive certificate)", [r["v_naive"] for r in runs]),
        Metric(
            "naive over-claim V_naive - P_safe(naive)",
            [r["v_naive"] - r["eval"]["naive"]["p_safe"] for r in runs],
        ),
        Metric("max |Q_fd - Q|", [r["err_fd"][0] for r in runs]),
        Metric("max |Q_naive - Q|", [r["err_naive"][0] for r in runs]),
        Metric("backed-off cells (front-door)", [r["backoff"] for r in runs]),
        Metric("Monte-Carlo P_safe front-door", [r["mc"]["mean"] for r in runs]),
    ]
    return out


def _notes(checks, runs) -> str:
    bad = [c.name for c in checks if not c.held]
    return ("Checks not held: " + "; ".join(bad) + ".") if bad else ""


# -- figures -------------------------------------------------------------------------------------
def _plot_curves(st: Setting, runs: list[dict]):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    t = list(range(H + 1))
    for name in CONTROLLERS:
        curves = torch.stack([r["eval"][name]["curve"] for r in runs])
        ax.plot(t, curves.mean(0).tolist(), marker="o", ms=3, label=name)
    mc = runs[0]["mc"]
    ax.fill_between(
        t,
        mc["curve_ci"][:, 0].tolist(),
        mc["curve_ci"][:, 1].tolist(),
        alpha=0.3,
        label="front-door MC 95% CI (seed 0)",
    )
    ax.axhline(1 - EPS, ls="--", color="k", lw=1)
    ax.set_xlabel("t")
    ax.set_ylabel("P(safe through t)")
    ax.legend(fontsize=7)
    ax.set_title("ConfoundedDriving, aggressive nominal")
    return fig


def _plot_tradeoff(runs: list[dict]):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in runs[0]["eval"]:
        p = statistics.fmean(r["eval"][name]["p_safe"] for r in runs)
        g = statistics.fmean(r["eval"][name]["progress"] for r in runs)
        ax.scatter([g], [p])
        ax.annotate(name, (g, p), fontsize=7)
    ax.axhline(1 - EPS, ls="--", color="k", lw=1)
    ax.set_xlabel("progress E[sum v_t]")
    ax.set_ylabel("P_safe over 0..H")
    return fig


def _plot_sweep(sweep: dict, kappas, sizes):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    n = max(sizes) if 10_000 not in sizes else 10_000
    for key, label in (
        ("front_door", "front-door"),
        ("naive", "naive"),
        ("dtcbf_offline", "DTCBF offline"),
    ):
        ax.plot(
            kappas,
            [statistics.fmean(x[key] for x in sweep[(k, n, 0.0)]) for k in kappas],
            marker="o",
            label=label,
        )
    ax.axhline(1 - EPS, ls="--", color="k", lw=1)
    ax.set_xlabel("confounding strength kappa")
    ax.set_ylabel(f"exact P_safe (n = {n})")
    ax.legend()
    return fig
