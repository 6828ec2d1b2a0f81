"""Property-based tests at DPS's public boundary: the crop boxes against their definition (the
official ``util.py``), box parsing against a direct reading, images of every dtype and shape a
user holds (uint8, float in [0, 1], bf16 tensors, grey, RGBA, 1x1, empty, NaN), and the defence's
numbers as Python, numpy or 0-d torch values, through a scripted backend."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.dps import DPSDefense, RuleHelper, crop_vote, smooth_vlm
from icml25.dps.attacks import apply_patch, pgd_linf, universal_patch
from icml25.dps.crops import auto_mask, center_box, center_crop, parse_boxes, random_box
from icml25.dps.images import encode_data_url, to_pil
from icml25.llm import CallableChat

FAST = settings(max_examples=40, deadline=None)
INTS = (int, np.int64, np.int32, lambda v: torch.tensor(v))
FLOATS = (float, np.float32, np.float64, lambda v: torch.tensor(v, dtype=torch.float64))


# -- crop boxes ---------------------------------------------------------------------------------------
@FAST
@given(
    W=st.integers(1, 400),
    H=st.integers(1, 400),
    frac=st.floats(0.01, 1.0),
    ik=st.sampled_from(INTS),
    fk=st.sampled_from(FLOATS),
)
def test_center_box_equals_its_definition(W, H, frac, ik, fk):
    f = float(fk(frac))  # what the user's number holds (float32 rounds)
    w2, h2 = int(W * f), int(H * f)
    cx, cy = W // 2, H // 2
    want = (cx - w2 // 2, cy - h2 // 2, cx + w2 // 2, cy + h2 // 2)
    if want[2] <= want[0] or want[3] <= want[1]:
        with pytest.raises(ValueError, match="empty centre crop"):
            center_box(ik(W), ik(H), fk(frac))
        return
    box = center_box(ik(W), ik(H), fk(frac))
    assert box == want and all(type(v) is int for v in box)
    assert 0 <= box[0] < box[2] <= W and 0 <= box[1] < box[3] <= H


@FAST
@given(
    W=st.integers(1, 300),
    H=st.integers(1, 300),
    lo=st.floats(0.01, 1.0),
    d=st.floats(0, 1),
    seed=st.integers(0, 2**32 - 1),
    ik=st.sampled_from(INTS),
)
def test_random_box_is_inside_the_image_at_a_ratio_in_range(W, H, lo, d, seed, ik):
    hi = lo + (1 - lo) * d
    box = random_box(ik(W), ik(H), np.random.default_rng(seed), np.float64(lo), hi)
    x0, y0, x1, y1 = box
    assert all(type(v) is int for v in box)
    assert 0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H
    # one ratio r ~ U(lo, hi) for both sides, at least one pixel
    assert max(1, int(W * lo)) - 1 <= x1 - x0 <= max(1, int(W * hi))
    assert max(1, int(H * lo)) - 1 <= y1 - y0 <= max(1, int(H * hi))
    # the same draw from the same seed
    assert random_box(W, H, np.random.default_rng(seed), lo, hi) == box


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 5), r"W must be an integer >= 1, got 0"),
        ((5.0, 5), r"W must be an integer >= 1, got 5.0"),
        ((5, True), r"H must be an integer >= 1, got True"),
        ((5, float("nan")), r"H must be an integer >= 1, got nan"),
    ],
)
def test_boxes_refuse_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        center_box(*args)
    with pytest.raises(ValueError, match=match):
        random_box(*args, np.random.default_rng(0))
    with pytest.raises(ValueError, match=match):
        parse_boxes("[0, 0, 1, 1]", *args)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"lo": float("nan")}, r"lo must be a finite number in \(0, 1\], got nan"),
        ({"lo": 0.0}, r"lo must be a finite number in \(0, 1\]"),
        ({"hi": 1.5}, r"hi must be a finite number in \(0, 1\], got 1.5"),
        ({"lo": 0.6, "hi": 0.5}, r"need 0 < lo <= hi <= 1"),
        ({"lo": "0.2"}, r"lo must be a finite number"),
    ],
)
def test_random_box_refuses_bad_ratios_fail_before(kw, match):
    """Before: ``lo="0.2"`` raised a raw TypeError from a comparison."""
    with pytest.raises(ValueError, match=match):
        random_box(10, 10, np.random.default_rng(0), **kw)


@pytest.mark.parametrize("frac", [0.0, 1.5, float("nan"), float("inf"), True, "0.5"])
def test_center_box_refuses_bad_fractions(frac):
    with pytest.raises(ValueError, match=r"frac must be a finite number in \(0, 1\]"):
        center_box(10, 10, frac)


# -- parsing the auto mode's boxes ---------------------------------------------------------------------
@FAST
@given(
    boxes=st.lists(st.tuples(*[st.integers(-50, 150)] * 4), max_size=4),
    W=st.integers(1, 100),
    H=st.integers(1, 100),
)
def test_parse_boxes_equals_a_direct_clamp(boxes, W, H):
    text = "objects: " + ", ".join(
        f"'o{i}': [{a}, {b}, {c}, {d}]" for i, (a, b, c, d) in enumerate(boxes)
    )
    want = []
    for a, b, c, d in boxes:
        left, top, right, bottom = max(0, a), max(0, b), min(W, c), min(H, d)
        if left < right and top < bottom:
            want.append((left, top, right, bottom))
    assert parse_boxes(text, np.int64(W), H) == want


def test_parse_boxes_of_an_empty_reply_and_float_sizes_fail_before():
    """Before: ``W=5.5`` clamped boxes to 5.5 and returned float coordinates."""
    assert parse_boxes("", 10, 10) == []
    assert parse_boxes("[1e999, 0, 5, 5]", 10, 10) == []
    with pytest.raises(ValueError, match="W must be an integer >= 1, got 5.5"):
        parse_boxes("[0, 0, 10, 10]", 5.5, 5)


@FAST
@given(
    box=st.tuples(*[st.integers(-5, 20)] * 4),
    ik=st.sampled_from((int, np.int64, np.int32)),
)
def test_auto_mask_blacks_out_exactly_the_clamped_box(box, ik):
    img = np.full((8, 12, 3), 200, dtype=np.uint8)
    out = np.array(auto_mask(img, [tuple(ik(v) for v in box)]))
    a, b, c, d = box
    want = img.copy()
    left, top, right, bottom = max(0, a), max(0, b), min(12, c), min(8, d)
    if left < right and top < bottom:
        want[top:bottom, left:right] = 0
    assert np.array_equal(out, want)


# -- images -------------------------------------------------------------------------------------------
@FAST
@given(
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    channels=st.sampled_from([None, 1, 3, 4]),
    dtype=st.sampled_from(["uint8", "float32", "float64", "bf16", "f16-tensor"]),
    seed=st.integers(0, 1000),
)
def test_to_pil_reads_every_dtype_as_round_x_255(h, w, channels, dtype, seed):
    rng = np.random.default_rng(seed)
    shape = (h, w) if channels is None else (h, w, channels)
    u8 = rng.integers(0, 256, shape, dtype=np.uint8)
    if dtype == "uint8":
        x = u8
    elif dtype in ("float32", "float64"):
        x = (u8 / 255).astype(dtype)
    else:
        t = torch.from_numpy(u8 / 255).to(torch.bfloat16 if dtype == "bf16" else torch.float16)
        x = t.permute(2, 0, 1) if t.ndim == 3 else t
        u8 = np.round(t.float().numpy().astype(np.float64) * 255).astype(np.uint8)
    img = to_pil(x)
    assert img.size == (w, h)
    arr = np.asarray(img)
    if channels == 4:  # composited over white
        a = u8[..., 3:].astype(np.float64) / 255
        want = u8[..., :3] * a + 255 * (1 - a)
        assert img.mode == "RGB" and np.abs(arr.astype(np.float64) - want).max() <= 1.01
    elif channels == 3:
        assert img.mode == "RGB" and np.array_equal(arr, u8)
    else:
        assert img.mode == "L" and np.array_equal(arr, u8.reshape(h, w))


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        (np.zeros((0, 4)), ValueError, "non-empty"),
        (np.zeros((4, 0, 3)), ValueError, "non-empty"),
        (np.full((2, 2), np.nan), ValueError, "NaN or infinite"),
        (np.full((2, 2), np.inf, dtype=np.float32), ValueError, "NaN or infinite"),
        (np.full((2, 2), 1.5), ValueError, r"values in \[0, 1\]"),
        (np.full((2, 2), 300, dtype=np.int32), ValueError, "0..255"),
        (np.zeros((2, 2, 2)), ValueError, "array must be"),
        (torch.full((3, 2, 2), float("nan"), dtype=torch.bfloat16), ValueError, "NaN"),
        (np.array([["a"]]), TypeError, "numbers"),
    ],
)
def test_to_pil_refuses_what_is_no_image(x, error, match):
    with pytest.raises(error, match=match):
        to_pil(x)


def test_a_1x1_image_has_no_centre_crop_but_is_encoded():
    one = np.zeros((1, 1, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="empty centre crop"):
        center_crop(one)
    assert encode_data_url(one).startswith("data:image/png;base64,")


@FAST
@given(
    q=st.integers(1, 95),
    ik=st.sampled_from(INTS),
    max_pixels=st.sampled_from([None, 1, np.int64(10), 10**6]),
    down=st.sampled_from([1, 2, np.int32(3)]),
)
def test_encode_data_url_takes_numpy_numbers(q, ik, max_pixels, down):
    from PIL import Image

    img = np.linspace(0, 1, 6 * 5 * 3).reshape(6, 5, 3)
    url = encode_data_url(img, format="jpeg", quality=ik(q), max_pixels=max_pixels, downscale=down)
    same = encode_data_url(
        img, format="jpeg", quality=q, max_pixels=max_pixels, downscale=int(down)
    )
    assert url == same
    back = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    shrink = max_pixels is not None and int(max_pixels) < 30
    assert back.size == ((max(1, 5 // int(down)), max(1, 6 // int(down))) if shrink else (5, 6))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"quality": 0}, r"quality must be an integer in \[1, 95\], got 0"),
        ({"quality": 50.0}, r"quality must be an integer in \[1, 95\], got 50.0"),
        ({"max_pixels": 0}, "max_pixels must be an integer >= 1, got 0"),
        ({"downscale": True}, "downscale must be an integer >= 1, got True"),
    ],
)
def test_encode_data_url_refuses_bad_numbers(kw, match):
    with pytest.raises(ValueError, match=match):
        encode_data_url(np.zeros((4, 4)), format="jpeg", **kw)


# -- the defence through a scripted backend -------------------------------------------------------------
def _backend():
    def reply(messages, **kw):
        assert all(type(kw[k]) in (int, float, type(None)) for k in ("temperature", "max_tokens"))
        return "{'obj': [0, 0, 4, 4]}" if messages[0]["content"] == "" else "A cat."

    return CallableChat(reply)


@FAST
@given(
    n_agents=st.sampled_from([1, 2, np.int64(3), torch.tensor(2)]),
    temperature=st.sampled_from([0, 0.5, np.float32(1.0), np.float64(2.0), torch.tensor(0.0)]),
    max_tokens=st.sampled_from([1, np.int64(64)]),
    jpeg_quality=st.sampled_from([1, 95, np.int32(75)]),
    seed=st.sampled_from([None, 0, np.int64(7), np.uint32(2**32 - 1)]),
    crop=st.sampled_from(["center", "random"]),
)
def test_defense_takes_every_number_kind(
    n_agents, temperature, max_tokens, jpeg_quality, seed, crop
):
    d = DPSDefense(
        _backend(),
        crop=crop,
        n_agents=n_agents,
        temperature=temperature,
        max_tokens=max_tokens,
        jpeg_quality=jpeg_quality,
        seed=seed,
        crop_format="jpeg",
    )
    assert (type(d.n_agents), type(d.temperature), type(d.max_tokens)) == (int, float, int)
    assert d.seed is None or type(d.seed) is int
    res = d.respond(np.linspace(0, 1, 32 * 32).reshape(32, 32), "What is it?")
    assert res.final == "A cat." and len(res.crops) == int(n_agents)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"n_agents": 0}, "n_agents must be an integer >= 1, got 0"),
        ({"n_agents": 1.0}, "n_agents must be an integer >= 1, got 1.0"),
        (
            {"temperature": float("nan")},
            r"temperature must be a finite number in \[0, 2\], got nan",
        ),
        ({"temperature": 2.5}, r"temperature must be a finite number in \[0, 2\]"),
        ({"max_tokens": 0}, "max_tokens must be an integer >= 1, got 0"),
        ({"summary_limit": True}, "summary_limit must be an integer >= 1, got True"),
        ({"jpeg_quality": 96}, r"jpeg_quality must be an integer in \[1, 95\], got 96"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"seed": 1.5}, "seed must be an integer >= 0, got 1.5"),
        ({"max_pixels": 0}, "max_pixels must be an integer >= 1, got 0"),
    ],
)
def test_defense_refuses_bad_numbers_naming_them(kw, match):
    with pytest.raises(ValueError, match=match):
        DPSDefense(_backend(), **kw)


def test_defense_refuses_a_non_bool_image_once():
    with pytest.raises(TypeError, match="image_once must be True or False, got 1"):
        DPSDefense(_backend(), image_once=1)


def test_defense_seeds_of_every_kind_give_the_same_crops():
    img = np.linspace(0, 1, 40 * 40).reshape(40, 40)
    a = DPSDefense(_backend(), crop="random", seed=np.int64(5)).respond(img, "q?")
    b = DPSDefense(_backend(), crop="random", seed=5).respond(img, "q?")
    c = DPSDefense(_backend(), crop="random").respond(img, "q?", seed=np.int32(5))
    assert [x.size for x in a.crops] == [x.size for x in b.crops] == [x.size for x in c.crops]


# -- baselines -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fn", "kw", "match"),
    [
        (smooth_vlm, {"n_copies": 0}, "n_copies must be an integer >= 1, got 0"),
        (smooth_vlm, {"frac": 1.0}, r"frac must be a finite number in \[0, 1\), got 1.0"),
        (smooth_vlm, {"frac": float("nan")}, r"frac must be a finite number in \[0, 1\)"),
        (smooth_vlm, {"seed": -1}, "seed must be an integer >= 0, got -1"),
        (crop_vote, {"n_random": -1}, "n_random must be an integer >= 0, got -1"),
        (crop_vote, {"seed": 0.5}, "seed must be an integer >= 0, got 0.5"),
    ],
)
def test_baselines_refuse_bad_numbers_fail_before(fn, kw, match):
    """Before: a negative or float seed raised numpy's own error from ``default_rng``."""
    with pytest.raises(ValueError, match=match):
        fn(_backend(), np.zeros((16, 16)), "q?", **kw)


