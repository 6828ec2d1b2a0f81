"""The example of docs/swan.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "swan.md"


def test_the_docs_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    ns: dict = {}
    exec(compile(blocks[0], str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
    opt = ns["opt"]
    assert any(g.get("blocks") == 3 for g in opt.param_groups)  # Q/K/V whitened per block
    swan_params = [p for g in opt.param_groups if g["use_swan"] for p in g["params"]]
    assert swan_params and all(p not in opt.state for p in swan_params)
