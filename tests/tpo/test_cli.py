"""``icml25 tpo`` end to end: a local OpenAI-compatible server as the policy, a tiny random reward
model saved to disk, JSONL output, and a rerun that skips finished queries."""

from __future__ import annotations

import json

import pytest

from icml25.llm import CallableChat
from icml25.tpo import PromptSet

P = PromptSet.default()


def policy(messages, *, n=1, sample_index=0, **kw):
    role = P.detect_role(list(messages))
    if role == "generate":
        return f"first answer {sample_index}"
    if role in ("loss", "gradient"):
        return "be clearer"
    return f"{P.start_tag}a clearer answer {sample_index}{P.end_tag}"


@pytest.fixture
def reward_dir(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from icml25.toy import build_tokenizer

    tok = build_tokenizer(["first answer clearer a question"], 300)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        num_labels=1,
        pad_token_id=tok.pad_token_id,
    )
    model = transformers.LlamaForSequenceClassification(cfg).eval()
    path = tmp_path / "rm"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_cli_runs_and_resumes(tmp_path, reward_dir, monkeypatch):
    pytest.importorskip("httpx")
    from icml25.cli import main
    from icml25.llm import ChatServer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "q.json"
    data.write_text(json.dumps(["question one", "question two", "question three"]))
    out = tmp_path / "out.jsonl"
    with ChatServer(CallableChat(policy)) as server:
        argv = [
            "tpo",
            "--base-url",
            server.url,
            "--model",
            "policy",
            "--reward-model",
            str(reward_dir),
            "--data",
            str(data),
            "--out",
            str(out),
            "--width",
            "2",
            "--depth",
            "1",
            "-q",
        ]
        assert main(argv) == 0
        first = len(server.requests)
        assert first == 3 * (1 + 3 * 1)  # 1 + 3D calls per query
        assert main(argv) == 0
        assert len(server.requests) == first  # everything was already done
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(x["index"] for x in lines) == [0, 1, 2]
    assert all(len(x["result"]["cache"]) == 4 for x in lines)
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    with pytest.raises(SystemExit):
        main(
            [
                "tpo",
                "--base-url",
                "http://x",
                "--model",
                "m",
                "--reward-model",
                "r",
                "--data",
                str(bad),
                "--out",
                str(out),
            ]
        )


def test_cli_sampling_flags_failures_exit_code_and_retry(tmp_path, reward_dir, monkeypatch, capsys):
    pytest.importorskip("httpx")
    from icml25.cli import main
    from icml25.llm import ChatServer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tmp_path / "q.json"
    data.write_text(json.dumps(["question one", "question too long", "question three"]))
    out = tmp_path / "out.jsonl"
    state = {"refuse": True}

    def fussy(messages, **kw):
        if state["refuse"] and "too long" in messages[-1]["content"]:
            raise ValueError("context length exceeded")  # the server answers 400
        return policy(messages, **kw)

    with ChatServer(CallableChat(fussy)) as server:
        argv = [
            "tpo",
            "--base-url",
            server.url,
            "--model",
            "policy",
            "--reward-model",
            str(reward_dir),
            "--data",
            str(data),
            "--out",
            str(out),
            "--width",
            "2",
            "--depth",
            "1",
            "--temperature",
            "0.3",
            "--seed",
            "11",
            "--max-tokens",
            "64",
            "--reward-batch-size",
            "1",
            "--threads",
            "1",
            "-q",
        ]
        assert main(argv) == 1  # one query failed: the exit code says so
        err = capsys.readouterr().err
        assert "3 queries: 2 done, 1 failed" in err and "--retry-errors" in err
        gen = [r for r in server.requests if P.detect_role(r["messages"]) == "generate"]
        assert {r["temperature"] for r in gen} == {0.3} and {r["seed"] for r in gen} == {11}
        assert {r["max_tokens"] for r in gen} == {64}
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert [r["index"] for r in rows if "error" in r] == [1]
        assert (
            "context length exceeded" in next(r for r in rows if "error" in r)["error"]["message"]
        )
        n = len(server.requests)
        assert main(argv) == 1 and len(server.requests) == n  # error rows are not retried
        state["refuse"] = False
        assert main([*argv, "--retry-errors"]) == 0
        assert "3 queries: 3 done, 0 failed" in capsys.readouterr().err
