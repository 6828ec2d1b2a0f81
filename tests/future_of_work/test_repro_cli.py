"""The interpretation check at smoke size and the `icml25 fow royalties` command."""

from __future__ import annotations

import csv
from decimal import Decimal

import pytest


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from icml25.future_of_work import repro

    return repro.run(quick=True, seed=0, out=tmp_path_factory.mktemp("fow"), smoke=True)


def test_criteria_and_claim():
    from icml25.future_of_work import repro
    from icml25.report import Criterion

    assert all(isinstance(c, Criterion) for c in repro.CRITERIA) and len(repro.CRITERIA) == 11
    assert repro.CLAIM.startswith("Interpretation check — the paper contains no experiment")
    assert repro.run.preregistered_seeds == {"quick": 3, "full": 5}


def test_smoke_run(smoke, check_smoke):
    check_smoke(
        smoke,
        "future_of_work",
        prefixes=("phi_exact h", "phi_loo h", "payout gini"),
        ranges={"payout gini": (0, 1)},
    )
    assert {"payouts_by_rule.png", "payout_lorenz.png", "labour_share_gini_paths.png"} <= {
        f.name for f in smoke.figures
    }
    assert "does not test its position" in smoke.notes
    by = {c.name: c for c in smoke.checks}
    assert by["R1: |sum of payouts - net pool| in cents, every rule and seed"].estimate == 0
    assert len(smoke.checks) == 11


def test_noisy_quantities_are_not_exact_checks(smoke):
    """Only deterministic quantities use the exact design: the permutation estimator's coverage
    is a Monte-Carlo frequency (a proportion counted per seed) and h6's Shapley value depends on
    the split and the fitted models (one value per seed, a t-interval)."""
    by = {c.name: c for c in smoke.checks}
    cover = by[
        "R1 (estimator check): share of groups with the exact value within permutation "
        "estimate ± 3 SE"
    ]
    assert cover.criterion.design == "proportion"
    assert cover.data["n"] == [6, 6] and all(0 <= k <= 6 for k in cover.data["successes"])
    noise = by["R1: Shapley value of the pure-noise holder h6 < 0.002"]
    assert noise.criterion.design == "mean" and len(noise.data["values"]) == 2
    assert noise.low < noise.estimate < noise.high  # an interval, not one number
    exact = {c.name for c in smoke.checks if c.criterion.design == "exact"}
    assert exact == {
        "R1: |sum of exact Shapley - (U(all) - U(empty))|, max over seeds",
        "R1: |sum of payouts - net pool| in cents, every rule and seed",
        *(c.name for c in smoke.checks if c.name.startswith("R2:")),
    }


def test_groups_are_what_the_docs_say():
    from icml25.future_of_work.experiment import build_rights_holders

    X, y, G, Xv, yv = build_rights_holders(0, 10)
    import numpy as np

    assert sorted(set(G)) == sorted(f"h{i}" for i in range(10))
    assert (X[G == "h4"] == X[G == "h0"]).all() and (y[G == "h4"] == y[G == "h0"]).all()
    assert (G == "h7").sum() == 3 * (G == "h0").sum() and set(y[G == "h8"]) <= set(range(5))
    assert len(Xv) == len(yv) and abs(len(yv) / 1797 - 0.4) < 0.01
    assert np.mean(y[G == "h5"] != y[G == "h1"][: (G == "h5").sum()]) > 0  # labels differ (noise)


def _main(argv):
    from icml25.cli import main

    return main(argv)


def test_cli_royalties(tmp_path, capsys):
    usage = tmp_path / "usage.csv"
    usage.write_text("holder,units,work\nalice,100,a1\nbob,250,b1\nbob,50,b2\ncarol,3,c1\n")
    out = tmp_path / "pay.csv"
    assert (
        _main(["fow", "royalties", "--usage", str(usage), "--pool", "100000", "--out", str(out)])
        == 0
    )
    text = capsys.readouterr().out
    assert "bob" in text and "100,000.00" in text
    rows = list(csv.DictReader(out.open()))
    assert sum(Decimal(r["payout"]) for r in rows) == Decimal("100000.00")
    assert {r["holder"] for r in rows} == {"alice", "bob", "carol"}
    vals = tmp_path / "values.csv"
    vals.write_text("holder,value\nalice,0.2\nbob,0.0\ncarol,0.1\n")
    assert (
        _main(
            [
                "fow",
                "royalties",
                "--usage",
                str(usage),
                "--pool",
                "999.99",
                "--rule",
                "attribution",
                "--values",
                str(vals),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = {r["holder"]: Decimal(r["payout"]) for r in csv.DictReader(out.open())}
    assert rows["bob"] == 0 and sum(rows.values()) == Decimal("999.99")


def test_cli_errors(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,size\nx,1\n")
    assert _main(["fow", "royalties", "--usage", str(bad), "--pool", "10"]) == 2
    assert "missing column(s) ['holder', 'units']" in capsys.readouterr().err
    ok = tmp_path / "ok.csv"
    ok.write_text("holder,units\nx,1\n")
    assert _main(["fow", "royalties", "--usage", str(ok), "--pool", "ten"]) == 2
    assert "--pool must be an amount" in capsys.readouterr().err
    ok.write_text("holder,units\nx,-1\n")
    assert (
        _main(
            [
                "fow",
                "royalties",
                "--usage",
                str(ok),
                "--pool",
                "10",
                "--out",
                str(tmp_path / "o.csv"),
            ]
        )
        == 2
    )
    assert "units of work" in capsys.readouterr().err
    ok.write_text("holder,units\nx,1\n")
    with pytest.raises(SystemExit):
        _main(["fow", "royalties", "--usage", str(ok), "--pool", "10", "--rule", "attribution"])
    assert "needs --values" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_repro_verdicts_are_the_recorded_ones(
    tmp_path, check_smoke, assert_recorded_verdicts
):
    """Regression: the quick interpretation check (seed 0, 3 splits) gives the verdicts
    docs/future_of_work.md records."""
    from icml25.future_of_work import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    check_smoke(r, "future_of_work", prefixes=("phi_exact h",))
    assert_recorded_verdicts(r, "future_of_work", "quick")
    assert r.seconds < 240
