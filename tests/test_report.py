"""ReproResult / Metric semantics and the Markdown + JSON report they render into."""

from __future__ import annotations

import json
import math

import pytest

from icml25.report import (
    Metric,
    ReproResult,
    load_results,
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


def test_result_needs_a_verdict_and_valid_fields():
    with pytest.raises(ValueError, match="needs a verdict"):
        ReproResult("lapsum", "claim", held=None)
    with pytest.raises(TypeError, match="held must be True, False or None"):
        ReproResult("lapsum", "claim", held="yes")
    with pytest.raises(ValueError, match="key_metric 'z'"):
        ReproResult("lapsum", "c", held=True, metrics=[Metric("a", 1)], key_metric="z")
    with pytest.raises(ValueError, match="duplicate metric names"):
        ReproResult("lapsum", "c", held=True, metrics=[Metric("a", 1), Metric("a", 2)])
    with pytest.raises(ValueError, match="slug"):
        ReproResult("", "c", held=True)


def test_statuses():
    assert ReproResult("a", "c", held=True).status == "held"
    assert ReproResult("a", "c", held=False).status == "did not hold"
    assert ReproResult.for_error("a", "Traceback ...").status == "error"
    assert ReproResult.for_planned("a", "T").status == "planned"


def test_report_with_fake_result_and_figure(tmp_path):
    out = tmp_path / "run"
    fig = _figure(out / "lapsum" / "scaling.png")
    outside = _figure(tmp_path / "elsewhere" / "extra.png")
    held = ReproResult(
        "lapsum",
        "Soft top-k in O(n log n) matches the exact operator.",
        held=True,
        metrics=[Metric("max error", [1e-12, 2e-12]), Metric("speedup", [4.0, 5.0, 6.0], unit="x")],
        key_metric="speedup",
        setup="n up to 1e5, 3 seeds",
        criterion="speedup >= 3 and max error <= 1e-10",
        figures=[fig, outside],
        deviations=["smaller n than the paper"],
        notes="All good.",
        seconds=12.5,
    )
    failed = ReproResult("swan", "SWAN matches Adam | at half the memory.", held=False, seconds=3)
    broken = ReproResult.for_error("cdkf", "Traceback (most recent call last):\nRuntimeError: boom")
    planned = ReproResult.for_planned("tpo", "Test-Time Preference Optimization")
    report = write_report([held, failed, broken, planned], out, meta={"mode": "quick", "seed": 0})
    text = report.read_text()

    assert "| 04 | [lapsum](#04-lapsum) |" in text
    assert "✅ held" in text and "❌ did not hold" in text and "💥 error" in text
    assert "speedup = 5 ± 1 (n=3) x" in text  # key number in the summary
    assert "SWAN matches Adam \\| at half the memory." in text  # pipe escaped in the table
    assert "![scaling](lapsum/scaling.png)" in text
    assert "![extra](lapsum/extra.png)" in text and (out / "lapsum" / "extra.png").exists()
    assert "RuntimeError: boom" in text
    assert "## Planned (no reproduction yet)" in text and "| 16 | tpo |" in text
    assert "- smaller n than the paper" in text
    assert "**Pass criterion.** speedup >= 3 and max error <= 1e-10" in text

    data = json.loads((out / "results.json").read_text())
    assert [r["status"] for r in data["results"]] == ["held", "did not hold", "error", "planned"]
    assert data["results"][0]["figures"] == ["lapsum/scaling.png", "lapsum/extra.png"]
    meta, back = load_results(out)
    assert meta["mode"] == "quick"
    assert [r.to_dict() for r in back] == data["results"]


def test_missing_figure_is_marked_not_fatal(tmp_path):
    r = ReproResult("lapsum", "c", held=True, figures=["lapsum/nothing.png"])
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


def test_checks_table_and_pyplot():
    from icml25.report import checks_table, pyplot

    assert checks_table({"A": True, "B": False}) == (
        "| check | result |\n|---|---|\n| A | PASS |\n| B | FAIL |"
    )
    assert pyplot().get_backend().lower() == "agg"


def test_torch_threads_restores_the_count():
    torch = pytest.importorskip("torch")
    from icml25.report import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
