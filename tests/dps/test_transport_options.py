"""Issue 48, DPS: one image per request (``image_once``), JPEG-encoded crops (``crop_format``), and
``respond_batch(errors="raise")`` keeping every finished result beside the failures."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from icml25.dps import BackendError, DPSDefense, DPSResult
from icml25.dps.crops import center_crop
from icml25.dps.images import decode_data_url, to_pil
from icml25.llm import CallableChat

IMG = np.linspace(0, 1, 32 * 32).reshape(32, 32)
NOISE = np.random.default_rng(0).integers(0, 256, size=(64, 48, 3), dtype=np.uint8)


def _image_urls(messages):
    return [
        part["image_url"]["url"]
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    ]


class OneImageServer:
    """A stand-in for a vLLM server started with ``--limit-mm-per-prompt image=1``: a request
    with more than one image is rejected, as vLLM rejects it (HTTP 400). Records each request."""

    def __init__(self, limit=1):
        self.limit, self.requests = limit, []
        self.backend = CallableChat(self)

    def __call__(self, messages, **kw):
        urls = _image_urls(messages)
        self.requests.append(urls)
        if len(urls) > self.limit:
            raise ValueError(f"At most {self.limit} image(s) may be provided in one request")
        # the image the model sees: the latest one in the conversation, sent now or before
        return "size {}x{}".format(*decode_data_url(urls[-1]).size) if urls else "no image"


@pytest.mark.parametrize("crop", ["center", "random", "auto"])
def test_image_once_keeps_every_request_to_one_image(crop):
    server = OneImageServer(limit=1)
    with pytest.raises(BackendError, match="At most 1 image"):  # today's default: 2 per request
        DPSDefense(server.backend, crop=crop).respond(IMG, "What is it?")
    # strong question, (auto: the text-box request), weak question, then the weak describe fails
    assert [len(r) for r in server.requests] == [1] * (3 if crop == "auto" else 2) + [2]

    server = OneImageServer(limit=1)
    res = DPSDefense(server.backend, crop=crop, image_once=True).respond(IMG, "What is it?")
    assert server.requests and max(len(r) for r in server.requests) == 1
    assert res.n_calls["lvlm"] == len(server.requests)
    by_template = {}
    for t in res.trace:
        by_template.setdefault((t["role"], t["template"]), []).append(t)
    # later turns carry text only, and the model still sees their image in the history:
    # the weak describe turn its crop, the strong final turn the whole image
    assert all(not t["has_image"] for t in by_template[("weak", "describe")])
    assert [t["reply"] for t in by_template[("weak", "describe")]] == [
        t["reply"] for t in by_template[("weak", "question")]
    ]
    (final,) = by_template[("strong", "final")]
    assert not final["has_image"] and res.final == "size 32x32" == res.initial


def test_image_once_off_sends_the_image_again_as_the_official_code():
    server = OneImageServer(limit=2)
    res = DPSDefense(server.backend).respond(IMG, "What is it?")
    assert max(len(r) for r in server.requests) == 2
    assert [t["has_image"] for t in res.trace if t["role"] != "helper"] == [
        True,  # strong question
        True,  # weak question
        True,  # weak describe: the crop again
        False,  # strong supervision (text only in both settings)
        True,  # strong final: the image again
    ]
    with pytest.raises(TypeError, match="image_once"):
        DPSDefense(server.backend, image_once="yes")


def test_image_once_over_http_never_sends_two_images():
    from icml25.llm import ChatServer, OpenAIChat

    with ChatServer(CallableChat(lambda m, **kw: "It is a cat.")) as server:
        DPSDefense(OpenAIChat(server.url, "m"), image_once=True).respond(IMG, "What animal?")
        bodies = list(server.requests)
    assert len(bodies) == 5
    assert max(len(_image_urls(b["messages"])) for b in bodies) == 1


class Recording:
    def __init__(self):
        self.calls = []
        self.backend = CallableChat(lambda m, **kw: self.calls.append(m) or "It is a cat.")


def test_crop_format_jpeg_reencodes_the_crops_like_the_official_code():
    from icml25.dps import DPSPrompts

    weak_system = DPSPrompts().weak_system
    for fmt in ("png", "jpeg"):
        rec = Recording()
        res = DPSDefense(rec.backend, crop_format=fmt).respond(NOISE, "What is it?")
        weak = [
            p["image_url"]["url"]
            for m in rec.calls
            if m[0]["content"] == weak_system and isinstance(m[-1]["content"], list)
            for p in m[-1]["content"]
            if p["type"] == "image_url"
        ]
        strong = [
            p["image_url"]["url"]
            for m in rec.calls
            if m[0]["content"] != weak_system and isinstance(m[-1]["content"], list)
            for p in m[-1]["content"]
            if p["type"] == "image_url"
        ]
        assert len(weak) == 2 and len(strong) == 2
        assert all(u.startswith("data:image/png;base64,") for u in strong)  # whole image: PNG
        crop = np.asarray(center_crop(to_pil(NOISE)), dtype=np.int16)
        assert np.array_equal(np.asarray(res.crops[0], dtype=np.int16), crop)  # kept as cropped
        for u in weak:
            sent = decode_data_url(u)
            pixels = np.asarray(sent, dtype=np.int16)
            assert pixels.shape == crop.shape
            if fmt == "png":
                assert u.startswith("data:image/png;base64,") and sent.format == "PNG"
                assert np.array_equal(pixels, crop)
            else:
                assert u.startswith("data:image/jpeg;base64,") and sent.format == "JPEG"
                assert np.abs(pixels - crop).max() > 10  # lossy: the noise is not kept


def test_jpeg_quality_is_used_and_checked():
    from icml25.dps.images import encode_data_url

    crop = center_crop(to_pil(NOISE))
    ref = np.asarray(crop, dtype=np.int16)
    err = {
        q: np.abs(
            np.asarray(decode_data_url(encode_data_url(crop, format="jpeg", quality=q)), np.int16)
            - ref
        ).mean()
        for q in (10, 95)
    }
    assert err[95] < err[10]
    for bad in (0, 96, 2.5, True):
        with pytest.raises(ValueError, match="jpeg_quality"):
            DPSDefense(CallableChat(lambda m, **kw: "x"), crop_format="jpeg", jpeg_quality=bad)
    with pytest.raises(ValueError, match="crop_format"):
        DPSDefense(CallableChat(lambda m, **kw: "x"), crop_format="webp")
    with pytest.raises(ValueError, match="format"):
        encode_data_url(crop, format="gif")


def _batch_backend(fail_question, n_in_flight):
    """Every query's first call waits until ``n_in_flight`` queries are in flight; the query
    asking ``fail_question`` then fails (a server error), the others answer."""
    barrier, lock, seen = threading.Barrier(n_in_flight, timeout=20), threading.Lock(), set()

    def fn(messages, **kw):
        last = messages[-1]["content"]
        text = last if isinstance(last, str) else last[0]["text"]
        with lock:
            # the query's first call (the strong agent's question; the weak agent asks it again)
            first = text.startswith("q") and len(text) == 2 and text not in seen
            seen.add(text)
        if first:
            barrier.wait()
        if text == fail_question:
            raise ConnectionError("HTTP 500 from the server")
        return "It is a cat."

    return CallableChat(fn)


@pytest.mark.parametrize("workers", [1, 5])
def test_respond_batch_raise_keeps_finished_results_beside_the_failure(workers):
    items = [(IMG, f"q{i}") for i in range(5)]
    d = DPSDefense(_batch_backend("q2", n_in_flight=workers))
    with pytest.raises(BackendError, match="HTTP 500") as info:
        d.respond_batch(items, workers=workers)
    results, failures = info.value.results, info.value.failures
    assert len(results) == 5 and list(failures) == [2]
    assert isinstance(results[2], BackendError) and failures[2] is results[2]
    if workers == 1:  # one at a time: the queries after the failure never start
        assert [type(r).__name__ for r in results] == [
            "DPSResult",
            "DPSResult",
            "BackendError",
            "NoneType",
            "NoneType",
        ]
    else:  # all five were in flight: the four others finish and are kept
        assert all(isinstance(results[i], DPSResult) for i in (0, 1, 3, 4))
    assert all(results[i].final == "It is a cat." for i in (0, 1))


def test_respond_batch_raise_on_an_unreadable_image_keeps_the_others(tmp_path):
    d = DPSDefense(CallableChat(lambda m, **kw: "ok"))
    with pytest.raises(FileNotFoundError, match=r"items\[1\]") as info:
        d.respond_batch([(IMG, "Q"), (tmp_path / "nope.png", "Q"), (IMG, "Q")], workers=2)
    res = info.value.results
    assert res[0].final == "ok" and isinstance(res[1], FileNotFoundError)
    assert list(info.value.failures) == [1]
    # success: a plain list of results, as before
    assert [r.final for r in d.respond_batch([(IMG, "a"), (IMG, "b")], workers=2)] == ["ok"] * 2
