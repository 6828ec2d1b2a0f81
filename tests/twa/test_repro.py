"""The reproduction at smoke size: structure, criteria and checks built from the right arms."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from icml25.twa import repro

    return repro.run(quick=True, seed=0, out=tmp_path_factory.mktemp("twa"), smoke=True)


def test_criteria_are_declared_at_module_level():
    from icml25.report import Criterion
    from icml25.twa import repro

    assert all(isinstance(c, Criterion) for c in repro.CRITERIA)
    assert [c.name for c in repro.CRITERIA[:3]] == [
        "penalty(filter_sft) - penalty(twa) > 0",
        "penalty(dpo) - penalty(twa) > 0",
        "penalty(base) - penalty(twa) > 0",
    ]
    assert all((c.design, c.above) == ("paired", 0.0) for c in repro.CRITERIA[:4])
    assert (repro.WHAT_SUFFIX.design, repro.WHAT_SUFFIX.below) == ("mean", 0.0)
    assert repro.run.preregistered_seeds == {"quick": repro.N_QUICK, "full": repro.N_FULL}


def test_smoke_run(smoke, check_smoke):
    from icml25.twa import repro

    check_smoke(
        smoke,
        "twa",
        prefixes=("penalty ", "exact match "),
        ranges={"exact match": (0, 1), "error-free share": (0, 1)},
    )
    assert "penalty_bars.png" in {f.name for f in smoke.figures}
    get = {m.name: m.values for m in smoke.metrics}
    assert len(smoke.checks) == 3  # the in-span checks are full mode's
    for c, b in zip(smoke.checks, ("filter_sft", "dpo", "base")):
        # one value per seed (each seed's fine-tuned models are the unit), not 2 x 30 segments
        assert c.name == repro.GAIN[b].name and c.n == len(smoke.seeds) == 2
        assert c.data["units"] == [f"seed {s}" for s in smoke.seeds]
        assert c.data["a"] == pytest.approx(get[f"penalty {b}"])
        assert c.data["b"] == pytest.approx(get["penalty twa"])
    assert all(v >= 0 for v in get["penalty twa"])


def _seed(rng, shift, n=300):
    """One seed's measurements: TWA's penalty per segment and the baselines' shifted by
    ``shift`` (the same shift for every segment of the seed, as a trained model would give)."""
    twa = rng.uniform(0, 2, n)
    pen = {m: (twa + shift).tolist() for m in ("filter_sft", "dpo", "base")}
    spans = {
        k: (rng.normal(0, 0.1, 50) + shift).tolist()
        for k in ("stem_span", "stem_token", "suffix_span", "suffix_token")
    }
    spans["stem_token"] = [x - shift for x in spans["stem_token"]]
    return {"penalty": pen | {"twa": twa.tolist()}, "inspan": spans}


def test_checks_count_each_seed_once():
    """Three seeds whose gains disagree (+1, +1, -0.5): pooled over 900 segments the gain looks
    certain, over 3 seeds (the independent units) it is not, and every check says so."""
    from icml25.report.checks import unit_problems
    from icml25.twa import repro

    rng = np.random.default_rng(0)
    per_seed = [_seed(rng, shift) for shift in (1.0, 1.0, -0.5)]
    seeds = [0, 1, 2]
    checks = repro.gain_checks(per_seed, seeds) + repro.inspan_checks(per_seed, seeds)
    assert [c.name for c in checks] == [c.name for c in repro.CRITERIA]
    for c in checks:
        assert c.n == 3 and c.data["units"] == ["seed 0", "seed 1", "seed 2"]
        assert not unit_problems(c, seeds)
        assert c.verdict == "inconclusive", (c.name, c.low, c.high)
    gain = checks[0]
    assert gain.estimate == pytest.approx(0.5) and gain.data["a"] == pytest.approx(
        [np.mean(p["penalty"]["filter_sft"]) for p in per_seed]
    )
    # the same gain on every seed is held, per seed as well
    agree = [_seed(rng, shift) for shift in (1.0, 1.1, 0.9)]
    assert all(c.verdict == "held" for c in repro.gain_checks(agree, seeds))


def test_inspan_checks_without_spans_are_unmeasured():
    from icml25.twa import repro

    rng = np.random.default_rng(1)
    per_seed = [_seed(rng, 1.0), _seed(rng, 1.0)]
    for p in per_seed:
        p["inspan"] = {k: [] for k in p["inspan"]}
    checks = repro.inspan_checks(per_seed, [0, 1])
    assert [c.verdict for c in checks] == ["inconclusive"] * 2
    assert all(not c.measured for c in checks)
    # a seed without spans contributes nothing; the others are still one value each
    per_seed.append(_seed(rng, 1.0))
    per_seed.append(_seed(rng, 1.1))
    stem, suffix = repro.inspan_checks(per_seed, [0, 1, 2, 3])
    assert stem.data["units"] == ["seed 2", "seed 3"] and suffix.n == 2


@pytest.mark.slow
def test_quick_repro_meets_its_recorded_verdicts(tmp_path, check_smoke, assert_recorded_verdicts):
    """The quick run end to end (test 12): its verdicts are the ones docs/twa.md records."""
    from icml25.twa import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    check_smoke(r, "twa", prefixes=("penalty ",))
    assert_recorded_verdicts(r, "twa", "quick")
    assert all(c.n == repro.N_QUICK for c in r.checks)


@pytest.mark.slow
def test_full_smoke_has_the_in_span_checks(tmp_path, check_smoke):
    from icml25.twa import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(r, "twa", prefixes=("penalty ", "inspan d logp "))
    assert [c.name for c in r.checks] == [c.name for c in repro.CRITERIA]
    assert "inspan_logprob_delta.png" in {f.name for f in r.figures}
    stem = r.check(repro.WHAT_STEM.name)
    assert stem.n == len(r.seeds) and len(stem.data["a"]) == len(stem.data["b"])
    get = {m.name: m.values for m in r.metrics}
    assert stem.data["a"] == pytest.approx(get["inspan d logp stem_span"])
