"""A local OpenAI-compatible chat server in front of any :class:`ChatBackend`.

Serves ``POST /v1/chat/completions``, ``GET /v1/models`` and, for a backend that can score text
(``text_logprobs``, e.g. :class:`~icml25.llm.HFChat`), prompt scoring through ``POST
/v1/completions`` with ``echo=true`` and ``logprobs`` (vLLM's legacy format; no generation on that
route) on 127.0.0.1. Chat requests may ask for ``logprobs`` / ``top_logprobs``; sampling fields a
request leaves out reach the backend as ``None`` (its default). Two uses: expose a local
model (e.g. an :class:`~icml25.llm.hf.HFChat`) to tools that speak the OpenAI protocol, and test
clients against a real HTTP server, with added latency and injected faults.

Faults, one per incoming request, taken in order from ``faults`` (a list) or decided by a
function ``faults(request_index, body) -> str | None``:

- ``"429"``: Too Many Requests with ``Retry-After: retry_after``; ``"429ms"``: the same with
  ``retry-after-ms`` (OpenAI's header, milliseconds);
- ``"empty"``: HTTP 200 with an empty ``choices`` list (a gateway's "no candidates");
- ``"500"`` / ``"503"``: server errors; ``"400"`` / ``"401"`` / ``"404"``: client errors (not retryable);
- ``"slow"``: answer only after ``slow_seconds`` (past a client's timeout);
- ``"drop"``: send the headers and half the body, then close the connection;
- ``"fewer"``: return one choice fewer than ``n`` (at least one).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from icml25.llm.base import ChatBackend

__all__ = ["ChatServer"]

FaultPlan = Sequence[str | None] | Callable[[int, dict[str, Any]], str | None]
_FAULTS = {
    "429",
    "429ms",
    "500",
    "503",
    "400",
    "401",
    "404",
    "slow",
    "drop",
    "fewer",
    "empty",
    None,
}


_ROUTES = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "score",
    "/completions": "score",
}


def _opt(value: Any, kind: type) -> Any:
    return None if value is None else kind(value)


class ChatServer:
    """Serve ``backend`` over HTTP until :meth:`close` (or the end of a ``with`` block).

    Attributes:
        url: the base URL for clients, ``http://127.0.0.1:PORT/v1``.
        requests: every request body received, in arrival order.
        authorizations: the ``Authorization`` header of each request (``None`` when absent).
        completed: number of requests answered with HTTP 200 and a full body.
    """

    def __init__(
        self,
        backend: ChatBackend,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str | None = None,
        latency: float = 0.0,
        faults: FaultPlan | None = None,
        retry_after: float = 0.05,
        slow_seconds: float = 2.0,
        serialize: bool = True,
    ) -> None:
        if not callable(faults):
            for f in faults or ():
                if f not in _FAULTS:
                    raise ValueError(
                        f"unknown fault {f!r}; valid: {sorted(x for x in _FAULTS if x)}"
                    )
        self.backend = backend
        self.model_name = model_name or getattr(backend, "name", "local")
        self.latency = latency
        self.retry_after = retry_after
        self.slow_seconds = slow_seconds
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.completed = 0
        self._faults = faults if callable(faults) else list(faults or [])
        self._lock = threading.Lock()
        self._backend_lock = threading.Lock() if serialize else None
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self.url = f"http://{host}:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _next_fault(self, body: dict[str, Any], authorization: str | None) -> str | None:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.authorizations.append(authorization)
            if callable(self._faults):
                return self._faults(index, body)
            return self._faults.pop(0) if self._faults else None

    def _answer(self, body: dict[str, Any], fault: str | None) -> dict[str, Any]:
        n = int(body.get("n", 1))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        kwargs = {
            "n": n,
            "temperature": _opt(body.get("temperature"), float),
            "top_p": _opt(body.get("top_p"), float),
            "max_tokens": _opt(max_tokens, int),
            "seed": body.get("seed"),
            "stop": body.get("stop"),
        }
        if body.get("logprobs"):
            kwargs["logprobs"] = True
            kwargs["top_logprobs"] = _opt(body.get("top_logprobs"), int)
        if self._backend_lock is None:
            completions = self.backend.complete(body["messages"], **kwargs)
        else:
            with self._backend_lock:
                completions = self.backend.complete(body["messages"], **kwargs)
        if fault == "fewer":
            completions = completions[: max(1, n - 1)]
        if fault == "empty":
            completions = []
        choices = []
        for i, c in enumerate(completions):
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": c.text},
                "finish_reason": c.finish_reason or "stop",
            }
            if kwargs.get("logprobs"):
                choice["logprobs"] = {
                    "content": [
                        {
                            "token": t.token,
                            "logprob": t.logprob,
                            "top_logprobs": [{"token": a, "logprob": v} for a, v in t.top],
                        }
                        for t in (c.logprobs or [])
                    ]
                }
            choices.append(choice)
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
        }

    def _score(self, body: dict[str, Any]) -> dict[str, Any]:
        """``/v1/completions`` with ``echo`` and ``logprobs``: the prompt's token log-probs."""
        scorer = getattr(self.backend, "text_logprobs", None)
        if scorer is None:
            raise NotImplementedError(f"backend {self.model_name!r} cannot score text")
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not body.get("echo") or body.get("logprobs") is None:
            raise ValueError(
                "this test server answers /v1/completions only for prompt scoring: a string "
                "'prompt' with echo=true and logprobs"
            )
        if self._backend_lock is None:
            scored = scorer(prompt)
        else:
            with self._backend_lock:
                scored = scorer(prompt)
        return {
            "id": f"cmpl-{len(self.requests)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": 0,
                    "text": prompt,
                    "finish_reason": "length",
                    "logprobs": {
                        "tokens": [t for t, _, _ in scored],
                        "token_logprobs": [v for _, _, v in scored],
                        "text_offset": [o for _, o, _ in scored],
                        "top_logprobs": [None if v is None else {t: v} for t, _, v in scored],
                    },
                }
            ],
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms stall

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model_name}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                route = self.path.rstrip("/")
                if route not in _ROUTES:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    length = int(self.headers.get("Content-Length", 0))
                    body = json.loads(self.rfile.read(length))
                except (ValueError, json.JSONDecodeError):
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                fault = server._next_fault(body, self.headers.get("Authorization"))
                if server.latency:
                    time.sleep(server.latency)
                try:
                    if fault in ("429", "429ms", "500", "503", "400", "401", "404"):
                        headers = {}
                        if fault == "429":
                            headers = {"Retry-After": f"{server.retry_after:g}"}
                        elif fault == "429ms":
                            headers = {"retry-after-ms": f"{1000 * server.retry_after:g}"}
                        code = int(fault[:3])
                        self._send(code, {"error": {"message": f"injected {fault}"}}, headers)
                        return
                    if fault == "slow":
                        time.sleep(server.slow_seconds)
                    try:
                        if _ROUTES[route] == "chat":
                            payload = server._answer(body, fault)
                        else:
                            payload = server._score(body)
                    except NotImplementedError as exc:
                        self._send(404, {"error": {"message": str(exc)}})
                        return
                    except (ValueError, TypeError, KeyError) as exc:
                        self._send(400, {"error": {"message": str(exc)}})
                        return
                    except Exception as exc:  # noqa: BLE001 - a backend failure is a 500
                        msg = f"{type(exc).__name__}: {exc}"
                        self._send(500, {"error": {"message": msg}})
                        return
                    if fault == "drop":
                        data = json.dumps(payload).encode()
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data[: len(data) // 2])
                        self.wfile.flush()
                        self.close_connection = True
                        return
                    self._send(200, payload)
                    with server._lock:
                        server.completed += 1
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

        return Handler

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ChatServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
