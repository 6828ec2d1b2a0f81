"""The reproduction at smoke size (quick and full mode) and its pre-registered criteria."""

from __future__ import annotations

import pytest

from icml25.certificates import experiment, repro

METRICS = ("true V(x0, H)", "P_safe front_door", "P_safe dtcbf_offline", "max |Q_fd - Q|")


def test_quick_smoke(tmp_path, check_smoke):
    result = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    check_smoke(
        result,
        "certificates",
        metrics=METRICS,
        prefixes=("progress ",),
        ranges={"P_safe ": (0.0, 1.0), "true V(x0, H)": (0.82, 0.822)},
    )
    names = [c.name for c in result.checks]
    assert names[0] == repro.PREMISE_TRUE.name and repro.FEASIBLE.name in names
    assert {f.name for f in result.figures} == {"cert_safety_curve.png", "cert_tradeoff.png"}
    assert result.key_check == repro.CERT_SAFE.name


def test_full_smoke_runs_the_sweep(tmp_path, check_smoke):
    result = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(result, "certificates", metrics=METRICS + ("neural max |Q_nn - Q|",))
    sweep = [c for c in result.checks if c.name.startswith(repro.FULL_KAPPA.name)]
    assert len(sweep) == 4  # smoke grid: kappa in {0, 1} x n in {500, 1000}
    assert any(t.startswith("Sweep") for t in result.tables)
    assert "cert_kappa_sweep.png" in {f.name for f in result.figures}
    # the neural estimator is a trained network: one fit per seed, an interval over the seeds
    by = {c.name: c for c in result.checks}
    for crit in (repro.NEURAL_SAFE, repro.NEURAL_ERR):
        c = by[crit.name]
        assert c.criterion.design == "mean" and c.n == len(result.seeds) == 2
        assert c.data["units"] == ["seed 0", "seed 1"] and c.low < c.high
    # fits on different seeds differ (a repeated value would be one fit counted twice)
    assert len(set(by[repro.NEURAL_ERR.name].data["values"])) == 2
    exact = {
        c.criterion.declared_as or c.name for c in result.checks if c.criterion.design == "exact"
    }
    assert exact == DETERMINISTIC


#: the only quantities checked as exact: no data involved (1a, 3a) or zero by Theorem 3.4 (5)
DETERMINISTIC = {repro.PREMISE_TRUE.name, repro.NOMINAL_FAILS.name, repro.FEASIBLE.name}


def test_only_deterministic_quantities_are_exact_criteria():
    exact = {c.name for c in repro.CRITERIA if c.design == "exact"}
    assert exact == DETERMINISTIC
    assert repro.CERT_MC.design == "proportion" and repro.CERT_MC.above == 0.78
    assert (repro.NEURAL_SAFE.above, repro.NEURAL_ERR.below) == (0.8, 0.15)  # thresholds kept


def test_monte_carlo_check_counts_trajectories_once_per_seed(tmp_path):
    result = repro.run(quick=True, seed=3, out=tmp_path, smoke=True)
    c = next(c for c in result.checks if c.name == repro.CERT_MC.name)
    n = experiment.MC_SIMS * experiment.MC_TRAJ
    assert c.criterion.design == "proportion" and c.data["n"] == [n, n]
    assert c.data["units"] == ["seed 3", "seed 4"]
    # the counts are the safe trajectories of the rollouts the metric averages
    mc = next(m for m in result.metrics if m.name == "Monte-Carlo P_safe front-door")
    assert [k / n for k in c.data["successes"]] == pytest.approx(mc.values, abs=1e-12)
    assert c.estimate == pytest.approx(sum(c.data["successes"]) / (2 * n))


@pytest.mark.filterwarnings("ignore:.*never taken in the data")
def test_exact_quantities_do_not_depend_on_the_data():
    """What the exact checks read is the same on every seed, even with data too small to cover
    the state space: the nominal uses no data, and Theorem 3.4 leaves no certified set empty."""
    st = experiment.Setting(1.0)
    runs = [experiment.run_seed(st, s, 20, mc=False) for s in range(3)]
    assert len({r["eval"]["nominal"]["p_safe"] for r in runs}) == 1
    assert [r["empty"] for r in runs] == [0, 0, 0]
    assert len({r["v_fd"] for r in runs}) == 3  # the fits themselves do vary
    with pytest.raises(ValueError, match="same on every seed"):
        repro.same_for_every_seed([0.07, 0.08], "the nominal's P_safe")


@pytest.mark.slow
def test_quick_repro_verdicts_are_the_recorded_ones(tmp_path, assert_recorded_verdicts):
    result = repro.run(quick=True, seed=0, out=tmp_path)
    assert_recorded_verdicts(result, "certificates", mode="quick")
    assert result.status == "held"


def test_checks_fail_on_planted_unsafe_numbers():
    """The checks can fail: a certificate whose closed loop is as unsafe as DTCBF's."""
    st = experiment.Setting(1.0)
    runs = []
    for s in range(3):
        m = {
            "seed": s,
            "v_fd": st.v_true + 0.1 + 0.003 * s,
            "v_naive": 0.84,
            "backoff": 0,
            "empty": 0,
            "err_fd": (0.6 + 0.01 * s, 0.1),
            "err_naive": (0.5, 0.05 + 0.002 * s),
        }
        m["eval"] = {
            n: {"p_safe": 0.5 + 0.01 * s, "progress": 10.0}
            for n in ("nominal", "dtcbf_offline", "front_door")
        }
        m["eval"]["nominal"]["p_safe"] = 0.9
        m["mc"] = {"safe": 5_000 + 30 * s, "n": experiment.MC_SIMS * experiment.MC_TRAJ}
        runs.append(m)
    verdicts = {c.name: c.verdict for c in repro.quick_checks(st, runs)}
    assert verdicts[repro.CERT_SAFE.name] == "did not hold"
    assert verdicts[repro.CERT_MC.name] == "did not hold"
    assert verdicts[repro.PREMISE_EST.name] == "did not hold"
    assert verdicts[repro.NOMINAL_FAILS.name] == "did not hold"
    assert verdicts[repro.BIAS_MAX.name] == "did not hold"
    assert verdicts[repro.BIAS_MEAN.name] == "did not hold"
