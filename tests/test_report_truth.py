"""The report tells the truth (issue 46): a check that could not be measured never aborts a run,
reports merge, intervals keep their level, identical values are judged at their own precision, a
stored verdict must follow from its data and from the installed code's criteria, and every check
counts each independent unit once."""

from __future__ import annotations

import json
import math
import sys
import types

import numpy as np
import pytest

from icml25 import cli
from icml25.registry import Paper
from icml25.report import (
    Check,
    Criterion,
    ReproResult,
    load_results,
    reproduction,
    stats,
    write_report,
)
from icml25.report.checks import unit_problems
from icml25.runner import run_reproductions

GAIN = Criterion("gain", "paired", above=0.0)
RATE = Criterion("rate", "proportion", above=0.5)


# -- a check that could not be measured -----------------------------------------------------------


def test_unmeasured_check_is_null_in_json_and_inconclusive(tmp_path):
    c = RATE.unmeasured("no attack reached 20 % ASR: nothing to measure")
    assert c.verdict == "inconclusive" and math.isnan(c.estimate) and not c.measured
    r = ReproResult("lapsum", "claim", checks=[c, GAIN.check([1, 1.1, 1.2], [0, 0, 0])])
    write_report([r], tmp_path, meta={"mode": "quick", "seed": 0})
    stored = json.loads((tmp_path / "results.json").read_text())["results"][0]["checks"][0]
    assert (
        stored["estimate"] is None and stored["low"] is None and stored["verdict"] == "inconclusive"
    )
    _, (back,) = load_results(tmp_path)
    assert back.checks[0].verdict == "inconclusive" and not back.checks[0].measured
    assert back.status == "inconclusive"
    text = (tmp_path / "report.md").read_text()
    assert "not measured" in text and "no attack reached 20 % ASR" in text


def test_hand_built_nan_check_keeps_its_reason_and_cannot_claim_held():
    # what elicitation and safety_reasoning built before Criterion.unmeasured existed
    c = Check(
        GAIN, math.nan, math.nan, math.nan, 1, math.nan, "inconclusive", "1 run passed the gate"
    )
    assert not c.measured and c.data["unmeasured"] == "1 run passed the gate"
    assert c.recompute().verdict == "inconclusive"
    with pytest.raises(ValueError, match="can only be inconclusive"):
        Check(GAIN, math.nan, math.nan, math.nan, 0, math.nan, "held", "x")


def test_designs_and_verdicts_are_typed_as_the_values_they_accept():
    """The ``Literal`` types of ``Criterion.design`` and ``Check.verdict`` list exactly
    :data:`DESIGNS` and :data:`VERDICTS`, the values the checks accept."""
    from typing import get_args, get_type_hints

    from icml25.report.checks import DESIGNS, VERDICTS

    assert get_args(get_type_hints(Criterion)["design"]) == DESIGNS
    assert get_args(get_type_hints(Check)["verdict"]) == VERDICTS
    for design in DESIGNS:
        assert Criterion("x", design, above=0.5).design == design
    with pytest.raises(ValueError, match="design must be one of"):
        Criterion("x", "other", above=0.5)
    for verdict in VERDICTS:
        assert Check(GAIN, 0.1, 0.0, 0.2, 3, 0.05, verdict, "t").verdict == verdict
    with pytest.raises(ValueError, match="verdict must be one of"):
        Check(GAIN, 0.1, 0.0, 0.2, 3, 0.05, "other", "t")


def test_report_writes_whatever_a_check_holds(tmp_path):
    c = GAIN.check([1, 1.1, 1.2], [0, 0, 0])
    c.data["extra"] = {
        "array": np.array([1.0, np.nan]),
        "scalar": np.float32(2.5),
        "path": tmp_path,
    }
    r = ReproResult("lapsum", "claim", checks=[c])
    write_report([r], tmp_path)
    extra = json.loads((tmp_path / "results.json").read_text())["results"][0]["checks"][0]
    assert extra["data"]["extra"] == {"array": [1.0, None], "scalar": 2.5, "path": str(tmp_path)}


# -- the runner never loses a paper -------------------------------------------------------------


def _lapsum(quick, seed, out):
    return ReproResult("aaa", "A.", checks=[GAIN.check([1, 1.1, 1.2], [0, 0, 0])])


def _nan_check(quick, seed, out):
    gate = Check(RATE, math.nan, math.nan, math.nan, 0, math.nan, "inconclusive", "gate failed")
    return ReproResult("bbb", "B.", checks=[gate])


