"""Reproduction of paper 02 (distinguishability queries, DistQ) at small scale.

Part A (quick and full): reward learning on Pendulum-v1 segments. At an equal number of queries,
distinguishability queries with DistQ selection against pairwise comparisons with PEBBLE's
disagreement selection; a Boltzmann teacher (beta = 5 / std of the returns) and a noise-free one;
the score is the mean held-out Pearson of the learned return over the evaluation budgets.
Part B (quick and full): 12 items with convex utilities; noise-free answers to 60 PCQs vs 60 DQs;
balanced accuracy of expected-utility choices between a sure item and a lottery.
Part C (full only): the online PEBBLE loop with SAC on Pendulum-v1, PCQ vs DQ feedback.

The module reads: the claim and the pre-registered criteria (every one a paired comparison over
seeds: the same seed's segments, items or environment for both arms) -> ``setup`` -> per-seed
measurement (``measure_seed``: Part A; ``lottery_experiment``: Part B; ``measure_part_c``) ->
``evaluate`` (one line per criterion) -> ``metrics`` -> ``run``. The experiments are in
``experiment.py``, the figures in ``figures.py``; the fixed discussion (deviations, the sizing of
the seed counts) is in docs/distinguishability.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from icml25.distinguishability.experiment import (
    CurveConfig,
    learning_curve,
    lottery_experiment,
    online_comparison,
    split,
)
from icml25.distinguishability.figures import (
    plot_curves,
    plot_lottery,
    plot_returns,
    plot_scatter,
    plot_teacher_error,
    plot_utilities,
)
from icml25.distinguishability.segments import collect_segments
from icml25.distinguishability.teachers import ScriptedTeacher
from icml25.report import (
    Check,
    Criterion,
    Metric,
    ReproResult,
    Run,
    mean_sd,
    power_summary,
    reproduction,
    table,
    torch_threads,
)

CLAIM = (
    "At an equal number of queries, rewards learned from distinguishability queries with DistQ "
    "selection recover the true reward better (cardinally) than rewards learned from pairwise "
    "comparisons with disagreement selection, and DQ-learned utilities choose better under risk."
)
BASE, PAPER = "pcq+disagreement", "dq+distq"
FULL_EXTRA = ("pcq+uniform", "dq+uniform", "dq+informative", "dq+easy")
TEACHERS = ("boltzmann", "oracle")

# -- pre-registered: seeds and criteria (fixed before the numbers of this version) ---------------

#: Seeds in quick / full mode (Parts A and B). Quick: about 15 s per seed on one core, 8 seeds
#: detect a Boltzmann-teacher gain like the earlier quick runs' (docs/distinguishability.md,
#: "Power"); full: 10 seeds for the
#: main comparison at budget 120, the four ablation methods on the first N_ABLATION seeds, the
#: online loop (Part C, ~5 min per seed) on the first N_RL.
N_QUICK, N_FULL = 8, 10
N_ABLATION, N_RL = 5, 3

A_GAIN = {
    t: Criterion(
        f"A {t} teacher: score DQ+DistQ - PCQ+disagreement > 0",
        "paired",
        above=0.0,
        description=f"speed-of-learning score (mean held-out Pearson r(R_hat, R) over the "
        f"budgets) at equal queries, {t} teacher, paired by seed (same segments and split)",
    )
    for t in TEACHERS
}
B_GAIN = Criterion(
    "B lottery balanced accuracy DQ - PCQ > 0",
    "paired",
    above=0.0,
    description="balanced accuracy of expected-utility choices from utilities fitted to 60 "
    "noise-free DQ vs 60 PCQ answers, paired by seed (same items and decisions)",
)
C_GAIN = Criterion(
    "C final true return DQ+DistQ - PCQ+disagreement > 0",
    "paired",
    above=0.0,
    unit="return",
    description="online PEBBLE with SAC on Pendulum-v1, final true return of the deterministic "
    "policy (10 episodes), paired by seed",
)
CRITERIA = [*A_GAIN.values(), B_GAIN, C_GAIN]


# -- setup ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """What every seed shares: the mode, Part A's curve settings and methods, and the seeds that
    run the ablation methods."""

    smoke: bool
    full: bool
    cfg: CurveConfig
    methods: tuple[str, ...]
    ablation_seeds: frozenset[int]
    first_seed: int

    def methods_of(self, seed: int) -> tuple[str, ...]:
        """Part A's methods on ``seed``: the full mode's ablations on the first seeds only."""
        return self.methods if seed in self.ablation_seeds else (BASE, PAPER)


def setup(r: Run) -> Setup:
    budgets = r.size(smoke=(10, 20), quick=(20, 40, 60), full=(20, 40, 60, 80, 100, 120))
    cfg = CurveConfig(budgets=budgets)
    if r.smoke:
        cfg = CurveConfig(budgets=budgets, epochs=5, n_quadruples=100)
    return Setup(
        smoke=r.smoke,
        full=not r.quick,
        cfg=cfg,
        methods=(BASE, PAPER) + (() if r.quick else FULL_EXTRA),
        ablation_seeds=frozenset(r.seeds[:N_ABLATION]),
        first_seed=r.seeds[0],
    )


# -- per-seed measurement -------------------------------------------------------------------------
def measure_seed(seed: int, s: Setup) -> dict:
    """Part A on one seed (the first keeps its Boltzmann-teacher ensembles for the scatter plot)."""
    return measure_part_a(
        seed, s.cfg, s.methods_of(seed), smoke=s.smoke, keep_ensembles=seed == s.first_seed
    )


def _teacher(name: str, pool, seed: int) -> ScriptedTeacher:
    if name == "boltzmann":
        return ScriptedTeacher.relative(pool, 5.0, rng=seed + 101)
    return ScriptedTeacher.preset("oracle", rng=seed + 101)


def measure_part_a(
    seed: int,
    cfg: CurveConfig,
    methods,
    *,
    smoke: bool = False,
    keep_ensembles: bool = False,
) -> dict:
    """One seed of Part A: segments, split, a learning curve per (teacher, method) from the same
    pool and held-out set, and (unless smoke) the per-binary-answer view (DQ at 30 queries vs PCQ
    at 60). ``keep_ensembles`` keeps the Boltzmann teacher's reward ensembles for the scatter plot.
    """
    buf = collect_segments(n_episodes=16 if smoke else 120, segment_len=25, seed=seed)
    pool, held = split(buf, 0.7, seed)
    curves: dict[tuple[str, str], dict] = {}
    per_answer: dict[str, tuple[float, float]] = {}
    ensembles: dict[str, object] = {}
    for tname in TEACHERS:
        for method in methods:
            res = learning_curve(pool, held, _teacher(tname, pool, seed), method, cfg, seed)
            ens = res.pop("ensemble")
            if keep_ensembles and tname == "boltzmann" and method in (BASE, PAPER):
                ensembles[method] = ens
            curves[(tname, method)] = res
        if not smoke:
            half = CurveConfig(budgets=(30,))
            r30 = learning_curve(pool, held, _teacher(tname, pool, seed), PAPER, half, seed)
            pcq60 = curves[(tname, BASE)]["curve"][60]["pearson"]
            per_answer[tname] = (r30["curve"][30]["pearson"], pcq60)
    return {
        "curves": curves,
        "per_answer": per_answer,
        "ensembles": ensembles,
        "held": held if keep_ensembles else None,
    }


@dataclass(frozen=True)
class PartC:
    """Part C's per-seed true-return curves, final returns and curve means, by method."""

    seeds: list[int]
    steps_axis: list
    curves: dict[str, list]
    final: dict[str, list[float]]
    auc: dict[str, list[float]]


