"""``OpenAIChat``: the chat-completions protocol over HTTP (vLLM, llama.cpp server, OpenAI, ...).

Transient failures (429, 5xx, time-outs, dropped or refused connections) are retried with
exponential backoff and full jitter, honouring ``Retry-After``; any other 4xx fails at once with the
server's message. The API key is sent in the ``Authorization`` header and nowhere else: it is never
logged, never part of an error message, never in ``repr``.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import threading
import time
from typing import Any

from icml25.llm.base import BaseChat, Completion, SamplingParams

__all__ = ["LLMRequestError", "OpenAIChat"]

log = logging.getLogger("icml25.llm")

_RETRY_STATUS = frozenset({408, 409, 425, 429}) | frozenset(range(500, 600))


class LLMRequestError(RuntimeError):
    """The server refused the request (a 4xx other than 429) or retries ran out."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class OpenAIChat(BaseChat):
    """A chat backend for any server that speaks ``POST {base_url}/chat/completions``.

    Args:
        base_url: e.g. ``"http://localhost:8000/v1"`` (vLLM) or ``"https://api.openai.com/v1"``.
        model: the model name the server knows.
        api_key: the key; default: the environment variable named by ``api_key_env``. Without a
            key no ``Authorization`` header is sent (local vLLM/llama.cpp need none).
        timeout: seconds for one HTTP request (connect + read).
        max_retries: retries after the first attempt for transient failures.
        concurrency: requests in flight at once in :meth:`chat_many`.
        supports_n: ``False`` for servers that ignore ``n`` (some llama.cpp builds): ``n`` single
            calls are made instead, with seeds ``seed + j``. Also learnt on the fly when a server
            returns fewer choices than asked.
        backoff: base of the exponential backoff in seconds; ``max_backoff`` caps one wait.
        extra_body: extra JSON fields sent with every request (e.g. vLLM's ``top_k``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 120.0,
        max_retries: int = 5,
        concurrency: int = 16,
        supports_n: bool = True,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        try:
            import httpx
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("OpenAIChat needs httpx: pip install 'icml25[llm]'") from exc
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        for label, value in (
            ("timeout", timeout),
            ("backoff", backoff),
            ("max_backoff", max_backoff),
        ):
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{label} must be a positive number of seconds, got {value!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{model}@{self.base_url}"
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.supports_n = supports_n
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
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

    # -- one request -------------------------------------------------------------------------
    def _complete(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[Completion]:
        if params.n == 1 or self.supports_n:
            got = self._post(messages, params, params.n, params.seed)
            if len(got) >= params.n:
                return got[: params.n]
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
            one = self._post(messages, params, 1, seed)
            if not one:
                raise LLMRequestError(f"{self.name} returned no choice for a single-sample request")
            got.append(one[0])
        return got

    def _payload(
        self, messages: list[dict[str, Any]], params: SamplingParams, n: int, seed: int | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
        }
        if n != 1:
            body["n"] = n
        if seed is not None:
            body["seed"] = seed
        if params.stop:
            body["stop"] = list(params.stop)
        body.update(self.extra_body)
        return body

    def _post(
        self,
        messages: list[dict[str, Any]],
        params: SamplingParams,
        n: int,
        seed: int | None,
    ) -> list[Completion]:
        body = self._payload(messages, params, n, seed)
        url = f"{self.base_url}/chat/completions"
        attempt = 0
        while True:
            problem, wait_hint = None, None
            try:
                response = self._client.post(url, json=body)
                if response.status_code == 200:
                    try:
                        return _parse_choices(response.json())
                    except (ValueError, KeyError, TypeError) as exc:
                        problem = f"malformed response body ({exc})"
                elif response.status_code in _RETRY_STATUS:
                    problem = f"HTTP {response.status_code}"
                    wait_hint = _retry_after(response.headers.get("retry-after"))
                else:
                    raise LLMRequestError(
                        f"{url} refused the request for model {self.model!r}: HTTP "
                        f"{response.status_code}: {_server_message(response)}",
                        status=response.status_code,
                    )
            except self._httpx.TimeoutException:
                problem = f"no answer within {self.timeout:g} s"
            except self._httpx.TransportError as exc:
                problem = f"connection problem ({type(exc).__name__})"
            if attempt >= self.max_retries:
                raise LLMRequestError(
                    f"{url} (model {self.model!r}) failed after {attempt + 1} attempt(s): {problem}"
                )
            delay = min(self.max_backoff, self.backoff * 2**attempt) * random.random()
            if wait_hint is not None:  # the server knows best how long it needs
                delay = wait_hint
            log.warning(
                "%s: %s; retry %d/%d in %.2f s",
                self.name,
                problem,
                attempt + 1,
                self.max_retries,
                delay,
            )
            time.sleep(delay)
            attempt += 1

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIChat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
            )
        )
    return out


def _retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
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
