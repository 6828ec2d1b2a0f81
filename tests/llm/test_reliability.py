"""Nothing lost, nothing hangs: per-request results, capped waits, the JSONL store, cache keys that
follow the weights, seeds that follow the prompt."""

from __future__ import annotations

import json
import math
import time

import pytest

from icml25.llm import (
    CachedChat,
    CallableChat,
    Completion,
    ItemError,
    JsonlStore,
    json_safe,
    run_resumable,
)

USER = [{"role": "user", "content": "hello"}]


def flaky(bad: set[int], delay: float = 0.0):
    def fn(messages, **kw):
        i = int(messages[-1]["content"])
        time.sleep(delay)
        if i in bad:
            raise ValueError(f"request {i} is too long for the context")
        return f"answer {i}"

    return fn


def test_complete_many_returns_each_request_its_result_or_error(tmp_path):
    reqs = [[{"role": "user", "content": str(i)}] for i in range(20)]
    chat = CallableChat(flaky({7}, 0.01), concurrency=4)
    out = chat.complete_many(reqs, errors="return")
    assert isinstance(out[7], ValueError) and "too long" in str(out[7])
    assert [r[0].text for i, r in enumerate(out) if i != 7] == [
        f"answer {i}" for i in range(20) if i != 7
    ]
    # strict chat_many raises the failure, but only after every other request finished: a cache
    # in front keeps all 19 answers (before: the first failure cancelled the queued requests)
    cached = CachedChat(CallableChat(flaky({7}, 0.01), concurrency=4), tmp_path / "c.sqlite")
    with pytest.raises(ValueError, match="too long") as err:
        cached.chat_many(reqs, temperature=0)
    assert len(cached) == 19
    notes = "".join(getattr(err.value, "__notes__", []))
    assert "1 failed in all, 19 completed" in notes or not hasattr(err.value, "add_note")
    with pytest.raises(ValueError, match="errors must be 'raise' or 'return'"):
        chat.complete_many(reqs, errors="ignore")


def test_empty_choices_are_a_blocked_completion():
    pytest.importorskip("httpx")
    from icml25.llm import ChatServer, OpenAIChat

    with ChatServer(CallableChat(lambda m, **k: "x"), faults=["empty"]) as server:
        with OpenAIChat(server.url, "m", backoff=0.01) as chat:
            got = chat.complete(USER, n=2)
            assert [c.blocked for c in got] == [True, True] and [c.text for c in got] == ["", ""]
            assert len(server.requests) == 1  # not an error: no retry


def test_retry_after_is_capped_and_retry_after_ms_honoured(caplog):
    pytest.importorskip("httpx")
    from icml25.llm import ChatServer, OpenAIChat

    echo = CallableChat(lambda m, **k: "ok")
    # a day-long Retry-After: the client waits max_backoff, not 86400 s
    with ChatServer(echo, faults=["429"], retry_after=86400) as server:
        with OpenAIChat(server.url, "m", max_backoff=0.2, backoff=0.01) as chat:
            t0 = time.perf_counter()
            assert chat.chat(USER) == ["ok"]
            assert time.perf_counter() - t0 < 5
    assert "asked to wait 86400 s" in caplog.text
    with ChatServer(echo, faults=["429ms"], retry_after=0.3) as server:
        with OpenAIChat(server.url, "m", backoff=0.001) as chat:
            t0 = time.perf_counter()
            assert chat.chat(USER) == ["ok"]
            assert time.perf_counter() - t0 >= 0.3


def test_deadline_bounds_one_request_and_says_what_was_waited():
    pytest.importorskip("httpx")
    from icml25.llm import ChatServer, LLMRequestError, OpenAIChat

    with ChatServer(CallableChat(lambda m, **k: "ok"), faults=["503"] * 50, retry_after=0.2) as s:
        with OpenAIChat(s.url, "m", max_retries=50, deadline=1.0) as chat:
            t0 = time.perf_counter()
            with pytest.raises(LLMRequestError, match=r"1 s deadline after \d+ attempt") as err:
                chat.chat(USER)
            assert time.perf_counter() - t0 < 3
            assert "waiting between attempts" in str(err.value)


