"""CD-KF scheduling reproduction, setting "GP-pass-by" (docs/cdkf.md, "Reproduction").

A Matern-3/2 GP is observed by a precise, expensive sensor and a cheap sensor carried past the
target (accurate near t = 4). At an expected-cost budget, rates are optimised through the bound of
Proposition 6.1 and turned into deterministic time stamps (Proposition 8.1). Claims: (1) the bound
holds against Monte Carlo; (2) optimised rates beat uniform and best-constant rates at equal cost;
(3) the deterministic schedule beats Poisson sampling of the same rates; (4) the filter is calibrated.
Full mode adds the "robot with energy" setting (claims 5 and 6).

The optimisation and the schedules are deterministic; seeds only drive the Monte Carlo (Poisson
paths, simulated GP paths), whose paths are independent across seeds. The Monte-Carlo checks use
batch means: each seed's paths are cut into ``BATCHES`` equal batches (the units, labelled
``seed s batch b``), and the t-interval over all batches has the Monte-Carlo standard error of the
pooled paths; the pointwise rule is one z-score per seed. Only deterministic quantities (exact
covariance paths of deterministic schedules, costs, energies) are exact checks (docs/cdkf.md).
The module reads: constants and
pre-registered criteria -> setup (optimisation, schedules) -> per-seed Monte Carlo -> checks ->
figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from icml25.cdkf.baselines import greedy_schedule, m_optimized
from icml25.cdkf.evaluate import monte_carlo_covariance, schedule_trace, simulate_and_filter
from icml25.cdkf.ocp import SchedulingProblem
from icml25.cdkf.schedule import RateSchedule, deterministic_schedule
from icml25.cdkf.ssm import Sensor, matern_ssm
from icml25.report import Check, Criterion, Metric, ReproResult, Run, pyplot, reproduction

CLAIM = (
    "Optimising time-varying Poisson measurement rates through the covariance bound, then placing "
    "deterministic measurements at the rates' conditional means, lowers the estimation variance at "
    "equal sensing cost, and the bound holds."
)
D = torch.float64
T, K, BUDGET, LAM_MAX = 10.0, 20, 12.0, 8.0  # docs/cdkf.md
COSTS = (1.0, 0.2)  # precise, pass-by
METHODS = ("uniform", "best_constant", "optimized")
#: pre-registered seed counts (quick, full), as before issue 17
SEEDS = (3, 5)
#: Monte-Carlo batches per seed (batch means); M and the calibration paths are multiples of it
BATCHES = 20
CAL_PATHS, CAL_FINE = (
    200,
    400,
)  # simulated GP paths per seed for the calibration (docs/cdkf.md: 200)

# -- pre-registered criteria (thresholds as planned; fixed before any number) ----------------

BOUND = Criterion(
    "1 bound - Poisson MC, time-averaged variance",
    "mean",
    above=0.0,
    unit="var",
    over="MC batches",
    description=(
        "the bound of Prop. 6.1 minus the Monte-Carlo time average of tr(W Sigma) under Poisson "
        "sampling of the same rates, one value per batch of Poisson paths (all seeds)"
    ),
)
BOUND_POINTWISE = Criterion(
    "1 largest pointwise excess of Poisson MC over the bound",
    "mean",
    below=4.0,
    unit="se",
    over="seeds",
    description=(
        "per seed, max over the RK4 grid times and the three methods of (MC mean - bound) / se "
        "from that seed's Poisson paths; the planned 4 se, against the mean over seeds"
    ),
)
OPT_VS_UNIFORM = Criterion(
    "2 optimized / uniform, deterministic schedules",
    "exact",
    below=0.85,
    unit="x",
    description="time-averaged posterior variance of f, exact covariance paths",
)
OPT_VS_CONSTANT = Criterion(
    "2 optimized / best constant, deterministic schedules",
    "exact",
    below=0.9,
    unit="x",
    description="time-averaged posterior variance of f, exact covariance paths",
)
COST = Criterion(
    "2 realised cost of the optimized schedule",
    "exact",
    below=BUDGET + max(COSTS),
    unit="cost",
    description="count='round' may exceed the budget B by one measurement per sensor: <= B + max c",
)
SCHEDULE_VS_POISSON = Criterion(
    "3 Poisson MC - deterministic schedule, optimized rates",
    "mean",
    above=0.0,
    unit="var",
    over="MC batches",
    description=(
        "Monte-Carlo time-averaged variance under Poisson sampling of the optimised rates minus "
        "that of their deterministic schedule, one value per batch of Poisson paths (all seeds)"
    ),
)
CALIBRATION = Criterion(
    "4 filter calibration: MSE / predicted variance",
    "mean",
    above=0.85,
    below=1.15,
    unit="x",
    over="batches of simulated paths",
    description=(
        "time-averaged squared error of f-hat over simulated GP paths, divided by the filter's "
        "predicted variance, one value per batch of paths (all seeds); 1 for an exact filter"
    ),
)
ROBOT_ENERGY = Criterion(
    "5 robot: optimized minimum mean energy",
    "exact",
    above=0.0,
    unit="energy",
    description="the optimised plan must itself keep the mean energy >= 0 to be the best eligible",
)
ROBOT_VS_SCHEDULE = Criterion(
    "5 robot: deterministic method / optimized variance - 1",
    "exact",
    above=0.0,
    unit="rel.",
    description="a method with mean energy >= 0 whose schedule is deterministic (exact paths)",
)
ROBOT_VS_M_OPTIMIZED = Criterion(
    "5 robot: M-optimized / optimized variance - 1",
    "mean",
    above=0.0,
    unit="rel.",
    # the paper's radioactive-GP table: M-Optimized 1.925 vs Optimized 1.902 covariance trace
    paper_effect=0.012,
    description="the best of 100 Poisson draws of the optimised rates, one draw set per seed",
)
ROBOT_VS_RANDOM = Criterion(
    "5 robot: random / optimized variance - 1",
    "mean",
    above=0.0,
    unit="rel.",
    paper_effect=0.171,  # the paper's table: Random 2.228 vs Optimized 1.902
    description="Poisson rate 1 on every sensor, Monte Carlo per seed (tested only if eligible)",
)
ROBOT_VIOLATION = Criterion(
    "6 robot: optimized violation frequency",
    "exact",
    below=0.05,
    unit="",
    description=(
        "fraction of realisations whose energy goes below 0; the optimised plan's times and "
        "control are deterministic, so every realisation is the same one: 0 or 1, no sampling"
    ),
)
CRITERIA = (
    BOUND,
    BOUND_POINTWISE,
    OPT_VS_UNIFORM,
    OPT_VS_CONSTANT,
    COST,
    SCHEDULE_VS_POISSON,
    CALIBRATION,
    ROBOT_ENERGY,
    ROBOT_VS_SCHEDULE,
    ROBOT_VS_M_OPTIMIZED,
    ROBOT_VS_RANDOM,
    ROBOT_VIOLATION,
)

POWER = (
    "Sizing, fixed before this run from the previous version's numbers. Monte Carlo: 2000 Poisson paths per seed and method (3 seeds quick, 5 full) in batches of "
    "100; the standard error of a seed's time-averaged variance was 0.0006-0.0019 before, so the "
    "pooled checks 1 and 3 detect (80% power) a gap of about 0.001-0.003, against measured gaps "
    "of 0.007-0.013 (bound) and 0.09 (schedule vs Poisson). The pointwise check has one z-score "
    "per seed, from 2000 paths: a true excess of the bound gives a z sqrt(3) (quick) or sqrt(5) "
    "(full) times smaller than the pooled z of issue 17. Calibration: 200 simulated paths per "
    "seed in batches of 10; the per-seed ratios had sd 0.023, so the interval's half-width is "
    "about 0.03 with 3 seeds, far inside the band's 0.15 around 1. The paper reports no effect "
    "sizes for this setting (the planning reference numbers are a prototype's). Full mode: the "
    "paper's M-Optimized trails Optimized by 1.2% (radioactive-GP table); our per-seed spread of "
    "M-optimized (sd 3% of the optimized variance) lets 5 seeds detect about 5%, so that check "
    "is underpowered for an effect of the paper's size (the previous version measured 15%)."
)


def _power_text(checks: list) -> str:
    """The pre-registered sizing, then what this run's checks can detect (80% power)."""
    measured = "; ".join(
        f"{c.name}: {c.detectable:.3g}" for c in checks if c.detectable is not None
    )
    return POWER + (f" This run detects: {measured}." if measured else "")


