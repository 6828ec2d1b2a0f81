"""The partial views of DPS (the official ``util.py``): centre crop, random crop, and the
text-box mask of the ``auto`` mode (arXiv:2412.12722, §4)."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from icml25._validate import as_int, as_real
from icml25.dps.images import to_pil

__all__ = ["auto_mask", "center_box", "center_crop", "parse_boxes", "random_box", "random_crop"]


def center_box(W: int, H: int, frac: float = 0.5) -> tuple[int, int, int, int]:
    """The official centre box: ``w2 = int(W * frac)``, ``h2 = int(H * frac)``, centred on
    ``(W // 2, H // 2)``: ``(cx - w2 // 2, cy - h2 // 2, cx + w2 // 2, cy + h2 // 2)``
    (``frac = 0.5`` is the official ``W // 2``). ``ValueError`` when the box is empty (e.g.
    ``W < 4`` at ``frac = 0.5``)."""
    W, H = as_int("W", W, 1), as_int("H", H, 1)  # pixels
    frac = as_real("frac", frac, low=0.0, high=1.0, low_open=True)
    w2, h2 = int(W * frac), int(H * frac)
    cx, cy = W // 2, H // 2
    box = (cx - w2 // 2, cy - h2 // 2, cx + w2 // 2, cy + h2 // 2)
    if box[2] <= box[0] or box[3] <= box[1]:
        raise ValueError(
            f"a {W}x{H} image has an empty centre crop at frac={frac} (box {box}); it needs to be at least 4x4"
        )
    return box


def center_crop(image: Any, frac: float = 0.5) -> Any:
    """The centre crop (about a quarter of the area at ``frac = 0.5``)."""
    img = to_pil(image)
    return img.crop(center_box(img.width, img.height, frac))


def random_box(
    W: int, H: int, rng: np.random.Generator, lo: float = 0.25, hi: float = 0.5
) -> tuple[int, int, int, int]:
    """The official random crop: one ratio ``r ~ U(lo, hi)`` for both sides, width ``int(W r)``
    (at least 1 px), top-left uniform over the valid positions (inclusive)."""
    W, H = as_int("W", W, 1), as_int("H", H, 1)  # pixels
    lo = as_real("lo", lo, low=0.0, high=1.0, low_open=True)
    hi = as_real("hi", hi, low=0.0, high=1.0, low_open=True)
    if lo > hi:
        raise ValueError(f"need 0 < lo <= hi <= 1, got lo={lo!r}, hi={hi!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy Generator (np.random.default_rng(seed)), got {type(rng).__name__}"
        )
    r = rng.uniform(lo, hi)
    cw, ch = max(1, int(W * r)), max(1, int(H * r))
    x0, y0 = int(rng.integers(0, W - cw + 1)), int(rng.integers(0, H - ch + 1))
    return (x0, y0, x0 + cw, y0 + ch)


def random_crop(image: Any, rng: np.random.Generator, lo: float = 0.25, hi: float = 0.5) -> Any:
    """A random crop of side ratio ``U(lo, hi)`` (:func:`random_box`), drawn from ``rng``."""
    img = to_pil(image)
    return img.crop(random_box(img.width, img.height, rng, lo, hi))


_NUM = r"\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*"
_BOX = re.compile(r"\[" + ",".join([_NUM] * 4) + r"\]")


def parse_boxes(text: str, W: int, H: int) -> list[tuple[int, int, int, int]]:
    """Every ``[left, top, right, bottom]`` in a model's reply (integers or floats, also 1e1-style, rounded),
    clamped to the image; boxes empty after clamping (including swapped corners) are dropped."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    W, H = as_int("W", W, 1), as_int("H", H, 1)  # pixels
    out = []
    for m in _BOX.finditer(text):
        vals = [float(v) for v in m.groups()]
        if not all(math.isfinite(v) for v in vals):  # e.g. 1e999
            continue
        left, top, right, bottom = (int(round(v)) for v in vals)
        left, top = max(0, left), max(0, top)
        right, bottom = min(W, right), min(H, bottom)
        if left < right and top < bottom:
            out.append((left, top, right, bottom))
    return out


def auto_mask(image: Any, boxes: list[tuple[int, int, int, int]]) -> Any:
    """The full image with every box set to 0 (black): the ``auto`` mode's first view, which
    hides text regions (typographic attacks). Boxes are clamped to the image as in
    :func:`parse_boxes`; an empty or swapped box masks nothing."""
    img = to_pil(image)
    arr = np.array(img)
    if boxes is None or isinstance(boxes, (str, bytes)) or not hasattr(boxes, "__iter__"):
        raise TypeError(
            f"boxes must be a list of (left, top, right, bottom) boxes, got {boxes!r:.60}"
        )
    for k, box in enumerate(boxes):
        if not (
            isinstance(box, (tuple, list))
            and len(box) == 4
            and all(not isinstance(v, bool) and isinstance(v, (int, np.integer)) for v in box)
        ):
            raise ValueError(
                f"boxes[{k}] must be 4 integers (left, top, right, bottom), got {box!r:.60}"
            )
        # clamped to the image as parse_boxes does; an empty box masks nothing
        left, top = max(0, int(box[0])), max(0, int(box[1]))
        right, bottom = min(img.width, int(box[2])), min(img.height, int(box[3]))
        if left < right and top < bottom:
            arr[top:bottom, left:right] = 0
    from PIL import Image

    return Image.fromarray(arr, mode=img.mode)
