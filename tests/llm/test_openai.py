"""OpenAIChat against a real HTTP server on 127.0.0.1, with injected faults."""

from __future__ import annotations

import logging
import random
import time

import pytest

pytest.importorskip("httpx")

from icml25.llm import ChatServer, LLMRequestError, OpenAIChat  # noqa: E402

USER = [{"role": "user", "content": "hello"}]


def client(server, **kw):
    kw = {"max_retries": 6, "backoff": 0.01, "timeout": 5.0, **kw}
    return OpenAIChat(server.url, "echo", api_key=kw.pop("api_key", None), **kw)


def test_round_trip_n_and_payload(echo):
    with ChatServer(echo) as server, client(server) as chat:
        assert chat.chat(
            USER, n=3, seed=5, temperature=0.2, top_p=0.9, max_tokens=7, stop=["x"]
        ) == [
            "echo hello sample 5",
            "echo hello sample 6",
            "echo hello sample 7",
        ]
        body = server.requests[0]
        assert body["model"] == "echo" and body["n"] == 3 and body["seed"] == 5
        assert body["temperature"] == 0.2 and body["top_p"] == 0.9 and body["max_tokens"] == 7
        assert body["stop"] == ["x"]


def test_supports_n_false_makes_single_calls_with_consecutive_seeds(echo):
    with ChatServer(echo) as server, client(server, supports_n=False) as chat:
        assert chat.chat(USER, n=3, seed=1) == [f"echo hello sample {k}" for k in (1, 2, 3)]
        assert [r.get("n", 1) for r in server.requests] == [1, 1, 1]
        assert [r["seed"] for r in server.requests] == [1, 2, 3]


def test_fewer_choices_are_topped_up_and_learnt(echo):
    with ChatServer(echo, faults=["fewer"]) as server, client(server) as chat:
        assert chat.chat(USER, n=3, seed=0) == [f"echo hello sample {k}" for k in (0, 1, 2)]
        assert chat.supports_n is False
        assert len(server.requests) == 2  # 2 choices, then one single call for the third


def test_429_honours_retry_after(echo):
    with ChatServer(echo, faults=["429", "429"], retry_after=0.2) as server, client(server) as chat:
        t0 = time.perf_counter()
        assert chat.chat(USER, seed=0) == ["echo hello sample 0"]
        assert time.perf_counter() - t0 >= 0.4
        assert len(server.requests) == 3


@pytest.mark.parametrize("fault", ["500", "503", "drop", "slow"])
def test_transient_faults_are_retried(echo, fault):
    with ChatServer(echo, faults=[fault], slow_seconds=1.0) as server:
        with client(server, timeout=0.3) as chat:
            assert chat.chat(USER, seed=0) == ["echo hello sample 0"]
        assert len(server.requests) == 2


@pytest.mark.parametrize("fault", ["400", "404"])
def test_client_errors_fail_fast_with_the_server_message(echo, fault):
    with ChatServer(echo, faults=[fault]) as server, client(server) as chat:
        with pytest.raises(LLMRequestError, match=f"HTTP {fault}: injected {fault}") as err:
            chat.chat(USER)
        assert err.value.status == int(fault)
        assert len(server.requests) == 1  # no retry


def test_retries_run_out(echo):
    with ChatServer(echo, faults=["500"] * 10) as server, client(server, max_retries=2) as chat:
        with pytest.raises(LLMRequestError, match="failed after 3 attempt"):
            chat.chat(USER)
        assert len(server.requests) == 3


def test_refused_connection_is_retried_then_reported():
    chat = OpenAIChat("http://127.0.0.1:9/v1", "m", max_retries=1, backoff=0.01, timeout=1)
    with pytest.raises(LLMRequestError, match="connection problem"):
        chat.chat(USER)


def test_api_key_is_sent_but_never_shown(echo, caplog, monkeypatch):
    secret = "sk-very-secret-123"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    with ChatServer(echo, faults=["500", "401"]) as server:
        chat = OpenAIChat(server.url, "echo", backoff=0.01)
        with caplog.at_level(logging.DEBUG), pytest.raises(LLMRequestError) as err:
            chat.chat(USER)
        assert server.authorizations == [f"Bearer {secret}"] * 2
        assert secret not in str(err.value) and secret not in repr(chat)
        assert secret not in caplog.text
        assert "retry 1/5" in caplog.text
    with ChatServer(echo) as server:
        monkeypatch.delenv("OPENAI_API_KEY")
        OpenAIChat(server.url, "echo").chat(USER)
        assert server.authorizations == [None]


def test_chat_many_through_random_faults_keeps_order_and_content(echo):
    rng = random.Random(0)
    kinds = [None] * 6 + ["429", "500", "503", "drop", "slow", "fewer"]

    def plan(index, body):
        return rng.choice(kinds)

    with ChatServer(echo, faults=plan, slow_seconds=0.6, retry_after=0.01) as server:
        with client(server, timeout=0.3, max_retries=12, concurrency=8) as chat:
            requests = [[{"role": "user", "content": f"q{i}"}] for i in range(40)]
            out = chat.chat_many(requests, n=2, seed=100)
    assert out == [[f"echo q{i} sample 100", f"echo q{i} sample 101"] for i in range(40)]
    assert len(server.requests) > 40  # faults really happened


def test_content_filter_is_reported_as_blocked():
    from icml25.llm import CallableChat, Completion
    from icml25.llm.openai_http import _parse_choices

    choices = _parse_choices(
        {"choices": [{"index": 0, "message": {"content": None}, "finish_reason": "content_filter"}]}
    )
    assert choices == [Completion("", "content_filter", True, choices[0].raw)]

    class Filtered(CallableChat):
        def _complete(self, messages, params):
            return [Completion("", "content_filter", True) for _ in range(params.n)]

    with ChatServer(Filtered(lambda m, **k: "x")) as server, client(server) as chat:
        assert [c.blocked for c in chat.complete(USER, n=2)] == [True, True]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"base_url": "localhost:8000"}, "base_url must start with http"),
        ({"model": ""}, "model must be a non-empty string"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"max_retries": -1}, "max_retries must be an integer >= 0"),
        ({"concurrency": 0}, "concurrency must be a positive integer"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    args = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kwargs}
    with pytest.raises(ValueError, match=match):
        OpenAIChat(**args)
