"""The reproduction: smoke runs of quick and full mode, the pre-registered criteria, and checks
built from the right arms and the right replicates."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from icml25.lapsum import repro
from icml25.report import Criterion, ReproResult

A_NAMES = [
    c.name for c in (repro.A1, repro.A2_NS, repro.A2_SS, repro.A3, repro.A4_SUM, repro.A4_VJP)
]


def test_criteria_are_declared_at_module_level():
    assert all(isinstance(c, Criterion) for c in repro.CRITERIA)
    names = [c.name for c in repro.CRITERIA]
    assert len(set(names)) == len(names)
    assert names[: len(A_NAMES)] == A_NAMES
    assert repro.C in repro.CRITERIA and repro.B_N5 in repro.CRITERIA
    assert all(c in repro.CRITERIA for c in repro.B_PARITY.values())
    # the old thresholds, kept
    assert repro.A1.below == 1.3 and repro.A2_NS.above == repro.A2_SS.above == 5.0
    assert repro.C.design == "paired" and repro.C.above == 0.5 and repro.C.unit == "pt"
    assert all(c.above == -0.07 for c in repro.B_PARITY.values()) and repro.B_N5.above == 0.30
    assert repro.run.preregistered_seeds == {"quick": repro.SEEDS[0], "full": repro.SEEDS[1]}


@pytest.mark.parametrize("quick", [True, False])
def test_repro_smoke_structure(tmp_path, quick, check_smoke):
    result = repro.run(quick=quick, seed=0, out=tmp_path, smoke=True)
    assert isinstance(result, ReproResult)
    check_smoke(
        result,
        "lapsum",
        metrics=("A1 log-log slope of the median times", "C top-5 gain LapSum - CE (points)"),
        ranges={"C top-5 CE": (0, 1), "C top-1": (0, 1)},
    )
    assert [c.name for c in result.checks] == _expected_checks(quick)
    if quick:  # Part B is declared but not evaluated: the report says so
        assert "Declared criteria not evaluated in this smoke run: " in result.notes
        assert all(c.name in result.notes for c in (*repro.B_PARITY.values(), repro.B_N5))
    else:
        assert "Declared criteria not evaluated" not in result.notes
    assert result.key_check == repro.C.name and result.seeds == [0, 1]
    a1 = result.check(repro.A1.name)
    assert a1.n == 2 and a1.criterion.over == "timing repeats"  # smoke times 2 repeats
    assert result.check(repro.C.name).n == 2
    names = [m.name for m in result.metrics]
    assert any(n.startswith("B exact") for n in names) == (not quick)
    assert {f.name for f in result.figures} == {
        "scaling_time.png",
        "scaling_memory.png",
        "topk_profiles.png",
        "topk_accuracy.png",
        *(() if quick else ("permutation_accuracy.png",)),
    }
    # the deviations (the check designs among them) are stated in docs/lapsum.md, not in the result
    assert not result.deviations
    docs = (Path(__file__).resolve().parents[2] / "docs" / "lapsum.md").read_text(encoding="utf-8")
    assert "C is a paired t-interval of the" in docs and "means over the 5 timed repeats" in docs


def _expected_checks(quick: bool) -> list[str]:
    """Every check a run evaluates, in order: A and C, plus in full mode (smoke size too) Part B
    at n = 3, 5, 7 with LapSum's own exact match at n = 5."""
    names = [*A_NAMES, repro.C.name]
    if not quick:
        b = repro.B_PARITY
        names += [b[3].name, b[5].name, repro.B_N5.name, b[7].name]
    return names


@pytest.mark.filterwarnings("ignore:Creating legend:UserWarning")  # matplotlib reads the clock
def test_full_mode_checks_do_not_depend_on_the_clock(tmp_path, monkeypatch):
    """Issue 46: the full mode skipped Part B at n = 7 when the run looked slow, so the machine's
    load decided which checks decided. Here the full mode runs at its real sizes on planted
    measurements, under a clock that makes every second look like a thousand (the run seems to
    have taken days): it evaluates every declared check, and reports nothing as skipped. Parts C
    and B train with one torch thread, Part A times with the run's two."""
    import time

    threads = {"A": set(), "C": set(), "B": set()}

    def fake_scaling(ns, base, sink, *, repeats):
        threads["A"].add(torch.get_num_threads())
        sizes = {"LapSum": ns, "NeuralSort": base, "SoftSort": base, "SOFT (Sinkhorn)": sink}
        return {
            m: {
                n: {"times": [1e-6 * n] * repeats, "seconds": 1e-6 * n, "saved_bytes": 4 * n}
                for n in rows
            }
            for m, rows in sizes.items()
        }

    def fake_probe(loss, seed, **kw):
        threads["C"].add(torch.get_num_threads())
        return {"top1": 0.3, "top5": 0.64 + 0.01 * (loss == "lapsum") + 0.001 * seed}

    def fake_permutation(loss, n, seed, **kw):
        threads["B"].add(torch.get_num_threads())
        return {"exact": 0.5 + 0.01 * seed, "elementwise": 0.8}

    monkeypatch.setattr(repro.ex, "scaling", fake_scaling)
    monkeypatch.setattr(
        repro.ex, "exactness", lambda: {"sum_error": 0.0, "vjp_rel_error": {"x": 0.0}}
    )
    monkeypatch.setattr(repro.ex, "train_probe", fake_probe)
    monkeypatch.setattr(repro.ex, "permutation_learning", fake_permutation)
    real = time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: 1000.0 * real())
    result = repro.run(quick=False, seed=0, out=tmp_path)
    assert result.seconds > 1000  # the run did look slow to everything that read the clock
    assert [c.name for c in result.checks] == _expected_checks(quick=False)
    assert {c.name for c in result.checks} == {c.name for c in repro.CRITERIA}
    assert "skipped" not in result.notes and "Declared criteria not evaluated" not in result.notes
    assert threads == {"A": {2}, "C": {1}, "B": {1}}


