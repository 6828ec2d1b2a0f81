"""The complete example of docs/fpo.md runs as written (the other blocks are sketches on the
user's own model, files and SAE)."""

from __future__ import annotations

import math
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "fpo.md"


def test_the_complete_example_runs(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    runnable = [b for b in blocks if "tiny_causal_lm" in b]
    assert len(runnable) == 1
    ns: dict = {}
    exec(compile(runnable[0], str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
    losses = [s["loss"] for s in ns["hist"].steps]
    assert len(ns["hist"].step_seconds) == 2 and all(math.isfinite(x) for x in losses)
    assert 0 < ns["info"]["fve"] <= 1
    assert capsys.readouterr().out.strip()


def test_sketch_blocks_use_public_names():
    import icml25.fpo as fpo

    text = DOC.read_text(encoding="utf-8")
    found = re.findall(r"from icml25\.fpo import \(([^)]*)\)", text)
    found += re.findall(r"from icml25\.fpo import ([^(\n]+)\n", text)
    names = [n.strip() for block in found for n in block.replace("\n", " ").split(",")]
    assert len(names) > 8
    for n in names:
        assert n in fpo.__all__, n
