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
