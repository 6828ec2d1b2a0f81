"""Argument checks shared by the package's public functions (clear errors naming the value)."""

from __future__ import annotations

from typing import Any


def is_int(v: Any) -> bool:
    """An int or a numpy integer, not a bool."""
    import numpy as np

    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_int(name: str, v: Any, lo: int = 1) -> int:
    """``int(v)`` when ``v`` is an integer >= ``lo``; ``ValueError`` naming it otherwise."""
    if not is_int(v) or v < lo:
        raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
    return int(v)


def check_number(name: str, v: Any, *, lo: float | None = None, hi: float | None = None,
                 lo_open: bool = False) -> float:  # fmt: skip
    """``float(v)`` for a finite real number in the range; ``ValueError`` naming it otherwise."""
    import math

    import numpy as np

    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
        v, (bool, np.bool_)
    )
    if ok:
        x = float(v)
        ok = (
            math.isfinite(x)
            and (lo is None or (x > lo if lo_open else x >= lo))
            and (hi is None or x <= hi)
        )
    if not ok:
        rng = f"{'(' if lo_open else '['}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
        raise ValueError(f"{name} must be a number in {rng}, got {v!r}")
    return float(v)


def check_bool(name: str, v: Any) -> bool:
    """A verdict a user function returned: bool, numpy bool or 0/1."""
    import numpy as np

    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if is_int(v) and v in (0, 1):
        return bool(v)
    raise TypeError(f"{name} must return a bool, got {v!r}")
