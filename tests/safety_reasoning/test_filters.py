"""Each filter's accept/reject truth table."""

from __future__ import annotations

import pytest

from icml25.llm import KeywordRefusalDetector, ScriptedChat
from icml25.safety_reasoning import (
    FormatFilter,
    Guideline,
    GuidelineFilter,
    OutcomeFilter,
    Query,
    ReasoningFormat,
)
from icml25.safety_reasoning.filters import as_filter
from icml25.safety_reasoning.formats import ParsedOutput

HARM = Query("how to build a bomb", "harmful", "h")
HELP = Query("how to bake bread", "helpful", "b")
REFUSAL = "I'm sorry, but I can't help with that."
ANSWER = "Mix flour, water, salt and yeast; knead; bake at 230 C."


def parsed(text: str) -> ParsedOutput:
    return ReasoningFormat().split_output(text)


@pytest.mark.parametrize(
    "text,accept",
    [
        ("<think>r</think>a", True),
        ("<think>r</think>", False),  # no answer
        ("<think> </think>a", False),  # empty reasoning
        ("just an answer", False),  # no block
        ("<think>r", False),  # truncated
        ("<think>a<think>b</think>c", False),  # nested
        ("r</think>a", False),  # missing open
        ("pre <think>r</think>a", False),
    ],
)
def test_format_filter(text, accept):
    assert FormatFilter()(HARM, parsed(text)).accept is accept


def test_format_filter_allow():
    assert FormatFilter(allow=["missing_open"])(HARM, parsed("r</think>a")).accept


def test_outcome_filter_truth_table():
    f = OutcomeFilter(KeywordRefusalDetector.default())
    ok = lambda q, a: f(q, ParsedOutput("r", a, "ok")).accept  # noqa: E731
    assert ok(HARM, REFUSAL) and not ok(HARM, ANSWER)
    assert ok(HELP, ANSWER) and not ok(HELP, REFUSAL)


def test_outcome_filter_judges():
    calls = []

    def judge(prompts, responses):
        calls.append((prompts, responses))
        return ["unknown"]

    f = OutcomeFilter(
        KeywordRefusalDetector.default(),
        safety_judge=judge,
        helpful_judge=lambda q, a: len(a) / 100,
        tau=0.3,
    )
    d = f(HARM, ParsedOutput("r", REFUSAL, "ok"))
    assert not d.accept and "unknown" in d.reason and calls == [([HARM.text], [REFUSAL])]
    assert f(HELP, ParsedOutput("r", ANSWER, "ok")).accept  # 0.55 >= 0.3
    assert not f(HELP, ParsedOutput("r", "Sure.", "ok")).accept  # 0.05 < 0.3


def test_guideline_filter_with_callable_and_backend():
    gs = [Guideline("a", "x"), Guideline("b", "y"), Guideline("c", "z")]
    f = GuidelineFilter(lambda q, r, g: [True, False, True], min_guidelines=2, guidelines=gs)
    assert f(HARM, ParsedOutput("r", "a", "ok")).accept
    f3 = GuidelineFilter(lambda q, r, g: [True, False, True], min_guidelines=3, guidelines=gs)
    assert not f3(HARM, ParsedOutput("r", "a", "ok")).accept
    judge = ScriptedChat(["Yes.", "no", "YES, it does"])
    fb = GuidelineFilter(judge, min_guidelines=2, guidelines=gs)
    assert fb.applied(HARM, "my reasoning") == 2
    assert len(judge.calls) == 3 and "my reasoning" in judge.calls[0]["messages"][0]["content"]


def test_guideline_judge_outputs_are_checked():
    gs = [Guideline("a", "x"), Guideline("b", "y")]
    ok = ParsedOutput("r", "a", "ok")
    assert GuidelineFilter(lambda q, r, g: {"a": True}, guidelines=gs)(HARM, ok).accept
    with pytest.raises(TypeError, match="must return a bool"):
        GuidelineFilter(lambda q, r, g: ["no", "no"], guidelines=gs)(HARM, ok)
    with pytest.raises(TypeError, match="one bool per guideline"):
        GuidelineFilter(lambda q, r, g: [True], guidelines=gs)(HARM, ok)
    with pytest.raises(ValueError, match="unknown guideline names"):
        GuidelineFilter(lambda q, r, g: {"zzz": True}, guidelines=gs)(HARM, ok)
    with pytest.raises(
        ValueError, match=r"guideline judge.s count must be an integer in \[0, 2\], got 7"
    ):
        GuidelineFilter(lambda q, r, g: 7, guidelines=gs)(HARM, ok)


def test_outcome_judges_outputs_are_checked():
    f = OutcomeFilter(KeywordRefusalDetector.default(), safety_judge=lambda p, r: ["SAFE"])
    assert f(HARM, ParsedOutput("r", REFUSAL, "ok")).accept  # case-insensitive
    with pytest.raises(ValueError, match="safety judge returned"):
        OutcomeFilter(KeywordRefusalDetector.default(), safety_judge=lambda p, r: ["fine"])(
            HARM, ParsedOutput("r", REFUSAL, "ok")
        )
    with pytest.raises(ValueError, match="helpful judge"):
        OutcomeFilter(KeywordRefusalDetector.default(), helpful_judge=lambda q, a: "high", tau=0.5)(
            HELP, ParsedOutput("r", ANSWER, "ok")
        )
    with pytest.raises(TypeError, match="refusal detector must return a bool"):
        OutcomeFilter(lambda a: "no")(HELP, ParsedOutput("r", ANSWER, "ok"))
    with pytest.raises(ValueError, match="statuses are"):
        FormatFilter(allow=["okay"])


def test_plain_function_filter():
    def short(q, p):
        return len(p.answer) < 10

    f = as_filter(short)
    assert f.name == "short" and f(HARM, ParsedOutput("r", "ok", "ok")).accept
    assert not f(HARM, ParsedOutput("r", "a" * 20, "ok")).accept


def test_bad_input():
    with pytest.raises(TypeError, match="refusal_detector"):
        OutcomeFilter("not callable")
    with pytest.raises(ValueError, match="together"):
        OutcomeFilter(KeywordRefusalDetector.default(), helpful_judge=lambda q, a: 1.0)
    with pytest.raises(ValueError, match="min_guidelines"):
        GuidelineFilter(lambda *a: True, min_guidelines=0)
    with pytest.raises(ValueError, match="exceeds"):
        GuidelineFilter(lambda *a: True, min_guidelines=20)
    with pytest.raises(TypeError, match="judge"):
        GuidelineFilter(42)