def measure_part_c(r: Run, seeds: list[int], s: Setup) -> PartC:
    """Part C: the online PEBBLE loop, PCQ vs DQ feedback and SAC on the true reward, per seed.
    SAC's 256 x 128 batches run on 2 threads (the full run's budget was measured so; Parts A and
    B's tiny networks run on the harness's one thread)."""
    with torch_threads(2):
        hists = r.over_seeds(
            lambda seed: online_comparison(seed, (BASE, PAPER), smoke=s.smoke),
            seeds=seeds,
            label="Part C (online PEBBLE)",
        )
    curves = {k: [h[k]["true_return"] for h in hists] for k in hists[0]}
    return PartC(
        seeds=seeds,
        steps_axis=hists[0][BASE]["step"],
        curves=curves,
        final={k: [c[-1] for c in v] for k, v in curves.items()},
        auc={k: [float(np.mean(c)) for c in v] for k, v in curves.items()},
    )


def by_arm(part_a: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """``{(teacher, method): [one curve record per seed that ran it]}``."""
    res: dict[tuple[str, str], list[dict]] = {}
    for seed_res in part_a:
        for key, val in seed_res["curves"].items():
            res.setdefault(key, []).append(val)
    return res


# -- checks and metrics ---------------------------------------------------------------------------
def _scores(res: dict, key: str = "score") -> dict[tuple[str, str], list[float]]:
    return {arm: [x[key] for x in v] for arm, v in res.items()}


def evaluate(res: dict, lot: list[dict], part_c: PartC | None) -> list[Check]:
    scores = _scores(res)
    checks = [A_GAIN[t].check(scores[(t, PAPER)], scores[(t, BASE)]) for t in TEACHERS]
    checks.append(B_GAIN.check([x["acc_dq"] for x in lot], [x["acc_pcq"] for x in lot]))
    if part_c is not None:
        checks.append(part_c_check(part_c.final, part_c.seeds))
    return checks


def part_c_check(final: dict[str, list[float]], seeds: list[int]):
    """Check C from Part C's final true returns (method -> one value per seed of ``seeds``).
    Part C runs on the first :data:`N_RL` seeds only, fewer than the run's seeds, so each value
    is labelled with its seed (its independent unit: environment, SAC and teacher seeds)."""
    return C_GAIN.check(final[PAPER], final[BASE], units=[f"seed {s}" for s in seeds])


def metrics(res: dict, part_a: list[dict], lot: list[dict], part_c: PartC | None, s: Setup):
    out: list[Metric] = []
    for tname in TEACHERS:
        for method in s.methods:
            rs = res[(tname, method)]
            out.append(Metric(f"A score {tname} {method}", [x["score"] for x in rs]))
            out.append(
                Metric(f"A Spearman score {tname} {method}", [x["score_spearman"] for x in rs])
            )
            out.append(
                Metric(f"A teacher error {tname} {method}", [x["teacher_error"] for x in rs])
            )
    scores = _scores(res)
    for t in TEACHERS:
        gain = np.array(scores[(t, PAPER)]) - np.array(scores[(t, BASE)])
        out.append(Metric(f"A score gain dq-pcq {t}", list(gain)))
        s_gain = [
            a["score_spearman"] - b["score_spearman"]
            for a, b in zip(res[(t, PAPER)], res[(t, BASE)])
        ]
        out.append(
            Metric(
                f"A Spearman score gain dq-pcq {t}",
                s_gain,
                description="as the score gain, on the rank correlation (reported, not tested)",
            )
        )
        out.append(
            Metric(
                f"A seeds with DQ score >= PCQ {t}",
                [float(g >= 0) for g in gain],
                description="1 per seed where DQ+DistQ scored at least PCQ+disagreement "
                "(the former rule's count; reported, not tested)",
            )
        )
    if not s.smoke:
        for tname in TEACHERS:
            out.append(
                Metric(f"A per-answer DQ@30 {tname}", [p["per_answer"][tname][0] for p in part_a])
            )
    out += [
        Metric("B lottery balanced accuracy PCQ", [x["acc_pcq"] for x in lot]),
        Metric("B lottery balanced accuracy DQ", [x["acc_dq"] for x in lot]),
        Metric("B utility Pearson PCQ", [x["pearson_pcq"] for x in lot]),
        Metric("B utility Pearson DQ", [x["pearson_dq"] for x in lot]),
    ]
    if part_c is not None:
        out += [Metric(f"C final true return {k}", v) for k, v in part_c.final.items()]
        out += [Metric(f"C mean return over evaluations {k}", v) for k, v in part_c.auc.items()]
    return out


# -- tables and texts -----------------------------------------------------------------------------
def table_part_a(res: dict, s: Setup) -> str:
    budgets, last = s.cfg.budgets, s.cfg.budgets[-1]
    rows = []
    for tname in TEACHERS:
        for method in s.methods:
            rs = res[(tname, method)]

            def mean_at(key: str, rs=rs) -> str:
                return f"{np.mean([x['curve'][last][key] for x in rs]):.3f}"

            rows.append(
                [
                    tname,
                    method,
                    *(mean_sd([x["curve"][b]["pearson"] for x in rs]) for b in budgets),
                    mean_sd([x["score"] for x in rs], 4),
                    mean_sd([x["score_spearman"] for x in rs], 4),
                    mean_at("spearman"),
                    mean_at("pair_acc"),
                    mean_at("diff_acc"),
                    f"{np.mean([x['teacher_error'] for x in rs]):.3f}",
                    len(rs),
                ]
            )
    columns = ["teacher", "method", *(f"Pearson @{b}" for b in budgets), "score (mean ± sd)"]
    columns += ["Spearman score", "Spearman @max", "pair acc @max", "diff acc @max"]
    columns += ["teacher error", "seeds"]
    caption = (
        "Part A: held-out Pearson r(R_hat, R) of the learned return (mean ± sd over seeds), "
        "score = mean over the budgets; the Spearman score is the same mean of the rank "
        "correlation, reported beside it because Pearson rewards a cardinal (affine) fit, which "
        "is what DQs add by construction, while Spearman sees only the order PCQs also teach:"
    )
    return table(columns, rows, caption=caption) + "\n\n" + _spearman_gains(res)


def _spearman_gains(res) -> str:
    """Paired mean gain of DQ+DistQ over PCQ+disagreement in the Spearman score, per teacher
    (a 95% t-interval over seeds; reported, not a pre-registered check)."""
    from scipy import stats

    out = []
    for t in TEACHERS:
        a = np.array([x["score_spearman"] for x in res[(t, PAPER)]])
        b = np.array([x["score_spearman"] for x in res[(t, BASE)]])
        d = a - b
        if len(d) > 1:
            half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
            out.append(f"{t}: {d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]")
        else:
            out.append(f"{t}: {d.mean():+.3f}")
    return (
        "Spearman-score gain of DQ+DistQ over PCQ+disagreement (paired, 95% t-interval over "
        "seeds; reported, not checked): " + "; ".join(out) + "."
    )


def table_per_answer(part_a: list[dict]) -> str:
    rows = [
        [
            tname,
            f"{np.mean([p['per_answer'][tname][0] for p in part_a]):.3f}",
            f"{np.mean([p['per_answer'][tname][1] for p in part_a]):.3f}",
        ]
        for tname in TEACHERS
    ]
    return table(
        ["teacher", "DQ at 30 queries (60 answers)", "PCQ at 60 queries (60 answers)"],
        rows,
        caption="Per binary answer (report only): held-out Pearson when DQ and PCQ got the same "
        "number of answers:",
    )


def table_part_b(lot: list[dict], seeds: list[int]) -> str:
    rows = [
        [
            s,
            f"{x['acc_pcq']:.3f}",
            f"{x['acc_dq']:.3f}",
            f"{x['pearson_pcq']:.3f}",
            f"{x['pearson_dq']:.3f}",
        ]
        for s, x in zip(seeds, lot)
    ]
    return table(
        ["seed", "balanced acc PCQ", "balanced acc DQ", "Pearson PCQ", "Pearson DQ"],
        rows,
        caption="Part B (12 items, u_i = exp(0.35 i), 60 noise-free answers each, 1000 decisions):",
    )


def table_part_c(c: PartC) -> str:
    rows = [[k, mean_sd(c.final[k], 1), f"{np.mean(c.auc[k]):.1f}"] for k in c.final]
    return table(
        ["method", "final return", "mean over the curve"],
        rows,
        caption="Part C (online PEBBLE, true return of the deterministic policy, mean ± sd over "
        f"seeds {c.seeds}):",
    )


def setup_text(s: Setup, seeds: list[int]) -> str:
    n_a = len(seeds)
    text = (
        f"Part A: Pendulum-v1, 120 scripted episodes x 200 steps per seed cut into 960 segments "
        f"of 25 steps, 70% query pool / 30% held out; reward ensemble K=3, 2 x 32 hidden, "
        f"full-batch Adam lr 3e-3, 60 epochs per round continuing; rounds of 10 queries, "
        f"large_batch 10, first round uniform; budgets {list(s.cfg.budgets)}; teachers: "
        f"Boltzmann (beta = 5 / std of returns) and oracle; {n_a} seeds "
        f"{seeds[0]}-{seeds[-1]}, both methods on the same segments, split and teacher "
        f"per seed (paired). Part B: 12 items, u_i = exp(0.35 i), 60 noise-free PCQ vs 60 DQ "
        f"answers, fit_utilities (Adam 0.05, 2000 steps, 1e-3 L2), 1000 lottery decisions, the "
        f"same {n_a} seeds."
    )
    if s.full:
        text += (
            f" Ablation methods ({', '.join(FULL_EXTRA)}) on the first "
            f"{min(N_ABLATION, n_a)} seeds. Part C: PEBBLE with SAC (2 x 128) on Pendulum-v1, "
            "1000 seed steps, no unsupervised phase, segments of 25, 20 queries per round every "
            "1500 steps, 120 queries, 15k steps, oracle teacher, the first "
            f"{min(N_RL, n_a)} seeds; SAC on the true reward as ceiling."
        )
    return text


# -- the run --------------------------------------------------------------------------------------
@reproduction("distinguishability", seeds=(N_QUICK, N_FULL), smoke_seeds=2)
def run(r: Run) -> ReproResult:
    s = setup(r)
    part_a = r.over_seeds(lambda seed: measure_seed(seed, s), label="Part A (reward learning)")
    lot = r.over_seeds(lottery_experiment, label="Part B (lotteries)")
    part_c = measure_part_c(r, r.seeds[:N_RL], s) if s.full else None
    res = by_arm(part_a)
    checks = evaluate(res, lot, part_c)
    r.figure(
        plot_curves(s.cfg.budgets, s.methods, res, TEACHERS, (BASE, PAPER)),
        "pearson_vs_queries.png",
    )
    r.figure(plot_teacher_error(s.methods, res, TEACHERS), "teacher_error.png")
    r.figure(plot_scatter(part_a[0], s.cfg.budgets[-1], (BASE, PAPER)), "reward_scatter.png")
    acc_p, acc_d = [x["acc_pcq"] for x in lot], [x["acc_dq"] for x in lot]
    r.figure(plot_lottery(r.seeds, acc_p, acc_d), "lottery_accuracy.png")
    r.figure(plot_utilities(lot[0]), "utility_recovery.png")
    tables = [table_part_a(res, s), *([] if s.smoke else [table_per_answer(part_a)])]
    tables.append(table_part_b(lot, r.seeds))
    if part_c is not None:
        tables.append(table_part_c(part_c))
        r.figure(plot_returns(part_c.steps_axis, part_c.curves), "return_curves.png")
    return r.result(
        claim=CLAIM,
        checks=checks,
        criteria=CRITERIA,
        key_check=A_GAIN[TEACHERS[0]].name,
        metrics=metrics(res, part_a, lot, part_c, s),
        setup=setup_text(s, r.seeds),
        power=power_summary(checks),
        tables=tables,
    )
