"""ReproResult / Metric / Check semantics and the Markdown + JSON report they render into."""

from __future__ import annotations

import json
import math

import pytest

from icml25.report import (
    Criterion,
    Metric,
    ReproResult,
    load_results,
    render_comparison,
    render_markdown,
    save_figure,
    write_report,
)


def _figure(path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    return save_figure(fig, path)


def test_metric_mean_and_sample_std():
    m = Metric("acc", [0.8, 0.9, 1.0])
    assert m.n == 3
    assert m.mean == pytest.approx(0.9)
    assert m.std == pytest.approx(0.1)  # sample (ddof=1) standard deviation
    assert m.format() == "0.9 ± 0.1 (n=3)"
    single = Metric("speedup", 3.0, unit="x")
    assert single.values == [3.0] and single.std == 0.0
    assert single.format() == "3 x"


def test_metric_accepts_numpy_scalars_and_keeps_nan():
    np = pytest.importorskip("numpy")
    m = Metric("x", np.array([1.0, 2.0]))
    assert m.values == [1.0, 2.0]
    nan = Metric("y", [1.0, float("nan")])
    assert math.isnan(nan.mean) and math.isnan(nan.std)
    assert nan.to_dict()["mean"] is None  # JSON has no NaN


@pytest.mark.parametrize(
    ("values", "error"),
    [([], ValueError), (["a"], TypeError), (None, TypeError), ([object()], TypeError)],
)
def test_metric_rejects_bad_values(values, error):
    with pytest.raises(error, match="metric 'm'"):
        Metric("m", values)


HELD = Criterion("gain", "paired", above=0.0, unit="pt", description="ours minus baseline")
EXACT = Criterion("bytes", "exact", below=100)


def _held_check():
    return HELD.check([1.0, 1.1, 0.9, 1.2], [0.0, 0.1, 0.0, 0.1])


def _failed_check():
    return EXACT.check(200)


def test_result_needs_checks_and_valid_fields():
    with pytest.raises(ValueError, match="at least one check"):
        ReproResult("lapsum", "claim")
    with pytest.raises(TypeError, match="Check objects"):
        ReproResult("lapsum", "claim", checks=[True])
    with pytest.raises(ValueError, match="key_check 'z'"):
        ReproResult("lapsum", "c", checks=[_held_check()], key_check="z")
    with pytest.raises(ValueError, match="duplicate metric names"):
        ReproResult("lapsum", "c", checks=[_held_check()], metrics=[Metric("a", 1), Metric("a", 2)])
    with pytest.raises(ValueError, match="duplicate check names"):
        ReproResult("lapsum", "c", checks=[_held_check(), _held_check()])
    with pytest.raises(ValueError, match="slug"):
        ReproResult("", "c", checks=[_held_check()])


def test_statuses_follow_the_checks():
    inconclusive = HELD.check([1.0, -1.0, 0.5], [0.0, 0.0, 0.0])
    assert inconclusive.verdict == "inconclusive"
    assert ReproResult("a", "c", checks=[_held_check()]).status == "held"
    assert ReproResult("a", "c", checks=[_held_check()]).held is True
    both = [_held_check(), inconclusive.renamed("other")]
    assert ReproResult("a", "c", checks=both).status == "inconclusive"
    assert ReproResult("a", "c", checks=[*both, _failed_check()]).status == "did not hold"
    assert ReproResult("a", "c", checks=[_held_check(), _failed_check()]).held is False
    assert ReproResult.for_error("a", "Traceback ...").status == "error"
    assert ReproResult.for_error("a", "Traceback ...").held is None
    assert ReproResult.for_planned("a", "T").status == "planned"


def test_report_with_fake_result_and_figure(tmp_path):
    out = tmp_path / "run"
    fig = _figure(out / "lapsum" / "scaling.png")
    outside = _figure(tmp_path / "elsewhere" / "extra.png")
    speed = Criterion("speedup", "mean", above=2.0, unit="x", paper_effect=0.1)
    held = ReproResult(
        "lapsum",
        "Soft top-k in O(n log n) matches the exact operator.",
        checks=[EXACT.check(12).renamed("max error"), speed.check([4.0, 5.0, 6.0])],
        metrics=[Metric("max error", [1e-12, 2e-12]), Metric("speedup", [4.0, 5.0, 6.0], unit="x")],
        key_check="speedup",
        setup="n up to 1e5, 3 seeds",
        criterion="speedup >= 3 and max error <= 1e-10",
        figures=[fig, outside],
        deviations=["smaller n than the paper"],
        notes="All good.",
        seconds=12.5,
        seeds=[0, 1, 2],
    )
    failed = ReproResult(
        "swan", "SWAN matches Adam | at half the memory.", checks=[_failed_check()], seconds=3
    )
    broken = ReproResult.for_error("cdkf", "Traceback (most recent call last):\nRuntimeError: boom")
    planned = ReproResult.for_planned("tpo", "Test-Time Preference Optimization")
    report = write_report([held, failed, broken, planned], out, meta={"mode": "quick", "seed": 0})
    text = report.read_text()

    assert "| 04 | [lapsum](#04-lapsum) |" in text
    assert "✅ held" in text and "❌ did not hold" in text and "💥 error" in text
    # the key check in the summary, with its interval and n (t(0.975, 2) = 4.303, se = 1/sqrt(3))
    assert "speedup = 5 [2.516, 7.484] x (n=3)" in text
    assert "| 2/2 |" in text and "| 0/1 |" in text  # checks held per paper
    assert "seeds 0–2" in text
    assert "underpowered" in text  # detects ~4.3 x, the paper's effect is 0.1
    assert "SWAN matches Adam \\| at half the memory." in text  # pipe escaped in the table
    assert "![scaling](lapsum/scaling.png)" in text
    assert "![extra](lapsum/extra.png)" in text and (out / "lapsum" / "extra.png").exists()
    assert "RuntimeError: boom" in text
    assert "## Planned (no reproduction yet)" in text and "| 16 | tpo |" in text
    assert "- smaller n than the paper" in text
    assert "**Criteria.** speedup >= 3 and max error <= 1e-10" in text
    assert "What each check compares:" not in text.split("## 05")[0]  # no descriptions given
    described = render_markdown([ReproResult("swan", "c", checks=[_held_check()])], out_dir=out)
    assert "- *gain*: ours minus baseline" in described

    data = json.loads((out / "results.json").read_text())
    assert [r["status"] for r in data["results"]] == ["held", "did not hold", "error", "planned"]
    assert data["results"][0]["figures"] == ["lapsum/scaling.png", "lapsum/extra.png"]
    # the per-seed values and the test are stored: a reader can recompute each check
    stored = data["results"][0]["checks"][1]
    assert stored["data"] == {"values": [4.0, 5.0, 6.0]} and "t-interval" in stored["test"]
    meta, back = load_results(out)
    assert meta["mode"] == "quick"
    assert [r.to_dict() for r in back] == data["results"]
    again = back[0].checks[1].recompute()
    assert (again.low, again.high, again.verdict) == (
        back[0].checks[1].low,
        back[0].checks[1].high,
        "held",
    )


def test_old_results_without_checks_are_refused_with_a_reason(tmp_path):
    old = {"results": [{"slug": "lapsum", "claim": "c", "held": True, "metrics": []}]}
    (tmp_path / "results.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match="has no checks"):
        load_results(tmp_path)
    with pytest.raises(FileNotFoundError, match="no results.json"):
        load_results(tmp_path / "nothing")


def test_comparison_puts_two_runs_side_by_side(tmp_path):
    a = ReproResult("lapsum", "c", checks=[_held_check()], seeds=[0, 1, 2, 3])
    b = ReproResult(
        "lapsum", "c", checks=[HELD.check([0.1, -0.2, 0.3], [0, 0, 0])], seeds=[4, 5, 6]
    )
    text = render_comparison(({"seed": 0}, [a]), ({"seed": 4}, [b]), labels=("s0", "s4"))
    assert "## 04 · lapsum: ✅ held (s0) · ❔ inconclusive (s4)" in text
    row = next(line for line in text.splitlines() if line.startswith("| gain |"))
    assert "(n=4)" in row and "(n=3)" in row and "✅ held" in row and "❔ inconclusive" in row
    assert "| > 0 pt |" in row  # the claim both runs tested
    other = ReproResult("swan", "c", checks=[_failed_check()])
    text = render_comparison(({}, [a, other]), ({}, [b]), labels=("s0", "s4"))
    assert "In one run only: swan (in s0)." in text


def test_missing_figure_is_marked_not_fatal(tmp_path):
    r = ReproResult("lapsum", "c", checks=[_held_check()], figures=["lapsum/nothing.png"])
    text = render_markdown([r], out_dir=tmp_path)
    assert "*(figure `lapsum/nothing.png` is missing)*" in text


def test_save_figure_needs_png(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots()
    with pytest.raises(ValueError, match="PNG"):
        save_figure(fig, tmp_path / "a.pdf")
    plt.close(fig)


def test_checks_markdown_and_pyplot():
    from icml25.report import checks_markdown, pyplot

    table = checks_markdown([_held_check(), _failed_check()])
    lines = table.splitlines()
    assert lines[0].startswith("| check | claim | estimate [95% interval] | n | test |")
    assert lines[2].startswith("| gain | > 0 pt | ") and lines[2].endswith("| ✅ held |")
    assert lines[3].startswith("| bytes | ≤ 100 | 200 | — | deterministic")
    assert pyplot().get_backend().lower() == "agg"


def test_torch_threads_restores_the_count():
    torch = pytest.importorskip("torch")
    from icml25.report import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
