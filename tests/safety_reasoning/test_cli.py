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
    rc = main(["safety-reasoning", "eval", "--model", str(model_dir), "--queries", str(q), "--attacks", "plain,cipher",
               "--judge", "keyword", "--max-tokens", "4", "--out", str(out)])  # fmt: skip
    assert rc == 0
    res = json.loads(out.read_text())
    assert set(res) == {"plain", "cipher"} and res["cipher"]["n"] == 2
    assert res["cipher"]["records"][0]["prompt"].endswith("ky1 gw2 i3")  # Caesar, shift 3
    rc = main(["safety_reasoning", "bon", "--model", f"hf:{model_dir}", "--queries", str(q), "--n", "1,2",
               "--max-tokens", "4", "--out", str(tmp_path / "b.json")])  # fmt: skip
    assert rc == 0
    b = json.loads((tmp_path / "b.json").read_text())
    assert set(b["asr"]) == {"1", "2"} and len(b["matrix"]) == 2 and len(b["matrix"][0]) == 2


def test_synthesize_then_train(model_dir, tmp_path, capsys):
    q = _jsonl(
        tmp_path / "q.jsonl",
        [{"query": "hv1 dt2 f3", "kind": "harmful"}, {"query": "bv1 nt2 f3", "kind": "helpful"}],
    )
    out = tmp_path / "syn.jsonl"
    rc = main(["safety-reasoning", "synthesize", "--teacher", str(model_dir), "--queries", str(q), "--out", str(out),
               "--k", "2", "--max-tokens", "4", "--guideline-judge", "none"])  # fmt: skip
    assert rc == 0 and out.exists()
    assert (tmp_path / "syn.jsonl.records.jsonl").exists()
    assert "acceptance" in capsys.readouterr().out
    rows = _jsonl(tmp_path / "rt.jsonl", [{"query": "hv1 dt2 f3", "target": "sorry cannot"}])
    rc = main(["safety-reasoning", "train", "--model", str(model_dir), "--data", str(rows), "--out", str(tmp_path / "m"),
               "--epochs", "1", "--batch-size", "1", "--max-length", "32"])  # fmt: skip
    assert rc == 0 and (tmp_path / "m" / "config.json").exists()


def test_clear_errors(model_dir, tmp_path, capsys):
    q = _jsonl(tmp_path / "harm.jsonl", [{"prompt": "hv1 dt2 f3"}])
    assert (
        main(
            [
                "safety-reasoning",
                "eval",
                "--model",
                str(model_dir),
                "--queries",
                str(q),
                "--attacks",
                "rot13",
            ]
        )
        == 2
    )
    assert "unknown attack 'rot13'" in capsys.readouterr().err
    assert main(["safety-reasoning", "eval", "--model", "openai:m", "--queries", str(q)]) == 2
    assert "--base-url" in capsys.readouterr().err
    assert (
        main(
            [
                "safety-reasoning",
                "eval",
                "--model",
                str(model_dir),
                "--queries",
                str(q),
                "--attacks",
                "template",
            ]
        )
        == 2
    )
    assert "--templates" in capsys.readouterr().err
    assert main(["safety-reasoning", "bon", "--model", "/no/such/model", "--queries", str(q)]) == 2
    assert "existing local path" in capsys.readouterr().err
    assert (
        main(
            [
                "safety-reasoning",
                "train",
                "--model",
                str(model_dir),
                "--data",
                str(q),
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "query + target" in capsys.readouterr().err