DEVIATIONS = [
    "Monte Carlo applies each event at the end of its fine step (T/1600).",
    "Quick mode runs the pass-by setting only; the 'robot with energy' setting, the budget "
    "trade-off and five seeds are full mode.",
    "Robot setting: the mean-energy constraint is imposed at the 40 control-interval ends (exact "
    "here because the energy only decreases) and checked at every RK4 node after the solve; "
    "schedules use count='floor' so that the realised energy never goes below the planned mean.",
    "issue 17: claims 1 and 3 ('bound >= MC mean - 3 se' and 'schedule < MC mean - 3 se', for "
    "every method and seed) are t-intervals over batch means of the Poisson paths (20 batches "
    "per seed, every seed's paths pooled) against the same threshold 0: the 95% interval "
    "replaces the 3 se allowance, and the pooled estimate replaces 'every seed'.",
    "issue 17, issue 46: the pointwise rule (no grid time with MC - bound > 4 se) is the largest "
    "z-score over grid times and methods. Issue 17 applied it once to the Monte Carlo pooled over "
    "seeds as an exact check; a z-score of Monte-Carlo paths is noisy, so since issue 46 each "
    "seed gives one (from its own paths) and the t-interval of their mean must lie below the same "
    "4 se.",
    "issue 46: checks 1, 3 and 4 name each batch of paths as its unit ('seed s batch b'): the "
    "batches are disjoint sets of independent paths of deterministic rates and schedules, so "
    "they share nothing else. The other exact checks are deterministic: 2 (ratios and cost of "
    "deterministic schedules), 5 (the optimised plan's mean energy, the competitors' exact "
    "variances) and 6, the violation frequency, whose times and control are deterministic, so "
    "its energy path is one realisation (0 or 1), not a Monte-Carlo frequency. An exact check "
    "whose value differs between seeds is refused.",
    "issue 17: calibration ('every seed's ratio in [0.85, 1.15]') is a t-interval of the ratio "
    "over batches of 10 simulated paths (every seed's paths pooled), same band.",
    "issue 17: robot check 5 ('optimized has the lowest variance among methods with mean energy "
    ">= 0') is one check per eligible competitor, as (competitor / optimized - 1) > 0: exact for "
    "deterministic schedules, a t-interval over seeds for M-optimized (and random, if it were "
    "eligible); the optimised plan's own eligibility is an exact check.",
    "issue 17: monte_carlo_covariance and simulate_and_filter also return per-path values "
    "(time_avgs, path_mse) so that batches can be formed; their other outputs are unchanged.",
    "issue 17: torch runs on 1 thread (the harness default) instead of 2.",
]


