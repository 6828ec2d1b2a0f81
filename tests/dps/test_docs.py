"""The Python blocks of docs/dps.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "dps.md"


def test_docs_examples_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    ns: dict = {}
    exec(compile(blocks[0], str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
    res = ns["result"]
    assert res.n_calls == {"lvlm": 5, "helper": 2} and res.final == "It is a cat."
    assert [t["role"] for t in res.trace] == [
        "strong",
        "weak",
        "weak",
        "helper",
        "strong",
        "helper",
        "strong",
    ]
    assert capsys.readouterr().out.strip()
