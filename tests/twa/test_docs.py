"""The complete example of docs/twa.md runs as written (the first block is a sketch on the
user's own model and file)."""

from __future__ import annotations

import math
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "twa.md"


def test_the_complete_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    runnable = [b for b in blocks if "tiny_causal_lm" in b]
    assert len(runnable) == 1
    ns: dict = {}
    exec(compile(runnable[0], str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
    assert len(ns["data"]) == 2 and ns["data"][0].spans[0].weight == 5.0
    losses = [s["loss"] for s in ns["hist"].steps]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
