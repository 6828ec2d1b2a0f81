"""Argument checks shared by the package."""

from __future__ import annotations

import math
from typing import Any

from icml25._validate import as_int

__all__ = ["DISCLAIMER", "as_float", "as_int"]

DISCLAIMER = "Interpretation tool; the paper does not specify this mechanism."


def as_float(name: str, v: Any, *, low: float | None = None, high: float | None = None,
             low_open: bool = False, high_open: bool = False) -> float:  # fmt: skip
    """A finite float in the given range; ``ValueError`` naming the value and the range."""
    if isinstance(v, bool):
        raise ValueError(f"{name} must be a number, got {v!r}")
    try:
        out = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {v!r}") from None
    bad = not math.isfinite(out)
    if low is not None:
        bad |= out <= low if low_open else out < low
    if high is not None:
        bad |= out >= high if high_open else out > high
    if bad:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        rng = f"{lo}{low if low is not None else '-inf'}, {high if high is not None else 'inf'}{hi}"
        raise ValueError(f"{name} must be a finite number in {rng}, got {v!r}")
    return out
