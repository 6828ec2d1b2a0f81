"""``icml25 tpo``'s exit codes (review of issue 48): a store made with other settings is refused
with exit 2 and a one-line message (``--keep-both`` keeps both runs), a dead server ends with exit
1 and a message saying the rows done are kept, never a traceback."""

from __future__ import annotations

import functools
import json
import socket

import pytest

import icml25.llm
from icml25.llm import CallableChat, CallableReward
from icml25.llm.openai_http import OpenAIChat
from icml25.tpo import PromptSet

pytest.importorskip("httpx")
P = PromptSet.default()


def policy(messages, *, n=1, sample_index=0, **kw):
    role = P.detect_role(list(messages))
    if role == "generate":
        return f"first answer {sample_index}"
    if role in ("loss", "gradient"):
        return "be clearer"
    return f"{P.start_tag}a clearer answer {sample_index}{P.end_tag}"


def refused_url() -> str:
    """A local URL nothing listens on: every connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def fast_cli(monkeypatch):
    """The CLI with a reward function instead of a checkpoint and a client that gives up fast."""
    monkeypatch.setattr(
        icml25.llm,
        "HFRewardModel",
        lambda path, device=None, batch_size=8: CallableReward(lambda q, r: float(len(r))),
    )
    monkeypatch.setattr(
        icml25.llm,
        "OpenAIChat",
        functools.partial(OpenAIChat, backoff=0.01, max_backoff=0.02),
    )


def argv(url, data, out, *extra):
    return [
        "tpo",
        "--base-url",
        url,
        "--model",
        "policy",
        "--reward-model",
        "rm",
        "--data",
        str(data),
        "--out",
        str(out),
        "--depth",
        "1",
        "-q",
        *extra,
    ]


def test_other_settings_exit_2_with_one_line_and_keep_both_keeps_both(tmp_path, fast_cli, capsys):
    from icml25.cli import main
    from icml25.llm import ChatServer

    data = tmp_path / "q.json"
    data.write_text(json.dumps(["question one", "question two"]))
    out = tmp_path / "out.jsonl"
    with ChatServer(CallableChat(policy)) as server:
        assert main(argv(server.url, data, out, "--width", "2")) == 0
        capsys.readouterr()
        n = len(server.requests)
        assert main(argv(server.url, data, out, "--width", "3")) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.count("\n") == 1
        assert "width" in err and "--keep-both" in err
        assert len(server.requests) == n  # refused before any call
        assert main(argv(server.url, data, out, "--width", "3", "--keep-both")) == 0
        assert "2 queries: 2 done, 0 failed" in capsys.readouterr().err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    widths = sorted(len(r["result"]["cache"]) for r in rows)
    assert len(rows) == 4 and widths[0] < widths[-1]  # both runs' rows are in the file


def test_dead_server_exit_1_without_traceback_and_rerun_resumes(tmp_path, fast_cli, capsys):
    from icml25.cli import main
    from icml25.llm import ChatServer

    data = tmp_path / "q.json"
    data.write_text(json.dumps([f"question {i}" for i in range(12)]))
    out = tmp_path / "out.jsonl"
    url = refused_url()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    assert main(argv(url, data, out, "--width", "2", "--threads", "2")) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "unavailable" in err and "rerun" in err and str(out) in err
    # nothing was recorded as this query's fault: a rerun against a live server does them all
    with ChatServer(CallableChat(policy), port=port) as server:
        assert server.url == url
        assert main(argv(url, data, out, "--width", "2")) == 0
        assert "12 queries: 12 done, 0 failed" in capsys.readouterr().err
