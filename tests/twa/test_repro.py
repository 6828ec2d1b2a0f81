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

    check_smoke(smoke, "twa", prefixes=("penalty ", "exact match "),
                ranges={"exact match": (0, 1), "error-free share": (0, 1)})  # fmt: skip
    assert "penalty_bars.png" in {f.name for f in smoke.figures}
    get = {m.name: m.values for m in smoke.metrics}
    assert len(smoke.checks) == 3  # the in-span checks are full mode's
    for c, b in zip(smoke.checks, ("filter_sft", "dpo", "base")):
        assert c.name == repro.GAIN[b].name and c.n == 2 * 30  # segments pooled over 2 seeds
        assert np.mean(c.data["a"]) == pytest.approx(np.mean(get[f"penalty {b}"]))
        assert np.mean(c.data["b"]) == pytest.approx(np.mean(get["penalty twa"]))
    assert all(v >= 0 for v in get["penalty twa"])


@pytest.mark.slow
def test_quick_repro_meets_its_criterion(tmp_path, check_smoke):
    """The quick run end to end (test 12): its three paired checks hold."""
    from icml25.twa import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    check_smoke(r, "twa", prefixes=("penalty ",))
    assert [c.verdict for c in r.checks] == ["held"] * 3
    get = {m.name: np.mean(m.values) for m in r.metrics}
    assert get["penalty twa"] < min(
        get["penalty filter_sft"], get["penalty dpo"], get["penalty base"]
    )


@pytest.mark.slow
def test_full_smoke_has_the_in_span_checks(tmp_path, check_smoke):
    from icml25.twa import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(r, "twa", prefixes=("penalty ", "inspan d logp "))
    assert [c.name for c in r.checks] == [c.name for c in repro.CRITERIA]
    assert "inspan_logprob_delta.png" in {f.name for f in r.figures}
    stem = r.check(repro.WHAT_STEM.name)
    assert stem.n > 0 and len(stem.data["a"]) == len(stem.data["b"])
