"""The chat-backend protocol every LLM paper in icml25 is written against.

Messages are OpenAI chat messages: ``{"role": "system" | "user" | "assistant", "content": ...}``
where ``content`` is a string or a list of OpenAI content parts (``{"type": "text", "text": ...}``,
``{"type": "image_url", "image_url": {"url": ...}}``) for vision models.

A backend returns exactly ``n`` strings per request. :class:`BaseChat` gives every backend the same
argument checks and a concurrent, order-preserving ``chat_many``; a backend implements
``_complete`` (one request) and may override ``_complete_many`` when it can batch natively.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ROLES",
    "BaseChat",
    "ChatBackend",
    "Completion",
    "SamplingParams",
    "message_text",
    "validate_messages",
]

ROLES = ("system", "user", "assistant")
Message = Mapping[str, Any]


@runtime_checkable
class ChatBackend(Protocol):
    """Anything that answers chat requests: HTTP servers, local models, scripted stand-ins."""

    name: str

    def chat(
        self,
        messages: Sequence[Message],
        *,
        n: int = 1,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_tokens: int = 1024,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> list[str]:
        """Exactly ``n`` completions of ``messages``."""
        ...

    def chat_many(
        self,
        requests: Sequence[Sequence[Message]],
        *,
        n: int = 1,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_tokens: int = 1024,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> list[list[str]]:
        """``[chat(m, ...) for m in requests]``, run concurrently, returned in input order."""
        ...


@dataclass(frozen=True)
class SamplingParams:
    """The sampling arguments of one request, validated once at the public boundary."""

    n: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be a positive integer, got {self.n!r}")
        if not _finite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if not _finite(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int):
            raise ValueError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        stop = self.stop
        if isinstance(stop, str):
            stop = (stop,)
        stop = tuple(stop or ())
        if any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", stop)

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "stop": list(self.stop),
        }


@dataclass
class Completion:
    """One returned choice, with what the server said about it.

    ``blocked`` is True when the provider refused to answer (OpenAI ``finish_reason ==
    "content_filter"``); the text is then empty.
    """

    text: str
    finish_reason: str | None = None
    blocked: bool = False
    raw: dict[str, Any] | None = field(default=None, repr=False)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """Check OpenAI chat messages and return them as a list of plain dicts.

    Raises ``TypeError``/``ValueError`` naming the offending message and what would be valid.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            "messages must be a list of {'role': ..., 'content': ...} dicts, "
            f"got {type(messages).__name__}: {messages!r:.80}"
        )
    if not messages:
        raise ValueError("messages must not be empty")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise TypeError(f"message {i} must be a dict with 'role' and 'content', got {m!r:.80}")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise ValueError(f"message {i} has role {role!r}; valid roles: {', '.join(ROLES)}")
        if isinstance(content, str):
            pass
        elif isinstance(content, Sequence) and not isinstance(content, (bytes, bytearray)):
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind not in ("text", "image_url"):
                    raise ValueError(
                        f"message {i} content part {j} must be a dict with type 'text' or "
                        f"'image_url', got {part!r:.80}"
                    )
        else:
            raise TypeError(
                f"message {i} content must be a string or a list of content parts, "
                f"got {type(content).__name__}"
            )
        out.append(dict(m))
    return out


def message_text(message: Mapping[str, Any], *, allow_images: bool = False) -> str:
    """The text of a message; image parts raise unless ``allow_images`` (then they are dropped)."""
    content = message["content"]
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if part["type"] == "text":
            texts.append(part.get("text", ""))
        elif not allow_images:
            raise ValueError(
                "this backend serves text-only models but a message carries an image_url part; "
                "use a vision model behind OpenAIChat, or drop the image"
            )
    return "".join(texts)


class BaseChat:
    """Shared front half of every backend: argument checks, ``chat`` and ``chat_many``.

    Subclasses implement :meth:`_complete` (one validated request -> exactly ``n``
    :class:`Completion`) and may override :meth:`_complete_many` to batch natively.
    """

    name: str = "chat"
    #: requests in flight at once in :meth:`chat_many`
    concurrency: int = 16
    #: True when :meth:`_complete_many` batches natively (a local model) instead of using threads
    native_batching: bool = False

    def chat(
        self,
        messages: Sequence[Message],
        *,
        n: int = 1,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_tokens: int = 1024,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> list[str]:
        return [
            c.text
            for c in self.complete(
                messages,
                n=n,
                temperature=temperature,
                top_p=top_p,
                max_tokens=max_tokens,
                seed=seed,
                stop=stop,
            )
        ]

    def complete(
        self,
        messages: Sequence[Message],
        *,
        n: int = 1,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_tokens: int = 1024,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> list[Completion]:
        """Like :meth:`chat`, returning :class:`Completion` objects (finish reason, blocked)."""
        params = SamplingParams(n, temperature, top_p, max_tokens, seed, tuple(stop or ()))
        return self._checked(self._complete(validate_messages(messages), params), params)

    def chat_many(
        self,
        requests: Sequence[Sequence[Message]],
        *,
        n: int = 1,
        temperature: float = 0.7,
        top_p: float = 1.0,
        max_tokens: int = 1024,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> list[list[str]]:
        params = SamplingParams(n, temperature, top_p, max_tokens, seed, tuple(stop or ()))
        if isinstance(requests, (str, bytes)) or not isinstance(requests, Sequence):
            raise TypeError(
                f"requests must be a list of message lists, got {type(requests).__name__}"
            )
        checked = []
        for i, r in enumerate(requests):
            try:
                checked.append(validate_messages(r))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"request {i}: {exc}") from None
        if not checked:
            return []
        results = self._complete_many(checked, params)
        return [[c.text for c in self._checked(r, params)] for r in results]

    def _complete(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[Completion]:
        raise NotImplementedError

    def _complete_many(
        self, requests: list[list[dict[str, Any]]], params: SamplingParams
    ) -> list[list[Completion]]:
        """Default: a thread pool of ``concurrency`` workers calling :meth:`_complete`."""
        workers = max(1, min(int(self.concurrency), len(requests)))
        if workers == 1:
            return [self._complete(r, params) for r in requests]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{self.name}-") as pool:
            return list(pool.map(lambda r: self._complete(r, params), requests))

    def _checked(self, completions: list[Completion], params: SamplingParams) -> list[Completion]:
        if len(completions) != params.n:
            raise RuntimeError(
                f"backend {self.name!r} returned {len(completions)} completion(s), expected n={params.n}"
            )
        return completions

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
