"""OpenAIChat's transport (issue 48): a circuit breaker in front of a dead endpoint, and a reasoning
model's ``reasoning_content`` kept beside the answer."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("httpx")

from icml25.llm import CachedChat, ChatServer, Completion, LLMRequestError, OpenAIChat  # noqa: E402

try:
    from icml25.llm.base import BackendUnavailableError
except ImportError:  # today's main, to watch the tests fail first
    BackendUnavailableError = type("BackendUnavailableError", (RuntimeError,), {})

USER = [{"role": "user", "content": "hello"}]


def refused_url() -> str:
    """A local URL nothing listens on: every connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


# -- circuit breaker -------------------------------------------------------------------------------


def test_dead_endpoint_opens_the_breaker_and_the_remaining_requests_fail_fast():
    url = refused_url()
    reqs = [[{"role": "user", "content": str(i)}] for i in range(100)]
    with OpenAIChat(url, "m", backoff=0.05, max_backoff=1.0, concurrency=5) as chat:
        t0 = time.perf_counter()
        out = chat.complete_many(reqs, errors="return")
        elapsed = time.perf_counter() - t0
    assert all(isinstance(r, LLMRequestError) for r in out)
    opened = [r for r in out if isinstance(r, BackendUnavailableError)]
    # at most the first breaker-many requests plus the ones in flight beside them ran out their
    # retries; every other request was refused by the open breaker without waiting
    assert len(opened) >= len(reqs) - 5 - 5
    msg = str(opened[-1])
    assert "circuit breaker" in msg and url in msg and "'m'" in msg
    assert "ConnectError" in msg and "5 requests in a row" in msg
    # without a breaker each request spends ~0.8 s on 6 refused attempts: 100 / 5 * 0.8 ~ 16 s;
    # with it, about the retries of the first requests in flight (~1-2 s)
    assert elapsed < 6.0, f"{elapsed:.1f} s for 100 requests against a dead endpoint"
    # once open, a request costs no retries at all
    with OpenAIChat(url, "m", backoff=0.05, circuit_breaker=1) as chat:
        with pytest.raises(LLMRequestError):
            chat.chat(USER)
        t0 = time.perf_counter()
        for _ in range(20):
            with pytest.raises(BackendUnavailableError, match="circuit breaker"):
                chat.chat(USER)
        assert time.perf_counter() - t0 < 0.5


def test_a_success_or_an_http_answer_resets_the_count(echo):
    # max_retries=0: one dropped connection is one request failed by transport
    faults = ["drop", "drop", None, "drop", "drop", "400", "drop", "drop", None]
    with ChatServer(echo, faults=faults) as server:
        with OpenAIChat(server.url, "echo", max_retries=0, circuit_breaker=3) as chat:
            got = []
            for _ in faults:
                try:
                    got.append(chat.chat(USER, seed=0)[0])
                except LLMRequestError as exc:
                    assert not isinstance(exc, BackendUnavailableError), exc
                    got.append(exc.status or "transport")
            assert got == ["transport", "transport", "echo hello sample 0"] + [
                "transport",
                "transport",
                400,
                "transport",
                "transport",
                "echo hello sample 0",
            ]
            assert len(server.requests) == len(faults)  # every request reached the server
            # three in a row open it: the fourth request is not sent
    with ChatServer(echo, faults=["drop"] * 3) as server:
        with OpenAIChat(server.url, "echo", max_retries=0, circuit_breaker=3) as chat:
            for _ in range(3):
                with pytest.raises(LLMRequestError) as err:
                    chat.chat(USER)
                assert not isinstance(err.value, BackendUnavailableError)
            with pytest.raises(BackendUnavailableError, match="3 requests in a row") as err:
                chat.chat(USER)
            assert "RemoteProtocolError" in str(err.value) and server.url in str(err.value)
            assert len(server.requests) == 3
            chat.reset_breaker()  # the server is back: requests go through again
            assert chat.chat(USER, seed=1) == ["echo hello sample 1"]


def test_http_errors_never_open_the_breaker(echo):
    with ChatServer(echo, faults=["400"] * 6 + ["503"] * 6) as server:
        with OpenAIChat(server.url, "echo", max_retries=0, circuit_breaker=2) as chat:
            statuses = []
            for _ in range(12):
                with pytest.raises(LLMRequestError) as err:
                    chat.chat(USER)
                assert not isinstance(err.value, BackendUnavailableError)
                statuses.append(err.value.status)
            assert statuses[:6] == [400] * 6 and len(server.requests) == 12