@FAST
@given(n=st.sampled_from([1, np.int64(3)]), frac=st.sampled_from([0.0, np.float32(0.2)]))
def test_smooth_vlm_takes_numpy_numbers(n, frac):
    assert smooth_vlm(_backend(), np.zeros((16, 16)), "q?", n_copies=n, frac=frac) == "A cat."


def test_rule_helper_limits():
    h = RuleHelper(limit=np.int64(2))
    assert h.summarize("a b c d", limit=np.int32(3)) == "a b c"
    assert h.summarize("a b c d") == "a b"
    with pytest.raises(ValueError, match="limit must be an integer >= 1, got 0"):
        h.summarize("a", limit=0)


# -- attacks ------------------------------------------------------------------------------------------
class _Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc(x.flatten(1).float())


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"step": float("inf")}, r"step must be a finite number > 0, got inf"),
        ({"eps": float("inf")}, r"eps must be a finite number >= 0, got inf"),
        ({"eps": float("nan")}, r"eps must be a finite number >= 0, got nan"),
        ({"steps": 1.5}, r"steps must be an integer >= 0, got 1.5"),
    ],
)
def test_pgd_refuses_infinite_steps_fail_before(kw, match):
    """Before: ``eps=inf`` (no bound on the perturbation at all) and ``step=inf`` were accepted,
    and ``steps=1.5`` was refused in one message for three arguments."""
    x = torch.rand(2, 1, 4, 4)
    with pytest.raises(ValueError, match=match):
        pgd_linf(_Linear(), x, 1, **{"steps": 2, **kw})