def test_jsonl_store_keys_errors_torn_lines_and_strict_json(tmp_path):
    path = tmp_path / "out.jsonl"
    with JsonlStore(path, "id") as store:
        store.append({"id": 1, "score": float("nan"), "vals": [1.0, float("-inf")]})
        store.append_error(2, ValueError("bad input"), query="q2")
        # flushed per record: another reader sees both rows before close
        assert len(path.read_text().splitlines()) == 2
    with open(path, "a") as f:
        f.write('{"id": 3, "score": 0.')  # a kill mid-write
    again = JsonlStore(path, "id")
    assert again.n_torn == 1 and again.is_done(1) and again.is_failed(2) and 3 not in again
    assert again.get(1)["score"] is None and again.get(1)["vals"] == [1.0, None]
    assert again.pending([1, 2, 3]) == [3]
    assert again.pending([1, 2, 3], retry_errors=True) == [2, 3]
    again.append({"id": 3, "score": 0.5})  # the torn fragment is cut off first
    again.close()
    lines = path.read_text().splitlines()
    strict = [json.loads(x, parse_constant=lambda c: pytest.fail(c)) for x in lines]
    assert [r["id"] for r in strict] == [1, 2, 3]
    assert JsonlStore(path, "id").errors() == [ItemError((2,), "ValueError", "bad input")]
    with pytest.raises(KeyError, match="lacks the key field"):
        JsonlStore(path, "id").append({"other": 1})
    assert json_safe({"a": (1.0, math.inf)}) == {"a": [1.0, None]}


def test_run_resumable_saves_the_others_and_retries_errors_only_when_asked(tmp_path):
    calls: list[int] = []

    def work(x: int) -> dict:
        calls.append(x)
        if x == 3:
            raise RuntimeError("boom")
        return {"y": x * x}

    store = JsonlStore(tmp_path / "r.jsonl", "i")
    key = lambda i, x: {"i": i, "x": x}  # noqa: E731
    rep = run_resumable(list(range(6)), work, store, key=key, concurrency=2)
    assert (rep.n_ok, rep.n_failed, rep.n_skipped) == (5, 1, 0)
    assert store.get(3)["error"]["message"] == "boom" and store.get(3)["x"] == 3
    calls.clear()
    rep = run_resumable(list(range(6)), work, store, key=key)
    assert calls == [] and rep.n_skipped == 5 and rep.n_failed == 1  # 5 done + 1 failed
    rep = run_resumable(list(range(6)), work, store, key=key, retry_errors=True)
    assert calls == [3] and rep.n_failed == 1 and "boom" in rep.summary()


def test_hf_cache_identity_follows_the_weights(tmp_path, tiny_chat):
    torch = pytest.importorskip("torch")
    from icml25.llm import HFChat

    model = tiny_chat.model
    before = tiny_chat.cache_identity()
    assert tiny_chat.cache_identity() == before  # stable while nothing changes
    clone = HFChat(model, tiny_chat.tokenizer, name=tiny_chat.name)
    assert clone.cache_identity() == before  # same weights, same identity
    cached = CachedChat(tiny_chat, tmp_path / "c.sqlite")
    cached.chat(USER, temperature=0, max_tokens=4)
    cached.chat(USER, temperature=0, max_tokens=4)
    assert (cached.hits, cached.misses) == (1, 1)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with torch.no_grad():
            next(model.parameters()).add_(0.01)  # "retrained" in place
        assert tiny_chat.cache_identity() != before
        cached.chat(USER, temperature=0, max_tokens=4)
        assert cached.misses == 2  # a different model never replays the old answers
    finally:
        model.load_state_dict(saved)
    assert tiny_chat.cache_identity() == before


def test_hf_distinct_prompts_draw_independent_samples():
    torch = pytest.importorskip("torch")
    from icml25.llm import HFChat
    from icml25.toy import build_tokenizer, tiny_causal_lm

    tok = build_tokenizer([f"word{i}" for i in range(200)], 300, kind="word")
    model = tiny_causal_lm(tok, d_model=16, n_layers=1, max_positions=64)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # uniform next-token distribution whatever the prompt
    chat = HFChat(model, tok, batch_size=8)
    reqs = [[{"role": "user", "content": f"word{i}"}] for i in range(4)]
    out = chat.chat_many(reqs, n=3, temperature=1.0, seed=0, max_tokens=6)
    # before: sample j of every prompt was seeded seed + j, so all four prompts got the same draws
    assert len({tuple(o) for o in out}) == 4
    assert out == chat.chat_many(reqs, n=3, temperature=1.0, seed=0, max_tokens=6)
    assert chat.chat(reqs[2], n=3, temperature=1.0, seed=0, max_tokens=6) == out[2]


def test_hf_warns_without_a_chat_template_and_can_require_one(tiny_chat):
    from icml25.llm import HFChat

    tok = tiny_chat.tokenizer
    template, tok.chat_template = tok.chat_template, None
    try:
        chat = HFChat(tiny_chat.model, tok)
        with pytest.warns(UserWarning, match="no chat template"):
            chat.render(USER)
        with pytest.raises(ValueError, match="require_template=True"):
            HFChat(tiny_chat.model, tok, require_template=True)
    finally:
        tok.chat_template = template


