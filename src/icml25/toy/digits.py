"""scikit-learn's bundled 8x8 handwritten digits (1797 images, offline), as torch tensors.

One loader for every reproduction that trains on digits, so the scaling and the splits are the
same everywhere: pixel values are divided by 16 (to [0, 1]); images come as ``(N, 1, 8, 8)`` or
flattened ``(N, 64)``.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["digits", "digits_split"]

_SHAPES = ("image", "flat")


@functools.lru_cache(maxsize=1)
def _raw() -> tuple[Any, Any]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            "the digits data come with scikit-learn: pip install 'icml25[repro]'"
        ) from None
    d = load_digits()
    return d.data, d.target


def digits(shape: str = "image") -> tuple[Any, Any]:
    """All 1797 digits: ``(x, y)`` with ``x`` float32 in [0, 1] shaped ``(N, 1, 8, 8)``
    (``shape="image"``) or ``(N, 64)`` (``shape="flat"``) and ``y`` int64 labels 0-9."""
    import torch

    if shape not in _SHAPES:
        raise ValueError(f"shape must be one of {_SHAPES}, got {shape!r}")
    data, target = _raw()
    x = torch.tensor(data / 16.0, dtype=torch.float32)
    if shape == "image":
        x = x.reshape(-1, 1, 8, 8)
    return x, torch.tensor(target, dtype=torch.long)


def digits_split(
    test_size: float = 0.2, *, seed: int = 0, shape: str = "image"
) -> tuple[Any, Any, Any, Any]:
    """A stratified train/test split (scikit-learn's ``train_test_split`` with
    ``random_state=seed``): ``(x_train, y_train, x_test, y_test)``."""
    from sklearn.model_selection import train_test_split

    if not 0 < test_size < 1:
        raise ValueError(f"test_size must be a fraction in (0, 1), got {test_size}")
    x, y = digits(shape)
    idx = list(range(len(y)))
    tr, te = train_test_split(idx, test_size=test_size, random_state=seed, stratify=y.numpy())
    return x[tr], y[tr], x[te], y[te]
