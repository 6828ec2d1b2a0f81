"""A SIGKILLed `icml25 orbench eval` loses at most the requests in flight: a rerun finishes the
rest without repeating a finished request, and the store holds one row per prompt."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from icml25.llm import CallableChat, ChatServer


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkilled_eval_resumes_without_repeating_requests(tmp_path):
    n = 60
    seen: list[str] = []
    lock = threading.Lock()

    def answer(messages, **kw):
        with lock:
            seen.append(messages[-1]["content"])
        return "I'm sorry, I can't." if messages[-1]["content"].endswith("0") else "Sure."

    data = tmp_path / "or-bench-hard-1k.csv"
    with open(data, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["prompt", "category"])
        w.writerows((f"question number {i}", "privacy") for i in range(n))
    out = tmp_path / "results"
    env = {**os.environ, "ICML25_QUIET": "1", "OMP_NUM_THREADS": "1"}
    with ChatServer(CallableChat(answer), latency=0.05, serialize=False) as server:
        cmd = [
            sys.executable,
            "-m",
            "icml25",
            "orbench",
            "eval",
            "--model",
            f"m@{server.url}",
            "--data",
            str(data),
            "--subset",
            "hard-1k",
            "--out",
            str(out),
            "--concurrency",
            "2",
            "-q",
        ]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        store = out / "m_http_127.0.0.1_{}_v1__hard-1k.jsonl"
        deadline = time.time() + 120
        while time.time() < deadline:
            files = list(out.glob("*.jsonl")) if out.exists() else []
            if files and len(files[0].read_text(encoding="utf-8").splitlines()) >= 15:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        (store,) = list(out.glob("*.jsonl"))
        done_before = len([x for x in store.read_text(encoding="utf-8").splitlines() if x.strip()])
        assert 15 <= done_before < n
        first = len(seen)
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["n"] == n and summary["n_failed"] == 0 and summary["rate"] == pytest.approx(10.0)
    rows = [json.loads(x) for x in store.read_text(encoding="utf-8").splitlines() if x.strip()]
    assert len({r["id"] for r in rows if "error" not in r}) == n
    # at most the two requests in flight at the kill were asked twice
    assert len(seen) - n <= 2 and len(seen) >= n and first - done_before <= 2
