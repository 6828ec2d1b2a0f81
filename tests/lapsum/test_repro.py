from __future__ import annotations

import pytest

from icml25.lapsum import repro
from icml25.report import ReproResult


@pytest.mark.parametrize("quick", [True, False])
def test_repro_smoke_structure(tmp_path, quick, check_smoke):
    result = repro.run(quick=quick, seed=0, out=tmp_path, smoke=True)
    assert isinstance(result, ReproResult)
    check_smoke(result, "lapsum", prefixes=("A1", "C top-5 gain"))
    names = [m.name for m in result.metrics]
    assert any(n.startswith("A1") for n in names) and any(
        n.startswith("C top-5 gain") for n in names
    )
    assert any(n.startswith("B exact") for n in names) == (not quick)
    for fig in result.figures:
        assert fig.exists() and fig.suffix == ".png"
    assert "A1 slope <= 1.3" in result.criterion


@pytest.mark.slow
def test_quick_repro_holds(tmp_path):
    result = repro.run(quick=True, seed=0, out=tmp_path)
    assert result.seconds < 240
    assert result.held, result.notes