class _Unwritable:
    def to_dict(self):
        raise RuntimeError("cannot serialise")


def _unwritable(quick, seed, out):
    r = ReproResult("ccc", "C.", checks=[GAIN.check([1, 1.1, 1.2], [0, 0, 0])])
    r.to_dict = _Unwritable().to_dict  # a result the report cannot write
    return r


@reproduction("ddd", seeds=(3, 5), threads=None)
def _seeded(r):
    runs = r.over_seeds(lambda s: {"ours": 1.0 + 0.1 * s, "base": 0.5})
    check = GAIN.check([x["ours"] for x in runs], [x["base"] for x in runs])
    return r.result(claim="D.", checks=[check], criteria=[GAIN])


@pytest.fixture
def stand_ins(monkeypatch):
    mod = types.ModuleType("icml25_truth_stand_ins")
    mod.lapsum, mod.nan_check, mod.unwritable, mod.seeded = (
        _lapsum,
        _nan_check,
        _unwritable,
        _seeded,
    )
    monkeypatch.setitem(sys.modules, "icml25_truth_stand_ins", mod)
    papers = [
        Paper(1, "aaa", "A", "arXiv:0000.00001", repro="icml25_truth_stand_ins:lapsum"),
        Paper(2, "bbb", "B", "arXiv:0000.00002", repro="icml25_truth_stand_ins:nan_check"),
        Paper(3, "ccc", "C", "arXiv:0000.00003", repro="icml25_truth_stand_ins:unwritable"),
        Paper(4, "ddd", "D", "arXiv:0000.00004", repro="icml25_truth_stand_ins:seeded"),
    ]
    from icml25 import registry

    for p in papers:
        monkeypatch.setitem(registry._BY_SLUG, p.slug, p)
    monkeypatch.setattr(registry, "PAPERS", (*registry.PAPERS, *papers))
    return papers


def test_a_nan_check_or_an_unwritable_result_does_not_abort_the_run(stand_ins, tmp_path):
    results = run_reproductions(stand_ins, out=tmp_path)
    assert [r.status for r in results] == ["held", "inconclusive", "error", "held"]
    assert "cannot serialise" in results[2].error
    _, saved = load_results(tmp_path)
    assert [r.slug for r in saved] == ["aaa", "bbb", "ccc", "ddd"]  # the paper after still ran


def test_out_merges_and_resume_keeps_the_others(stand_ins, tmp_path):
    a, b, _, d = stand_ins
    run_reproductions([a, d], out=tmp_path)
    run_reproductions([b], out=tmp_path)
    meta, saved = load_results(tmp_path)
    assert [r.slug for r in saved] == ["aaa", "bbb", "ddd"] and meta["kept"] == ["aaa", "ddd"]
    assert "Kept from an earlier run" in (tmp_path / "report.md").read_text()
    calls = []
    run_reproductions([d], out=tmp_path, resume=True, echo=calls.append)
    assert any("(resumed)" in line for line in calls)
    _, saved = load_results(tmp_path)
    assert [r.slug for r in saved] == ["aaa", "bbb", "ddd"]
    run_reproductions([d], out=tmp_path, resume=True, seeds=2)  # another seed count: rerun
    _, saved = load_results(tmp_path)
    assert len(saved[-1].seeds) == 2 and [r.slug for r in saved] == ["aaa", "bbb", "ddd"]


def test_unreadable_report_in_out_is_refused_before_running(stand_ins, tmp_path, capsys):
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(SystemExit) as exc:
        cli.main(["repro", "aaa", "--out", str(tmp_path), "-q"])
    assert exc.value.code == 2 and "cannot be merged" in capsys.readouterr().err


def test_resume_needs_out(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["repro", "lapsum", "--resume"])
    assert exc.value.code == 2 and "--resume needs --out" in capsys.readouterr().err


def test_help_prints_percent_signs_once(capsys):
    with pytest.raises(SystemExit):
        cli.main(["repro", "--help"])
    out = capsys.readouterr().out
    assert "95% intervals" in out and "%%" not in out


