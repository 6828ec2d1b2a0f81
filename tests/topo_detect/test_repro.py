"""The reproduction at smoke size."""

from __future__ import annotations

from icml25.topo_detect import repro


def test_quick_smoke(tmp_path, check_smoke):
    result = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    check_smoke(result, "topo_detect", metrics=("clean zero-shot accuracy", "Spearman rho TP"),
                prefixes=("power ", "type-I "), ranges={"power ": (0.0, 1.0), "type-I ": (0.0, 1.0)})  # fmt: skip
    assert [c.name.split(" (")[0] for c in result.checks] == [c.name for c in repro.CRITERIA]
    assert {f.name for f in result.figures} == {"signature_vs_fraction.png", "power_table.png"}


def test_full_smoke_has_the_sweep(tmp_path, check_smoke):
    result = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(result, "topo_detect", metrics=("clean zero-shot accuracy",))
    assert any(t.startswith("Sweep (report only") for t in result.tables)
