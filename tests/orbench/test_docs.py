"""docs/orbench.md's Python examples run as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "orbench.md"


def test_the_doc_examples_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 5, "docs/orbench.md lost its examples"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ICML25_QUIET", "1")
    namespace: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/orbench.md block {i}", "exec"), namespace)  # noqa: S102
    assert (tmp_path / "results" / "my-model__hard-1k.jsonl").is_file()
    assert (tmp_path / "tradeoff.png").is_file()
    assert (tmp_path / "my-orbench" / "or-bench-80k.jsonl").is_file()
    assert (tmp_path / "orbench_task").is_dir()