def pass_by_problem(budget: float = BUDGET):
    """Our quick setting: GP (l = 1, s2 = 1), precise sensor (R 0.01, cost 1) and pass-by
    sensor (R 0.09 exp(p(t)^2), p(t) = 2 cos(pi t / 8), cost 0.2); ``W = H^T H``."""
    m = matern_ssm(1.5, 1.0, 1.0)
    precise = Sensor(m.H, torch.tensor([[0.01]], dtype=D), cost=COSTS[0], name="precise")

    def r2(xi, t):
        return torch.tensor([[0.09 * math.exp((2 * math.cos(math.pi * t / 8)) ** 2)]], dtype=D)

    passby = Sensor(lambda xi, t: m.H, r2, cost=COSTS[1], name="pass-by")
    sensors = [precise, passby]
    W = m.H.T @ m.H
    return m, sensors, W, SchedulingProblem(m, sensors, T, K, W=W, budget=budget, lam_max=LAM_MAX)


def batch_means(values, batches: int = BATCHES) -> list[float]:
    """Means of ``batches`` equal consecutive batches of ``values`` (batch-means Monte Carlo)."""
    v = torch.as_tensor(values, dtype=D).reshape(-1)
    if v.numel() % batches or v.numel() < batches:
        raise ValueError(f"{v.numel()} values do not split into {batches} equal batches")
    return v.reshape(batches, -1).mean(1).tolist()


# -- setup: the deterministic part -------------------------------------------------------------


@dataclass
class Setup:
    """The pass-by problem, its solutions and everything about them that no seed changes."""

    m: object
    sensors: list
    W: torch.Tensor
    prob: SchedulingProblem
    opt: object
    methods: dict  # name -> RateSchedule
    bounds: dict  # name -> time-averaged bound
    bound_paths: dict  # name -> tr(W Sigma-hat) on the RK4 grid
    times: dict  # name -> deterministic schedule (one tensor per sensor)
    det: dict  # name -> time-averaged exact variance of the schedule
    det_paths: dict  # name -> tr(W Sigma) of the schedule on the fine grid
    costs: dict  # name -> realised cost of the schedule


