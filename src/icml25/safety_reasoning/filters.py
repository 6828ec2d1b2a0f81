"""Rejection sampling of SRG's synthesised reasoning (arXiv:2502.04040, §4.2): a candidate is kept
only when every filter accepts it.

A filter is ``filter(query, parsed) -> Decision`` with ``query`` a
:class:`~icml25.safety_reasoning.data.Query` and ``parsed`` the candidate split by the reasoning
format (``ParsedOutput(reasoning, answer, status)``). Three filters, in the order the paper applies
the checks:

* :class:`FormatFilter`: both the reasoning block and a final answer are present and parse;
* :class:`OutcomeFilter`: a harmful query gets a refusal (and a safe answer by the safety judge),
  a helpful query an answer that is not a refusal (and, optionally, a helpfulness score >= tau);
* :class:`GuidelineFilter`: the reasoning actually applies the guidelines, by a judge.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from icml25._validate import as_int, as_real, shown
from icml25.safety_reasoning.data import Query
from icml25.safety_reasoning.guidelines import DEFAULT_GUIDELINES, Guideline

__all__ = ["Decision", "Filter", "FormatFilter", "GuidelineFilter", "OutcomeFilter"]


def _verdict(name: str, v: Any) -> bool:
    """A verdict a user function returned: a bool, a numpy bool or 0/1 (not one of the numbers
    :mod:`icml25._validate` checks: ``True``/``1`` are the same answer here)."""
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        return bool(v)
    if isinstance(v, numbers.Integral) and v in (0, 1):
        return bool(v)
    raise TypeError(f"{name} must return a bool, got {shown(v)}")


class Decision(NamedTuple):
    """A filter's verdict on one synthesized example: ``accept`` and, when rejected, the
    ``reason``."""

    accept: bool
    reason: str = ""


@runtime_checkable
class Filter(Protocol):
    """A rejection-sampling filter: ``filter(query, parsed) -> Decision`` on one candidate, with a
    ``name`` that the synthesis report counts its rejections under. A plain function returning a
    bool works too (named by its ``__name__``)."""

    name: str

    def __call__(self, query: Query, parsed: Any) -> Decision: ...


class FormatFilter:
    """Accepts a candidate whose reasoning block is closed (status ``"ok"``) and whose reasoning
    and answer are both non-empty; ``allow`` adds statuses to accept (e.g. ``"preamble"``)."""

    name = "format"

    def __init__(self, allow: Sequence[str] = ()) -> None:
        from icml25.safety_reasoning.formats import STATUSES

        if isinstance(allow, str):
            allow = [allow]
        bad = [a for a in allow if a not in STATUSES]
        if bad:
            raise ValueError(f"allow holds {bad[0]!r}; statuses are {STATUSES}")
        self.allow = {"ok", *allow}

    def __call__(self, query: Query, parsed: Any) -> Decision:
        if parsed.status not in self.allow:
            return Decision(False, f"status {parsed.status}")
        if not (parsed.reasoning or "").strip():
            return Decision(False, "empty reasoning")
        if not parsed.answer.strip():
            return Decision(False, "empty answer")
        return Decision(True)


class OutcomeFilter:
    """The answer fits the query's kind.

    Args:
        refusal_detector: ``detector(answer) -> bool`` (True = a refusal), e.g.
            ``icml25.llm.KeywordRefusalDetector.default()``.
        safety_judge: optional ``judge([query], [answer]) -> ["safe" | "unsafe" | "unknown"]``
            (e.g. ``LlamaGuardJudge``), required to say ``"safe"`` on harmful queries.
        helpful_judge: optional ``score(query, answer) -> float`` for helpful queries, accepted
            when ``>= tau``.
    """

    name = "outcome"

    def __init__(
        self,
        refusal_detector: Callable[[str], bool],
        safety_judge: Any = None,
        helpful_judge: Callable[[str, str], float] | None = None,
        tau: float | None = None,
    ) -> None:
        if not callable(refusal_detector):
            raise TypeError("refusal_detector must be callable: detector(answer) -> bool")
        if safety_judge is not None and not callable(safety_judge):
            raise TypeError("safety_judge must be callable: judge(prompts, responses) -> verdicts")
        if (helpful_judge is None) != (tau is None):
            raise ValueError("helpful_judge and tau go together: give both or neither")
        if helpful_judge is not None and not callable(helpful_judge):
            raise TypeError("helpful_judge must be callable: score(query, answer) -> float")
        if tau is not None:
            tau = as_real("tau", tau)
        self.refusal_detector, self.safety_judge = refusal_detector, safety_judge
        self.helpful_judge, self.tau = helpful_judge, tau

    def __call__(self, query: Query, parsed: Any) -> Decision:
        refused = _verdict("the refusal detector", self.refusal_detector(parsed.answer))
        if query.kind == "harmful":
            if not refused:
                return Decision(False, "harmful query answered")
            if self.safety_judge is not None:
                out = self.safety_judge([query.text], [parsed.answer])
                verdict = out[0] if isinstance(out, (list, tuple)) and len(out) == 1 else out
                if isinstance(verdict, str):
                    verdict = verdict.strip().lower()
                if verdict not in ("safe", "unsafe", "unknown"):
                    raise ValueError(
                        f"the safety judge returned {out!r:.80}; expected a list with one of "
                        "'safe', 'unsafe', 'unknown'"
                    )
                if verdict != "safe":
                    return Decision(False, f"safety judge: {verdict}")
            return Decision(True)
        if refused:
            return Decision(False, "helpful query refused")
        if self.helpful_judge is not None:
            score = as_real(
                "the helpful judge's score", self.helpful_judge(query.text, parsed.answer)
            )
            if not score >= self.tau:
                return Decision(False, f"helpfulness {score:.3g} < {self.tau}")
        return Decision(True)


JUDGE_PROMPT = (
    "Guideline: {guideline}\n\nRequest: {query}\n\nReasoning:\n{reasoning}\n\n"
    "Does the reasoning apply this guideline to the request (where it is relevant)? "
    "Answer yes or no."
)


class GuidelineFilter:
    """The reasoning applies at least ``min_guidelines`` of the guidelines, by a judge.

    ``judge`` is either a chat backend (asked once per guideline with :data:`JUDGE_PROMPT`, greedy;
    an answer starting with "yes" counts) or a callable ``judge(query_text, reasoning,
    guidelines) -> bool | int | list[bool]`` (a rule, as in the offline reproduction). Which
    guidelines the paper's judge checks is not stated; counting applied guidelines is our choice
    (docs/safety_reasoning.md, Decisions).
    """

    name = "guideline"

    def __init__(
        self,
        judge: Any,
        min_guidelines: int = 1,
        guidelines: Sequence[Guideline] = DEFAULT_GUIDELINES,
    ) -> None:
        min_guidelines = as_int("min_guidelines", min_guidelines, 1)
        if not guidelines:
            raise ValueError("guidelines is empty")
        if min_guidelines > len(guidelines):
            raise ValueError(
                f"min_guidelines={min_guidelines} exceeds the {len(guidelines)} guidelines"
            )
        if not (hasattr(judge, "chat_many") or callable(judge)):
            raise TypeError(
                f"judge must be a chat backend or a callable, got {type(judge).__name__}"
            )
        self.judge, self.min_guidelines, self.guidelines = judge, min_guidelines, list(guidelines)

    def applied(self, query: Query, reasoning: str) -> int:
        """How many guidelines the judge says the reasoning applies."""
        if hasattr(self.judge, "chat_many"):
            reqs = [
                [
                    {
                        "role": "user",
                        "content": JUDGE_PROMPT.format(
                            guideline=g.text, query=query.text, reasoning=reasoning
                        ),
                    }
                ]
                for g in self.guidelines
            ]
            answers = self.judge.chat_many(reqs, temperature=0.0, max_tokens=4)
            return sum(bool(re.match(r"\s*yes\b", a[0], re.IGNORECASE)) for a in answers)
        out = self.judge(query.text, reasoning, self.guidelines)
        n = len(self.guidelines)
        import numpy as np

        if isinstance(out, (bool, np.bool_)):
            return self.min_guidelines if out else 0
        if isinstance(out, numbers.Number) or getattr(out, "ndim", None) == 0:
            return as_int("the guideline judge's count", out, 0, n)
        if isinstance(out, dict):
            unknown = set(out) - {g.name for g in self.guidelines}
            if unknown:
                raise ValueError(
                    f"the guideline judge returned unknown guideline names {sorted(unknown)[:3]}"
                )
            out = [out.get(g.name, False) for g in self.guidelines]
        if isinstance(out, (str, bytes)) or not hasattr(out, "__len__") or len(out) != n:
            raise TypeError(
                f"the guideline judge must return a bool, a count, one bool per guideline ({n}) or "
                f"a {{name: bool}} dict; got {out!r:.80}"
            )
        return sum(_verdict("the guideline judge (per guideline)", x) for x in out)

    def __call__(self, query: Query, parsed: Any) -> Decision:
        n = self.applied(query, parsed.reasoning or "")
        if n < self.min_guidelines:
            return Decision(False, f"{n} guideline(s) applied, {self.min_guidelines} needed")
        return Decision(True)


@dataclass
class _Named:
    """A plain function ``fn(query, parsed) -> bool | Decision`` as a filter."""

    fn: Callable[[Query, Any], Any]
    name: str

    def __call__(self, query: Query, parsed: Any) -> Decision:
        out = self.fn(query, parsed)
        return out if isinstance(out, Decision) else Decision(bool(out), "" if out else "rejected")


def as_filter(obj: Any, i: int = 0) -> Filter:
    """A filter object, or a plain function wrapped as one (named by its ``__name__``)."""
    if not callable(obj):
        raise TypeError(f"filters[{i}] must be callable: filter(query, parsed) -> Decision")
    if isinstance(getattr(obj, "name", None), str):
        return obj
    return _Named(obj, getattr(obj, "__name__", f"filter{i}"))