@FAST
@given(
    eps=st.floats(0, 0.5),
    steps=st.sampled_from([0, 1, np.int64(3)]),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
    fk=st.sampled_from(FLOATS),
)
def test_pgd_keeps_the_bound_for_every_dtype(eps, steps, dtype, fk):
    x = torch.rand(2, 1, 4, 4, generator=torch.Generator().manual_seed(0)).to(dtype)
    adv = pgd_linf(_Linear(), x, np.int64(2), eps=fk(eps), step=fk(0.1), steps=steps)
    assert adv.dtype == dtype and torch.isfinite(adv.float()).all()
    assert float((adv.float() - x.float()).abs().max()) <= float(fk(eps)) + 1e-2
    assert float(adv.min()) >= 0 and float(adv.max()) <= 1


def test_universal_patch_refuses_an_infinite_lr_fail_before():
    """Before: ``lr=inf`` was accepted (Adam at an infinite rate) and numpy sizes were refused."""
    x = torch.rand(4, 1, 4, 4)
    with pytest.raises(ValueError, match="lr must be a finite number > 0, got inf"):
        universal_patch(_Linear(), x, 1, steps=2, size=2, lr=float("inf"))
    p = universal_patch(
        _Linear(),
        x,
        np.int64(1),
        steps=np.int64(2),
        size=np.int64(2),
        batch_size=np.int32(2),
        lr=np.float32(0.1),
    )
    assert p.shape == (1, 2, 2) and torch.isfinite(p).all()
    out = apply_patch(x, p, torch.tensor([0, 1, 2, 3]))
    assert torch.equal(out[1, :, :2, 2:], p)
    with pytest.raises(ValueError, match=r"corners\[1\] must be an integer in \[0, 3\], got 4"):
        apply_patch(x, p, [0, 4, 0, 0])