def test_progress_without_a_terminal_prints_a_line_per_seed(
    stand_ins, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("ICML25_QUIET", raising=False)
    assert cli.main(["repro", "ddd", "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    seed_lines = [line for line in err.splitlines() if line.startswith("ddd: seeds:")]
    assert [line.split(" done")[0] for line in seed_lines] == [
        f"ddd: seeds: {i}/3" for i in (1, 2, 3)
    ]
    assert all(line.endswith(" s") for line in seed_lines)
    assert cli.main(["repro", "ddd", "--out", str(tmp_path / "b"), "-q"]) == 0
    assert "ddd: seeds" not in capsys.readouterr().err
    monkeypatch.delenv("ICML25_QUIET", raising=False)  # -q set it for this process


# -- intervals that keep their level ---------------------------------------------------------------


@pytest.mark.parametrize("k", [5, 10])
def test_clustered_design_covers_at_few_clusters(k):
    """Coverage of the clustered design's 95% interval, simulated: clusters with their own mean
    (sd 1) and unequal sizes, items with noise (sd 1) around it. 2000 trials: the band is 0.95 ±
    3 binomial standard errors (± 0.0146); the two-stage percentile bootstrap it replaces covered
    0.870 at 5 clusters and 0.847 at 6."""
    rng = np.random.default_rng(k)
    crit = Criterion("m", "bootstrap", above=0.0)
    trials, covered = 2000, 0
    for _ in range(trials):
        sizes = rng.integers(20, 41, size=k)
        means = rng.normal(0.0, 1.0, size=k)
        values = np.concatenate([m + rng.normal(0.0, 1.0, size=s) for m, s in zip(means, sizes)])
        labels = np.repeat(np.arange(k), sizes)
        iv = stats.cluster_t_interval(values, labels)
        covered += iv.low <= 0.0 <= iv.high
    band = 3 * math.sqrt(0.95 * 0.05 / trials)
    assert abs(covered / trials - 0.95) <= band, covered / trials
    c = crit.check(values, clusters=labels)  # the design uses it below 30 clusters
    assert c.n == k and "cluster-robust t-interval" in c.test


def test_cluster_t_equals_the_t_interval_of_cluster_means_for_equal_sizes():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(6, 10))
    labels = np.repeat(np.arange(6), 10)
    a = stats.cluster_t_interval(values.ravel(), labels)
    b = stats.mean_t_interval(values.mean(axis=1))
    assert (a.low, a.high) == pytest.approx((b.low, b.high), rel=1e-12)


def test_proportion_over_runs_counts_the_variance_between_runs():
    # three trained models at 20 %, 50 % and 80 %: pooled Wilson alone says 0.5 ± 0.06
    wide = RATE.check([20, 50, 80], [100, 100, 100], units=["seed 0", "seed 1", "seed 2"])
    pooled = stats.wilson_interval(150, 300)
    assert wide.high - wide.low > 5 * (pooled.high - pooled.low)
    # homogeneous runs: the Wilson interval of the pooled counts (0/100 each is not "no spread")
    same = Criterion("r", "proportion", below=0.05).check([0, 0, 0], [100, 100, 100])
    assert (same.low, same.high) == pytest.approx((0.0, stats.wilson_interval(0, 300).high))
    assert same.verdict == "held"


def test_identical_values_are_judged_at_float32_precision():
    f32 = np.float32
    mean = Criterion("m", "mean", above=0.99).check(np.array([1, 1, 0.99999994], dtype=f32))
    assert mean.verdict == "inconclusive" and "identical" in mean.test
    paired = GAIN.check(np.array([1, 1], dtype=f32), np.array([0.9, 0.9000001], dtype=f32))
    assert paired.verdict == "inconclusive"
    # float64 values that truly differ are not rounding noise
    assert Criterion("m", "mean", above=0.99).check([1.0, 1.001, 0.999, 1.002, 1.0, 0.998]).held


# -- a verdict must follow from the data and the installed criteria -------------------------------


def test_run_result_rejects_a_verdict_its_criterion_would_not_give(tmp_path):
    @reproduction("eee", seeds=(3, 5), threads=None)
    def body(r):
        check = GAIN.check([1.0, -1.0, 0.5], [0.0, 0.0, 0.0])  # straddles 0: inconclusive
        check.verdict = "held"
        return r.result(claim="E.", checks=[check], criteria=[GAIN])

    with pytest.raises(ValueError, match="its criterion gives"):
        body(out=tmp_path)


def test_report_refuses_a_results_file_with_an_edited_threshold(tmp_path, capsys):
    from icml25.twa import repro

    crit = repro.GAIN["filter_sft"]
    check = crit.check([5.0, 5.2, 5.1], [2.0, 2.1, 2.2], units=[0, 1, 2])
    write_report([ReproResult("twa", "claim", checks=[check])], tmp_path)
    assert cli.main(["report", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    data["results"][0]["checks"][0]["criterion"]["above"] = 2.5  # raises the bar after the run
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert cli.main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "above 2.5 (installed code: 0.0)" in err and crit.name in err


def test_renamed_check_remembers_its_declared_criterion(tmp_path):
    c = GAIN.check([1, 1.1, 1.2], [0, 0, 0]).renamed("gain (setting B)")
    assert c.criterion.declared_as == "gain"
    write_report([ReproResult("lapsum", "c", checks=[c])], tmp_path)
    _, (back,) = load_results(tmp_path)
    assert back.checks[0].criterion.declared_as == "gain"


# -- each independent unit counted once ------------------------------------------------------------


def test_a_unit_labelled_twice_is_an_error():
    with pytest.raises(ValueError, match="unit .img 0. appears 2 times"):
        Criterion("b", "bootstrap", above=0).check(
            [0.1] * 12, units=[f"img {i % 11}" for i in range(12)]
        )
    with pytest.raises(ValueError, match="not both"):
        Criterion("b", "bootstrap", above=0).check(
            [0.1] * 12, clusters=[0] * 6 + [1] * 6, units=list(range(12))
        )


def test_unit_problems_flags_pooled_values_without_units():
    seeds = [0, 1, 2]
    pooled = GAIN.check(list(range(1, 31)) * 3, [0] * 90)  # 30 segments x 3 seeds, unlabelled
    assert unit_problems(pooled, seeds)
    assert not unit_problems(GAIN.check([1, 1.1, 1.2], [0, 0, 0]), seeds)  # one value per seed
    labelled = GAIN.check(list(range(1, 91)), [0] * 90, units=list(range(90)))
    assert not unit_problems(labelled, seeds)


# -- found by a new user's review ----------------------------------------------------------------


def test_checks_are_matched_to_criteria_by_name_not_by_threshold(tmp_path):
    a = Criterion("A quick check", "mean", above=0.8)
    b = Criterion("B full-mode check", "mean", above=0.8)

    @reproduction("twins", seeds=(3, 5), threads=None)
    def twins(r):
        return r.result(claim="x", checks=[a.check([0.9, 0.91, 0.92])], criteria=[a, b])

    assert "B full-mode check" in twins(out=tmp_path / "t").notes  # a twin does not hide it

    @reproduction("extra", seeds=(3, 5), threads=None)
    def extra(r):
        stray = Criterion("extra", "mean", above=0.8).check([0.9, 0.91, 0.92])
        return r.result(claim="x", checks=[stray], criteria=[a])

    with pytest.raises(ValueError, match="no declared criterion"):
        extra(out=tmp_path / "e")


def test_report_flags_an_edited_paper_verdict_and_paper_effect(tmp_path, capsys):
    from icml25.twa import repro

    crit = repro.GAIN["filter_sft"]
    check = crit.check([5.0, 5.2, 5.1], [2.0, 2.1, 2.2], units=[0, 1, 2])
    write_report([ReproResult("twa", "claim", checks=[check])], tmp_path)
    data = json.loads((tmp_path / "results.json").read_text())
    data["results"][0]["status"] = "did not hold"
    data["results"][0]["checks"][0]["criterion"]["paper_effect"] = 0.01
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert cli.main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "stored verdict 'did not hold'" in err and "paper_effect 0.01" in err
    assert "**Warnings**" in (tmp_path / "report.md").read_text()


def test_report_of_a_users_own_reproduction_exits_0(tmp_path):
    write_report(
        [ReproResult("mypaper", "c", checks=[GAIN.check([1, 1.1, 1.2], [0, 0, 0])])], tmp_path
    )
    assert cli.main(["report", str(tmp_path)]) == 0


def test_out_that_is_a_file_or_a_results_folder_is_a_clean_error(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("")
    with pytest.raises(SystemExit) as exc:
        cli.main(["repro", "lapsum", "--out", str(target), "-q"])
    assert exc.value.code == 2 and "is a file" in capsys.readouterr().err
    (tmp_path / "d" / "results.json").mkdir(parents=True)
    with pytest.raises(SystemExit) as exc:
        cli.main(["report", str(tmp_path / "d")])
    assert exc.value.code == 2 and "cannot be read" in capsys.readouterr().err


def test_identical_values_on_the_threshold_say_so():
    c = Criterion("acc", "mean", above=0.99).check([0.99] * 8)
    assert c.verdict == "inconclusive" and "equal to the threshold" in c.test
    low = Criterion("acc", "mean", above=0.99).check([0.98] * 8)
    assert low.verdict == "did not hold" and low.test.count("p =") == 1
    few = Criterion("acc", "mean", above=0.9).check([0.98] * 3)
    assert few.verdict == "inconclusive" and few.test.count("0.125") == 1
