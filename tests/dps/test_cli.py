"""`icml25 dps run` against a local OpenAI-compatible server: results, resumption, errors."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from icml25.cli import main
from icml25.llm import CallableChat, ChatServer


def test_run_resumes_and_records_failures(tmp_path, capsys):
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for k in range(3):
        Image.fromarray(np.full((16, 16), 40 * k, dtype=np.uint8)).save(imgs / f"{k}.png")
    q = tmp_path / "q.jsonl"
    q.write_text(
        "\n".join(
            json.dumps({"id": f"q{k}", "image": f"{k}.png", "question": f"What is {k}?"})
            for k in range(3)
        )
        + "\n"
    )
    calls = []

    def model(messages, **kw):
        calls.append(1)
        if "What is 2?" in json.dumps(messages) and len(calls) < 100:
            raise RuntimeError("server error")
        return "A grey square."

    out = tmp_path / "dps.jsonl"
    args = [
        "dps",
        "run",
        "--images",
        str(imgs),
        "--questions",
        str(q),
        "--out",
        str(out),
        "-q",
        "--workers",
        "2",
    ]
    with ChatServer(CallableChat(model)) as server:
        rc = main(["dps", "run", "--model", "openai:m", "--base-url", server.url, *args[2:]])
        assert rc == 1  # one item failed, the others are kept
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert sorted(r["id"] for r in rows if "error" not in r) == ["q0", "q1"]
        assert any("error" in r and r["id"] == "q2" for r in rows)
        n_before = len(calls)
        calls.extend([1] * 100)  # the server recovers
        rc = main(["dps", "run", "--model", "openai:m", "--base-url", server.url, *args[2:]])
    assert rc == 0 and "2 done before" in capsys.readouterr().out
    assert len(calls) - n_before - 100 < 10  # only the failed item was asked again
    final = {json.loads(x)["id"]: json.loads(x) for x in out.read_text().splitlines()}
    assert final["q2"]["final"] == "A grey square." and final["q0"]["n_calls"] == {
        "lvlm": 5,
        "helper": 2,
    }


def test_clear_errors(tmp_path, capsys):
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"image": "missing.png", "question": "x"}) + "\n")
    assert (
        main(
            [
                "dps",
                "run",
                "--model",
                "openai:m",
                "--base-url",
                "http://127.0.0.1:9",
                "--images",
                str(tmp_path),
                "--questions",
                str(q),
                "--out",
                str(tmp_path / "o.jsonl"),
            ]
        )
        == 2
    )
    assert "no image" in capsys.readouterr().err
    assert (
        main(
            [
                "dps",
                "run",
                "--model",
                "gpt",
                "--images",
                str(tmp_path),
                "--questions",
                str(q),
                "--out",
                str(tmp_path / "o.jsonl"),
            ]
        )
        == 2
    )
    assert "openai:NAME" in capsys.readouterr().err


def test_other_settings_do_not_reuse_answers(tmp_path, capsys):
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    Image.fromarray(np.zeros((16, 16), dtype=np.uint8)).save(imgs / "a.png")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "x", "image": "a.png", "question": "What?"}) + "\n")
    out = tmp_path / "o.jsonl"
    with ChatServer(CallableChat(lambda m, **kw: "ok")) as server:
        base = [
            "dps",
            "run",
            "--model",
            "openai:m",
            "--base-url",
            server.url,
            "--images",
            str(imgs),
            "--questions",
            str(q),
            "--out",
            str(out),
            "-q",
        ]
        assert main(base) == 0 and main(base) == 0
        assert "1 done before" in capsys.readouterr().out
        assert main([*base, "--crop", "random"]) == 2  # refused, naming what differs
        assert "crop: 'center' -> 'random'" in capsys.readouterr().err
        assert main([*base, "--crop", "random", "--keep-both"]) == 0
        assert "1 done now" in capsys.readouterr().out
        # an image overwritten in place (same name, same id) is answered afresh
        Image.fromarray(np.full((16, 16), 255, dtype=np.uint8)).save(imgs / "a.png")
        assert main(base) == 0
        assert "1 done now" in capsys.readouterr().out
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len({r["_settings"] for r in rows}) == 2 and len({r["content"] for r in rows}) == 2
    assert all(r["question"] == "What?" for r in rows)


def test_resume_ignores_the_url_but_not_an_edited_question(tmp_path, capsys):
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    Image.fromarray(np.zeros((16, 16), dtype=np.uint8)).save(imgs / "a.png")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": 7, "image": "a.png", "question": "What?"}) + "\n")
    out = tmp_path / "o.jsonl"
    base = ["--images", str(imgs), "--questions", str(q), "--out", str(out), "-q"]
    with ChatServer(CallableChat(lambda m, **kw: "ok")) as s1:
        assert main(["dps", "run", "--model", "openai:m", "--base-url", s1.url, *base]) == 0
    capsys.readouterr()
    with ChatServer(CallableChat(lambda m, **kw: "ok")) as s2:  # the server restarted elsewhere
        assert main(["dps", "run", "--model", "openai:m", "--base-url", s2.url + "/", *base]) == 0
        assert "0 done now, 1 done before" in capsys.readouterr().out
        q.write_text(json.dumps({"id": 7, "image": "a.png", "question": "What colour?"}) + "\n")
        assert main(["dps", "run", "--model", "openai:m", "--base-url", s2.url, *base]) == 0
        assert "1 done now" in capsys.readouterr().out  # the edited question is answered afresh
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["question"] for r in rows] == ["What?", "What colour?"] and {
        r["id"] for r in rows
    } == {"7"}


def test_empty_final_answers_bad_ids_and_folders_are_clear(tmp_path, capsys):
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    Image.fromarray(np.zeros((16, 16), dtype=np.uint8)).save(imgs / "a.png")
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "x", "image": "a.png", "question": "What?"}) + "\n")
    out = tmp_path / "o.jsonl"
    base = ["--images", str(imgs), "--questions", str(q), "-q"]
    with ChatServer(CallableChat(lambda m, **kw: "")) as server:

        def run(out_path):
            cmd = [
                "dps",
                "run",
                "--model",
                "openai:m",
                "--base-url",
                server.url,
                "--out",
                str(out_path),
            ]
            return main(cmd + base)

        assert run(out) == 1
        (row,) = [json.loads(x) for x in out.read_text().splitlines()]
        assert "final answer is empty" in row["error"]["message"]
        assert run(imgs) == 2
        assert "is a folder" in capsys.readouterr().err
        q.write_text(json.dumps({"id": None, "image": "a.png", "question": "What?"}) + "\n")
        assert run(out) == 2
        assert "'id' must be" in capsys.readouterr().err
