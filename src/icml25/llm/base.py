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

from icml25._validate import as_bool, as_int, as_real
from icml25.llm.fingerprint import settings_fingerprint, wrapped_function_identity

__all__ = [
    "ROLES",
    "BackendUnavailableError",
    "BaseChat",
    "ChatBackend",
    "Completion",
    "RequestResult",
    "SamplingParams",
    "TokenLogprob",
    "message_text",
    "validate_messages",
]

ROLES = ("system", "user", "assistant")
Message = Mapping[str, Any]


class BackendUnavailableError(RuntimeError):
    """The backend stopped answering and will not be asked again (a circuit breaker opened, as in
    :class:`~icml25.llm.OpenAIChat`): every remaining request fails at once with this error.

    It says nothing about the item that raised it, so a resumable pipeline should stop rather
    than record it as that item's failure: the rows already written are kept and a rerun, once
    the server is back, asks for the rest.
    """


@runtime_checkable
class ChatBackend(Protocol):
    """Anything that answers chat requests: HTTP servers, local models, scripted stand-ins.

    Sampling arguments left at ``None`` mean "the provider's default": an HTTP backend does not
    send the field at all (reasoning models such as OpenAI's o-series refuse ``temperature`` and
    ``top_p``), a local model uses its ``generation_config``.
    """

    name: str

    def chat(
        self,
        messages: Sequence[Message],
        *,
        n: int = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
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
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> list[list[str]]:
        """``[chat(m, ...) for m in requests]``, run concurrently, returned in input order."""
        ...


@dataclass(frozen=True)
class SamplingParams:
    """The sampling arguments of one request, validated once at the public boundary.

    ``None`` for ``temperature``, ``top_p`` or ``max_tokens`` is the provider's default (the field
    is not sent). ``logprobs`` asks for the log-probability of every generated token and
    ``top_logprobs`` (0-20, implies ``logprobs``) for that many alternatives per position.
    """

    n: int = 1
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int | None = None

    def __post_init__(self) -> None:
        # Python, numpy and 0-d torch numbers are accepted and stored as Python's own, so that
        # cache keys and JSON requests do not depend on where a number came from.
        object.__setattr__(self, "n", as_int("n", self.n, 1))
        for name, check, kw in (
            ("temperature", as_real, {"low": 0.0}),
            ("top_p", as_real, {"low": 0.0, "high": 1.0, "low_open": True}),
            ("max_tokens", as_int, {"low": 1}),
            ("seed", as_int, {}),
        ):
            object.__setattr__(self, name, _optional(check, name, getattr(self, name), **kw))
        stop = self.stop
        if isinstance(stop, str):
            stop = (stop,)
        stop = tuple(stop or ())
        if any(not isinstance(s, str) or not s for s in stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", stop)
        k = self.top_logprobs
        if k is not None:
            object.__setattr__(self, "top_logprobs", _optional(as_int, "top_logprobs", k, 0, 20))
            object.__setattr__(self, "logprobs", True)
        try:
            object.__setattr__(self, "logprobs", as_bool("logprobs", self.logprobs))
        except TypeError as e:
            raise ValueError(str(e)) from None

    @property
    def sampled(self) -> bool:
        """False only for explicit greedy decoding (``temperature == 0``)."""
        return self.temperature != 0

    def as_dict(self) -> dict[str, Any]:
        """The arguments as keyword arguments of ``chat``; the log-prob fields only when set, so
        cache keys of plain requests are unchanged."""
        out: dict[str, Any] = {
            "n": self.n,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "stop": list(self.stop),
        }
        if self.logprobs:
            out["logprobs"] = True
            out["top_logprobs"] = self.top_logprobs
        return out


@dataclass
class TokenLogprob:
    """One generated token: its text, its log-probability and the ``top`` alternatives
    (``[(token, logprob), ...]``, most likely first) when they were asked for."""

    token: str
    logprob: float
    top: list[tuple[str, float]] = field(default_factory=list)

    def to_list(self) -> list[Any]:
        return [self.token, _json_number(self.logprob), [[t, _json_number(v)] for t, v in self.top]]

    @classmethod
    def from_list(cls, data: Sequence[Any]) -> TokenLogprob:
        token, logprob, top = data
        return cls(token, _from_json_number(logprob), [(t, _from_json_number(v)) for t, v in top])


@dataclass
class Completion:
    """One returned choice, with what the server said about it.

    ``blocked`` is True when the provider refused to answer: OpenAI ``finish_reason ==
    "content_filter"``, or a response with no choices at all (a gateway's "no candidates"); the
    text is then empty. ``logprobs`` holds one :class:`TokenLogprob` per generated token when
    the request asked for them (``None`` otherwise). ``reasoning`` is a reasoning model's
    reasoning when the server returns it apart from the answer (vLLM's reasoning parsers put it in
    ``message.reasoning_content``, newer versions in ``message.reasoning``; ``text`` is then the
    answer alone); ``None`` when the server sent none. ``raw`` is the server's choice as received
    (not stored by caches, not compared by ``==``).
    """

    text: str
    finish_reason: str | None = None
    blocked: bool = False
    raw: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    logprobs: list[TokenLogprob] | None = None
    reasoning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (``raw`` is dropped), as :class:`~icml25.llm.CachedChat` stores it."""
        out: dict[str, Any] = {
            "text": self.text,
            "finish_reason": self.finish_reason,
            "blocked": self.blocked,
        }
        if self.logprobs is not None:
            out["logprobs"] = [t.to_list() for t in self.logprobs]
        if self.reasoning is not None:  # only when sent: rows of other models stay as they were
            out["reasoning"] = self.reasoning
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Completion:
        lps = data.get("logprobs")
        return cls(
            data["text"],
            data.get("finish_reason"),
            bool(data.get("blocked", False)),
            logprobs=None if lps is None else [TokenLogprob.from_list(t) for t in lps],
            reasoning=data.get("reasoning"),
        )


def _json_number(x: float) -> float | None:
    return x if math.isfinite(x) else None  # -inf log-probs (masked tokens) become null


def _from_json_number(x: float | None) -> float:
    return -math.inf if x is None else float(x)


def _optional(check: Any, name: str, v: Any, *args: Any, **kw: Any) -> Any:
    """``check(name, v, ...)`` for a sampling field where ``None`` is the provider's default."""
    if v is None:
        return None
    try:
        return check(name, v, *args, **kw)
    except ValueError as e:
        raise type(e)(f"{e} (or None: the provider's default)") from None


def validate_messages(messages: Any) -> list[dict[str, Any]]:
    """Check OpenAI chat messages and return them as a list of plain dicts.

    Content parts are checked too: a ``text`` part needs a string ``text``; an ``image_url``
    part needs ``{"image_url": {"url": URL}}`` with an ``http(s)://`` URL or a ``data:image/...``
    URL (the form vision servers accept). Raises ``TypeError``/``ValueError`` naming the
    offending message and what would be valid.
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
            if not content:
                raise ValueError(f"message {i} has an empty content list; give text or parts")
            for j, part in enumerate(content):
                _check_part(i, j, part)
        else:
            raise TypeError(
                f"message {i} content must be a string or a list of content parts, "
                f"got {type(content).__name__}"
            )
        out.append(dict(m))
    return out


def _check_part(i: int, j: int, part: Any) -> None:
    kind = part.get("type") if isinstance(part, Mapping) else None
    where = f"message {i} content part {j}"
    if kind == "text":
        if not isinstance(part.get("text"), str):
            raise ValueError(f"{where} has type 'text' but no string 'text' field: {part!r:.80}")
        return
    if kind != "image_url":
        raise ValueError(
            f"{where} must be a dict with type 'text' or 'image_url', got {part!r:.80}"
        )
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, Mapping) else None
    if not isinstance(url, str) or not url.startswith(("http://", "https://", "data:image/")):
        raise ValueError(
            f"{where} must carry {{'image_url': {{'url': URL}}}} with an http(s):// URL or a "
            f"data:image/...;base64 URL, got {part!r:.80}"
        )
    if url.startswith("data:") and (";base64," not in url or not url.split(";base64,", 1)[1]):
        raise ValueError(
            f"{where}: a data URL must carry a base64 payload (data:image/png;base64,...)"
        )


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


#: one entry of :meth:`BaseChat.complete_many` with ``errors="return"``
RequestResult = list[Completion] | BaseException


class BaseChat:
    """Shared front half of every backend: argument checks, ``chat``, ``complete`` and the
    concurrent, order-preserving ``complete_many`` / ``chat_many``.

    Subclasses implement :meth:`_complete` (one validated request -> exactly ``n``
    :class:`Completion`) and may override :meth:`_complete_many` to batch natively; that method
    returns one entry per request, a list of completions or the exception that request raised,
    so one failing request never costs the others their answers.
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
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
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
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
    ) -> list[Completion]:
        """Like :meth:`chat`, returning :class:`Completion` objects (finish reason, blocked and,
        with ``logprobs``/``top_logprobs``, the generated tokens' log-probabilities)."""
        params = SamplingParams(
            n, temperature, top_p, max_tokens, seed, tuple(stop or ()), logprobs, top_logprobs
        )
        return self._checked(self._complete(validate_messages(messages), params), params)

    def complete_many(
        self,
        requests: Sequence[Sequence[Message]],
        *,
        n: int = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
        top_logprobs: int | None = None,
        errors: str = "raise",
    ) -> list[RequestResult]:
        """:meth:`complete` for every request, concurrently, in input order.

        Every request runs to its end whatever the others do. ``errors="return"``: a failed
        request's entry is its exception (the others keep their completions). ``errors="raise"``:
        once all have finished, the first failure (in input order) is raised, with a note saying
        how many failed; answers that arrived are not lost when the backend caches them
        (:class:`~icml25.llm.CachedChat` stores each one as it arrives).
        """
        if errors not in ("raise", "return"):
            raise ValueError(f"errors must be 'raise' or 'return', got {errors!r}")
        params = SamplingParams(
            n, temperature, top_p, max_tokens, seed, tuple(stop or ()), logprobs, top_logprobs
        )
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
        results: list[RequestResult] = []
        for r in self._complete_many(checked, params):
            if not isinstance(r, BaseException):
                try:
                    r = self._checked(r, params)
                except RuntimeError as exc:
                    r = exc
            results.append(r)
        if errors == "raise":
            failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
            if failed:
                first = results[failed[0]]
                _add_note(
                    first,
                    f"request {failed[0]} of {len(results)} failed; {len(failed)} failed in all, "
                    f"{len(results) - len(failed)} completed (complete_many(..., "
                    "errors='return') gives each request its own result)",
                )
                raise first
        return results

    def chat_many(
        self,
        requests: Sequence[Sequence[Message]],
        *,
        n: int = 1,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
    ) -> list[list[str]]:
        """Texts of :meth:`complete_many` with ``errors="raise"``."""
        results = self.complete_many(
            requests,
            n=n,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            seed=seed,
            stop=stop,
            errors="raise",
        )
        return [[c.text for c in r] for r in results]  # type: ignore[union-attr]

    def _complete(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[Completion]:
        raise NotImplementedError

    def _complete_many(
        self, requests: list[list[dict[str, Any]]], params: SamplingParams
    ) -> list[RequestResult]:
        """Default: a thread pool of ``concurrency`` workers calling :meth:`_complete`; each
        request's exception is caught and returned in its place."""

        def one(r: list[dict[str, Any]]) -> RequestResult:
            try:
                return self._complete(r, params)
            except Exception as exc:  # noqa: BLE001 - handed back to the caller per request
                return exc

        workers = max(1, min(int(self.concurrency), len(requests)))
        if workers == 1:
            return [one(r) for r in requests]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{self.name}-") as pool:
            return list(pool.map(one, requests))

    def _checked(self, completions: list[Completion], params: SamplingParams) -> list[Completion]:
        if len(completions) != params.n:
            raise RuntimeError(
                f"backend {self.name!r} returned {len(completions)} completion(s), expected n={params.n}"
            )
        return completions

    def cache_identity(self) -> str:
        """What :class:`~icml25.llm.CachedChat` keys on: the name, unless a backend knows more
        (a local model adds a fingerprint of its weights; a backend that answers with a Python
        function ``fn``, as :class:`~icml25.llm.CallableChat` does, the fingerprint of that
        function's code, defaults and closure, so two lambdas under one name are told apart)."""
        fn = self._function_identity()
        if fn is None:
            return self.name
        return f"{self.name} fn={settings_fingerprint({'fn': fn})}"

    def identity_parts(self) -> dict[str, Any]:
        """What :func:`~icml25.llm.store.describe` shows of this backend in a store's settings:
        ``cache_identity``, and for a backend answering with a Python function ``fn`` its name
        and that function's description (``fn``: code digest, defaults, closure values;
        :func:`~icml25.llm.store.wrapped_function_identity`), so a settings mismatch names the
        part that differs."""
        fn = self._function_identity()
        if fn is None:
            return {"cache_identity": self.cache_identity()}
        return {"cache_identity": self.name, "fn": fn}

    def _function_identity(self) -> Any:
        """The description of the Python function this backend answers with (its own ``fn``),
        or ``None``."""
        fn = getattr(self, "__dict__", {}).get("fn")
        if not callable(fn):
            return None
        return wrapped_function_identity(fn)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _add_note(exc: BaseException, note: str) -> None:
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(note)
