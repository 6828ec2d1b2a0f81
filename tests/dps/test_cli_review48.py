"""``icml25 dps run`` (review of issue 48): the first failure's cause in full, ``--jpeg-quality``
without ``--crop-format jpeg`` refused, a renamed image reusing its row."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from icml25.cli import main
from icml25.llm import CallableChat, ChatServer


def setup(tmp_path, n=2):
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for k in range(n):
        Image.fromarray(np.full((16, 16), 40 * k, dtype=np.uint8)).save(imgs / f"{k}.png")
    q = tmp_path / "q.jsonl"
    q.write_text(
        "\n".join(
            json.dumps({"id": f"q{k}", "image": f"{k}.png", "question": f"What is {k}?"})
            for k in range(n)
        )
        + "\n"
    )
    return imgs, q


def test_the_first_failure_is_shown_with_its_cause_in_full(tmp_path, capsys):
    imgs, q = setup(tmp_path)
    with ChatServer(CallableChat(lambda m, **k: "ok"), faults=lambda i, b: "400") as server:
        rc = main(
            [
                "dps",
                "run",
                "--model",
                "openai:http400",
                "--base-url",
                server.url,
                "--images",
                str(imgs),
                "--questions",
                str(q),
                "--out",
                str(tmp_path / "o.jsonl"),
                "-q",
            ]
        )
    out, err = capsys.readouterr()
    assert rc == 1
    assert "2 items: 0 done now, 0 done before, 2 failed" in out
    text = out + err
    # the message names the status and the server's own words, not cut after "HTTP "
    assert "refused the request for model 'http400': HTTP 400: injected 400" in text
    assert "first failure: id 'q" in text


def test_jpeg_quality_without_jpeg_crops_is_an_argument_error(tmp_path, capsys):
    imgs, q = setup(tmp_path, n=1)
    base = [
        "dps",
        "run",
        "--model",
        "openai:m",
        "--base-url",
        "http://127.0.0.1:9",
        "--images",
        str(imgs),
        "--questions",
        str(q),
        "--out",
        str(tmp_path / "o.jsonl"),
        "-q",
    ]
    assert main([*base, "--jpeg-quality", "50"]) == 2
    err = capsys.readouterr().err
    assert "--jpeg-quality 50" in err and "--crop-format" in err
    assert main([*base, "--jpeg-quality", "50", "--crop-format", "png"]) == 2


def test_jpeg_quality_with_jpeg_crops_keys_the_rows(tmp_path, capsys):
    imgs, q = setup(tmp_path, n=1)
    out = tmp_path / "o.jsonl"
    with ChatServer(CallableChat(lambda m, **k: "ok")) as server:
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
            "--crop-format",
            "jpeg",
        ]
        assert main(base) == 0 and main([*base, "--jpeg-quality", "75"]) == 0  # 75: the default
        assert "1 done before" in capsys.readouterr().out
        assert main([*base, "--jpeg-quality", "50"]) == 2
        assert "jpeg_quality: 75 -> 50" in capsys.readouterr().err


def test_a_renamed_image_with_the_same_bytes_reuses_its_row(tmp_path, capsys):
    imgs, q = setup(tmp_path, n=1)
    out = tmp_path / "o.jsonl"
    with ChatServer(CallableChat(lambda m, **k: "ok")) as server:
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
        assert main(base) == 0
        (imgs / "0.png").rename(imgs / "renamed.png")
        q.write_text(json.dumps({"id": "q0", "image": "renamed.png", "question": "What is 0?"}))
        n = len(server.requests)
        assert main(base) == 0 and len(server.requests) == n
    assert "0 done now, 1 done before" in capsys.readouterr().out
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["image"] == "0.png"  # the name it was first answered under
    assert {"id", "content", "_settings", "image", "question", "final"} <= set(rows[0])
