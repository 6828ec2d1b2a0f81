"""`icml25 safety_reasoning ...` on a local (tiny) Hugging Face model folder."""

from __future__ import annotations

import json

import pytest

from icml25.cli import main


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from icml25.toy.jailbreak_lang import JailbreakWorld

    w = JailbreakWorld(0, "V2")
    tok = w.build_tokenizer()
    model = w.build_model(tok, seed=0, d_model=32, n_layers=2)
    path = tmp_path_factory.mktemp("model")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_eval_and_bon(model_dir, tmp_path, capsys):
    q = _jsonl(tmp_path / "harm.jsonl", [{"prompt": "hv1 dt2 f3"}, {"prompt": "hv2 dt3 f4"}])
    out = tmp_path / "r.json"
    rc = main(
        [
            "safety-reasoning",
            "eval",
            "--model",
            str(model_dir),
            "--queries",
            str(q),
            "--attacks",
            "plain,cipher",
            "--judge",
            "keyword",
            "--max-tokens",
            "4",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    res = json.loads(out.read_text())
    assert set(res) == {"plain", "cipher"} and res["cipher"]["n"] == 2
    assert res["cipher"]["records"][0]["prompt"].endswith("ky1 gw2 i3")  # Caesar, shift 3
    rc = main(
        [
            "safety_reasoning",
            "bon",
            "--model",
            f"hf:{model_dir}",
            "--queries",
            str(q),
            "--n",
            "1,2",
            "--max-tokens",
            "4",
            "--out",
            str(tmp_path / "b.json"),
        ]
    )
    assert rc == 0
    b = json.loads((tmp_path / "b.json").read_text())
    assert set(b["asr"]) == {"1", "2"} and len(b["matrix"]) == 2 and len(b["matrix"][0]) == 2


def test_synthesize_then_train(model_dir, tmp_path, capsys):
    q = _jsonl(
        tmp_path / "q.jsonl",
        [{"query": "hv1 dt2 f3", "kind": "harmful"}, {"query": "bv1 nt2 f3", "kind": "helpful"}],
    )
    out = tmp_path / "syn.jsonl"
    # a local model whose 48 positions cannot hold the teacher's prompt: every query's request
    # fails, a clear error naming the cause (exit 1: the run failed, the arguments were fine)
    rc = main(
        [
            "safety-reasoning",
            "synthesize",
            "--teacher",
            str(model_dir),
            "--queries",
            str(q),
            "--out",
            str(out),
            "--k",
            "2",
            "--max-tokens",
            "4",
            "--guideline-judge",
            "none",
        ]
    )
    assert rc == 1 and "more than the model's context of 48" in capsys.readouterr().err
    from icml25.llm import CallableChat, ChatServer

    # a teacher whose replies never follow the format: nothing passes the filters (exit 1). The
    # records file holds the first teacher's error rows: another teacher is refused, naming it,
    # unless --keep-both keeps the two runs apart
    with ChatServer(CallableChat(lambda messages, **kw: "no reasoning block")) as server:
        args = [
            "safety-reasoning",
            "synthesize",
            "--teacher",
            "openai:m",
            "--base-url",
            server.url,
            "--queries",
            str(q),
            "--out",
            str(out),
            "--k",
            "2",
            "--guideline-judge",
            "none",
        ]
        assert main(args) == 2
        assert "teacher.class: 'HFChat' -> 'OpenAIChat'" in capsys.readouterr().err
        rc = main([*args, "--keep-both"])
    assert rc == 1 and out.exists() and (tmp_path / "syn.jsonl.records.jsonl").exists()
    assert "no candidate was accepted" in capsys.readouterr().err
    out.unlink()
    (tmp_path / "syn.jsonl.records.jsonl").unlink()
    # a served teacher (OpenAI-compatible) that follows the format, judged by itself

    def teacher(messages, **kw):
        content = messages[-1]["content"]
        if content.startswith("Guideline:"):  # the guideline judge's question
            return "yes"
        if "hv1" in content:
            return "<think>intent: harmful. harm: refuse.</think>I'm sorry, I can't help with that."
        return "<think>intent: benign. helpfulness: answer.</think>Sure, here is how."

    with ChatServer(CallableChat(teacher)) as server:
        rc = main(
            [
                "safety-reasoning",
                "synthesize",
                "--teacher",
                "openai:m",
                "--base-url",
                server.url,
                "--queries",
                str(q),
                "--out",
                str(out),
                "--k",
                "2",
            ]
        )
    assert rc == 0, capsys.readouterr().err
    rows_out = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["kind"] for r in rows_out] == ["harmful", "helpful"]
    assert "acceptance 100.0%" in capsys.readouterr().out
    rows = _jsonl(tmp_path / "rt.jsonl", [{"query": "hv1 dt2 f3", "target": "sorry cannot"}])
    rc = main(
        [
            "safety-reasoning",
            "train",
            "--model",
            str(model_dir),
            "--data",
            str(rows),
            "--out",
            str(tmp_path / "m"),
            "--epochs",
            "1",
            "--batch-size",
            "1",
            "--max-length",
            "32",
        ]
    )
    assert rc == 0 and (tmp_path / "m" / "config.json").exists()


def test_clear_errors(model_dir, tmp_path, capsys):
    q = _jsonl(tmp_path / "harm.jsonl", [{"prompt": "hv1 dt2 f3"}])
    cases = [
        (
            ["eval", "--model", str(model_dir), "--queries", str(q), "--attacks", "rot13"],
            "unknown attack 'rot13'",
        ),
        (["eval", "--model", "openai:m", "--queries", str(q)], "--base-url"),
        (
            ["eval", "--model", str(model_dir), "--queries", str(q), "--attacks", "template"],
            "--templates",
        ),
        (["bon", "--model", "/no/such/model", "--queries", str(q)], "existing local path"),
        (
            ["train", "--model", str(model_dir), "--data", str(q), "--out", str(tmp_path / "x")],
            "query + target",
        ),
    ]
    for args, message in cases:
        assert main(["safety-reasoning", *args]) == 2, args
        assert message in capsys.readouterr().err


def test_bon_reads_a_jailbreakbench_artifact_and_eval_skips_helpful_rows(
    model_dir, tmp_path, capsys
):
    art = tmp_path / "PAIR.json"
    art.write_text(
        json.dumps(
            {
                "parameters": {},
                "jailbreaks": [
                    {"goal": "g1", "prompt": "hv1 dt2 f3"},
                    {"goal": "g2", "prompt": None},
                ],
            }
        )
    )
    out = tmp_path / "b.json"
    assert (
        main(
            [
                "safety-reasoning",
                "bon",
                "--model",
                str(model_dir),
                "--queries",
                str(art),
                "--n",
                "1,2",
                "--max-tokens",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert len(json.loads(out.read_text())["matrix"]) == 1  # the None prompt is skipped
    mixed = _jsonl(
        tmp_path / "mixed.jsonl",
        [{"query": "hv1 dt2 f3", "kind": "harmful"}, {"query": "bv1 nt2 f3", "kind": "helpful"}],
    )
    assert (
        main(
            [
                "safety-reasoning",
                "eval",
                "--model",
                str(model_dir),
                "--queries",
                str(mixed),
                "--attacks",
                "plain",
                "--max-tokens",
                "4",
                "--out",
                str(tmp_path / "e.json"),
            ]
        )
        == 0
    )
    assert "1 helpful rows" in capsys.readouterr().err
    assert json.loads((tmp_path / "e.json").read_text())["plain"]["n"] == 1
    assert (
        main(
            [
                "safety-reasoning",
                "bon",
                "--model",
                str(model_dir),
                "--queries",
                str(art),
                "--n",
                "1,a",
            ]
        )
        == 2
    )
    assert "--n must be a comma list" in capsys.readouterr().err
