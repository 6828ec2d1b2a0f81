"""Argument checks at the public boundaries of every paper package: one copy, so that a message
never contradicts its own value.

Numbers come as Python's, numpy's (``np.float32(0.1)``, ``np.int64(3)``) or 0-d torch tensors'
(``torch.tensor(0.5)``): all are accepted and returned as Python ``int``/``float``. A bool is not a
number here (``True`` is refused where a count or a rate is asked). A refusal is a ``ValueError``
(:class:`NotANumberError`, a ``TypeError`` and a ``ValueError``, for a value that is no number
at all) that names the argument, says what would be
valid and shows the value as given, with its type where the ``repr`` alone would hide it::

    as_real("beta", np.float32(0.5), low=0, low_open=True)   # -> 0.5 (a Python float)
    as_real("beta", float("nan"), low=0, low_open=True)
    # ValueError: beta must be a finite number > 0, got nan
    as_int("k", 2.5, 1)
    # ValueError: k must be an integer >= 1, got 2.5
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any

__all__ = ["NotANumberError", "as_bool", "as_int", "as_prob", "as_real", "shown"]


class NotANumberError(TypeError, ValueError):
    """A value that is no number at all (a string, a list, a tensor with dimensions) where a
    number is asked: a ``TypeError``, and a ``ValueError`` too, as the checks each package kept
    before raised (so ``except ValueError`` written against them still catches it)."""


def shown(v: Any) -> str:
    """The value as a message shows it: its ``repr``, with its type where the ``repr`` does not say
    it (``0.5 (numpy.float32)``, ``3 (torch.int64 tensor)``)."""
    text = repr(v)
    if len(text) > 80:
        text = text[:77] + "..."
    cls = type(v)
    if cls in (int, float, str, bool, type(None)) or f"{cls.__name__}(" in text:
        return text
    if hasattr(v, "dtype") and hasattr(v, "shape") and type(v).__module__.startswith("torch"):
        return f"{text} ({v.dtype} tensor)"
    module = cls.__module__
    name = cls.__name__ if module == "builtins" else f"{module.split('.')[0]}.{cls.__name__}"
    return f"{text} ({name})"


def _plain(v: Any) -> Any:
    """A numpy scalar or a one-element torch tensor as the Python scalar it holds; anything else
    unchanged."""
    if type(v).__module__.startswith("torch") and hasattr(v, "numel"):
        if v.numel() == 1 and v.dim() == 0:
            return v.item()
        return v
    item = getattr(v, "item", None)
    if item is not None and type(v).__module__ == "numpy" and getattr(v, "shape", None) == ():
        return item()
    return v


def _bound(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    lo = None if low is None else f"{'>' if low_open else '>='} {low:g}"
    hi = None if high is None else f"{'<' if high_open else '<='} {high:g}"
    if lo and hi:
        return f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return f" {lo or hi}" if (lo or hi) else ""


def as_int(name: str, v: Any, low: int | None = None, high: int | None = None) -> int:
    """``v`` as a Python ``int`` in ``[low, high]`` (either end optional). Python, numpy and 0-d
    torch integers are accepted; bools and floats (even ``2.0``) are not."""
    want = f"{name} must be an integer{_bound(low, high, False, False)}, got {shown(v)}"
    p = _plain(v)
    if hasattr(p, "shape"):  # an array or a tensor with dimensions: not one number
        raise NotANumberError(want)
    if isinstance(p, bool) or not isinstance(p, numbers.Integral):
        try:
            if isinstance(p, bool):
                raise TypeError
            out = operator.index(p)
        except TypeError:
            raise (ValueError if isinstance(p, (bool, numbers.Real)) else NotANumberError)(
                want
            ) from None
    else:
        out = int(p)
    if (low is not None and out < low) or (high is not None and out > high):
        raise ValueError(want)
    return out


def as_real(
    name: str,
    v: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
) -> float:
    """``v`` as a Python ``float`` within the bounds (``low_open``/``high_open``: the end itself
    is excluded). Python, numpy and 0-d torch numbers are accepted, bools are not; NaN is always
    refused, and so is an infinity unless ``finite=False``."""
    kind = "a finite number" if finite else "a number (not NaN)"
    want = f"{name} must be {kind}{_bound(low, high, low_open, high_open)}, got {shown(v)}"
    p = _plain(v)
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise (ValueError if isinstance(p, bool) else NotANumberError)(want)
    try:
        out = float(p)
    except OverflowError:  # an integer beyond float's range (10**400): no finite float holds it
        if finite:
            raise ValueError(f"{want} (too large for a float)") from None
        out = math.inf if p > 0 else -math.inf
    if math.isnan(out) or (finite and math.isinf(out)):
        raise ValueError(want)
    if low is not None and (out < low or (low_open and out == low)):
        raise ValueError(want)
    if high is not None and (out > high or (high_open and out == high)):
        raise ValueError(want)
    return out


def as_prob(name: str, v: Any, *, low_open: bool = False, high_open: bool = False) -> float:
    """``v`` as a probability: a finite ``float`` in ``[0, 1]`` (ends excluded on request)."""
    return as_real(name, v, low=0.0, high=1.0, low_open=low_open, high_open=high_open)


def as_bool(name: str, v: Any) -> bool:
    """``v`` as a Python ``bool``: ``True``/``False`` or numpy's ``bool_``; not ``0``/``1``, not a
    string (``"false"`` would be truthy)."""
    p = _plain(v)
    if not isinstance(p, bool):
        raise TypeError(f"{name} must be True or False, got {shown(v)}")
    return p
