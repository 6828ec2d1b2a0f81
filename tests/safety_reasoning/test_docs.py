"""The Python blocks of docs/safety_reasoning.md run as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "safety_reasoning.md"


def test_docs_examples_run(tmp_path, monkeypatch, capsys):
    pytest.importorskip("sklearn")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 4
    ns: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), ns)  # noqa: S102 - our own documentation
    rep = ns["report"]
    # the malformed first candidate of each query is rejected, the second kept
    assert rep.per_filter_rejects == {"format": 4} and len(rep.examples) == 4
    assert rep.acceptance_by_kind == {"harmful": 0.5, "helpful": 0.5}
    assert (tmp_path / "srg_synthesis.jsonl").exists()
    assert ns["model"].sft_losses[-1] < ns["model"].sft_losses[0]
    assert sorted(ns["bon"].asr) == [1, 2, 4, 8]
    assert set(ns["rep"].a_distance) == {"cipher"}
    assert capsys.readouterr().out.strip()


def test_doc_names_are_public():
    import icml25.safety_reasoning as srg

    text = DOC.read_text(encoding="utf-8")
    names = set(re.findall(r"`([A-Za-z_]\w+)\(", text))
    external = {
        "OpenAIChat",
        "HFChat",
        "CallableChat",
        "CachedChat",
        "AutoModelForCausalLM",
        "LoraConfig",
        "SFTConfig",
        "simple_evaluate",
        "read_artifact",
        "KeywordRefusalDetector",
    }
    missing = [
        n for n in names - external if not hasattr(srg, n) and n not in ("peft", "trl", "jbb")
    ]
    assert not missing, missing
