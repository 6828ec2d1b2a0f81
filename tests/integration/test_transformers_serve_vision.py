"""icml25.dps against a real third-party vision server (issue 48): ``transformers serve`` on a tiny
random-init LLaVA (a CLIP vision tower and a Llama text model), built offline from config classes
and served from a temporary folder. It answers OpenAI chat requests whose user content holds
``image_url`` parts with base64 ``data:`` URLs, any number per request; the pixels reach the model
(on a short prompt, other pixels give other answers; on DPS's long prompts its 4 image tokens are
drowned out and the replies no longer tell images apart). The text is noise; what is checked is what must hold whatever the text: how many images
each request carries and in which encoding, that the server accepts them, the request counts of
``icml25 dps run`` reruns (the server's access log), and the failures ``respond_batch`` returns.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from icml25.llm import OpenAIChat
from icml25.llm.base import BaseChat

pytestmark = pytest.mark.integration

QUESTION = "what is in the picture"
BROKEN_URL = "data:image/png;base64,AAAAAAAA"  # not an image: the server answers 400


class Recorder(BaseChat):
    """Forwards every request to ``inner`` and keeps a copy of the messages it sent; with
    ``break_on``, a request whose text holds that word has its image URLs replaced by one the
    server cannot decode (an HTTP 400 for that query only)."""

    def __init__(self, inner: OpenAIChat, break_on: str | None = None) -> None:
        self.inner, self.name, self.concurrency = inner, inner.name, inner.concurrency
        self.break_on, self.sent = break_on, []

    def _complete(self, messages, params):
        messages = copy.deepcopy(list(messages))
        if self.break_on and self.break_on in json.dumps(_texts(messages)):
            for part in _image_parts(messages):
                part["image_url"]["url"] = BROKEN_URL
        self.sent.append(messages)
        return self.inner.complete(messages, **params.as_dict())


def _image_parts(messages) -> list[dict]:
    return [
        p
        for m in messages
        if isinstance(m["content"], list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]


def _texts(messages) -> list[str]:
    out = []
    for m in messages:
        parts = m["content"] if isinstance(m["content"], list) else [{"text": m["content"]}]
        out += [p["text"] for p in parts if "text" in p]
    return out


def _urls(messages) -> list[str]:
    return [p["image_url"]["url"] for p in _image_parts(messages)]


def _image(seed: int, size: tuple[int, int] = (40, 48)) -> np.ndarray:
    return (np.random.default_rng(seed).random((*size, 3)) * 255).astype(np.uint8)


def _chat(srv) -> OpenAIChat:
    return OpenAIChat(srv.url, srv.model, api_key="x", max_retries=0)


def _status_count(srv, status: int) -> int:
    text = srv.stdout_path.read_text(encoding="utf-8", errors="replace")
    return text.count(f'"POST /v1/chat/completions HTTP/1.1" {status}')


def test_the_server_sees_the_pixels(vision_server):
    srv = vision_server
    chat = _chat(srv)
    from icml25.dps.images import image_part

    def ask(img):
        msgs = [{"role": "user", "content": [{"type": "text", "text": QUESTION}, image_part(img)]}]
        return chat.chat(msgs, temperature=0, max_tokens=6)[0]

    before = srv.chat_requests()
    answers = [ask(_image(s)) for s in range(3)]
    assert srv.chat_requests() - before == 3
    assert ask(_image(0)) == answers[0]  # greedy: the same pixels, the same answer
    assert len(set(answers)) > 1  # other pixels, other answers: the image reaches the model


@pytest.mark.parametrize("image_once", [False, True])
def test_dps_images_per_request(vision_server, image_once):
    from icml25.dps import DPSDefense, DPSResult

    srv = vision_server
    rec = Recorder(_chat(srv))
    dps = DPSDefense(rec, max_tokens=6, image_once=image_once)
    before = srv.chat_requests()
    result = dps.respond(_image(1), QUESTION)
    assert isinstance(result, DPSResult) and isinstance(result.final, str)
    # every lvlm call is one request, and the server answered each with 200
    assert result.n_calls["lvlm"] == len(rec.sent) == srv.chat_requests() - before == 5
    counts = [len(_image_parts(m)) for m in rec.sent]
    if image_once:
        assert max(counts) == 1 and min(counts) == 1  # each conversation's image, once
    else:
        # the weak agent's describe turn and the strong agent's final turn attach it again
        assert counts == [1, 1, 2, 1, 2]
        assert max(counts) == 2
    # the final turn (the last request) sees the whole image the first request sent
    first_url = _urls(rec.sent[0])[0]
    assert _urls(rec.sent[-1])[0] == first_url
    if not image_once:
        assert _urls(rec.sent[-1]) == [first_url, first_url]


def test_dps_jpeg_crops_are_sent_and_accepted(vision_server):
    from icml25.dps import DPSDefense

    srv = vision_server
    rec = Recorder(_chat(srv))
    dps = DPSDefense(rec, max_tokens=6, crop_format="jpeg")
    before, before_4xx = srv.chat_requests(), _status_count(srv, 400)
    result = dps.respond(_image(2), QUESTION)
    assert srv.chat_requests() - before == result.n_calls["lvlm"] == len(rec.sent) == 5
    assert _status_count(srv, 400) == before_4xx
    weak = [m for m in rec.sent if m[0]["content"] == dps.prompts.weak_system]
    strong = [m for m in rec.sent if m[0]["content"] == dps.prompts.strong_system]
    assert len(weak) == 2 and len(strong) == 3
    weak_urls = [u for m in weak for u in _urls(m)]
    assert weak_urls and all(u.startswith("data:image/jpeg;base64,") for u in weak_urls)
    strong_urls = [u for m in strong for u in _urls(m)]  # the whole image stays lossless PNG
    assert strong_urls and all(u.startswith("data:image/png;base64,") for u in strong_urls)


def _dps_run(srv, folder: Path, *extra: str) -> int:
    from icml25.cli import main

    return main(
        [
            "dps",
            "run",
            "--model",
            f"openai:{srv.model}",
            "--base-url",
            srv.url,
            "--api-key",
            "x",
            "--images",
            str(folder / "images"),
            "--questions",
            str(folder / "q.jsonl"),
            "--out",
            str(folder / "out.jsonl"),
            "--max-tokens",
            "6",
            "--workers",
            "2",
            "-q",
            *extra,
        ]
    )


def _rows(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "out.jsonl").read_text().splitlines() if x.strip()]


def test_dps_run_resumes_by_image_content_and_refuses_other_settings(
    vision_server, tmp_path, capsys
):
    from PIL import Image

    srv = vision_server
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(_image(10)).save(images / "a.png")
    Image.fromarray(_image(11)).save(images / "b.png")
    items = [
        ("a1", "a.png", QUESTION),
        ("a2", "a.png", "what colour is it"),
        ("b1", "b.png", QUESTION),
    ]
    (tmp_path / "q.jsonl").write_text(
        "".join(json.dumps({"id": i, "image": f, "question": q}) + "\n" for i, f, q in items)
    )
    before = srv.chat_requests()
    assert _dps_run(srv, tmp_path) == 0, capsys.readouterr()
    assert srv.chat_requests() - before == 3 * 5  # 3 items x 5 lvlm calls (the helper is rules)
    first = _rows(tmp_path)
    assert sorted(r["id"] for r in first) == ["a1", "a2", "b1"]

    before = srv.chat_requests()
    assert _dps_run(srv, tmp_path) == 0  # the same command again: all served from the file
    assert srv.chat_requests() == before
    assert _rows(tmp_path) == first

    # a.png overwritten in place with other pixels: exactly its two items are asked again, b1 not
    Image.fromarray(_image(12)).save(images / "a.png")
    before = srv.chat_requests()
    assert _dps_run(srv, tmp_path) == 0
    assert srv.chat_requests() - before == 2 * 5
    rows = _rows(tmp_path)
    assert len(rows) == 5 and rows[:3] == first  # the old rows stay; new ones are appended
    old = {r["id"]: r for r in first}
    assert sorted(r["id"] for r in rows[3:]) == ["a1", "a2"]
    for r in rows[3:]:
        assert r["content"] != old[r["id"]]["content"] and r["image"] == "a.png"
    before = srv.chat_requests()
    assert _dps_run(srv, tmp_path) == 0  # and that new answer is reused in turn
    assert srv.chat_requests() == before

    capsys.readouterr()
    for extra, field in [
        (("--crop-format", "jpeg"), "crop_format"),
        (("--max-tokens", "5"), "max_tokens"),
        (("--image-once",), "image_once"),
    ]:
        assert _dps_run(srv, tmp_path, *extra) == 2  # a later --max-tokens wins over the 6
        err = capsys.readouterr().err
        assert field in err and "--keep-both" in err, err
    assert srv.chat_requests() == before  # refused before any request
    assert len(_rows(tmp_path)) == 5

    assert _dps_run(srv, tmp_path, "--crop-format", "jpeg", "--keep-both") == 0
    assert srv.chat_requests() - before == 3 * 5  # the new setting is asked afresh, every item
    kept = _rows(tmp_path)
    assert len(kept) == 8 and kept[:5] == rows  # the first run's rows stay as they were
    assert {r["_settings"] for r in kept[5:]}.isdisjoint(r["_settings"] for r in rows)
    before = srv.chat_requests()
    assert _dps_run(srv, tmp_path, "--crop-format", "jpeg", "--keep-both") == 0
    assert srv.chat_requests() == before  # and resumes in turn


def test_respond_batch_returns_an_unreadable_image_beside_the_results(vision_server, tmp_path):
    from icml25.dps import DPSDefense, DPSResult

    srv = vision_server
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"this is not a PNG")
    items = [(_image(20), QUESTION), (broken, QUESTION), (_image(21), QUESTION)]
    dps = DPSDefense(_chat(srv), max_tokens=6)
    before = srv.chat_requests()
    out = dps.respond_batch(items, workers=2, errors="return")
    assert srv.chat_requests() - before == 2 * 5  # the unreadable image never reached the server
    assert isinstance(out[0], DPSResult) and isinstance(out[2], DPSResult)
    assert isinstance(out[1], (OSError, ValueError)) and "broken.png" in str(out[1])
    # each kept result is its own query's: its weak agent saw that query's centre crop (the
    # replies cannot tell: on DPS's long prompts this tiny model's text ignores the 4 image tokens)
    alone = dps.respond(items[2][0], QUESTION)
    assert np.array_equal(np.asarray(out[2].crops[0]), np.asarray(alone.crops[0]))
    assert not np.array_equal(np.asarray(out[0].crops[0]), np.asarray(alone.crops[0]))


def test_respond_batch_returns_an_http_error_beside_the_results(vision_server):
    from icml25.dps import BackendError, DPSDefense, DPSResult

    srv = vision_server
    rec = Recorder(_chat(srv), break_on="BROKEN")
    items = [(_image(30), QUESTION), (_image(31), f"{QUESTION} BROKEN"), (_image(32), QUESTION)]
    dps = DPSDefense(rec, max_tokens=6)
    before, before_400 = srv.chat_requests(), _status_count(srv, 400)
    out = dps.respond_batch(items, workers=1, errors="return")
    assert _status_count(srv, 400) - before_400 == 1  # the server refused that image
    assert srv.chat_requests() - before == 2 * 5
    assert isinstance(out[0], DPSResult) and isinstance(out[2], DPSResult)
    assert isinstance(out[1], BackendError) and "400" in str(out[1])
    assert out[1].trace and out[1].trace[-1]["template"] == "question"

    # errors="raise": the failure is raised; what finished before it is kept on the exception
    before = srv.chat_requests()
    with pytest.raises(BackendError) as info:
        dps.respond_batch(items, workers=1, errors="raise")
    assert srv.chat_requests() - before == 5  # query 2 never started
    results = info.value.results
    assert isinstance(results[0], DPSResult) and results[2] is None
    assert sorted(info.value.failures) == [1]
