"""Reasoning format: round trip, missing / nested / duplicated tags, truncation."""

from __future__ import annotations

import pytest

from icml25.safety_reasoning import ReasoningFormat
from icml25.safety_reasoning.formats import STATUSES
from icml25.safety_reasoning.toy_teacher import TOY_FORMAT


@pytest.mark.parametrize(
    "fmt", [ReasoningFormat(), ReasoningFormat("<reasoning>", "</reasoning>", " "), TOY_FORMAT]
)
@pytest.mark.parametrize(
    "reasoning,answer",
    [
        ("step one\nstep two", "I cannot help with that."),
        ("plain: hv1 dt2 f3 verdict harm", "sorry cannot"),
        ("x", "Sure: 1. a\n2. b"),
    ],
)
def test_round_trip(fmt, reasoning, answer):
    parsed = fmt.split_output(fmt.format_target(reasoning, answer))
    assert parsed == (reasoning, answer, "ok")


def test_default_tags_and_layout():
    assert ReasoningFormat().format_target("r", "a") == "<think>\nr\n</think>\na"


def test_missing_tags():
    f = ReasoningFormat()
    assert f.split_output("Just an answer.") == (None, "Just an answer.", "no_reasoning")
    # closing tag only (templates that open the block themselves)
    assert f.split_output("thinking here</think>The answer") == (
        "thinking here",
        "The answer",
        "missing_open",
    )
    # opening tag only: truncated inside the block, no answer
    p = f.split_output("<think> I was thinking and ran out of toke")
    assert p.status == "truncated" and p.answer == "" and p.truncated
    assert p.reasoning == "I was thinking and ran out of toke"


def test_nested_and_duplicated_tags():
    f = ReasoningFormat()
    nested = f.split_output("<think> a <think> b </think> final")
    assert nested == ("a <think> b", "final", "nested")
    dup = f.split_output("<think> a </think> first <think> b </think> second")
    assert dup.status == "duplicated" and dup.answer == "second"
    assert dup.reasoning == "a </think> first <think> b"
    two_closes = f.split_output("<think> a </think> mid </think> end")
    assert two_closes.status == "duplicated" and two_closes.answer == "end"


def test_preamble_and_empty_answer():
    f = ReasoningFormat()
    assert f.split_output("Hello <think> r </think> y") == ("r", "y", "preamble")
    assert f.split_output("<think> r </think>") == ("r", "", "ok")
    assert set(STATUSES) >= {
        "ok",
        "truncated",
        "nested",
        "duplicated",
        "missing_open",
        "no_reasoning",
        "preamble",
    }


def test_word_tags_match_whole_words_only():
    # the toy's closing tag "A" must not match inside another word
    p = TOY_FORMAT.split_output("=> plain: ABC dt2 verdict ok A sure do dt2")
    assert p == ("plain: ABC dt2 verdict ok", "sure do dt2", "ok")


def test_bad_input():
    with pytest.raises(ValueError, match="open_tag"):
        ReasoningFormat("", "</think>")
    with pytest.raises(ValueError, match="differ"):
        ReasoningFormat("x", "x")
    with pytest.raises(ValueError, match="reasoning must be a non-empty"):
        ReasoningFormat().format_target("", "a")
    with pytest.raises(ValueError, match="contains the tag"):
        ReasoningFormat().format_target("a </think> b", "a")
    with pytest.raises(TypeError, match="string"):
        ReasoningFormat().split_output(None)