def test_breaker_disabled_with_none_and_validated():
    url = refused_url()
    with OpenAIChat(url, "m", max_retries=0, circuit_breaker=None) as chat:
        for _ in range(8):
            with pytest.raises(LLMRequestError) as err:
                chat.chat(USER)
            assert not isinstance(err.value, BackendUnavailableError)
    for bad in (0, -1, 2.5, True, "5"):
        with pytest.raises(ValueError, match="circuit_breaker"):
            OpenAIChat(url, "m", circuit_breaker=bad)


# -- reasoning_content -----------------------------------------------------------------------------


class ReasoningServer:
    """A stub of vLLM with a reasoning parser: the reasoning in ``message.<field>``, the answer in
    ``message.content`` (``None`` when the reasoning never ended)."""

    def __init__(self, reasoning: str, content: str | None, field: str = "reasoning_content"):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                choices = [
                    {
                        "index": i,
                        "message": {"role": "assistant", "content": content, field: reasoning},
                        "finish_reason": "stop" if content is not None else "length",
                    }
                    for i in range(body.get("n", 1))
                ]
                data = json.dumps({"object": "chat.completion", "choices": choices}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                outer.n_requests += 1

        self.n_requests = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._httpd.shutdown()
        self._httpd.server_close()


REASONING = "The user asks for a greeting. Guideline: be helpful. Nothing harmful here."
ANSWER = "Hello! How can I help you today?"


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_content_is_kept_beside_the_answer(field, tmp_path):
    with ReasoningServer(REASONING, ANSWER, field) as server:
        with OpenAIChat(server.url, "r1") as chat:
            got = chat.complete(USER, n=2)
            assert [c.text for c in got] == [ANSWER, ANSWER]
            assert [c.reasoning for c in got] == [REASONING, REASONING]
            assert chat.chat(USER) == [ANSWER]  # chat() stays the answer alone
            # stored and read back by the cache: a rerun sees the reasoning too
            cached = CachedChat(chat, tmp_path / "c.sqlite")
            first = cached.complete(USER, temperature=0)
            n = server.n_requests
            again = cached.complete(USER, temperature=0)
            assert server.n_requests == n and again == first and again[0].reasoning == REASONING


def test_completion_dict_round_trip_keeps_reasoning_and_plain_rows_unchanged():
    c = Completion("answer", "stop", reasoning="thought")
    assert Completion.from_dict(c.to_dict()) == c and c.to_dict()["reasoning"] == "thought"
    plain = Completion("answer", "stop")
    assert "reasoning" not in plain.to_dict() and Completion.from_dict(plain.to_dict()) == plain


def test_a_transport_failure_is_asked_again_by_the_next_run_an_http_refusal_is_not(echo, tmp_path):
    """A request whose retries ran out on the transport (the server was down) is not the item's
    fault: its error row is marked transient and the next run asks it again without
    ``retry_errors``; an HTTP 400 stays failed until ``retry_errors``."""
    from icml25.llm import JsonlStore, run_resumable

    def work_with(chat):
        return lambda q: {"reply": chat.chat([{"role": "user", "content": q}])[0]}

    path = tmp_path / "rows.jsonl"
    with ChatServer(echo, faults=["400"]) as server:
        with OpenAIChat(server.url, "echo", max_retries=0) as live, JsonlStore(path, "q") as st:
            run_resumable(["a"], work_with(live), st, key=lambda i, q: {"q": q}, progress=False)
            assert st.is_failed("a") and not st.is_transient_failure("a")
        with OpenAIChat(refused_url(), "echo", max_retries=0, circuit_breaker=None) as dead:
            with JsonlStore(path, "q") as st:
                run_resumable(["b"], work_with(dead), st, key=lambda i, q: {"q": q}, progress=False)
                assert st.is_transient_failure("b")
        with OpenAIChat(server.url, "echo", max_retries=0) as live, JsonlStore(path, "q") as st:
            n = len(server.requests)
            rep = run_resumable(
                ["a", "b"], work_with(live), st, key=lambda i, q: {"q": q}, progress=False
            )
            assert rep.n_ok == 1 and st.is_done("b") and st.is_failed("a")
            assert len(server.requests) - n == 1
            assert st.pending(["a", "b"]) == [] and st.pending(["a"], retry_errors=True) == ["a"]