def _setup(maxiter: int, n_fine: int) -> Setup:
    m, sensors, W, prob = pass_by_problem()
    opt = prob.solve(maxiter=maxiter)
    const = prob.solve(constant=True, maxiter=maxiter)
    methods = {
        "uniform": RateSchedule(torch.ones(2, K, dtype=D), T),
        "best_constant": const.rates,
        "optimized": opt.rates,
    }
    bounds = {n: float(prob.objective(r.values)) for n, r in methods.items()}
    bound_paths = {
        n: torch.einsum("ij,tji->t", W, prob.bound(r.values).detach()) for n, r in methods.items()
    }
    times = {n: deterministic_schedule(r) for n, r in methods.items()}
    traces = {n: schedule_trace(m, sensors, times[n], T, n_fine, W) for n in methods}
    costs = {n: sum(s.cost * len(t) for s, t in zip(sensors, times[n])) for n in methods}
    return Setup(
        m,
        sensors,
        W,
        prob,
        opt,
        methods,
        bounds,
        bound_paths,
        times,
        {n: tr[1] for n, tr in traces.items()},
        {n: tr[0] for n, tr in traces.items()},
        costs,
    )


# -- per-seed measurement: Monte Carlo only ----------------------------------------------------


def measure_seed(su: Setup, seed: int, M: int, n_fine: int) -> dict:
    """Poisson Monte Carlo of every method's rates and the filter calibration, for one seed."""
    out = {
        name: monte_carlo_covariance(
            su.m, su.sensors, rates, M, n_fine, torch.Generator().manual_seed(seed), su.W
        )
        for name, rates in su.methods.items()
    }
    out["calibration"] = simulate_and_filter(
        su.m,
        su.sensors,
        su.times["optimized"],
        T,
        CAL_PATHS,
        CAL_FINE,
        torch.Generator().manual_seed(100 + seed),
        su.m.H,
    )
    return out


def pointwise_excess(bound_paths: dict, mcs: dict) -> tuple[float, str]:
    """The largest ``(MC mean - bound) / se`` over the RK4 grid times and the methods of one
    seed's Monte Carlo ``mcs`` (method -> :func:`monte_carlo_covariance` result), and where."""
    worst, where = -math.inf, ""
    for name in METHODS:
        mc = mcs[name]
        fine = mc["mean_path"].numel() - 1
        coarse = bound_paths[name].numel() - 1
        if fine % coarse:
            raise ValueError(f"the MC grid ({fine} steps) does not refine the RK4 grid ({coarse})")
        step = fine // coarse
        excess = mc["mean_path"][::step] - bound_paths[name]
        z = excess / mc["se_path"][::step].clamp_min(1e-15)  # se = 0 at t = 0: both equal Sigma0
        if float(z.max()) > worst:
            worst = float(z.max())
            where = f"{name}, t = {float(mc['grid'][::step][int(z.argmax())]):g}"
    return worst, where


def same_for_every_seed(values: list, what: str):
    """The one value of a deterministic quantity measured on every seed (the exact design is only
    for such quantities, docs/cdkf.md); a ValueError if the seeds disagree."""
    if not values or any(v != values[0] for v in values):
        raise ValueError(
            f"{what} must be the same on every seed to be checked as an exact quantity, got {values}"
        )
    return values[0]


def pooled(mcs: list[dict]) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """Mean path, its se, the time average and its se over every seed's paths (equal M)."""
    n = len(mcs)
    mean = sum(mc["mean_path"] for mc in mcs) / n
    se = torch.sqrt(sum(mc["se_path"] ** 2 for mc in mcs)) / n
    avg = sum(mc["time_avg"] for mc in mcs) / n
    avg_se = math.sqrt(sum(mc["time_avg_se"] ** 2 for mc in mcs)) / n
    return mean, se, avg, avg_se


# -- checks ------------------------------------------------------------------------------------


