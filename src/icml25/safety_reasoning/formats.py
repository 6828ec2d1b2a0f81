"""The reasoning format of SRG's targets and outputs (arXiv:2502.04040, §4.2-4.3).

A target is the reasoning ``T`` inside a reasoning block followed by the final answer ``y``
(``<think> T </think> y`` by default; a model's native thinking tags, or the offline toy's
``=> T A y``, through :class:`ReasoningFormat`). At evaluation only the final answer is judged;
:meth:`ReasoningFormat.split_output` says how an output parsed, so a truncated or malformed one is
counted rather than silently judged (docs/safety_reasoning.md, Decisions). A server that returns
a reasoning model's reasoning apart from its answer (vLLM's reasoning parsers:
``message.reasoning_content``, kept in ``Completion.reasoning``) is parsed as the text the model
generated, through :meth:`ReasoningFormat.split_completion`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["STATUSES", "ParsedOutput", "ReasoningFormat"]

#: How an output parsed (``ParsedOutput.status``):
#: ``ok`` one block at the start, then the answer; ``preamble`` text before the block;
#: ``missing_open`` a closing tag without an opening one (models whose template opens the block);
#: ``nested`` an opening tag inside the block; ``duplicated`` more than one closing tag;
#: ``truncated`` the block never closes (the answer is empty); ``no_reasoning`` no tag at all.
STATUSES = ("ok", "preamble", "missing_open", "nested", "duplicated", "truncated", "no_reasoning")


class ParsedOutput(NamedTuple):
    """An output split into ``reasoning`` (``None`` without a block), the final ``answer`` and the
    parse ``status`` (one of :data:`STATUSES`)."""

    reasoning: str | None
    answer: str
    status: str

    @property
    def truncated(self) -> bool:
        return self.status == "truncated"


def _tag_pattern(tag: str) -> re.Pattern[str]:
    # a tag that starts/ends with a word character only matches as a whole word ("A" must not
    # match inside "ABC"); "<think>" matches anywhere
    head = r"(?<!\w)" if re.match(r"\w", tag) else ""
    tail = r"(?!\w)" if re.search(r"\w$", tag) else ""
    return re.compile(head + re.escape(tag) + tail)


@dataclass(frozen=True)
class ReasoningFormat:
    """Reasoning block tags and the separator between the parts of a target.

    Args:
        open_tag, close_tag: the block's tags (``<think>``/``</think>``, our default: the tags of
            DeepSeek-R1-style models; the paper's exact tags are not given).
        separator: put between the opening tag, the reasoning, the closing tag and the answer.
    """

    open_tag: str = "<think>"
    close_tag: str = "</think>"
    separator: str = "\n"

    def __post_init__(self) -> None:
        for name in ("open_tag", "close_tag"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip() or v != v.strip():
                raise ValueError(
                    f"{name} must be a non-empty string without outer spaces, got {v!r}"
                )
        if self.open_tag == self.close_tag:
            raise ValueError(f"open_tag and close_tag must differ, both are {self.open_tag!r}")
        if not isinstance(self.separator, str):
            raise TypeError(f"separator must be a string, got {type(self.separator).__name__}")

    def format_target(self, reasoning: str, answer: str) -> str:
        """``open ⊕ T ⊕ close ⊕ y``. ``ValueError`` if either part is empty or already holds a
        tag (the round trip through :meth:`split_output` would break)."""
        for name, part in (("reasoning", reasoning), ("answer", answer)):
            if not isinstance(part, str) or not part.strip():
                raise ValueError(f"{name} must be a non-empty string, got {part!r:.80}")
            for tag in (self.open_tag, self.close_tag):
                if _tag_pattern(tag).search(part):
                    raise ValueError(f"{name} contains the tag {tag!r}: {part!r:.80}")
        s = self.separator
        return f"{self.open_tag}{s}{reasoning.strip()}{s}{self.close_tag}{s}{answer.strip()}"

    def split_output(self, text: str, reasoning: str | None = None) -> ParsedOutput:
        """Split a model's output into reasoning and final answer.

        The answer is the text after the *last* closing tag (what a chat UI shows after hiding
        the reasoning); the reasoning runs from the first opening tag (or the start) to that tag.
        An unclosed block gives an empty answer and status ``truncated``: an evaluation then
        judges the full text (docs/safety_reasoning.md, Decisions).

        ``reasoning``: the reasoning when the server sent it apart from ``text`` (vLLM's
        ``reasoning_content``, which holds what the model wrote between its thinking tags, the
        answer being ``text``). The output is then parsed as the model generated it,
        ``open ⊕ reasoning ⊕ close ⊕ text``, or ``open ⊕ reasoning`` (``truncated``) when
        ``text`` is empty, since the parser sends no answer when the block never closed. ``None``
        or blank: ``text`` is parsed alone.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        if reasoning is not None and not isinstance(reasoning, str):
            raise TypeError(
                f"reasoning must be a string or None, got {type(reasoning).__name__}: "
                f"{reasoning!r:.60}"
            )
        if reasoning is not None and reasoning.strip():
            s = self.separator
            head = f"{self.open_tag}{s}{reasoning.strip()}"
            text = f"{head}{s}{self.close_tag}{s}{text}" if text.strip() else head
        opens = list(_tag_pattern(self.open_tag).finditer(text))
        closes = list(_tag_pattern(self.close_tag).finditer(text))
        if not closes:
            if not opens:
                return ParsedOutput(None, text.strip(), "no_reasoning")
            return ParsedOutput(text[opens[0].end() :].strip(), "", "truncated")
        last = closes[-1]
        answer = text[last.end() :].strip()
        if not opens or opens[0].start() > last.start():
            return ParsedOutput(text[: last.start()].strip(), answer, "missing_open")
        first = opens[0]
        reasoning = text[first.end() : last.start()].strip()
        inner_opens = [m for m in opens[1:] if m.start() < last.start()]
        if len(closes) > 1:
            status = "duplicated"
        elif inner_opens:
            status = "nested"
        elif text[: first.start()].strip():
            status = "preamble"
        else:
            status = "ok"
        return ParsedOutput(reasoning, answer, status)

    def split_completion(self, completion: Any) -> ParsedOutput:
        """:meth:`split_output` of a backend's ``Completion`` (``icml25.llm``): its ``text``,
        with its ``reasoning`` when the server sent the reasoning apart (otherwise ``None``)."""
        text = getattr(completion, "text", None)
        if not isinstance(text, str):
            raise TypeError(
                "completion must have text and reasoning attributes (an icml25.llm Completion), "
                f"got {type(completion).__name__}: {completion!r:.60}"
            )
        return self.split_output(text, getattr(completion, "reasoning", None))
