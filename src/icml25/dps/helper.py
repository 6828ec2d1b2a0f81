"""The helper ("moderator") of DPS: summaries and the informativeness check (arXiv:2412.12722;
official: ``gpt-4o-mini`` with a generic system prompt). :class:`LLMHelper` asks a text model
with our templates, each call in a fresh context; :class:`RuleHelper` is the deterministic
offline helper."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from icml25._validate import as_int
from icml25.dps.prompts import DPSPrompts

__all__ = ["Helper", "LLMHelper", "RuleHelper"]


@runtime_checkable
class Helper(Protocol):
    """The helper (moderator) of DPS: condenses weak agents' observations (``summarize``) and
    judges whether a reply is informative (``is_informative``)."""

    def summarize(self, text: str, limit: int = 20, style: str = "plain") -> str: ...

    def is_informative(self, text: str) -> bool: ...


def _check_style(style: str) -> None:
    if style not in ("answer", "plain"):
        raise ValueError(f"style must be 'answer' or 'plain', got {style!r}")


class RuleHelper:
    """Summary = the first ``limit`` whitespace-separated words; informative = none of
    ``uninformative_patterns`` matches (case-insensitive). An empty text is uninformative."""

    DEFAULT_PATTERNS = (
        r"unable to determine",
        r"cannot determine",
        r"can't determine",
        r"lack of specific information",
        r"not enough information",
    )

    def __init__(
        self, limit: int = 20, uninformative_patterns: Sequence[str] = DEFAULT_PATTERNS
    ) -> None:
        limit = as_int("limit", limit, 1)
        if isinstance(uninformative_patterns, str) or not all(
            isinstance(p, str) for p in uninformative_patterns
        ):
            raise TypeError(
                "uninformative_patterns must be a list of regex strings, not one string"
            )
        self.limit = limit
        self.patterns = [re.compile(p, re.IGNORECASE) for p in uninformative_patterns]
        self.calls = 0

    def summarize(self, text: str, limit: int | None = None, style: str = "plain") -> str:
        _check_style(style)
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        if limit is not None:
            limit = as_int("limit", limit, 1)
        self.calls += 1
        return " ".join(text.split()[: limit or self.limit])

    def is_informative(self, text: str) -> bool:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        self.calls += 1
        return bool(str(text).strip()) and not any(p.search(str(text)) for p in self.patterns)


class LLMHelper:
    """A text chat backend as the helper (fresh context per call; system prompt
    ``prompts.plain_system``; greedy by default)."""

    def __init__(
        self,
        backend: Any,
        prompts: DPSPrompts | None = None,
        *,
        temperature: float = 0.0,
        max_tokens: int = 256,
    ) -> None:
        if not hasattr(backend, "chat"):
            raise TypeError(
                f"backend must be an icml25.llm chat backend, got {type(backend).__name__}"
            )
        self.backend, self.prompts = backend, prompts or DPSPrompts()
        self.temperature, self.max_tokens = float(temperature), int(max_tokens)
        self.calls = 0

    def _ask(self, text: str) -> str:
        self.calls += 1
        msgs = [
            {"role": "system", "content": self.prompts.plain_system},
            {"role": "user", "content": text},
        ]
        return str(
            self.backend.chat(msgs, n=1, temperature=self.temperature, max_tokens=self.max_tokens)[
                0
            ]
        ).strip()

    def summarize(self, text: str, limit: int = 20, style: str = "plain") -> str:
        _check_style(style)
        name = "summarize_answer" if style == "answer" else "summarize_plain"
        return self._ask(self.prompts.render(name, content=text, limit=limit))

    def is_informative(self, text: str) -> bool:
        return "yes" in self._ask(self.prompts.render("check_informative", content=text)).lower()
