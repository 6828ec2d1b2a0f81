"""The examples of docs/topo_detect.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "topo_detect.md"


def test_every_python_block_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks
    for code in blocks:
        ns: dict = {}
        exec(compile(code, str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
        assert ns["feats"].shape == (100, 2) and 0 < ns["result"].p_value <= 1
        assert ns["plain"].test(ns["clean"], ns["suspect"]).reject  # the toy shift is easy
