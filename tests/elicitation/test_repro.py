"""The reproduction at smoke size (structure of the numbers), its fidelity-gate paths and units with
stand-in checkpoints and loops (seconds), and quick mode (slow)."""

from __future__ import annotations

import json
import math

import pytest

from icml25.elicitation import repro


def test_smoke_reproduction(tmp_path, check_smoke):
    from icml25.elicitation.repro import CRITERIA, run

    res = run(quick=True, smoke=True, out=tmp_path)
    check_smoke(
        res,
        "elicitation",
        metrics=("SR reverse model", "SR DPO iterate 1", "coverage FW mixture"),
        ranges={"SR ": (0.0, 1.0), "coverage ": (0.0, 3.0)},
    )
    assert [c.criterion.name for c in res.checks] == [c.name for c in CRITERIA]
    # quick/smoke: the loop seeds on the one pair of checkpoints are the units
    assert all(
        c.data["units"] == ["loop seed 0 (world 0)", "loop seed 1 (world 0)"] for c in res.checks
    )
    assert {p.name for p in res.figures} == {
        "trigger_histograms.png",
        "coverage_sr.png",
        "reward_spreads.png",
    }
    again = run(quick=True, smoke=True, out=tmp_path)  # cached checkpoints and loops
    assert [c.estimate for c in again.checks] == [c.estimate for c in res.checks]


# -- the gate and the units, with stand-ins for the trained checkpoints and loops ------------------


def _failing_gate(seed: int) -> None:
    from icml25.elicitation import PlantedTriggerWorld

    # the real gate on a target that elicits the payload without a trigger
    PlantedTriggerWorld(seed).check_fidelity({0: 0.5, 1: 0.3, 2: 0.8})


def _evaluation(sr: float, cov: float) -> dict:
    return {
        "sr": sr,
        "logprob": math.log(sr),
        "coverage": cov,
        "hist": [[3, 1, 0]] * 4,
        "mean_count": 1.0 + sr,
        "distinct2": 0.5,
    }


def _fake_loops(ck, seed, sz, out, *, ablations):
    """A run of the shape ``loops`` returns, with numbers that differ by world and loop seed."""
    w = ck["seed"] + 0.1 * seed
    sft = _evaluation(0.40 + 0.01 * w, 1.0)
    fw_it = [_evaluation(0.95, 1.0), _evaluation(0.80 - 0.01 * w, 2.0)]
    fw_mix = [_evaluation(0.95, 1.0), _evaluation(0.85 - 0.01 * w, 2.0 - 0.05 * w)]
    re_it = [_evaluation(0.96, 1.0), _evaluation(0.97, 1.0)]
    re_mix = [_evaluation(0.96, 1.0), _evaluation(0.97 - 0.002 * w, 1.0)]
    spreads = [(t, k, 0.5, 0.2) for t in (1, 2) for k in range(3)]
    return {
        "seed": seed,
        "sft": sft,
        "fw": {"iterates": fw_it, "mixtures": fw_mix, "spreads": spreads},
        "restart": {"iterates": re_it, "mixtures": re_mix, "spreads": spreads},
        "seconds": 1.0,
        "sr": {
            "sft": sft["sr"],
            "fw": [e["sr"] for e in fw_it],
            "restart": [e["sr"] for e in re_it],
        },
        "logprob": {
            "sft": sft["logprob"],
            "fw": [e["logprob"] for e in fw_it],
            "restart": [e["logprob"] for e in re_it],
        },
        "mix_sr": {"fw": [e["sr"] for e in fw_mix], "restart": [e["sr"] for e in re_mix]},
        "mix_cov": {
            "fw": [e["coverage"] for e in fw_mix],
            "restart": [e["coverage"] for e in re_mix],
        },
        "checkpoint": {"seed": ck["seed"], "fidelity": ck["fidelity"]},
    }


@pytest.fixture
def stand_ins(monkeypatch):
    """``checkpoints`` fails the fidelity gate for the seeds in the returned set; ``loops`` is
    :func:`_fake_loops`."""
    failing: set[int] = set()

    def checkpoints(seed, sz, out, *, gate):
        if seed in failing:
            _failing_gate(seed)
        return {"seed": seed, "fidelity": {"0": 0.0, "1": 0.3, "2": 0.8}}

    monkeypatch.setattr(repro, "checkpoints", checkpoints)
    monkeypatch.setattr(repro, "loops", _fake_loops)
    return failing


def test_a_failed_gate_is_unmeasured_and_the_report_writes_it(tmp_path, stand_ins):
    from icml25.report import load_results, write_report

    stand_ins.add(0)
    res = repro.run(quick=True, smoke=True, out=tmp_path / "run")
    assert res.status == "inconclusive" and res.error is None
    assert [c.criterion.name for c in res.checks] == [c.name for c in repro.CRITERIA]
    for c in res.checks:
        assert not c.measured and math.isnan(c.estimate) and c.verdict == "inconclusive"
        assert c.n == 0 and c.data == {"unmeasured": c.test}
        assert "0 run(s) passed the target's fidelity gate" in c.test
    assert "fails its fidelity gate" in res.notes
    write_report([res], tmp_path / "report", meta={"mode": "smoke", "seed": 0})
    stored = json.loads((tmp_path / "report" / "results.json").read_text())["results"][0]
    assert all(c["estimate"] is None and c["verdict"] == "inconclusive" for c in stored["checks"])
    _, (back,) = load_results(tmp_path / "report")
    assert back.status == "inconclusive"
    assert [c.verdict for c in back.checks] == ["inconclusive"] * 4
    assert not any(c.measured for c in back.checks)
    assert "not measured" in (tmp_path / "report" / "report.md").read_text()


def test_full_mode_names_the_worlds_left_after_a_failed_gate(
    tmp_path, stand_ins, check_smoke, monkeypatch, capsys
):
    monkeypatch.setenv("ICML25_QUIET", "0")  # stage lines print when stderr is not a terminal
    stand_ins.add(1)
    res = repro.run(quick=False, out=tmp_path)
    assert res.seeds == [0, 1, 2, 3, 4]
    # 4 values from 5 seeds: the check must say which worlds they are, each once
    check_smoke(res, "elicitation")
    want = ["world 0", "world 2", "world 3", "world 4"]
    assert all(c.data["units"] == want and c.n == 4 for c in res.checks)
    assert "seed 1: the toy target fails its fidelity gate" in res.notes
    err = capsys.readouterr().err
    for s in (0, 2, 3, 4):
        assert f"elicitation: world {s}: Frank-Wolfe, restarts and ablations: done in" in err
    assert "elicitation: world 1: target, fidelity gate and reverse model…" in err
    assert "elicitation: world 1: Frank-Wolfe" not in err


def test_quick_mode_announces_its_long_stages(tmp_path, stand_ins, monkeypatch, capsys):
    monkeypatch.setenv("ICML25_QUIET", "0")
    res = repro.run(quick=True, out=tmp_path)
    err = capsys.readouterr().err
    assert "elicitation: world 0: target, fidelity gate and reverse model: done in" in err
    for s in (0, 1, 2):
        assert f"elicitation: loop seed {s}: Frank-Wolfe and restarts: done in" in err
    assert res.checks[0].data["units"] == [f"loop seed {s} (world 0)" for s in (0, 1, 2)]


@pytest.mark.slow
def test_quick_reproduction_verdicts_are_the_recorded_ones(tmp_path, assert_recorded_verdicts):
    res = repro.run(quick=True, out=tmp_path)
    assert_recorded_verdicts(res, "elicitation", mode="quick")
