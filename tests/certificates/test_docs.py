"""The examples of docs/certificates.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "certificates.md"


def test_every_python_block_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/certificates.md has no python example"
    for code in blocks:
        ns: dict = {}
        exec(compile(code, str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
        assert 0.75 < float(ns["cert"].guarantee(ns["codec"].encode(0, 0))) < 0.9
        assert ns["u"] in range(5) and ns["u_batch"].shape == (3,)