def test_part_c_check_uses_the_right_arms():
    """Planted results: LapSum beats CE by about 1 point of top-5 on every seed."""
    ce = [{"top5": 0.63 + 0.002 * s, "top1": 0.33} for s in range(6)]
    lap = [{"top5": 0.64 + 0.0021 * s, "top1": 0.30} for s in range(6)]
    c = repro.part_c_check({"ce": ce, "lapsum": lap})
    assert c.verdict == "held" and c.estimate == pytest.approx(1.025)
    assert repro.part_c_check({"ce": lap, "lapsum": ce}).verdict == "did not hold"
    # a gain below the 0.5-point margin is not held, however consistent
    small = [{"top5": x["top5"] + 0.002, "top1": 0.3} for x in ce]
    assert repro.part_c_check({"ce": ce, "lapsum": small}).verdict == "did not hold"


def test_part_b_checks_use_the_right_arms():
    lap = [{"exact": 0.43 + 0.005 * s} for s in range(5)]
    ns = [{"exact": 0.46 + 0.004 * s} for s in range(5)]
    checks = repro.part_b_checks({5: {"lapsum": lap, "neuralsort": ns}})
    assert [c.name for c in checks] == [repro.B_PARITY[5].name, repro.B_N5.name]
    assert [c.verdict for c in checks] == ["held", "held"]
    assert checks[0].estimate == pytest.approx(-0.03 + 0.001 * 2)
    far_behind = [{"exact": x["exact"] + 0.2 + 0.01 * (s % 2)} for s, x in enumerate(lap)]
    worse = repro.part_b_checks({5: {"lapsum": lap, "neuralsort": far_behind}})
    assert worse[0].verdict == "did not hold"


def test_part_a_checks_use_every_repeat():
    """The slope and speed-up checks are means over the timed repeats: one slow repeat moves them,
    and a LapSum slower than NeuralSort fails A2."""
    a = {
        "slopes": [0.9, 0.92, 0.88, 0.91, 0.89],
        "speedups": {
            "NeuralSort": [200.0, 210, 190, 205, 195],
            "SoftSort": [150.0, 160, 170, 155, 165],
        },
        "bytes_per_4n": 1.0,
        "exact": {"sum_error": 1e-12, "vjp_rel_error": {"soft_topk": 1e-9}},
    }
    checks = repro.part_a_checks(a)
    assert [c.name for c in checks] == A_NAMES and all(c.held for c in checks)
    assert checks[0].data["values"] == a["slopes"] and checks[0].n == 5
    a["speedups"]["SoftSort"] = [0.5, 0.6, 0.55, 0.5, 0.58]  # LapSum slower than SoftSort
    a["slopes"] = [1.9, 2.0, 2.1, 1.95, 2.05]  # quadratic
    checks = repro.part_a_checks(a)
    assert checks[0].verdict == checks[2].verdict == "did not hold"


def test_part_a_measures_slopes_and_ratios_per_repeat(monkeypatch):
    """part_a pairs the i-th timed repeat of every n (slopes) and of both methods (ratios)."""
    times = {"LapSum": {256: [1.0, 2.0], 512: [2.0, 8.0]}, "NeuralSort": {256: [10.0, 40.0]}}
    times["SoftSort"] = {256: [5.0, 6.0]}

    def fake_scaling(ns, base, sink, *, repeats):
        return {
            m: {
                n: {"times": t, "seconds": sum(t) / 2, "saved_bytes": 4 * n + 8}
                for n, t in rows.items()
            }
            for m, rows in times.items()
        }

    monkeypatch.setattr(repro.ex, "scaling", fake_scaling)
    monkeypatch.setattr(
        repro.ex, "exactness", lambda: {"sum_error": 0.0, "vjp_rel_error": {"x": 0.0}}
    )
    sizes = dict(ns=[256, 512], base=[256], sink=[256], repeats=2)
    a = repro.part_a(dataclasses.replace(repro.SMOKE, **sizes))
    assert a["slopes"] == pytest.approx([1.0, 2.0])  # log2(2/1), log2(8/2) over one doubling
    assert a["speedups"]["NeuralSort"] == pytest.approx([10.0, 20.0])
    assert a["speedups"]["SoftSort"] == pytest.approx([5.0, 3.0])
    assert a["bytes_per_4n"] == pytest.approx(max((4 * n + 8 - 4096) / (4 * n) for n in (256, 512)))


def test_digit_number_sets_come_from_the_shared_loader():
    pytest.importorskip("sklearn")
    import torch

    from icml25.lapsum.data import digit_number_sets
    from icml25.toy import digits

    tr_x, tr_y, te_x, te_y = digit_number_sets()
    assert tr_x.shape == (1300, 64) and te_x.shape == (497, 64)
    x, y = digits("flat")
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(123))
    assert torch.equal(tr_x, x[perm[:1300]]) and torch.equal(te_y, y[perm[1300:]])


@pytest.mark.slow
def test_quick_repro_matches_its_recorded_verdicts(tmp_path, assert_recorded_verdicts):
    """The quick mode gives the verdicts docs/lapsum.md records, check by check (C has been
    inconclusive against its 0.5-point margin in every run so far), and the same checks as the
    smoke size. No timing bound: the run's speed is the machine's, not the code's."""
    result = repro.run(quick=True, seed=0, out=tmp_path)
    assert [c.name for c in result.checks] == _expected_checks(quick=True)
    assert_recorded_verdicts(result, "lapsum", "quick")
