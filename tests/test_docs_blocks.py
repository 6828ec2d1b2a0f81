"""Every ```python block of every docs page: it compiles, every name it uses is defined on the page
or declared as the reader's own (a first line ``# yours: model, tokenizer``), and it runs, in page
order, unless it needs the reader's objects or a resource the test machine lacks (a first line
``# needs: ...``); those blocks still run their imports. The pages are users' first contact."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"```python\n(.*?)```", re.S)
MARK = re.compile(r"^# (yours|needs): ?(.*)$")


def _blocks(page: Path) -> list[str]:
    return FENCE.findall(page.read_text(encoding="utf-8"))


def _mark(block: str) -> tuple[str | None, list[str]]:
    """The block's leading ``# yours:`` / ``# needs:`` lines: ``("yours" or "needs" or None,
    declared names)``; a block with both is a ``needs`` block."""
    kind, names = None, []
    for line in block.split("\n"):
        m = MARK.match(line)
        if not m:
            break
        if m.group(1) == "yours":
            names += [n.strip() for n in m.group(2).split(",")]
            kind = kind or "yours"
        else:
            kind = "needs"
    return kind, names


def _undefined(blocks: list[str], tmp: Path) -> list[list[str]]:
    """F821 (undefined name) per block, the page's blocks read in order as one module."""
    code, spans = "", []
    for b in blocks:
        start = code.count("\n") + 1
        code += b + "\n"
        spans.append((start, code.count("\n")))
    f = tmp / "page.py"
    f.write_text(code, encoding="utf-8")
    out = subprocess.run(
        [
            "ruff",
            "check",
            "--select",
            "F821",
            "--output-format",
            "concise",
            "--no-cache",
            "--isolated",
            str(f),
        ],
        capture_output=True,
        text=True,
    ).stdout
    res: list[list[str]] = [[] for _ in blocks]
    for line in out.splitlines():
        m = re.match(r".*?:(\d+):\d+: F821 Undefined name `([^`]+)`", line)
        if m:
            ln = int(m.group(1))
            res[next(i for i, (a, b) in enumerate(spans) if a <= ln <= b)].append(m.group(2))
    return res


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_blocks_use_only_defined_or_declared_names(page, tmp_path):
    blocks = _blocks(page)
    for i, b in enumerate(blocks):
        ast.parse(b, filename=f"{page.name} block {i}")
    if not blocks or shutil.which("ruff") is None:
        return
    for i, (b, und) in enumerate(zip(blocks, _undefined(blocks, tmp_path))):
        kind, declared = _mark(b)
        missing = sorted(set(und) - set(declared))
        assert not missing, (
            f"{page.name} block {i} uses {missing}: define them or declare '# yours: ...'"
        )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_blocks_run(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the page runs as a module of its own, as a reader's script would: a dataclass on the page
    # finds its module, and this file's ``from __future__`` imports do not leak into the blocks
    module = types.ModuleType(f"docs_{page.stem}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    ns = module.__dict__
    for i, b in enumerate(_blocks(page)):
        kind, _ = _mark(b)
        tree = ast.parse(b)
        if kind is not None:  # the reader's objects or a missing resource: only the imports run
            tree.body = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        code = compile(tree, f"{page.name} block {i}", "exec", dont_inherit=True)
        exec(code, ns)  # noqa: S102 - our own docs
