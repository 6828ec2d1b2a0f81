"""Images for vision-language chat messages: conversion to PIL, PNG (or JPEG) data URLs and
OpenAI-format ``image_url`` parts (arXiv:2412.12722; the official DPS code sends images as base64
data URLs).

``ImageLike`` is a PIL image, a numpy array ``(H, W)`` / ``(H, W, C)`` (uint8, or float in
[0, 1]), a torch tensor ``(C, H, W)`` / ``(H, W)`` (float in [0, 1]), or a file path.
"""

from __future__ import annotations

import base64
import io
import os
from typing import Any

import numpy as np

from icml25._validate import as_int

__all__ = [
    "IMAGE_FORMATS",
    "JPEG_QUALITY",
    "decode_data_url",
    "encode_data_url",
    "image_part",
    "last_image",
    "to_pil",
]

#: what :func:`encode_data_url` writes: lossless PNG (our default) or lossy JPEG (the official crops)
IMAGE_FORMATS = ("png", "jpeg")
#: JPEG quality when ``format="jpeg"``: 75, PIL's default, which a plain ``save("crop.jpg")``
#: uses (the official code's own setting is not recorded in docs/dps.md; see its "Decisions")
JPEG_QUALITY = 75


def to_pil(image: Any) -> Any:
    """A PIL image in mode ``"L"`` (one channel) or ``"RGB"``: floats become uint8 by
    ``round(x * 255)``; images with an alpha channel or a transparent colour are composited over
    white (RGBA, P -> RGB; LA -> L); I;16 and I become L; other modes are converted to RGB."""
    from PIL import Image

    if isinstance(image, Image.Image):
        img = image
    elif isinstance(image, str) and image.startswith("data:image/"):
        img = decode_data_url(image)
    elif isinstance(image, (str, os.PathLike)):
        if os.path.isdir(image):
            raise IsADirectoryError(f"{image} is a folder, not an image file")
        if not os.path.isfile(image):
            raise FileNotFoundError(f"no such image file: {str(image)[:200]}")
        img = _open(image, image)
    elif hasattr(image, "read"):  # an open binary file or io.BytesIO
        img = _open(image, f"the {type(image).__name__} object")
    elif hasattr(image, "detach") or isinstance(image, np.ndarray):
        if hasattr(image, "detach"):
            t = image.detach()
            if t.is_meta:
                raise TypeError(
                    "a meta tensor holds no pixel values; pass a tensor on a real device"
                )
            if t.dtype in (torch_low_precision()):
                t = t.float()
            arr = t.cpu().numpy()
        else:
            arr = image
        shape = tuple(arr.shape)
        if hasattr(image, "detach") and arr.ndim == 3 and arr.shape[0] in (1, 3, 4):
            arr = np.transpose(arr, (1, 2, 0))  # torch (C, H, W)
        if arr.ndim == 3 and arr.shape[2] == 1:
            arr = arr[:, :, 0]
        if (
            arr.ndim not in (2, 3)
            or (arr.ndim == 3 and arr.shape[2] not in (3, 4))
            or 0 in arr.shape
        ):
            raise ValueError(
                f"an image array must be a non-empty (H, W), (H, W, 1|3|4) array or (C, H, W) tensor, got shape {shape}"
            )
        if arr.dtype == np.bool_:
            arr = arr.astype(np.uint8) * 255
        elif arr.dtype == np.uint16:
            arr = np.round(arr.astype(np.float64) / 65535 * 255).astype(np.uint8)
        elif np.issubdtype(arr.dtype, np.integer) and arr.dtype != np.uint8:
            if arr.min() < 0 or arr.max() > 255:
                raise ValueError(
                    f"an integer image must hold pixel values 0..255, got {arr.min()}..{arr.max()} ({arr.dtype})"
                )
            arr = arr.astype(np.uint8)
        elif np.issubdtype(arr.dtype, np.floating):
            a = arr.astype(np.float64)
            if not np.isfinite(a).all():
                raise ValueError(
                    f"a float image must hold finite values in [0, 1], got {int((~np.isfinite(a)).sum())} "
                    "NaN or infinite values"
                )
            if a.min() < 0 or a.max() > 1:
                raise ValueError(
                    f"a float image must hold values in [0, 1], got {a.min():.3g}..{a.max():.3g}; "
                    "integer arrays hold 0..255"
                )
            arr = np.round(a * 255).astype(np.uint8)
        elif arr.dtype != np.uint8:
            raise TypeError(f"image values must be numbers, got dtype {arr.dtype}")
        img = Image.fromarray(arr)
    else:
        raise TypeError(
            "image must be a PIL image, a numpy array, a torch tensor, a file path, an open binary file or a "
            f"data URL, got {type(image).__name__}"
        )
    if img.mode in ("L", "RGB"):
        return img
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        # 16-bit grey (a 16-bit PNG opens as I;16 or I): a fixed scale, 0..65535 -> 0..255, never
        # each image's own maximum
        a = np.clip(np.asarray(img, dtype=np.float64), 0, 65535)
        return Image.fromarray(np.round(a / 65535 * 255).astype(np.uint8), mode="L")
    if img.mode == "F":  # 32-bit float pixels: [0, 1] as for float arrays
        return to_pil(np.asarray(img, dtype=np.float64))
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in img.info:
        # transparent pixels are shown over white, as an image viewer on a light page does;
        # dropping alpha would expose whatever colour the transparent pixels happen to store
        rgba = img.convert("RGBA")
        flat = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
        return flat.convert("L" if img.mode in ("LA", "La") else "RGB")
    return img.convert("RGB")