def build_checks(
    bounds: dict,
    bound_paths: dict,
    det: dict,
    opt_cost: float,
    per_seed: list[dict],
    *,
    batches: int = BATCHES,
    seeds: list[int] | None = None,
) -> list[Check]:
    """Claims 1-4 from the deterministic quantities and the per-seed Monte Carlo (``seeds``
    labels ``per_seed``; default ``0, 1, ...``). Batch checks name each batch of paths as its
    unit; the pointwise check takes one z-score per seed."""
    seeds = list(range(len(per_seed))) if seeds is None else list(seeds)
    if len(seeds) != len(per_seed):
        raise ValueError(f"{len(seeds)} seed labels for {len(per_seed)} seeds' Monte Carlo")
    units = [f"seed {s} batch {b}" for s in seeds for b in range(batches)]
    checks = []
    for name in METHODS:
        mcs = [s[name] for s in per_seed]
        gaps = [bounds[name] - b for mc in mcs for b in batch_means(mc["time_avgs"], batches)]
        checks.append(BOUND.check(gaps, units=units).renamed(f"1 bound - Poisson MC, {name}"))
    worst = [pointwise_excess(bound_paths, s)[0] for s in per_seed]
    checks.append(BOUND_POINTWISE.check(worst, units=[f"seed {s}" for s in seeds]))
    checks.append(OPT_VS_UNIFORM.check(det["optimized"] / det["uniform"]))
    checks.append(OPT_VS_CONSTANT.check(det["optimized"] / det["best_constant"]))
    checks.append(COST.check(opt_cost))
    poisson = [
        b - det["optimized"]
        for s in per_seed
        for b in batch_means(s["optimized"]["time_avgs"], batches)
    ]
    checks.append(SCHEDULE_VS_POISSON.check(poisson, units=units))
    ratios = [
        b / s["calibration"]["predicted"]
        for s in per_seed
        for b in batch_means(s["calibration"]["path_mse"], batches)
    ]
    checks.append(CALIBRATION.check(ratios, units=units))
    return checks


ROBOT_METHODS = ("optimized", "m_optimized", "kalman_bucy", "uniform", "greedy", "random")
ROBOT_RANDOM = {"m_optimized": ROBOT_VS_M_OPTIMIZED, "random": ROBOT_VS_RANDOM}


def robot_checks(res: dict) -> tuple[list[Check], list[str]]:
    """Claims 5 and 6 from :func:`icml25.cdkf.robot.run_methods`' per-seed results: the checks
    and the methods whose mean energy stays >= 0 (eligible)."""

    def avg(name, key):
        return sum(r[key] for r in res[name]) / len(res[name])

    def fixed(name, key):  # a deterministic schedule's value: the same on every seed
        return same_for_every_seed([r[key] for r in res[name]], f"robot {name} {key}")

    opt_var = fixed("optimized", "variance")
    eligible = [n for n in ROBOT_METHODS if avg(n, "min_mean_energy") >= 0]
    checks = [ROBOT_ENERGY.check(fixed("optimized", "min_mean_energy"))]
    for name in ROBOT_METHODS[1:]:
        if name not in eligible:
            continue
        if name in ROBOT_RANDOM:  # Poisson draws per seed: an interval over the seeds
            rel = [r["variance"] / opt_var - 1 for r in res[name]]
            checks.append(ROBOT_RANDOM[name].check(rel))
        else:
            checks.append(
                ROBOT_VS_SCHEDULE.check(fixed(name, "variance") / opt_var - 1).renamed(
                    f"5 robot: {name} / optimized variance - 1"
                )
            )
    checks.append(ROBOT_VIOLATION.check(fixed("optimized", "violation")))
    return checks, eligible


# -- the reproduction --------------------------------------------------------------------------


