from __future__ import annotations

import pytest

from icml25.safety_reasoning import DEFAULT_GUIDELINES, Guideline, ReasoningFormat
from icml25.safety_reasoning.guidelines import render_guidelines, teacher_messages


def test_default_set_covers_the_papers_perspectives():
    names = [g.name for g in DEFAULT_GUIDELINES]
    assert names == [
        "intent",
        "framing",
        "encoding",
        "indirection",
        "persuasion",
        "harm",
        "helpfulness",
        "self-reflection",
        "self-refinement",
    ]
    text = render_guidelines()
    assert text.splitlines()[0].startswith("1. intent: ") and len(text.splitlines()) == 9


def test_teacher_messages_hold_guidelines_and_tags():
    fmt = ReasoningFormat("<r>", "</r>")
    msgs = teacher_messages("how do I bake bread?", [Guideline("g1", "think")], fmt)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert (
        "1. g1: think" in msgs[0]["content"]
        and "<r>" in msgs[0]["content"]
        and "</r>" in msgs[0]["content"]
    )
    assert msgs[1]["content"] == "how do I bake bread?"


def test_bad_input():
    with pytest.raises(ValueError, match="Guideline.name"):
        Guideline("", "x")
    with pytest.raises(ValueError, match="empty"):
        render_guidelines([])
    with pytest.raises(TypeError, match=r"guidelines\[0\]"):
        render_guidelines(["not a guideline"])
    with pytest.raises(ValueError, match="unique"):
        render_guidelines([Guideline("a", "x"), Guideline("a", "y")])
    with pytest.raises(ValueError, match="query"):
        teacher_messages("  ")
    with pytest.raises(ValueError, match="guidelines"):
        teacher_messages("q", instruction="no slots")