def torch_low_precision() -> tuple[Any, ...]:
    """Tensor dtypes numpy cannot hold (converted to float32 first)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        return ()
    return tuple(
        d for d in (torch.bfloat16, getattr(torch, "float8_e4m3fn", None)) if d is not None
    )


def _open(source: Any, what: Any) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(source)
        img.load()
    except UnidentifiedImageError as exc:
        raise ValueError(f"{str(what)[:200]} is not an image PIL can read ({exc})") from None
    return img


def encode_data_url(
    image: Any,
    *,
    max_pixels: int | None = None,
    downscale: int = 10,
    format: str = "png",
    quality: int = JPEG_QUALITY,
) -> str:
    """A base64 data URL of the image: ``data:image/png;base64,...`` (``format="png"``, the
    default: lossless) or ``data:image/jpeg;base64,...`` (``format="jpeg"``: lossy, at
    ``quality`` 1..95, the scale of PIL's ``save(..., quality=)``; the official DPS code writes its
    crops to JPEG files, docs/dps.md "Decisions"). Images above ``max_pixels`` are shrunk
    ``downscale`` times per side (LANCZOS) first, as the official Gemini agent does above
    5 * 2**20 pixels."""
    from PIL import Image

    if not isinstance(format, str) or format.lower() not in IMAGE_FORMATS:
        raise ValueError(f"format must be one of {IMAGE_FORMATS}, got {format!r}")
    quality = as_int("quality", quality, 1, 95)  # PIL's JPEG quality scale
    if max_pixels is not None:
        max_pixels = as_int("max_pixels", max_pixels, 1)
    downscale = as_int("downscale", downscale, 1)
    img = to_pil(image)
    if max_pixels is not None and img.width * img.height > max_pixels:
        img = img.resize(
            (max(1, img.width // downscale), max(1, img.height // downscale)), Image.LANCZOS
        )
    buf = io.BytesIO()
    if format.lower() == "png":
        img.save(buf, format="PNG")
        mime = "png"
    else:
        img.save(buf, format="JPEG", quality=int(quality))
        mime = "jpeg"
    return f"data:image/{mime};base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def decode_data_url(url: str) -> Any:
    """The PIL image of a base64 data URL (``ValueError`` for anything else)."""
    from PIL import Image

    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        raise ValueError(f"not a base64 image data URL: {str(url)[:60]!r}")
    try:
        raw = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
        img = Image.open(io.BytesIO(raw))
        img.load()
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a bad URL
        raise ValueError(f"the data URL does not hold a readable image: {exc}") from exc
    return img


def image_part(image: Any, **kw: Any) -> dict[str, Any]:
    """An OpenAI-format content part ``{"type": "image_url", "image_url": {"url": ...}}``."""
    return {"type": "image_url", "image_url": {"url": encode_data_url(image, **kw)}}


def last_image(messages: list[dict[str, Any]]) -> Any:
    """The most recent image of a conversation (PIL), or ``None``."""
    for m in reversed(messages):
        content = m.get("content")
        if isinstance(content, list):
            for part in reversed(content):
                if isinstance(part, dict) and part.get("type") == "image_url":
                    body = part.get("image_url")
                    url = body.get("url") if isinstance(body, dict) else None
                    if not isinstance(url, str):
                        raise ValueError(
                            f"an image_url part needs {{'url': ...}}, got {body!r:.60}"
                        )
                    return decode_data_url(url)
    return None
