"""Inputs a first-time user passes (from a new-user review): each works or fails clearly."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image

from icml25.dps import BackendError, DPSDefense, DPSPrompts, ecso, vanilla
from icml25.dps.attacks import apply_patch, pgd_linf, universal_patch
from icml25.dps.crops import auto_mask, center_box
from icml25.dps.images import to_pil
from icml25.dps.standin import DigitsCNN, DigitsVLM, fuse
from icml25.llm import CallableChat

IMG = np.linspace(0, 1, 32 * 32).reshape(32, 32)
CHAT = CallableChat(lambda m, **kw: "A grey gradient.")


def test_respond_batch_checks_questions_first_and_returns_unreadable_images_in_place(tmp_path):
    calls = []
    chat = CallableChat(lambda m, **kw: calls.append(1) or "ok")
    d = DPSDefense(chat)
    with pytest.raises(ValueError, match=r"items\[2\].*non-empty"):
        d.respond_batch([(IMG, "Q"), (IMG, "Q"), (IMG, "  ")], workers=2)
    assert calls == []  # nothing was asked before the bad item was found
    out = d.respond_batch(
        [(IMG, "Q"), (tmp_path / "nope.png", "Q"), (IMG, "Q")], workers=2, errors="return"
    )
    assert out[0].final == "ok" and out[2].final == "ok" and isinstance(out[1], FileNotFoundError)
    with pytest.raises(FileNotFoundError, match=r"items\[1\]"):
        d.respond_batch([(IMG, "Q"), (tmp_path / "nope.png", "Q")])
    with pytest.raises(TypeError, match="iterable"):
        d.respond_batch(None)
    assert len(d.respond_batch([(IMG, "Q")], workers=np.int64(2))) == 1


def test_trace_holds_prompts_and_replies():
    res = DPSDefense(CHAT).respond(IMG, "What is it?")
    assert res.trace[0]["prompt"] == "What is it?" and res.trace[0]["reply"] == "A grey gradient."
    assert all("reply" in t for t in res.trace)


def test_to_pil_file_objects_data_urls_bfloat16_and_16bit_modes(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(np.full((4, 4), 7, np.uint8)).save(buf, format="PNG")
    buf.seek(0)
    assert np.array(to_pil(buf)).max() == 7
    path = tmp_path / "a.png"
    Image.fromarray(np.full((4, 4), 9, np.uint8)).save(path)
    with open(path, "rb") as f:
        assert np.array(to_pil(f)).max() == 9
    from icml25.dps.images import encode_data_url

    assert to_pil(encode_data_url(np.zeros((3, 5)))).size == (5, 3)
    assert to_pil(torch.rand(3, 8, 8).bfloat16()).mode == "RGB"
    # a 16-bit grey image reads the same whether PIL opened it as I;16 or I
    a16 = np.full((4, 4), 32896, np.uint16)
    i16 = Image.fromarray(a16)
    assert np.array(to_pil(i16)).max() == np.array(to_pil(i16.convert("I"))).max() == 128
    f = Image.fromarray(np.full((2, 2), 0.5, np.float32), mode="F")
    assert np.array(to_pil(f)).max() == 128
    for bad, exc, msg in (
        (tmp_path, IsADirectoryError, "folder"),
        (torch.empty(3, 3, device="meta"), TypeError, "meta"),
        (np.array([[np.nan, 0.1]]), ValueError, "NaN"),
        (io.BytesIO(b"xx"), ValueError, "not an image"),
        (3.5, TypeError, "data URL"),
    ):
        with pytest.raises(exc, match=msg):
            to_pil(bad)


def test_numpy_scalars_and_settings_checked_at_construction():
    DPSDefense(CHAT, temperature=np.float32(0.5))
    assert center_box(8, 8, np.float32(0.5)) == (2, 2, 6, 6)
    with pytest.raises(ValueError, match="max_pixels"):
        DPSDefense(CHAT, max_pixels=0)
    with pytest.raises(ValueError, match="W must be"):
        center_box("8", 8)
    with pytest.raises(TypeError, match="RuleHelper"):
        DPSDefense(CHAT, helper="rule")
    with pytest.raises(TypeError, match="unknown keyword"):
        vanilla(CHAT, IMG, "Q", foo=1)


def test_auto_mask_clamps_boxes_and_refuses_malformed_ones():
    img = np.full((8, 8), 200, np.uint8)
    out = np.array(auto_mask(img, [(-10, -10, 2, 2)]))
    assert (out[:2, :2] == 0).all() and out.sum() == 200 * 60
    assert np.array(auto_mask(img, [(6, 6, 1, 1)])).sum() == 200 * 64  # swapped: nothing masked
    for bad in ([(1, 2, 3)], [(1.5, 0, 2, 2)]):
        with pytest.raises(ValueError, match="4 integers"):
            auto_mask(img, bad)
    with pytest.raises(TypeError, match="list of"):
        auto_mask(img, None)


def test_attack_inputs_are_checked():
    m = DigitsCNN(4)
    x = torch.rand(3, 1, 32, 32)
    adv = pgd_linf(m, x, 7, eps=0.1, steps=2)  # one class index for every image
    assert adv.shape == x.shape and (adv - x).abs().max() <= 0.1 + 1e-6
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        pgd_linf(m, x, torch.full((3,), 12), steps=1)
    with pytest.raises(ValueError, match="NaN"):
        pgd_linf(m, x * float("nan"), 1, steps=1)
    with pytest.raises(ValueError, match=r"target must be an integer in \[0, 9\], got 2.5"):
        universal_patch(m, x, 2.5, steps=1)
    with pytest.raises(ValueError, match=r"target must be an integer in \[0, 9\], got -1"):
        universal_patch(m, x, -1, steps=1)
    with pytest.raises(ValueError, match="empty"):
        universal_patch(m, x[:0], 1, steps=1)
    p = torch.rand(1, 4, 4)
    assert apply_patch(x, p, np.int64(2)).shape == x.shape
    for corners in (1.0, [0, 1]):
        with pytest.raises(ValueError, match="corners"):
            apply_patch(x, p, corners)
    with pytest.raises(ValueError, match="N = 3"):
        apply_patch(x, torch.rand(2, 1, 4, 4), 0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        apply_patch(x, p * 5, 0)


def test_digits_vlm_and_fuse_settings():
    conf = np.full((10, 10), 0.1)
    for kw in (
        {"lam": float("nan"), "fusion": "bonus"},
        {"lam": -1, "fusion": "bonus"},
        {"tau_unsure": 2},
    ):
        with pytest.raises(ValueError, match="lam|tau_unsure"):
            DigitsVLM(DigitsCNN(4), conf, **kw)
    with pytest.raises(ValueError, match="confusion_matrix"):
        DigitsVLM(DigitsCNN(4))
    three = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(32 * 32, 3))
    with pytest.raises(ValueError, match="10 digit logits"):
        DigitsVLM(three, conf)
    for hints in ([12], [-1]):
        with pytest.raises(ValueError, match="hints"):
            fuse(np.log(np.full(10, 0.1)), hints, confusion=conf)


def test_official_prompt_file_loads_and_bad_templates_are_named(tmp_path):
    official = {
        "whole_observation": "You see all.",
        "local_observation": "You see a part.",
        "normal": "Hi.",
    }
    (tmp_path / "config_prompt.json").write_text(json.dumps(official))
    p = DPSPrompts.from_json(tmp_path / "config_prompt.json")
    assert (p.strong_system, p.weak_system, p.plain_system) == (
        "You see all.",
        "You see a part.",
        "Hi.",
    )
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        DPSPrompts.from_json(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="'describe' is not a valid template"):
        DPSPrompts(describe="Describe {the image")


@pytest.mark.parametrize(
    "verdict,caption_path",
    [("Yes.", True), ("Harmful", True), ("unsafe", True), ("No", False), ("Not harmful", False)],
)
def test_ecso_reads_one_word_verdicts(verdict, caption_path):
    seen = []

    def lvlm(messages, **kw):
        seen.append(json.dumps(messages))
        return "answer"

    ecso(CallableChat(lvlm), IMG, "Q", judge=CallableChat(lambda m, **kw: verdict))
    assert (len(seen) > 1) is caption_path


def test_failed_backend_still_raises_backend_error():
    def down(m, **kw):
        raise ConnectionError("down")

    with pytest.raises(BackendError, match="down"):
        DPSDefense(CallableChat(down)).respond(IMG, "Q")
