"""Keyword refusal detection (paper Algorithm 5, step 2; Sec. 4.1): shared with the other LLM
papers, it lives in :mod:`icml25.llm.refusal` and is re-exported here."""

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
    "OPENSOURCE_PREFIXES",
    "QWEN_EXTRA_PREFIXES",
    "XSTEST_REFUSAL_PREFIXES",
    "KeywordRefusalDetector",
    "is_blocked_response",
]
