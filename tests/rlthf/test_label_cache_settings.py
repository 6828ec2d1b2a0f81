"""The AI-label cache keeps what made each label (issue 48): another labeller on the same
cache file, even one that shares the first one's name, asks afresh and never gets its labels."""

from __future__ import annotations

import json

from icml25.llm import CallableChat
from icml25.rlthf import ChatLabeler


def test_another_labeller_under_the_same_name_is_kept_apart(small_pairs, tmp_path):
    path = tmp_path / "ai.jsonl"
    first = CallableChat(lambda m, **k: "A", name="judge")
    other = CallableChat(lambda m, **k: "B", name="judge")
    other.extra_body = {"reasoning_effort": "high"}  # same model name, asked otherwise
    la, _ = ChatLabeler(first, swap_check=False, cache_path=path).label(small_pairs, None)
    second = ChatLabeler(other, swap_check=False, cache_path=path)
    lb, _ = second.label(small_pairs, None)
    assert la.tolist() == [1, 1, 1] and lb.tolist() == [0, 0, 0] and second.calls == 3
    rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    assert len({r["_settings"] for r in rows}) == 2  # each row stamped with its labeller
    settings = json.loads((tmp_path / "ai.jsonl.settings.json").read_text(encoding="utf-8"))
    assert {"reasoning_effort": "high"} in [
        s["backend"].get("extra_body") for s in settings.values()
    ]
    again = ChatLabeler(first, swap_check=False, cache_path=path)
    assert again.label(small_pairs, None)[0].tolist() == [1, 1, 1] and again.calls == 0