@reproduction("cdkf", seeds=SEEDS, smoke_seeds=2)
def run(r: Run) -> ReproResult:
    """Optimise the pass-by schedule, Monte Carlo per seed, check claims 1-4 (full: + robot)."""
    M, n_fine = r.size(smoke=(40, 320), quick=(2000, 1600), full=(2000, 1600))
    maxiter = r.size(smoke=5, quick=200, full=200)
    su = _setup(maxiter, n_fine)
    per_seed = r.over_seeds(lambda s: measure_seed(su, s, M, n_fine), label="Monte Carlo")
    checks = build_checks(
        su.bounds, su.bound_paths, su.det, su.costs["optimized"], per_seed, seeds=r.seeds
    )

    metrics, rows = [], []
    for name in METHODS:
        mcs = [s[name] for s in per_seed]
        _, _, avg, avg_se = pooled(mcs)
        rows.append(
            f"| {name} | {su.bounds[name]:.4f} | {avg:.4f} ± {avg_se:.4f} | {su.det[name]:.4f} | "
            f"{', '.join(str(len(t)) for t in su.times[name])} | {su.costs[name]:.2f} |"
        )
        metrics.append(Metric(f"bound {name}", su.bounds[name]))
        metrics.append(Metric(f"Poisson MC {name}", [mc["time_avg"] for mc in mcs]))
        metrics.append(Metric(f"deterministic schedule {name}", su.det[name]))
    metrics.append(
        Metric(
            "calibration MSE / predicted variance",
            [s["calibration"]["ratio"] for s in per_seed],
            description=f"{CAL_PATHS} GP paths per seed",
        )
    )
    metrics.append(
        Metric(
            "optimized / uniform (deterministic schedules)", su.det["optimized"] / su.det["uniform"]
        )
    )
    where = [pointwise_excess(su.bound_paths, s) for s in per_seed]
    metrics.append(
        Metric(
            "largest pointwise (MC mean - bound) / se",
            [z for z, _ in where],
            unit="se",
            description="per seed, at " + "; ".join(at for _, at in where),
        )
    )
    metrics.append(Metric("SLSQP iterations", su.opt.info["iterations"]))
    tables = [
        "Time-averaged posterior variance of f (T = 10, budget 12; Poisson MC pooled over seeds):"
        "\n\n| method | bound | Poisson MC (mean ± se) | deterministic schedule | counts (s1, s2) "
        "| realised cost |\n|---|---|---|---|---|---|\n" + "\n".join(rows),
    ]
    # report-only baselines of docs/cdkf.md on the same budget
    greedy = greedy_schedule(su.m, su.sensors, T, BUDGET, 0.25, su.W)
    mopt = m_optimized(
        su.m,
        su.sensors,
        su.opt.rates,
        r.size(smoke=5, quick=100, full=100),
        su.W,
        torch.Generator().manual_seed(r.seed),
        budget=BUDGET + max(COSTS),
    )
    base_rows = ["| baseline | deterministic trace | counts (s1, s2) | cost |", "|---|---|---|---|"]
    for name, times in (
        ("greedy (slots of 0.25)", greedy),
        ("M-optimized (best of 100 Poisson draws)", mopt),
    ):
        _tr, avg = schedule_trace(su.m, su.sensors, times, T, n_fine, su.W)
        cost = sum(sn.cost * len(t) for sn, t in zip(su.sensors, times))
        base_rows.append(
            f"| {name} | {avg:.4f} | {', '.join(str(len(t)) for t in times)} | {cost:.2f} |"
        )
        metrics.append(Metric(f"baseline {name.split(' ')[0]}", avg, description="report only"))
    tables.append("Other baselines (report only):\n\n" + "\n".join(base_rows))

    r.figure(_plot_rates(su.opt.rates, su.times["optimized"]), "cdkf_rates.png")
    r.figure(_plot_bound_vs_mc(su, per_seed), "cdkf_bound_vs_mc.png")
    notes = []
    if not r.quick:
        curve = _tradeoff(maxiter, n_fine)
        tables.append(
            "Budget trade-off (deterministic schedules; uniform = equal budget split):\n\n"
            + "\n".join(
                ["| budget | uniform | best constant | optimized |", "|---|---|---|---|"]
                + [
                    f"| {B:g} | {v['uniform']:.4f} | {v['best_constant']:.4f} | "
                    f"{v['optimized']:.4f} |"
                    for B, v in curve.items()
                ]
            )
        )
        r.figure(_plot_tradeoff(curve), "cdkf_tradeoff.png")
        robot_c, robot_metrics, robot_table, robot_fig, ineligible = _robot_part(r)
        checks.extend(robot_c)
        metrics.extend(robot_metrics)
        tables.append(robot_table)
        r.figure(robot_fig, "cdkf_robot.png")
        if ineligible:
            notes.append(
                "Robot: not compared (mean energy below 0 at some time, so not eligible): "
                + ", ".join(ineligible)
                + "."
            )
    return r.result(
        claim=CLAIM,
        checks=checks,
        metrics=metrics,
        criteria=CRITERIA,
        key_check=OPT_VS_UNIFORM.name,
        setup=(
            ("" if r.quick else "Part 1, 'GP-pass-by': ")
            + f"Matern-3/2 GP (l=1, s2=1), T={T:g}; sensor 1 R=0.01 cost 1; sensor 2 R=0.09 exp(p(t)^2), "
            f"p(t)=2cos(pi t/8), cost 0.2; budget {BUDGET:g}, lam_max {LAM_MAX:g}, K={K}, RK4 "
            f"N={su.prob.n_steps}; SLSQP; Monte Carlo {M} Poisson paths on {n_fine} fine steps per "
            f"seed and method, seeds {r.seeds}, in {BATCHES} batches each; calibration with "
            f"{CAL_PATHS} simulated GP paths per seed."
            + (
                ""
                if r.quick
                else " Part 2, 'robot with energy': the same GP, three sensors (precise R=0.01 "
                "cost 1; on a 1-D robot R=0.09 exp(p^2) cost 0.2, dp/dt=u, |u|<=1, p(0)=2; velocity "
                "C=[0,1] R=0.05 cost 0.5), energy 15 drained by 0.5u^2 and the measurement costs, "
                "mean energy >= 0; rates and control optimised jointly (K=40, N=200); baselines "
                "uniform, greedy (0.25-s slots), random (rate 1, Poisson), M-optimized (M=100) and "
                "the Kalman-Bucy relaxation; 2000 Monte-Carlo paths per seed for random."
            )
        ),
        tables=tables,
        notes=notes,
        deviations=DEVIATIONS,
        power=_power_text(checks),
    )


