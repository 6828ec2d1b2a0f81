from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from icml25.report import ReproResult  # noqa: E402
from icml25.swan import repro  # noqa: E402


def test_tokens_to_target_interpolates():
    assert repro.tokens_to_target([0, 10, 20], [5.0, 4.0, 3.0], 3.5) == 15.0
    assert repro.tokens_to_target([0, 10], [5.0, 4.0], 3.0) is None


@pytest.mark.parametrize("quick", [True, False])
def test_repro_smoke_structure(tmp_path, quick, check_smoke):
    result = repro.run(quick=quick, seed=0, out=tmp_path, smoke=True)
    assert isinstance(result, ReproResult)
    # C3 is NaN when a run never reaches the AdamW target loss, as at smoke size
    check_smoke(result, "swan", metrics=("C1 SWAN optimizer state bytes",), allow_nan=("C3",))
    names = [m.name for m in result.metrics]
    assert "C1 SWAN optimizer state bytes" in names
    assert any(n.startswith("C3") for n in names) == (not quick)
    assert "C1 zero state on SWAN matrices, exact bytes" in result.criterion
    assert "train sha256" in result.setup
    assert [f.name for f in result.figures] == ["curves.png", "memory.png"]
    assert all(f.exists() for f in result.figures)
    state = result.metric("C1 SWAN optimizer state bytes").mean
    assert state > 0  # the AdamW side (embeddings, head, norms) keeps its moments


@pytest.mark.slow
def test_quick_repro_holds(tmp_path):
    result = repro.run(quick=True, seed=0, out=tmp_path)
    assert result.seconds < 240
    assert result.held, result.notes
