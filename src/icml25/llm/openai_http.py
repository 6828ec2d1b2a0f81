"""``OpenAIChat``: the chat-completions protocol over HTTP (vLLM, llama.cpp server, OpenAI, ...).

Transient failures (429, 5xx, time-outs, dropped or refused connections) are retried with
exponential backoff and full jitter, honouring ``Retry-After`` / ``retry-after-ms`` up to
``max_backoff``, within an overall per-request ``deadline``; any other 4xx fails at once with the
server's message. After ``circuit_breaker`` requests in a row fail on the transport (refused
or dropped connections, time-outs, retries included), the client stops sending: every further
request fails at once with :class:`CircuitOpenError`, naming the endpoint and the cause, instead of
spending its own retries on a dead server. ``base_url`` and the key default to ``$OPENAI_BASE_URL`` / ``$OPENAI_API_KEY``
as in the official ``openai`` client. The API key is sent in the ``Authorization`` header and nowhere else: it is never
logged, never part of an error message, never in ``repr``.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import re
import threading
import time
from typing import Any

from icml25.llm.base import (
    BackendUnavailableError,
    BaseChat,
    Completion,
    SamplingParams,
    TokenLogprob,
)

__all__ = ["CircuitOpenError", "LLMRequestError", "OpenAIChat"]

log = logging.getLogger("icml25.llm")

_RETRY_STATUS = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))


class LLMRequestError(RuntimeError):
    """The server refused the request (a 4xx other than 429) or retries ran out.

    ``status`` is the HTTP status when the server answered; ``transient`` is True when the
    retries ran out on the transport (connection refused, timeouts): not the request's fault, so
    a resumable run's next pass asks it again without ``retry_errors``."""

    def __init__(self, message: str, *, status: int | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


class CircuitOpenError(LLMRequestError, BackendUnavailableError):
    """:class:`OpenAIChat`'s circuit breaker is open: the endpoint failed ``circuit_breaker``
    requests in a row on the transport, so this request was not sent (or its retries stopped)."""


#: model families that answer HTTP 400 to ``max_tokens`` (they take ``max_completion_tokens``)
_REASONING_MODEL = re.compile(r"^(?:[\w.-]+/)?(?:o\d|gpt-5)", re.IGNORECASE)


class OpenAIChat(BaseChat):
    """A chat backend for any server that speaks ``POST {base_url}/chat/completions``.

    Args:
        base_url: e.g. ``"http://localhost:8000/v1"`` (vLLM) or ``"https://api.openai.com/v1"``;
            default ``$OPENAI_BASE_URL``, else OpenAI's own URL (as the official ``openai``
            client does).
        model: the model name the server knows.
        api_key: the key; default: the environment variable named by ``api_key_env``
            (``OPENAI_API_KEY``). Without a key no ``Authorization`` header is sent (local
            vLLM/llama.cpp need none).
        timeout: seconds for one HTTP attempt (connect + read).
        max_retries: retries after the first attempt for transient failures.
        deadline: seconds one request may take in all, attempts and waits together; a wait that
            would pass it is not started and the error says what was waited.
        concurrency: requests in flight at once in :meth:`chat_many`.
        supports_n: ``False`` for servers that ignore ``n`` (some llama.cpp builds): ``n`` single
            calls are made instead, with seeds ``seed + j``. Also learnt on the fly when a server
            returns fewer choices than asked.
        backoff: base of the exponential backoff in seconds; ``max_backoff`` caps every wait,
            a server's ``Retry-After`` / ``retry-after-ms`` included.
        max_tokens_field: ``"max_tokens"`` or ``"max_completion_tokens"``; default: the latter
            for OpenAI's reasoning families (o1, o3, o4, gpt-5) and api.openai.com, the former
            elsewhere (vLLM, llama.cpp).
        extra_body: extra JSON fields sent with every request (e.g. vLLM's ``top_k``).
        circuit_breaker: after this many requests in a row failed on the transport (each after
            its retries), every further request raises :class:`CircuitOpenError` at once, and
            requests waiting to retry stop; ``None`` turns the breaker off. Any answer from the
            server (a success, but also an HTTP error such as 400 or 503) resets the count, and so
            does :meth:`reset_breaker`. Default 5: without it a dead endpoint costs every item its
            full retries (on average about 15 s each with the default backoff).

    Sampling fields the caller leaves at ``None`` are not sent, so the server's defaults apply.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 120.0,
        max_retries: int = 5,
        deadline: float = 900.0,
        concurrency: int = 16,
        supports_n: bool = True,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        max_tokens_field: str | None = None,
        extra_body: dict[str, Any] | None = None,
        circuit_breaker: int | None = 5,
    ) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("OpenAIChat needs httpx: pip install 'icml25[llm]'") from exc
        if base_url is None:
            base_url = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        for label, value in (
            ("timeout", timeout),
            ("deadline", deadline),
            ("backoff", backoff),
            ("max_backoff", max_backoff),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{label} must be a positive number of seconds, got {value!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
        if circuit_breaker is not None and (
            isinstance(circuit_breaker, bool)
            or not isinstance(circuit_breaker, int)
            or circuit_breaker < 1
        ):
            raise ValueError(
                "circuit_breaker must be a positive integer (failed requests in a row) or None "
                f"(no breaker), got {circuit_breaker!r}"
            )
        if max_tokens_field not in (None, "max_tokens", "max_completion_tokens"):
            raise ValueError(
                "max_tokens_field must be 'max_tokens', 'max_completion_tokens' or None (chosen "
                f"from the model name), got {max_tokens_field!r}"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{model}@{self.base_url}"
        self.timeout = float(timeout)
        self.deadline = float(deadline)
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.supports_n = supports_n
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        if max_tokens_field is None:
            official = "api.openai.com" in self.base_url
            reasoning = bool(_REASONING_MODEL.match(model))
            max_tokens_field = "max_completion_tokens" if official or reasoning else "max_tokens"
        self.max_tokens_field = max_tokens_field
        self.extra_body = dict(extra_body or {})
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            timeout=httpx.Timeout(self.timeout),
            headers=headers,
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        self._httpx = httpx
        self._lock = threading.Lock()
        self.circuit_breaker = circuit_breaker
        self._transport_streak = 0  # requests in a row that failed on the transport
        self._breaker_open = threading.Event()
        self._breaker_reason = ""

    def cache_identity(self) -> str:
        """The name, plus ``extra_body`` when set (it is sent with every request and can change
        every answer: ``top_p``, a chat template's ``enable_thinking``...), so a cache or store
        never serves one setting's answers to another."""
        if not self.extra_body:
            return self.name
        extra = json.dumps(self.extra_body, sort_keys=True, ensure_ascii=True, default=str)
        return f"{self.name} extra_body={extra}"

    # -- circuit breaker -----------------------------------------------------------------------
    @property
    def breaker_open(self) -> bool:
        """True once ``circuit_breaker`` requests in a row failed on the transport."""
        return self._breaker_open.is_set()

    def reset_breaker(self) -> None:
        """Close the circuit breaker (e.g. once the server is back) and zero its count."""
        with self._lock:
            self._transport_streak = 0
            self._breaker_open.clear()

    def _breaker_error(self) -> CircuitOpenError:
        return CircuitOpenError(self._breaker_reason)

    def _answered(self) -> None:
        """The server answered (any HTTP status): the endpoint is alive."""
        if self._transport_streak or self._breaker_open.is_set():
            self.reset_breaker()

    def _transport_failed(self, problem: str) -> None:
        """A request ran out of attempts on transport failures; open the breaker at the limit."""
        with self._lock:
            self._transport_streak += 1
            limit = self.circuit_breaker
            if limit is None or self._transport_streak < limit or self._breaker_open.is_set():
                return
            self._breaker_reason = (
                f"circuit breaker open: {self.base_url} (model {self.model!r}) failed "
                f"{limit} requests in a row on the transport, the last with: {problem}. The "
                "remaining requests of this client are not sent; check that the server is up "
                "at that address and rerun (results already written are kept)"
            )
            self._breaker_open.set()
        log.error("%s", self._breaker_reason)

    # -- one request -------------------------------------------------------------------------
    def _complete(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[Completion]:
        if params.n == 1 or self.supports_n:
            got = self._post_chat(messages, params, params.n, params.seed)
            if len(got) >= params.n:
                return got[: params.n]
            if not got:  # no candidates at all: the provider blocked the request
                return [Completion("", None, True) for _ in range(params.n)]
            with self._lock:
                if self.supports_n:
                    log.warning(
                        "%s returned %d of n=%d choices; asking one at a time from now on",
                        self.name,
                        len(got),
                        params.n,
                    )
                self.supports_n = False
        else:
            got = []
        # One choice per call for the rest, each with its own seed so samples differ.
        while len(got) < params.n:
            j = len(got)
            seed = None if params.seed is None else params.seed + j
            one = self._post_chat(messages, params, 1, seed)
            got.append(one[0] if one else Completion("", None, True))
        return got

    def _payload(
        self, messages: list[dict[str, Any]], params: SamplingParams, n: int, seed: int | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if params.temperature is not None:
            body["temperature"] = params.temperature
        if params.top_p is not None:
            body["top_p"] = params.top_p
        if params.max_tokens is not None:
            body[self.max_tokens_field] = params.max_tokens
        if n != 1:
            body["n"] = n
        if seed is not None:
            body["seed"] = seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.logprobs:
            body["logprobs"] = True
            if params.top_logprobs is not None:
                body["top_logprobs"] = params.top_logprobs
        body.update(self.extra_body)
        return body

    def _post_chat(
        self, messages: list[dict[str, Any]], params: SamplingParams, n: int, seed: int | None
    ) -> list[Completion]:
        data = self._post("chat/completions", self._payload(messages, params, n, seed))
        out = _parse_choices(data)
        for c in out:  # some servers (transformers serve) keep the stop string: cut it as vLLM does
            for s in params.stop:
                cut = c.text.find(s)
                if cut >= 0:
                    c.text = c.text[:cut]
        return out

    def _post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``route`` with retries; the parsed JSON body of the 200 answer."""
        url = f"{self.base_url}/{route}"
        if self._breaker_open.is_set():
            raise self._breaker_error()
        start = time.monotonic()
        waited = 0.0
        attempt = 0
        while True:
            problem, wait_hint, transport = None, None, False
            left = self.deadline - (time.monotonic() - start)
            try:
                response = self._client.post(
                    url, json=body, timeout=max(0.001, min(self.timeout, left))
                )
                self._answered()
                if response.status_code == 200:
                    try:
                        data = response.json()
                        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
                            raise ValueError("no 'choices' list")
                        return data
                    except (ValueError, KeyError, TypeError) as exc:
                        problem = f"malformed response body ({exc})"
                elif response.status_code in _RETRY_STATUS:
                    problem = f"HTTP {response.status_code}: {_server_message(response)[:200]}"
                    wait_hint = _retry_after(response.headers)
                else:
                    raise LLMRequestError(
                        f"{url} refused the request for model {self.model!r}: HTTP "
                        f"{response.status_code}: {_server_message(response)}",
                        status=response.status_code,
                    )
            except self._httpx.TimeoutException:
                problem = f"no answer within {min(self.timeout, left):g} s"
                transport = True
            except self._httpx.TransportError as exc:
                detail = f": {exc}" if str(exc) else ""
                problem = f"connection problem ({type(exc).__name__}{detail})"
                transport = True
            elapsed = time.monotonic() - start
            summary = (
                f"{attempt + 1} attempt(s) in {elapsed:.1f} s, {waited:.1f} s of it waiting "
                f"between attempts"
            )
            if attempt >= self.max_retries:
                if transport:
                    self._transport_failed(problem)
                raise LLMRequestError(
                    f"{url} (model {self.model!r}) failed after {summary}: {problem}",
                    transient=transport,
                )
            delay = min(self.max_backoff, self.backoff * 2**attempt) * random.random()
            if wait_hint is not None:  # the server knows best how long it needs, within our cap
                if wait_hint > self.max_backoff:
                    log.warning(
                        "%s asked to wait %.0f s; waiting max_backoff=%.0f s instead",
                        self.name,
                        wait_hint,
                        self.max_backoff,
                    )
                delay = min(self.max_backoff, wait_hint)
            if elapsed + delay >= self.deadline:
                if transport:
                    self._transport_failed(problem)
                raise LLMRequestError(
                    f"{url} (model {self.model!r}) gave up at the {self.deadline:g} s deadline "
                    f"after {summary} (next wait would have been {delay:.1f} s): {problem}",
                    transient=transport,
                )
            log.warning(
                "%s: %s; retry %d/%d in %.2f s",
                self.name,
                problem,
                attempt + 1,
                self.max_retries,
                delay,
            )
            if self._breaker_open.wait(delay):  # other requests found the endpoint dead
                raise self._breaker_error()
            waited += delay
            attempt += 1

    # -- prompt log-probabilities --------------------------------------------------------------
    def continuation_logprobs(self, prompt: str, continuation: str) -> list[float]:
        """Per-token ``log p(continuation | prompt)`` of raw text, scored by the server.

        Sent to ``{base_url}/completions`` with ``echo=True, logprobs=1`` and one generated
        token, which vLLM and llama.cpp-style servers answer with the log-probability of every
        prompt token; the tokens starting at or after ``len(prompt)`` are the continuation's
        (end ``prompt`` at a token boundary, e.g. with a space or newline, so no token straddles
        it). The text is scored as is: render a chat template yourself for chat models.

        Raises ``NotImplementedError`` when the server gives no echoed prompt log-probs (OpenAI's
        own API does not), ``ValueError`` for an empty continuation.
        """
        if not isinstance(prompt, str) or not isinstance(continuation, str):
            raise TypeError("prompt and continuation must be strings")
        if not continuation:
            raise ValueError("continuation must not be empty")
        text = prompt + continuation
        body = {
            "model": self.model,
            "prompt": text,
            "max_tokens": 1,
            "echo": True,
            "logprobs": 1,
            "temperature": 0,
        }
        try:
            data = self._post("completions", body)
        except LLMRequestError as exc:
            if exc.status in (400, 404, 405, 422, 501):
                raise NotImplementedError(
                    f"{self.base_url} does not score prompts ({exc}); prompt log-probs need a "
                    "server with /v1/completions echo + logprobs (vLLM, llama.cpp)"
                ) from exc
            raise
        return _echoed_logprobs(data, len(prompt), len(text), self.base_url)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIChat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_STRADDLE = (
    "a token spans the prompt/continuation boundary at character {at}: its log-prob belongs to "
    "neither part. Byte-level BPE tokenizers (Llama 3, Qwen, GPT-2) attach a space to the next "
    "word, so start the continuation with the space (prompt 'Answer:', continuation ' yes')"
)


def _echoed_logprobs(data: dict[str, Any], begin: int, end: int, where: str) -> list[float]:
    missing = NotImplementedError(
        f"{where} returned no echoed prompt log-probs from /completions; prompt scoring needs a "
        "server that supports echo=True with logprobs (vLLM, llama.cpp), which OpenAI's API does not"
    )
    try:
        lp = data["choices"][0]["logprobs"]
        offsets, values = lp["text_offset"], lp["token_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise missing from None
    if not offsets or len(offsets) != len(values):
        raise missing
    picked = [v for o, v in zip(offsets, values) if begin <= o < end]
    if not picked:
        raise missing
    for a, b in zip(offsets, offsets[1:]):
        if a < begin < b:
            raise ValueError(_STRADDLE.format(at=begin))
    if any(v is None for v in picked):
        raise ValueError(
            "the server gave no log-prob for a continuation token (it scores the first token of "
            "a text only when a prompt precedes it): pass a non-empty prompt"
        )
    return [float(v) for v in picked]


def _parse_logprobs(choice: dict[str, Any]) -> list[TokenLogprob] | None:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("content"), list):
        return None
    out = []
    for item in lp["content"]:
        top = [
            (str(t.get("token", "")), _as_logprob(t.get("logprob")))
            for t in item.get("top_logprobs") or ()
            if isinstance(t, dict)
        ]
        out.append(TokenLogprob(str(item.get("token", "")), _as_logprob(item.get("logprob")), top))
    return out


def _as_logprob(v: Any) -> float:
    return -math.inf if v is None else float(v)


def _parse_choices(data: dict[str, Any]) -> list[Completion]:
    choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
    out = []
    for choice in choices:
        message = choice.get("message") or {}
        content = message.get("content")
        if isinstance(content, list):  # some servers return content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        reason = choice.get("finish_reason")
        out.append(
            Completion(
                text=content or "",
                finish_reason=reason,
                blocked=reason == "content_filter",
                raw=choice,
                logprobs=_parse_logprobs(choice),
                reasoning=_reasoning_of(message),
            )
        )
    return out


def _reasoning_of(message: dict[str, Any]) -> str | None:
    """A reasoning model's reasoning, sent apart from the answer: vLLM's reasoning parsers
    (``--reasoning-parser``) fill ``reasoning_content``, newer vLLM and some gateways
    ``reasoning``; ``None`` when the server sent neither."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str):
            return value
    return None


def _retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI, milliseconds) or ``Retry-After``
    (delta-seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_message(response: Any) -> str:
    try:
        data = response.json()
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message", err) if isinstance(err, dict) else err
        return str(msg)[:500]
    except ValueError:
        return response.text[:500]
