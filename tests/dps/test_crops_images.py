"""Crop geometry against the official formulas, box parsing and masking, image encoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from icml25.dps.crops import (
    auto_mask,
    center_box,
    center_crop,
    parse_boxes,
    random_box,
    random_crop,
)
from icml25.dps.images import decode_data_url, encode_data_url, to_pil


@pytest.mark.parametrize("W,H", [(7, 5), (8, 8), (33, 20), (32, 32), (100, 37)])
def test_center_box_is_the_official_formula(W, H):
    w2, h2, cx, cy = W // 2, H // 2, W // 2, H // 2
    assert center_box(W, H) == (cx - w2 // 2, cy - h2 // 2, cx + w2 // 2, cy + h2 // 2)
    img = Image.new("L", (W, H))
    l, t, r, b = center_box(W, H)
    assert center_crop(img).size == (r - l, b - t)


def test_center_box_known_values_and_tiny_images():
    assert center_box(8, 8) == (2, 2, 6, 6) and center_box(33, 20) == (8, 5, 24, 15)
    assert center_box(32, 32) == (8, 8, 24, 24)  # a corner 8x8 patch is fully removed
    with pytest.raises(ValueError, match="empty centre crop"):
        center_box(3, 3)
    with pytest.raises(ValueError, match="frac"):
        center_box(8, 8, frac=0)


def test_random_crops_stay_in_range_and_repeat_with_the_seed():
    W, H = 33, 20
    rng = np.random.default_rng(0)
    boxes = [random_box(W, H, rng) for _ in range(1000)]
    for l, t, r, b in boxes:
        assert 0 <= l < r <= W and 0 <= t < b <= H
        assert int(W * 0.25) <= r - l <= int(W * 0.5) and int(H * 0.25) <= b - t <= int(H * 0.5)
    again = [random_box(W, H, np.random.default_rng(0)) for _ in range(1)]
    assert again[0] == boxes[0]
    img = Image.new("L", (4, 4))
    assert random_crop(img, np.random.default_rng(1)).size[0] >= 1
    with pytest.raises(ValueError, match="lo <= hi"):
        random_box(8, 8, rng, lo=0.6, hi=0.5)
    with pytest.raises(TypeError, match="Generator"):
        random_box(8, 8, 0)


def test_parse_boxes_on_messy_replies_and_auto_mask():
    text = (
        "Here: {'obj1': [ 2, 3 ,10, 12], 'obj2': [-5, 0, 50.6, 4.4], 'bad': [9, 9, 3, 3], "
        "'also': [1,2,3], 'edge': [30, 30, 40, 40]}"
    )
    assert parse_boxes(text, 32, 16) == [(2, 3, 10, 12), (0, 0, 32, 4)]
    img = Image.fromarray(np.full((16, 32), 200, dtype=np.uint8))
    masked = np.array(auto_mask(img, [(2, 3, 10, 12)]))
    assert (masked[3:12, 2:10] == 0).all() and masked.sum() == 200 * (16 * 32 - 9 * 8)
    assert parse_boxes("no boxes here", 8, 8) == []
    assert parse_boxes("[1e1, 2, 2.5e1, 8] [1e999, 0, 4, 4]", 32, 16) == [(10, 2, 25, 8)]


def test_data_url_round_trip_and_to_pil_variants(tmp_path):
    rng = np.random.default_rng(0)
    gray = rng.integers(0, 256, (12, 9), dtype=np.uint8)
    rgb = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    for arr in (gray, rgb):
        back = np.array(decode_data_url(encode_data_url(arr)))
        assert np.array_equal(back, arr)
    f = rng.random((6, 6))
    assert np.array_equal(np.array(to_pil(f)), np.round(f * 255).astype(np.uint8))
    t = torch.rand(3, 4, 5)
    assert to_pil(t).size == (5, 4) and to_pil(t).mode == "RGB"
    assert to_pil(torch.rand(4, 5)).mode == "L"
    path = tmp_path / "x.png"
    Image.fromarray(rgb).save(path)
    assert np.array_equal(np.array(to_pil(path)), rgb)
    assert (
        to_pil(Image.new("RGBA", (3, 3))).mode == "RGB"
        and to_pil(Image.new("P", (3, 3))).mode == "RGB"
    )
    assert to_pil(Image.new("I;16", (3, 3))).mode == "L"
    big = encode_data_url(np.zeros((100, 100), dtype=np.uint8), max_pixels=5000)
    assert decode_data_url(big).size == (10, 10)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        to_pil(np.full((3, 3), 2.0))
    with pytest.raises(ValueError, match="data URL"):
        decode_data_url("http://example.com/x.png")
    with pytest.raises(FileNotFoundError):
        to_pil(tmp_path / "missing.png")


def test_integer_and_bad_images():
    assert np.array_equal(
        np.array(to_pil(np.array([[0, 1], [1, 0]]))), [[0, 1], [1, 0]]
    )  # ints are pixel values
    assert to_pil(np.full((8, 8, 3), 200)).mode == "RGB"
    assert to_pil(torch.randint(0, 255, (3, 8, 8), dtype=torch.uint8)).size == (
        8,
        8,
    )  # torchvision's CHW uint8
    assert np.array(to_pil(np.full((2, 2), 65535, dtype=np.uint16))).max() == 255
    with pytest.raises(TypeError, match="NoneType"):
        to_pil(None)
    with pytest.raises(ValueError, match="0..255"):
        to_pil(np.full((2, 2), 300))
    with pytest.raises(ValueError, match="non-empty"):
        to_pil(np.zeros((0, 5, 3)))
    with pytest.raises(ValueError, match="max_pixels"):
        encode_data_url(np.zeros((4, 4)), max_pixels=-5)


def test_transparency_is_composited_over_white():
    # black strokes on a transparent background (what a drawing app exports): fully transparent
    # pixels become white, opaque ones keep their colour, half-transparent ones blend
    rgba = np.zeros((2, 3, 4), dtype=np.uint8)
    rgba[0, 0] = (0, 0, 0, 255)
    rgba[0, 1] = (200, 10, 10, 0)
    rgba[0, 2] = (0, 0, 0, 128)
    img = to_pil(rgba)
    assert img.mode == "RGB"
    px = np.array(img)
    assert px[0, 0].tolist() == [0, 0, 0] and px[0, 1].tolist() == [255, 255, 255]
    assert 120 <= px[0, 2, 0] <= 130 and px[1, 0].tolist() == [255, 255, 255]
    la = to_pil(Image.fromarray(np.array([[[0, 0], [0, 255]]], dtype=np.uint8), mode="LA"))
    assert la.mode == "L" and np.array(la).tolist() == [[255, 0]]
    pal = Image.new("P", (2, 1))
    pal.putpalette([0, 0, 0, 9, 9, 9] + [0] * 762)
    pal.putpixel((1, 0), 1)
    pal.info["transparency"] = 0
    assert np.array(to_pil(pal)).tolist() == [[[255, 255, 255], [9, 9, 9]]]
