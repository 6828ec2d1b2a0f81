"""``icml25 safety_reasoning synthesize``'s exit codes (review of issue 48): a run whose requests
failed (HTTP 400/401 for every query, one query, or a dead server) exits 1, never 2, which stays
for bad arguments and a records file made with other settings."""

from __future__ import annotations

import functools
import json
import socket

import pytest

pytest.importorskip("httpx")

import icml25.llm  # noqa: E402
from icml25.cli import main  # noqa: E402
from icml25.llm import CallableChat, ChatServer  # noqa: E402
from icml25.llm.openai_http import OpenAIChat  # noqa: E402

GOOD = "<think>intent: benign. helpfulness: answer.</think>Sure, here is how."


@pytest.fixture(autouse=True)
def fast_client(monkeypatch):
    monkeypatch.setattr(
        icml25.llm, "OpenAIChat", functools.partial(OpenAIChat, backoff=0.01, max_backoff=0.02)
    )


@pytest.fixture
def queries(tmp_path):
    path = tmp_path / "q.jsonl"
    rows = [{"query": f"how do I bake bread, take {i}", "kind": "helpful"} for i in range(8)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def argv(url, queries, out, *extra):
    return [
        "safety-reasoning",
        "synthesize",
        "--teacher",
        "openai:m",
        "--base-url",
        url,
        "--queries",
        str(queries),
        "--out",
        str(out),
        "--k",
        "1",
        "--guideline-judge",
        "none",
        *extra,
    ]


@pytest.mark.parametrize("fault", ["400", "401"])
def test_every_query_failing_exits_1(tmp_path, queries, capsys, fault):
    with ChatServer(CallableChat(lambda m, **k: GOOD), faults=lambda i, b: fault) as server:
        rc = main(argv(server.url, queries, tmp_path / "syn.jsonl"))
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "every query failed" in err and fault in err


def test_one_query_failing_exits_1_and_a_rerun_asks_it_again(tmp_path, queries, capsys):
    state = {"fail": True}

    def faults(i, body):
        return "400" if state["fail"] and "take 3" in body["messages"][-1]["content"] else None

    out = tmp_path / "syn.jsonl"
    with ChatServer(CallableChat(lambda m, **k: GOOD), faults=faults) as server:
        assert main(argv(server.url, queries, out)) == 1
        assert "1 of 8 queries failed" in capsys.readouterr().err
        state["fail"] = False
        assert main(argv(server.url, queries, out)) == 0
    assert len(out.read_text().splitlines()) == 8


def test_dead_server_exits_1_without_traceback(tmp_path, queries, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    rc = main(argv(url, queries, tmp_path / "syn.jsonl", "--concurrency", "2"))
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "Traceback" not in err and "unavailable" in err and "rerun" in err


def test_bad_arguments_and_other_settings_still_exit_2(tmp_path, queries, capsys):
    out = tmp_path / "syn.jsonl"
    with ChatServer(CallableChat(lambda m, **k: GOOD)) as server:
        assert main(argv(server.url, queries, out, "--k", "0")) == 2
        assert main(argv(server.url, queries, out)) == 0
        capsys.readouterr()
        assert main(argv(server.url, queries, out, "--temperature", "0.3")) == 2
        assert "temperature" in capsys.readouterr().err
