"""The reproduction at smoke size, the regression test of its signature figure, and (slow) the
quick run's verdicts against the ones docs/topo_detect.md records."""

from __future__ import annotations

import pytest

from icml25.topo_detect import repro


@pytest.fixture(scope="module")
def quick_smoke(tmp_path_factory):
    return repro.run(quick=True, seed=0, out=tmp_path_factory.mktemp("quick"), smoke=True)


def test_quick_smoke(quick_smoke, check_smoke):
    result = quick_smoke
    check_smoke(
        result,
        "topo_detect",
        metrics=("clean zero-shot accuracy", "Spearman rho TP"),
        prefixes=("power ", "type-I "),
        ranges={"power ": (0.0, 1.0), "type-I ": (0.0, 1.0)},
    )
    assert [c.name.split(" (")[0] for c in result.checks] == [c.name for c in repro.CRITERIA]
    assert {f.name for f in result.figures} == {"signature_vs_fraction.png", "power_table.png"}
    names = {m.name for m in result.metrics}
    assert all(f"power {t}" in names for t in (*repro.TESTS, *repro.GRAD_TESTS))
    # one value per seed (the unit of the metrics), not one pooled number
    assert all(len(m.values) == len(result.seeds) for m in result.metrics)


def test_the_control_check_compares_the_key_test_with_its_best_control(quick_smoke):
    """Check 2d: SA*G_topo against the SA product of whichever control (k-NN distances, LID)
    has the higher power, paired trial by trial on the same data; every control test reports
    its power and type-I error, and enters the type-I check."""
    result = quick_smoke
    names = {m.name: m for m in result.metrics}
    for t in repro.CONTROL_TESTS:
        assert f"power {t}" in names and f"type-I {t}" in names
    check = result.checks[-1]
    assert check.name.startswith(repro.POWER_CONTROL.name)
    assert check.data["units"] == [f"seed {s} trial {i}" for s in result.seeds for i in range(4)]
    best = check.name.split("best control: ")[1].rstrip(")")
    assert best in ("SA*G_knn", "SA*G_lid")
    power = {t: names[f"power {t}"].mean for t in ("SA*G_knn", "SA*G_lid", "SA*G_topo")}
    assert power[best] == max(power["SA*G_knn"], power["SA*G_lid"])
    a, b = check.data["a"], check.data["b"]
    assert len(a) == len(b) == 4 * len(result.seeds)  # one value per (seed, trial), paired
    assert sum(a) / len(a) == pytest.approx(power["SA*G_topo"])
    assert sum(b) / len(b) == pytest.approx(power[best])
    assert any(t.startswith("Topology against the non-topological controls") for t in result.tables)


def test_the_signature_figure_is_monotone():
    """The paper's observation (§5, the figure signature_vs_fraction.png): the batch-mean TP and
    MK losses change monotonically with the adversarial fraction. On the reproduction's own
    model and attack (seed 0), 5 fractions x 5 batches of 100: |Spearman rho| >= 0.8 for both."""
    from icml25.topo_detect import experiment

    st = experiment.Setting(0)
    fractions = (0.0, 0.25, 0.5, 0.75, 1.0)
    curve = experiment.curve(st, 0, 5, fractions)
    assert curve["fractions"] == list(fractions)
    for loss in ("tp", "mk"):
        assert abs(curve["spearman"][loss]) >= 0.8, (loss, curve[loss]["mean"])
    # the image cloud drives the change; the text cloud's persistence barely moves
    px, py = curve["pers0_x"]["mean"], curve["pers0_y"]["mean"]
    assert abs(px[-1] - px[0]) > 5 * abs(py[-1] - py[0])


def test_full_smoke_has_the_sweep(tmp_path, check_smoke):
    result = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(
        result,
        "topo_detect",
        metrics=("clean zero-shot accuracy", "Spearman rho TP alpha=2"),
        prefixes=("power ", "type-I "),
        ranges={"power ": (0.0, 1.0), "type-I ": (0.0, 1.0)},
    )
    assert any(t.startswith("Sweep (report only") for t in result.tables)
    names = {m.name for m in result.metrics}
    for t in (
        *repro.TESTS,
        *repro.GRAD_TESTS,
        *repro.CONTROL_TESTS,
        *repro.EXTRA_TESTS,
        *repro.TRAINED_TESTS,
    ):
        assert f"power {t}" in names and f"type-I {t}" in names
    assert all(f"final J {t}" in names for t in repro.TRAINED_TESTS)
    assert "G_topo[per group]" not in result.checks[2].name  # the invalid control is not checked


@pytest.mark.slow
def test_quick_reproduction_gives_the_recorded_verdicts(
    tmp_path, check_smoke, assert_recorded_verdicts
):
    result = repro.run(quick=True, seed=0, out=tmp_path)
    check_smoke(result, "topo_detect", prefixes=("power ", "type-I "))
    assert result.seeds == [0, 1, 2]
    assert_recorded_verdicts(result, "topo_detect", "quick")
