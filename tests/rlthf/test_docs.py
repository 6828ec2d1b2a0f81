"""The Python blocks of docs/rlthf.md run as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "rlthf.md"


def test_docs_examples_run(capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("trl")
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 3
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
    res = ns["result"]
    assert abs(res.history[-1]["human_fraction"] - 0.06) < 1e-9
    assert (
        res.history[-1]["curated_label_accuracy"]
        > (ns["ai_labels"] == ns["pairs"].human_labels).mean()
    )
    assert ns["dist"].lower_bend >= ns["dist"].zero_crossing
    assert ns["rows"] and "weight" in ns["rows"][0]
    assert capsys.readouterr().out.strip()


def test_doc_names_are_public():
    import icml25.rlthf as rlthf

    text = DOC.read_text(encoding="utf-8")
    found = [n for n in re.findall(r"`([A-Z]\w+)\(", text) if len(n) > 1]
    assert len(set(found)) >= 4
    for name in found:
        if name not in (
            "AutoModelForSequenceClassification",
            "OpenAIChat",
            "HFChat",
            "CallableChat",
        ):
            assert name in rlthf.__all__, name
