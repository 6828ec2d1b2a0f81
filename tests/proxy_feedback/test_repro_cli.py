"""The reproduction at smoke size and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from icml25.proxy_feedback import repro

    return repro.run(quick=True, seed=0, out=tmp_path_factory.mktemp("pf"), smoke=True)


def test_criteria_are_declared_at_module_level():
    from icml25.proxy_feedback import repro
    from icml25.report import Criterion

    assert all(isinstance(c, Criterion) and c.design == "paired" for c in repro.CRITERIA)
    assert [c.above for c in repro.CRITERIA] == [0.0, 0.0, 0.01, 0.0]
    assert repro.run.preregistered_seeds == {"quick": 10, "full": 10}


def test_smoke_run(smoke, check_smoke):
    check_smoke(
        smoke,
        "proxy_feedback",
        prefixes=(
            "hold: TV two_stage",
            "v1_levelsets: TV",
            "hold: levelset_violation",
            "v2_image: image_gap_q99",
        ),
        ranges={"hold: TV": (0, 1), "v1_levelsets: TV": (0, 1), "hold: levelset_violation": (0, 1)},
    )
    names = {f.name for f in smoke.figures}
    assert {"tv_vs_n_hold.png", "tv_vs_n_v1_levelsets.png", "conditions.png"} <= names
    assert len(smoke.checks) == 4
    get = {m.name: m.values for m in smoke.metrics}
    c = smoke.checks[0]  # true_only - two_stage at the small n, per seed
    assert np.allclose(
        np.array(c.data["a"]) - np.array(c.data["b"]),
        np.array(get["hold: TV true_only @ n=35"]) - np.array(get["hold: TV two_stage @ n=35"]),
    )


@pytest.mark.slow
def test_quick_repro(tmp_path, check_smoke, assert_recorded_verdicts):
    """Quick mode end to end: under ~3 minutes, four checks with the verdicts
    docs/proxy_feedback.md records, the diagnostics of every world."""
    from icml25.proxy_feedback import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    check_smoke(r, "proxy_feedback", prefixes=("v4_lipschitz: L_hat",))
    assert r.seconds < 240 and len(r.checks) == 4
    assert_recorded_verdicts(r, "proxy_feedback", "quick")


def _main(argv):
    from icml25.cli import main

    return main(argv)


def test_cli_check_world_and_arrays(tmp_path, capsys):
    assert _main(["proxy_feedback", "check", "--world", "v2_image", "--n", "800", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["holds"]["C2"] is False and rep["image_gap_q99"] > 0.2
    from icml25.proxy_feedback import SyntheticPreferenceWorld

    w = SyntheticPreferenceWorld()
    x = w.sample_x(300, torch.Generator().manual_seed(0), dtype=torch.float64)
    np.save(tmp_path / "e.npy", w.true_policy(x).numpy())
    np.savetxt(
        tmp_path / "p.csv", w.proxy_policy(x).numpy(), delimiter=",", header="a,b,c", comments=""
    )
    assert (
        _main(
            [
                "proxy_feedback",
                "check",
                "--expert",
                str(tmp_path / "e.npy"),
                "--proxy",
                str(tmp_path / "p.csv"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "C1 shared level sets" in out and "300 inputs, 3 outputs" in out


def test_cli_errors(tmp_path, capsys):
    assert (
        _main(
            [
                "proxy_feedback",
                "check",
                "--expert",
                str(tmp_path / "none.npy"),
                "--proxy",
                str(tmp_path / "none.npy"),
            ]
        )
        == 2
    )
    assert "no file at" in capsys.readouterr().err
    (tmp_path / "bad.csv").write_text("0.5,0.6\n0.2,0.2\n0.1,0.1\n")
    assert (
        _main(
            [
                "proxy_feedback",
                "check",
                "--expert",
                str(tmp_path / "bad.csv"),
                "--proxy",
                str(tmp_path / "bad.csv"),
            ]
        )
        == 2
    )
    assert "rows must sum to 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _main(["proxy_feedback", "check", "--expert", str(tmp_path / "bad.csv")])
    assert "--expert needs --proxy" in capsys.readouterr().err
