"""The reproduction at smoke size (quick and full mode) and its pre-registered criteria."""

from __future__ import annotations

from icml25.certificates import repro

METRICS = ("true V(x0, H)", "P_safe front_door", "P_safe dtcbf_offline", "max |Q_fd - Q|")


def test_quick_smoke(tmp_path, check_smoke):
    result = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    check_smoke(result, "certificates", metrics=METRICS, prefixes=("progress ",),
                ranges={"P_safe ": (0.0, 1.0), "true V(x0, H)": (0.82, 0.822)})  # fmt: skip
    names = [c.name for c in result.checks]
    assert names[0] == repro.PREMISE_TRUE.name and repro.FEASIBLE.name in names
    assert {f.name for f in result.figures} == {"cert_safety_curve.png", "cert_tradeoff.png"}
    assert result.key_check == repro.CERT_SAFE.name


def test_full_smoke_runs_the_sweep(tmp_path, check_smoke):
    result = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(result, "certificates", metrics=METRICS)
    sweep = [c for c in result.checks if c.name.startswith(repro.FULL_KAPPA.name)]
    assert len(sweep) == 4  # smoke grid: kappa in {0, 1} x n in {500, 1000}
    assert any(t.startswith("Sweep") for t in result.tables)
    assert "cert_kappa_sweep.png" in {f.name for f in result.figures}


def test_checks_fail_on_planted_unsafe_numbers():
    """The checks can fail: a certificate whose closed loop is as unsafe as DTCBF's."""
    st = repro.Setting(1.0)
    runs = []
    for s in range(3):
        m = {"v_fd": st.v_true + 0.1 + 0.003 * s, "v_naive": 0.84, "backoff": 0, "empty": 0,
             "err_fd": (0.6 + 0.01 * s, 0.1), "err_naive": (0.5, 0.05 + 0.002 * s)}  # fmt: skip
        m["eval"] = {n: {"p_safe": 0.5 + 0.01 * s, "progress": 10.0} for n in
                     ("nominal", "dtcbf_offline", "front_door")}  # fmt: skip
        m["eval"]["nominal"]["p_safe"] = 0.9
        runs.append(m)
    verdicts = {c.name: c.verdict for c in repro.quick_checks(st, runs)}
    assert verdicts[repro.CERT_SAFE.name] == "did not hold"
    assert verdicts[repro.PREMISE_EST.name] == "did not hold"
    assert verdicts[repro.NOMINAL_FAILS.name] == "did not hold"
    assert verdicts[repro.BIAS_MAX.name] == "did not hold"
    assert verdicts[repro.BIAS_MEAN.name] == "did not hold"
