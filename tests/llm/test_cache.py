"""CachedChat: hits and misses, sampled repeats, persistence, and a SIGKILLed pipeline resuming."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest

from icml25.llm import CachedChat, ScriptedChat

USER = [{"role": "user", "content": "q"}]


def counting(replies):
    calls = []

    def fn(messages, **params):
        calls.append((messages[-1]["content"], params["temperature"], params["seed"]))
        return f"{messages[-1]['content']}-{len(calls)}"

    return ScriptedChat(fn), calls


def test_identical_requests_hit_and_any_change_misses(tmp_path):
    inner, calls = counting(None)
    chat = CachedChat(inner, tmp_path / "c.sqlite")
    assert chat.chat(USER, temperature=0) == ["q-1"]
    assert chat.chat(USER, temperature=0) == ["q-1"]
    assert (chat.hits, chat.misses) == (1, 1)
    for change in ({"max_tokens": 5}, {"top_p": 0.5}, {"seed": 1}, {"stop": ["x"]}, {"n": 2}):
        chat.chat(USER, temperature=0, **change)
    chat.chat([{"role": "user", "content": "other"}], temperature=0)
    assert chat.misses == 7 and len(chat) == 7


def test_sampled_repeats_are_distinct_draws_replayed_in_order(tmp_path):
    inner, calls = counting(None)
    path = tmp_path / "c.sqlite"
    with CachedChat(inner, path) as chat:
        first = [chat.chat(USER, temperature=0.7)[0] for _ in range(3)]
    assert first == ["q-1", "q-2", "q-3"]  # three samples, not one cached thrice
    inner2, calls2 = counting(None)
    with CachedChat(inner2, path) as chat:
        replay = [chat.chat(USER, temperature=0.7)[0] for _ in range(4)]
    assert replay[:3] == first and calls2 == [("q", 0.7, None)]  # only the 4th is new


def test_chat_many_stores_each_answer(tmp_path, echo):
    chat = CachedChat(echo, tmp_path / "c.sqlite")
    reqs = [[{"role": "user", "content": f"q{i}"}] for i in range(10)]
    out = chat.chat_many(reqs, n=2, seed=0, temperature=0)
    assert out == [[f"echo q{i} sample 0", f"echo q{i} sample 1"] for i in range(10)]
    assert (
        CachedChat(echo, tmp_path / "c.sqlite").chat_many(reqs, n=2, seed=0, temperature=0) == out
    )


def test_batched_local_backend_goes_through_the_cache(tmp_path, tiny_chat):
    chat = CachedChat(tiny_chat, tmp_path / "c.sqlite")
    reqs = [[{"role": "user", "content": f"reverse {w}"}] for w in ("red", "cat", "sun")]
    out = chat.chat_many(reqs, temperature=0, max_tokens=5)
    assert out == [["red"], ["cat"], ["sun"]]
    again = CachedChat(tiny_chat, tmp_path / "c.sqlite")
    assert again.chat_many(reqs, temperature=0, max_tokens=5) == out and again.misses == 0


def test_bad_backend():
    with pytest.raises(TypeError, match="needs a chat backend"):
        CachedChat(object(), "x.sqlite")


PIPELINE = textwrap.dedent(
    """
    import json, sys
    from icml25.llm import CachedChat, OpenAIChat

    url, db, out = sys.argv[1:4]
    chat = CachedChat(OpenAIChat(url, "echo", max_retries=0), db)
    with open(out, "a") as f:
        for i in range(30):
            (text,) = chat.chat([{"role": "user", "content": f"q{i}"}], temperature=0.7)
            f.write(json.dumps([i, text]) + "\\n")
            f.flush()
    """
)


def test_killed_pipeline_resumes_without_repeating_completed_calls(tmp_path, echo):
    pytest.importorskip("httpx")
    from icml25.llm import ChatServer

    script = tmp_path / "pipeline.py"
    script.write_text(PIPELINE)
    db, out = tmp_path / "cache.sqlite", tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with ChatServer(echo, latency=0.05) as server:
        args = [sys.executable, str(script), server.url, str(db), str(out)]
        proc = subprocess.Popen(args, env=env)
        deadline = time.time() + 60
        while server.completed < 10 and time.time() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        first_run = len(server.requests)
        assert 10 <= first_run < 30  # really killed partway
        subprocess.run(args, env=env, check=True, timeout=120)
        asked = Counter(r["messages"][-1]["content"] for r in server.requests)
    assert set(asked) == {f"q{i}" for i in range(30)}  # nothing lost
    repeated = [q for q, c in asked.items() if c > 1]
    assert len(repeated) <= 1  # at most the request in flight at the kill
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    final = dict(lines)  # the re-run rewrites every item; later lines win
    assert final == {i: f"echo q{i} sample 0" for i in range(30)}
    # answers the first run recorded are the ones the re-run replayed from the cache
    first = lines[: len(lines) - 30]
    assert all(final[i] == text for i, text in first)


def test_an_openai_backends_extra_body_is_part_of_its_identity(tmp_path):
    """Issue 48: ``extra_body`` goes with every request (``top_p``, ``enable_thinking``...), so
    two clients of one model that differ in it never share cached answers or store rows."""
    pytest.importorskip("httpx")
    from icml25.llm import CachedChat, OpenAIChat
    from icml25.llm.store import describe

    plain = OpenAIChat("http://127.0.0.1:9/v1", "m", api_key="x")
    top_p = OpenAIChat("http://127.0.0.1:9/v1", "m", api_key="x", extra_body={"top_p": 0.5})
    assert plain.cache_identity() == plain.name  # unchanged without extra_body
    assert top_p.cache_identity() != plain.cache_identity() and "top_p" in top_p.cache_identity()
    assert describe(top_p) != describe(plain)
    a, b = CachedChat(plain, tmp_path / "c.db"), CachedChat(top_p, tmp_path / "c.db")
    assert a.identity() != b.identity()
