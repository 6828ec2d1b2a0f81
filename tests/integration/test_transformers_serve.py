"""icml25.llm and icml25.tpo against a real third-party server: ``transformers serve`` on a tiny
random-init Llama (fixture in conftest.py). The model's text is noise; what is checked is what
must hold whatever the text: counts, order, seeding, stop, the cache, resumption, cost accounting.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections import Counter

import pytest

from icml25.llm import CachedChat, CallableReward, OpenAIChat

pytestmark = pytest.mark.integration

USER = [{"role": "user", "content": "Name three colours."}]
PROMPT_WORDS = "the cat sat on a mat red blue green sun moon dog bird tree river stone"


def test_chat_n_seed_max_tokens_and_stop(transformers_server):
    srv = transformers_server
    chat = OpenAIChat(srv.url, srv.model, max_retries=0)
    before = srv.chat_requests()
    three = chat.chat(USER, n=3, temperature=1.0, seed=5, max_tokens=8)
    # The server ignores n (one choice per request); the client tops up with seeds 6 and 7.
    assert srv.chat_requests() - before == 3
    assert chat.supports_n is False
    singles = [chat.chat(USER, temperature=1.0, seed=5 + j, max_tokens=8)[0] for j in range(3)]
    assert three == singles  # seeded requests, one at a time, are reproducible
    assert len(set(three)) == 3

    (full,) = chat.complete(USER, temperature=1.0, seed=11, max_tokens=24)
    assert full.finish_reason == "length"  # max_tokens honoured (no EOS drawn at this seed)
    # A stop string from the middle of that sample: the same seeded request ends at it.
    match = next(m for m in re.finditer(r"[a-z]{2,}", full.text) if m.start() > 0)
    stop = match.group()
    first = full.text.find(stop)
    assert first + len(stop) < len(full.text)
    (cut,) = chat.complete(USER, temperature=1.0, seed=11, max_tokens=24, stop=[stop])
    assert cut.finish_reason == "stop"
    # the server leaves the stop string in the text; the client cuts it as OpenAI and vLLM do
    assert cut.text == full.text[:first]


def test_client_protocol_against_the_real_server(transformers_server):
    srv = transformers_server
    chat = OpenAIChat(srv.url, srv.model, max_retries=0)
    # provider defaults: nothing the caller left out is sent, and the server accepts that
    (c,) = chat.complete(USER, max_tokens=4)
    assert isinstance(c.text, str) and c.finish_reason in ("stop", "length")
    # log-probs asked for but not served: parsed as absent, not an error
    (lp,) = chat.complete(USER, max_tokens=4, temperature=0, top_logprobs=2)
    assert lp.logprobs is None
    # no echoed prompt log-probs on /v1/completions: a clear NotImplementedError
    with pytest.raises(NotImplementedError, match="echoed prompt log-probs"):
        chat.continuation_logprobs("the cat sat on", " the mat")


def test_chat_many_concurrent_keeps_order(transformers_server):
    srv = transformers_server
    words = PROMPT_WORDS.split()
    prompts = [
        [{"role": "user", "content": " ".join(words[2 * i : 2 * i + 2 + i])}] for i in range(8)
    ]
    sequential = OpenAIChat(srv.url, srv.model, concurrency=1)
    expected = [sequential.chat(p, temperature=0, max_tokens=6)[0] for p in prompts]
    assert len(set(expected)) >= 3  # greedy answers differ enough to tell the order apart
    before = srv.chat_requests()
    concurrent = OpenAIChat(srv.url, srv.model, concurrency=8, max_retries=0)
    got = concurrent.chat_many(prompts, temperature=0, max_tokens=6)
    assert [g[0] for g in got] == expected
    assert srv.chat_requests() - before == 8


def test_cached_chat_replays_without_requests(transformers_server, tmp_path):
    srv = transformers_server
    prompts = [[{"role": "user", "content": f"Colour number {i}?"}] for i in range(4)]
    args = dict(n=2, temperature=1.0, seed=3, max_tokens=6)
    path = tmp_path / "cache.sqlite"
    before = srv.chat_requests()
    with CachedChat(OpenAIChat(srv.url, srv.model, supports_n=False), path) as cached:
        first = cached.chat_many(prompts, **args)
        assert (cached.hits, cached.misses) == (0, 4)
    assert srv.chat_requests() - before == 8  # 4 requests x 2 single-choice calls
    before = srv.chat_requests()
    with CachedChat(OpenAIChat(srv.url, srv.model, supports_n=False), path) as cached:
        assert cached.chat_many(prompts, **args) == first
        assert (cached.hits, cached.misses) == (4, 0)
        assert srv.chat_requests() == before  # nothing reached the server
        cached.chat([{"role": "user", "content": "A new question?"}], **args)
        assert cached.misses == 1
    assert srv.chat_requests() - before == 2


def test_tpo_optimize_cost_accounting_and_replay(transformers_server, tmp_path):
    from icml25.tpo import TPOConfig, tpo_optimize

    srv = transformers_server
    config = TPOConfig(width=3, depth=2, max_tokens_response=8, max_tokens_feedback=8)
    reward = CallableReward(lambda q, r: float(len(r)))
    path = tmp_path / "tpo.sqlite"

    def run():
        with CachedChat(OpenAIChat(srv.url, srv.model), path) as chat, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # no update output carries the tags
            result = tpo_optimize("Name three colours.", chat, reward, config)
            return result, chat.hits, chat.misses

    before = srv.chat_requests()
    result, hits, misses = run()
    assert result.n_policy_calls == 1 + 3 * config.depth
    assert (hits, misses) == (0, 1 + 3 * config.depth)
    assert srv.chat_requests() - before >= 1 + 3 * config.depth
    initial = [e for e in result.cache if e.iteration == -1]
    assert len(initial) == config.width
    # A random model never writes <IMPROVED_VARIABLE>...</IMPROVED_VARIABLE>: every update
    # output is dropped and counted, and the cache keeps only the initial samples.
    assert len(result.cache) == config.width and len(result.iterations) == config.depth
    for it in result.iterations:
        assert (it.n_parsed, it.n_dropped, it.new_rewards) == (0, config.width, [])
        assert isinstance(it.loss_text, str) and isinstance(it.gradient_text, str)
    assert result.n_reward_calls == config.width
    best = max(initial, key=lambda e: e.reward)
    assert result.best_reward == best.reward == len(best.text)
    assert result.iterations[0].chosen == best.text
    assert result.iterations[0].rejected == min(initial, key=lambda e: e.reward).text

    before = srv.chat_requests()
    again, hits, misses = run()  # a rerun is answered from the cache
    assert again.to_json() == result.to_json()
    assert (hits, misses) == (1 + 3 * config.depth, 0)
    assert srv.chat_requests() == before


BATCH_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from icml25.llm import CallableReward, OpenAIChat
    from icml25.llm.base import BaseChat
    from icml25.tpo import PromptSet, TPOConfig, tpo_batch

    url, model, out, log = sys.argv[1:5]
    P = PromptSet.default()

    class Logged(BaseChat):
        # Writes the query of each generation request to `log` before sending it on.
        def __init__(self, inner):
            self.inner, self.name, self.concurrency = inner, inner.name, inner.concurrency

        def _complete(self, messages, params):
            if P.detect_role(messages) == "generate":
                with open(log, "a") as f:
                    f.write(json.dumps(messages[-1]["content"]) + "\\n")
            return self.inner.complete(messages, **params.as_dict())

    queries = [f"query {i}" for i in range(8)]
    reward = CallableReward(lambda q, r: float(len(r)))
    config = TPOConfig(width=2, depth=1, max_tokens_response=6, max_tokens_feedback=6)
    backend = Logged(OpenAIChat(url, model, max_retries=0))
    tpo_batch(queries, backend, reward, config, num_threads=1, out_path=out, progress=False)
    """
)


