"""The reproduction at smoke size."""

from __future__ import annotations

from icml25.topo_detect import repro


def test_quick_smoke(tmp_path, check_smoke):
    result = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    check_smoke(result, "topo_detect", metrics=("clean zero-shot accuracy", "Spearman rho TP"),
                prefixes=("power ", "type-I "), ranges={"power ": (0.0, 1.0), "type-I ": (0.0, 1.0)})  # fmt: skip
    assert [c.name.split(" (")[0] for c in result.checks] == [c.name for c in repro.CRITERIA]
    assert {f.name for f in result.figures} == {"signature_vs_fraction.png", "power_table.png"}
    names = {m.name for m in result.metrics}
    assert all(f"power {t}" in names for t in (*repro.TESTS, *repro.GRAD_TESTS))


def test_full_smoke_has_the_sweep(tmp_path, check_smoke):
    result = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(result, "topo_detect", metrics=("clean zero-shot accuracy", "Spearman rho TP alpha=2"),
                prefixes=("power ", "type-I "), ranges={"power ": (0.0, 1.0), "type-I ": (0.0, 1.0)})  # fmt: skip
    assert any(t.startswith("Sweep (report only") for t in result.tables)
    names = {m.name for m in result.metrics}
    for t in (*repro.TESTS, *repro.GRAD_TESTS, *repro.EXTRA_TESTS, *repro.TRAINED_TESTS):
        assert f"power {t}" in names and f"type-I {t}" in names
    assert all(f"final J {t}" in names for t in repro.TRAINED_TESTS)
    assert "G_topo[per group]" not in result.checks[2].name  # the invalid control is not checked
