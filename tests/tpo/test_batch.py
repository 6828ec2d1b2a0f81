"""tpo_batch: thread pool, JSONL output, resume, and a SIGKILLed run against a real local HTTP
server (the icml25.llm test server) that resumes without losing or redoing finished queries."""

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

from icml25.llm import CallableChat, CallableReward
from icml25.tpo import PromptSet, TPOConfig, tpo_batch

P = PromptSet.default()


POLICY_CALLS: list[int] = []


def policy(messages, *, n=1, sample_index=0, **kw):
    POLICY_CALLS.append(1)
    role = P.detect_role(list(messages))
    if role == "generate":
        return f"draft for {messages[-1]['content']} #{sample_index}"
    if role == "loss":
        return "the chosen one is longer"
    if role == "gradient":
        return "make it longer"
    chosen = P.parse_update(list(messages))["chosen"]
    return f"{P.start_tag}{chosen} and more{P.end_tag}"


def test_batch_matches_single_runs_and_resumes(tmp_path):
    chat = CallableChat(policy)
    reward = CallableReward(lambda q, r: float(len(r)))
    qs = [f"query {i}" for i in range(6)]
    out = tmp_path / "r.jsonl"
    res = tpo_batch(qs, chat, reward, TPOConfig(width=2, depth=2), num_threads=3, out_path=out)
    assert [r.query for r in res] == qs
    assert all(r.best_response.endswith("and more and more") for r in res)
    assert len(out.read_text().splitlines()) == 6
    # the same policy again (a wrapper around it would be another function: refused)
    asked = len(POLICY_CALLS)
    again = tpo_batch(qs, CallableChat(policy), reward, TPOConfig(width=2, depth=2), out_path=out)
    assert len(POLICY_CALLS) == asked
    assert [r.best_response for r in again] == [r.best_response for r in res]
    with pytest.raises(ValueError, match="not this query list"):
        tpo_batch(["other"] + qs[1:], chat, reward, TPOConfig(width=2, depth=2), out_path=out)
    with pytest.raises(ValueError, match="num_threads"):
        tpo_batch(qs, chat, reward, num_threads=0)


SCRIPT = textwrap.dedent(
    """
    import sys
    from icml25.llm import CallableReward, OpenAIChat
    from icml25.tpo import TPOConfig, tpo_batch

    url, out = sys.argv[1:3]
    queries = [f"query {i}" for i in range(8)]
    reward = CallableReward(lambda q, r: float(len(r)))
    tpo_batch(queries, OpenAIChat(url, "policy", max_retries=0), reward, TPOConfig(width=2, depth=1),
              num_threads=1, out_path=out, progress=False)
    """
)


def test_killed_batch_resumes_over_http(tmp_path):
    pytest.importorskip("httpx")
    from icml25.llm import ChatServer

    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with ChatServer(CallableChat(policy), latency=0.03) as server:
        args = [sys.executable, str(script), server.url, str(out)]
        proc = subprocess.Popen(args, env=env)
        deadline = time.time() + 60
        while server.completed < 10 and time.time() < deadline:  # 4 calls per query
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        finished_first = {json.loads(x)["index"] for x in out.read_text().splitlines()}
        assert 1 <= len(finished_first) < 8  # really killed partway
        subprocess.run(args, env=env, check=True, timeout=120)
        generated = Counter(
            r["messages"][-1]["content"]
            for r in server.requests
            if P.detect_role(r["messages"]) == "generate"
        )
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["index"] for r in lines) == list(range(8))  # nothing lost, nothing twice
    assert set(generated) == {f"query {i}" for i in range(8)}
    redone = [q for q, c in generated.items() if c > 1]
    assert len(redone) <= 1  # at most the query in flight at the kill
    assert all(f"query {i}" not in redone for i in finished_first)


def test_a_rerun_with_other_settings_never_returns_the_first_runs_rows(tmp_path):
    """Another policy, depth and width into the same file: refused, naming what differs; with
    keep_both the new run computes its own answers and the first run's stay readable."""
    from icml25.llm.store import SettingsMismatch

    reward = CallableReward(lambda q, r: float(len(r)))
    qs = ["query 0", "query 1"]
    out = tmp_path / "r.jsonl"
    first = tpo_batch(
        qs, CallableChat(policy, name="policy-a"), reward, TPOConfig(width=2, depth=2), out_path=out
    )
    other = CallableChat(lambda m, **kw: policy(m, **kw).replace("draft", "other"), name="policy-b")
    with pytest.raises(
        SettingsMismatch,
        match=r"backend.cache_identity: 'policy-a' -> 'policy-b'.*config.depth: 2 -> 1",
    ):
        tpo_batch(qs, other, reward, TPOConfig(width=3, depth=1), out_path=out)
    second = tpo_batch(qs, other, reward, TPOConfig(width=3, depth=1), out_path=out, keep_both=True)
    assert all(r.best_response.startswith("other") for r in second)
    assert all(r.best_response.startswith("draft") for r in first)
    again = tpo_batch(
        qs,
        CallableChat(policy, name="policy-a"),
        reward,
        TPOConfig(width=2, depth=2),
        out_path=out,
        keep_both=True,
    )
    assert [r.best_response for r in again] == [r.best_response for r in first]
