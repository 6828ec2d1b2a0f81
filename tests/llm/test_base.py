"""Protocol, argument checks, order-preserving chat_many, scripted backends."""

from __future__ import annotations

import random
import time

import pytest

from icml25.llm import CallableChat, ChatBackend, SamplingParams, ScriptedChat, validate_messages
from icml25.llm.base import message_text

USER = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 0}, "n must be an integer >= 1, got 0"),
        ({"n": True}, "n must be an integer >= 1, got True"),
        (
            {"temperature": -0.1},
            r"temperature must be a finite number >= 0, got -0.1 \(or None: the provider's default\)",
        ),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, r"top_p must be a finite number in \(0, 1\], got 0.0 \(or None"),
        ({"top_p": 1.5}, "top_p"),
        (
            {"max_tokens": 0},
            r"max_tokens must be an integer >= 1, got 0 \(or None",
        ),
        ({"seed": 1.5}, "seed must be an integer, got 1.5 \\(or None"),
        ({"stop": [""]}, "stop must be a list of non-empty strings"),
    ],
)
def test_sampling_params_are_checked(kwargs, match, echo):
    with pytest.raises(ValueError, match=match):
        echo.chat(USER, **kwargs)


def test_stop_accepts_a_single_string():
    assert SamplingParams(stop="x").stop == ("x",)


@pytest.mark.parametrize(
    ("messages", "error", "match"),
    [
        ("hello", TypeError, "messages must be a list"),
        ([], ValueError, "must not be empty"),
        (
            [{"role": "robot", "content": "x"}],
            ValueError,
            "message 0 has role 'robot'; valid roles",
        ),
        ([{"role": "user", "content": 3}], TypeError, "message 0 content must be a string"),
        ([{"role": "user", "content": [{"type": "audio"}]}], ValueError, "content part 0"),
        (["hi"], TypeError, "message 0 must be a dict"),
    ],
)
def test_bad_messages(messages, error, match):
    with pytest.raises(error, match=match):
        validate_messages(messages)


def test_image_parts_are_valid_but_text_only_backends_refuse_them():
    msg = {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is "},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            {"type": "text", "text": "this?"},
        ],
    }
    assert validate_messages([msg])[0] == msg
    assert message_text(msg, allow_images=True) == "what is this?"
    with pytest.raises(ValueError, match="image_url"):
        message_text(msg)


def test_callable_backend_returns_exactly_n_and_satisfies_protocol(echo):
    assert isinstance(echo, ChatBackend)
    assert echo.chat(USER, n=3, seed=10) == [f"echo hi sample {k}" for k in (10, 11, 12)]


def test_wrong_number_of_completions_is_an_error():
    bad = CallableChat(lambda messages, **kw: ["only one"], name="bad")
    with pytest.raises(RuntimeError, match="returned 1 completion"):
        bad.chat(USER, n=2)


def test_chat_many_runs_concurrently_and_keeps_input_order():
    rng = random.Random(0)
    delays = [rng.uniform(0, 0.05) for _ in range(32)]

    def slow(messages, **kw):
        i = int(messages[0]["content"])
        time.sleep(delays[i])
        return f"answer {i}"

    backend = CallableChat(slow, concurrency=16)
    t0 = time.perf_counter()
    out = backend.chat_many([[{"role": "user", "content": str(i)}] for i in range(32)])
    elapsed = time.perf_counter() - t0
    assert out == [[f"answer {i}"] for i in range(32)]
    assert elapsed < 0.6 * sum(delays)  # really concurrent
    assert backend.chat_many([]) == []
    with pytest.raises(ValueError, match="request 1: message 0 has role"):
        backend.chat_many([USER, [{"role": "x", "content": ""}]])


def test_scripted_records_calls_and_runs_out_loudly():
    s = ScriptedChat(["a", "b", "c"])
    assert s.chat(USER, n=2, temperature=0.1) == ["a", "b"]
    assert s.calls[0]["messages"] == USER and s.calls[0]["n"] == 2
    assert s.calls[0]["temperature"] == 0.1
    with pytest.raises(RuntimeError, match="ran out of replies"):
        s.chat(USER, n=2)
    with pytest.raises(TypeError, match="strings"):
        ScriptedChat([1, 2])