def _tradeoff(maxiter: int, n_fine: int) -> dict:
    m, sensors, W, _ = pass_by_problem()
    curve = {}
    for B in (4.0, 8.0, 12.0, 20.0):
        _m, _s, _W, p = pass_by_problem(B)
        o, c = p.solve(maxiter=maxiter), p.solve(constant=True, maxiter=maxiter)
        uni = RateSchedule(p.initial_rates(), T)
        curve[B] = {
            k: schedule_trace(m, sensors, deterministic_schedule(rr), T, n_fine, W)[1]
            for k, rr in (("uniform", uni), ("best_constant", c.rates), ("optimized", o.rates))
        }
    return curve


def _robot_part(r: Run):
    """Full mode's "robot with energy" setting: checks, metrics, table, figure, ineligible."""
    from icml25.cdkf import robot

    plans = robot.solve_plans(maxiter=r.size(smoke=3, quick=200, full=200))
    M, n_fine = r.size(smoke=(50, 200), quick=(2000, 1600), full=(2000, 1600))
    res = robot.run_methods(plans, r.seeds, M, n_fine, m_draws=r.size(smoke=5, quick=100, full=100))
    checks, eligible = robot_checks(res)
    opt = plans["optimized"]
    aux_min = float(opt.info["aux_path"][:, 1].min())

    def avg(name, key):
        return sum(x[key] for x in res[name]) / len(res[name])

    rows = [
        "| method | variance (time avg, mean ± sd over seeds) | std / max over t | energy mean / std "
        "/ max | final mean energy | violation freq. | counts (precise, robot, velocity) |",
        "|---|---|---|---|---|---|---|",
    ]
    metrics = []
    for name in ROBOT_METHODS:
        vals = [x["variance"] for x in res[name]]
        mean = sum(vals) / len(vals)
        sd = (sum((v - mean) ** 2 for v in vals) / max(len(vals) - 1, 1)) ** 0.5
        counts = ", ".join(f"{c:g}" for c in res[name][0]["counts"])
        rows.append(
            f"| {name} | {mean:.4f} ± {sd:.4f} | {avg(name, 'variance_std'):.3f} / "
            f"{avg(name, 'variance_max'):.3f} | {avg(name, 'energy_mean'):.2f} / "
            f"{avg(name, 'energy_std'):.2f} / {avg(name, 'energy_max'):.1f} | "
            f"{avg(name, 'final_energy'):.2f} | {avg(name, 'violation'):.3f} | {counts} |"
        )
        metrics.append(Metric(f"robot variance {name}", vals))
        metrics.append(Metric(f"robot final mean energy {name}", avg(name, "final_energy")))
    metrics.append(Metric("robot SLSQP iterations", opt.info["iterations"]))
    metrics.append(Metric("robot planned min mean energy", aux_min))
    table = (
        "Robot with energy (variance = posterior variance of f; statistics over time, and over "
        "Monte-Carlo paths for random; deterministic schedules are the same for every seed):\n\n"
        + "\n".join(rows)
        + f"\n\nJoint SLSQP: {opt.info['iterations']} iterations ({opt.info['status']}); planned "
        f"mean energy min {aux_min:.2e} on the RK4 grid; Kalman-Bucy relaxation: "
        f"{plans['kalman_bucy'].info['iterations']} iterations. Methods with mean energy >= 0 "
        f"at all times: {', '.join(eligible) or 'none'}."
    )
    ineligible = [n for n in ROBOT_METHODS if n not in eligible]
    return checks, metrics, table, _plot_robot(plans, res), ineligible


