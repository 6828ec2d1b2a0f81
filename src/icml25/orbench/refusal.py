"""Keyword refusal detection (paper Algorithm 5, step 2; Sec. 4.1): shared with the other LLM
papers, it lives in :mod:`icml25.llm.refusal` and is re-exported here, with
:func:`official_detector`, the official checker of a model family as OR-Bench's commands build it
(the Mistral checker's quirk opt-in, see ``docs/orbench.md``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from icml25.llm.refusal import (
    CLAUDE_PREFIXES,
    DEFAULT_REFUSAL_PREFIXES,
    FAMILIES,
    FAMILY_ALIASES,
    GEMINI_PREFIXES,
    GPT4_ACCEPT_PREFIXES,
    GPT4_PREFIXES,
    GPT35_CONTAINS,
    MISTRAL_PREFIXES,
    OPENSOURCE_PREFIXES,
    QWEN_EXTRA_PREFIXES,
    XSTEST_REFUSAL_PREFIXES,
    KeywordRefusalDetector,
    is_blocked_response,
)

__all__ = [
    "CLAUDE_PREFIXES",
    "DEFAULT_REFUSAL_PREFIXES",
    "FAMILIES",
    "FAMILY_ALIASES",
    "GEMINI_PREFIXES",
    "GPT35_CONTAINS",
    "GPT4_ACCEPT_PREFIXES",
    "GPT4_PREFIXES",
    "MISTRAL_PREFIXES",
    "MISTRAL_QUIRK_WARNING",
    "OPENSOURCE_PREFIXES",
    "QWEN_EXTRA_PREFIXES",
    "XSTEST_REFUSAL_PREFIXES",
    "KeywordRefusalDetector",
    "is_blocked_response",
    "never_flags",
    "official_detector",
]

#: what a run judged by the official Mistral checker, quirk included, is warned with
MISTRAL_QUIRK_WARNING = (
    "the official Mistral checker (mistral_alignment_checker.py) lower-cases the response but "
    "not its keywords ('I apologize', \"I'm sorry\"), so it never flags a refusal: every "
    "non-empty answer counts as accepted and a Mistral model reports ~0% refusal. Use it only "
    "to reproduce the official numbers (--mistral-quirk / mistral_quirk=True); without it both "
    "sides are lower-cased"
)


def never_flags(detector: Any) -> bool:
    """``True`` for a :class:`KeywordRefusalDetector` that lower-cases the response only while
    every one of its keywords holds an upper-case letter: it can match no response at all (the
    official Mistral checker)."""
    if not isinstance(detector, KeywordRefusalDetector) or not detector.lowercase_response_only:
        return False
    keywords = (*detector.prefixes, *detector.contains)
    return bool(keywords) and all(k != k.lower() for k in keywords)


def official_detector(family: str, *, mistral_quirk: bool = False) -> KeywordRefusalDetector:
    """:meth:`KeywordRefusalDetector.official` for ``family`` (a family, an alias or a model
    name such as ``"mistral-7b-instruct"``), with the Mistral checker's quirk opt-in.

    Every family but Mistral is the official checker exactly. Mistral's official checker never
    flags a refusal (:data:`MISTRAL_QUIRK_WARNING`); by default both the response and the
    keywords are lower-cased (and the response stripped), named ``official:mistral``;
    ``mistral_quirk=True`` keeps the official behaviour, named ``official:mistral+quirk`` (the
    caller warns: :func:`~icml25.orbench.evaluate` does).

    Raises:
        ValueError: an unknown family (the message lists the valid ones).
    """
    if not isinstance(mistral_quirk, bool):
        raise TypeError(f"mistral_quirk must be True or False, got {mistral_quirk!r}")
    det = KeywordRefusalDetector.official(family)
    if det.name != "official:mistral":
        return det
    if mistral_quirk:
        return replace(det, name="official:mistral+quirk")
    return KeywordRefusalDetector.official(family, official_quirks=False)