def test_completion_round_trips_through_dict():
    from icml25.llm import TokenLogprob

    c = Completion("hi", "stop", False, logprobs=[TokenLogprob("hi", -0.5, [("hi", -0.5)])])
    assert Completion.from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_run_resumable_turns_bad_results_into_error_rows_and_checks_keys(tmp_path):
    np = pytest.importorskip("numpy")

    def work(x: int):
        if x == 1:
            return {"v": {1, 2}}  # not JSON
        if x == 2:
            return {"i": 99}  # clashes with the key
        if x == 3:
            return 7  # not a dict
        return {"v": np.array([x, 0.5])}  # arrays become lists

    store = JsonlStore(tmp_path / "r.jsonl", "i")
    rep = run_resumable(list(range(5)), work, store, key=lambda i, x: {"i": i}, concurrency=2)
    assert rep.n_ok == 2 and sorted(e.key for e in rep.failures) == [(1,), (2,), (3,)]
    assert store.get(4)["v"] == [4.0, 0.5] and store.get(0)["v"] == [0.0, 0.5]
    assert "not JSON serializable" in store.get(1)["error"]["message"]
    assert "key field" in store.get(2)["error"]["message"]
    again = run_resumable(list(range(5)), work, store, key=lambda i, x: {"i": i})
    assert (again.n_ok, again.n_skipped, again.n_failed) == (0, 2, 3)  # 2 + 3 = 5 items
    with pytest.raises(ValueError, match="share the key"):
        run_resumable([1, 2], work, store, key=lambda i, x: {"i": 0})
    with pytest.raises(TypeError, match="must return a dict holding the key"):
        run_resumable([1], work, store, key=lambda i, x: i)


def test_server_reports_a_backend_failure_as_http_500_with_its_message():
    pytest.importorskip("httpx")
    from icml25.llm import ChatServer, LLMRequestError, OpenAIChat

    def broken(messages, **kw):
        raise RuntimeError("the model fell over")

    with ChatServer(CallableChat(broken)) as server:
        with OpenAIChat(server.url, "m", max_retries=1, backoff=0.01) as chat:
            with pytest.raises(
                LLMRequestError, match="HTTP 500: RuntimeError: the model fell over"
            ):
                chat.chat(USER)


def test_hf_errors_a_user_meets_first(tiny_chat):
    image = {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
    with pytest.raises(ValueError, match="text-only models"):
        tiny_chat.chat([{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}])
    from icml25.llm import HFChat, HFRewardModel

    for cls in (HFChat, HFRewardModel):
        with pytest.raises(FileNotFoundError, match="no model folder '/nonexistent/model'"):
            cls("/nonexistent/model")
    # a token straddling the prompt/continuation boundary is refused, not silently dropped
    with pytest.raises(ValueError, match="spans the prompt/continuation boundary"):
        tiny_chat.continuation_logprobs("reverse red ca", "t red")
    with pytest.raises(ValueError, match="empty content list"):
        tiny_chat.chat([{"role": "user", "content": []}])


def test_jsonl_store_keeps_lone_surrogates_and_control_characters(tmp_path):
    from icml25.llm.store import JsonlStore

    path = tmp_path / "s.jsonl"
    with JsonlStore(path, "k") as st:
        st.append({"k": 1, "text": "lone \ud800 surrogate"})
        st.append({"k": 2, "text": "ctrl \x00\x07\t and é"})
    raw = path.read_text(encoding="utf-8")
    assert "\\ud800" in raw and "é" in raw  # escaped only where UTF-8 cannot hold it
    again = JsonlStore(path, "k")
    assert again.get(1)["text"] == "lone \ud800 surrogate"
    assert again.get(2)["text"] == "ctrl \x00\x07\t and é"


def test_a_dead_backend_stops_the_batch_without_error_rows_and_a_rerun_resumes(tmp_path):
    """A circuit breaker's BackendUnavailableError is not an item's failure: no error row, the
    items not yet started are cancelled, and a rerun (retry_errors=False) asks every item not
    done."""
    from icml25.llm import BackendUnavailableError, JsonlStore, run_resumable

    path = tmp_path / "rows.jsonl"
    asked = []

    def work(x):
        asked.append(x)
        if x >= 3:
            raise BackendUnavailableError("circuit breaker open: http://127.0.0.1:9/v1")
        return {"y": x * 2}

    with (
        JsonlStore(path, "x") as st,
        pytest.raises(BackendUnavailableError, match="3 of .* written"),
    ):
        run_resumable(
            list(range(10)), work, st, key=lambda i, x: {"x": x}, concurrency=1, progress=False
        )
    assert asked[:4] == [0, 1, 2, 3]  # (items already started still fail fast at the breaker)
    with JsonlStore(path, "x") as st:
        assert len(st) == 3 and not st.errors()
        rep = run_resumable(
            list(range(10)), lambda x: {"y": x * 2}, st, key=lambda i, x: {"x": x}, progress=False
        )
    assert rep.n_ok == 7 and rep.n_skipped == 3 and rep.n_failed == 0
