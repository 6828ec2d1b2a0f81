"""The example of docs/lapsum.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import torch

DOC = Path(__file__).resolve().parents[2] / "docs" / "lapsum.md"


def test_the_docs_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    ns: dict = {}
    exec(compile(blocks[0], str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
    assert torch.allclose(ns["p"].sum(-1), torch.full((8,), 5.0), atol=1e-4)
    assert ns["p_many"].shape == (8, 3, 10) and ns["per_example"].shape == (8, 10)
