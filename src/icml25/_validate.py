"""Argument checks shared by several paper packages (proxy_feedback, future_of_work)."""

from __future__ import annotations

import operator
from typing import Any


def as_int(name: str, v: Any, low: int) -> int:
    """``v`` as a Python int >= ``low``; numpy and 0-d torch integers are accepted, bools and
    floats are not. ``ValueError`` naming the argument otherwise."""
    if isinstance(v, bool) or getattr(v, "dtype", None) is not None and str(v.dtype) == "bool":
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    try:
        out = operator.index(v)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}") from None
    if out < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
    return out