# -- figures -----------------------------------------------------------------------------------


def _plot_rates(rates: RateSchedule, times):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    edges = torch.linspace(0, rates.T, rates.K + 1)
    for s, name in enumerate(("precise sensor", "pass-by sensor")):
        line = ax.stairs(rates.values[s].detach().numpy(), edges.numpy(), label=name)
        ax.plot(
            times[s].numpy(),
            [-0.3 - 0.3 * s] * len(times[s]),
            "|",
            color=line.get_edgecolor(),
            ms=8,
        )
    ax.set_xlabel("t")
    ax.set_ylabel("rate (1/s); ticks: schedule")
    ax.legend()
    ax.set_title("optimised measurement rates and deterministic time stamps")
    return fig


def _plot_bound_vs_mc(su: Setup, per_seed: list[dict]):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    grid = torch.linspace(0, T, su.prob.n_steps + 1)
    for name in METHODS:
        line = ax.plot(grid, su.bound_paths[name], label=f"{name}: bound")[0]
        mean, se, _, _ = pooled([s[name] for s in per_seed])
        fine = per_seed[0][name]["grid"]
        ax.plot(fine, mean, ":", color=line.get_color(), label=f"{name}: Poisson MC")
        ax.fill_between(fine, mean - 2 * se, mean + 2 * se, color=line.get_color(), alpha=0.2)
        ax.plot(
            fine,
            su.det_paths[name],
            "--",
            color=line.get_color(),
            lw=0.8,
            label=f"{name}: schedule",
        )
    ax.set_xlabel("t")
    ax.set_ylabel("posterior variance of f (MC: mean ± 2 se, seeds pooled)")
    ax.legend(fontsize=6)
    return fig


def _plot_tradeoff(curve: dict):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    budgets = sorted(curve)
    for name in METHODS:
        ax.plot(budgets, [curve[b][name] for b in budgets], "o-", label=name)
    ax.set_xlabel("expected-cost budget B")
    ax.set_ylabel("time-averaged variance of f (schedule)")
    ax.set_title("GP pass-by: budget trade-off")
    ax.legend()
    return fig


def _plot_robot(plans, res):
    from icml25.cdkf import robot

    plt = pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(7.5, 8.5), sharex=True)
    opt = plans["optimized"]
    edges = torch.linspace(0, robot.T, robot.K + 1).numpy()
    times = deterministic_schedule(opt.rates, "floor")
    for s, name in enumerate(robot.NAMES):
        line = axes[0].stairs(opt.rates.values[s].detach().numpy(), edges, label=name)
        axes[0].plot(
            times[s].numpy(), [-0.3 - 0.3 * s] * len(times[s]), "|", color=line.get_edgecolor()
        )
    axes[0].set_ylabel("optimised rate (1/s)")
    axes[0].legend(fontsize=7)
    grid = torch.linspace(0, robot.T, 401, dtype=D)
    for name, u in (
        ("optimized", opt.info["controls"]),
        ("baseline path", robot.baseline_controls()),
    ):
        pos = robot.position_fn(u)
        axes[1].plot(grid.numpy(), [pos(float(t)) for t in grid], label=f"position, {name}")
    ax2 = axes[1].twinx()
    for name in ("optimized", "uniform", "greedy", "random"):
        e = res[name][0]["energy_path"]
        ax2.plot(torch.linspace(0, robot.T, e.numel()).numpy(), e.numpy(), ":", label=name)
    ax2.axhline(0.0, color="k", lw=0.5)
    ax2.set_ylabel("mean energy (dotted)")
    ax2.legend(fontsize=6, loc="upper right")
    axes[1].set_ylabel("robot position")
    axes[1].legend(fontsize=6, loc="lower right")
    for name in ROBOT_METHODS:
        tr = res[name][0]["trace_path"]
        axes[2].plot(torch.linspace(0, robot.T, tr.numel()).numpy(), tr.numpy(), label=name, lw=0.9)
    axes[2].set_ylabel("variance of f")
    axes[2].set_xlabel("t")
    axes[2].legend(fontsize=6, ncol=3)
    fig.suptitle("robot with energy")
    return fig