def _finished(path) -> list[int]:
    """Indices of the rows that carry a result (error rows and a torn last line do not count)."""
    if not path.exists():
        return []
    done = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "result" in row:
            done.append(int(row["index"]))
    return done


def test_killed_tpo_batch_resumes(transformers_server, tmp_path):
    srv = transformers_server
    script, out, log = tmp_path / "run.py", tmp_path / "out.jsonl", tmp_path / "generate.log"
    script.write_text(BATCH_SCRIPT)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore"}
    args = [sys.executable, str(script), srv.url, srv.model, str(out), str(log)]
    proc = subprocess.Popen(args, env=env)
    deadline = time.monotonic() + 60
    while not _finished(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the batch ended before it could be killed"
    finished_first = set(_finished(out))
    assert 1 <= len(finished_first) < 8  # really killed partway
    subprocess.run(args, env=env, check=True, timeout=120)
    assert sorted(_finished(out)) == list(range(8))  # nothing lost, nothing twice
    generated = Counter(json.loads(x) for x in log.read_text().splitlines())
    assert set(generated) == {f"query {i}" for i in range(8)}
    redone = [q for q, c in generated.items() if c > 1]
    assert len(redone) <= 1  # at most the query in flight at the kill
    assert all(f"query {i}" not in redone for i in finished_first)


def test_a_dead_server_stops_a_batch_fast_and_the_rerun_resumes(transformers_server, tmp_path):
    """Rows from the real server, then the server gone (its port refuses connections): the circuit
    breaker stops the remaining items within seconds: the requests that failed on the transport
    before it opened (at most its limit) are error rows marked transient, the items not sent have
    no row, and a rerun against the server does exactly the items not done (the transient error
    rows included, without ``retry_errors``)."""
    from icml25.llm import BackendUnavailableError, JsonlStore, run_resumable

    s = transformers_server
    items = [f"{PROMPT_WORDS} {i}" for i in range(12)]
    path = tmp_path / "rows.jsonl"

    def work_with(chat):
        def work(q):
            return {"reply": chat.chat([{"role": "user", "content": q}], max_tokens=4, seed=0)[0]}

        return work

    live = OpenAIChat(s.url, s.model, api_key="x", concurrency=2)
    with JsonlStore(path, "q") as st:
        run_resumable(items[:3], work_with(live), st, key=lambda i, q: {"q": q}, progress=False)
    import socket

    with socket.socket() as sock:  # a port nothing listens on: the crashed server
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    dead = OpenAIChat(
        f"http://127.0.0.1:{dead_port}/v1",
        s.model,
        api_key="x",
        backoff=0.05,
        max_backoff=0.1,
        circuit_breaker=3,
        concurrency=2,
    )
    t0 = time.perf_counter()
    with (
        JsonlStore(path, "q") as st,
        pytest.raises(
            BackendUnavailableError, match=r"circuit breaker.*9 not done are asked again"
        ),
    ):
        run_resumable(
            items, work_with(dead), st, key=lambda i, q: {"q": q}, concurrency=2, progress=False
        )
    assert time.perf_counter() - t0 < 30
    with JsonlStore(path, "q") as st:
        assert len(st.records()) == 3
        assert 1 <= len(st.errors()) <= 3 and all("failed after" in e.message for e in st.errors())
        before = s.chat_requests()
        assert all(st.is_transient_failure(e.key) for e in st.errors())
        # the transport's failures are asked again without retry_errors
        rep = run_resumable(items, work_with(live), st, key=lambda i, q: {"q": q}, progress=False)
    assert rep.n_skipped == 3 and rep.n_ok == 9 and rep.n_failed == 0
    assert s.chat_requests() - before == 9
