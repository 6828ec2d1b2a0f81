"""Inequality of incomes or payouts: Gini, Theil, top shares and the Lorenz curve.

Interpretation tool; the paper does not specify this mechanism. (Hazra, Majumder and
Chakrabarty argue that AI raises income inequality; these are the standard measures used to
quantify such a claim, docs/future_of_work.md.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25._validate import as_real

__all__ = ["gini", "lorenz", "theil", "top_share"]


def _incomes(
    x: Any, weights: Any, allow_negative: bool, hint: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(x, "detach") and hasattr(x, "dtype"):  # a torch tensor, bfloat16 included
        x = x.detach().cpu().double().numpy()
    arr = np.asarray(x, dtype=object)
    if arr.ndim > 1:
        raise ValueError(f"incomes must be one-dimensional, got shape {arr.shape}")
    a = np.asarray([as_real("an income", v, finite=False) for v in np.ravel(arr)], dtype=float)
    if a.size == 0:
        raise ValueError("incomes are empty")
    if not np.all(np.isfinite(a)):
        raise ValueError("incomes hold NaN or inf")
    if not allow_negative and np.any(a < 0):
        extra = "; pass allow_negative=True to measure net positions" if hint else ""
        raise ValueError(f"incomes must be >= 0 (min {a.min():g}){extra}")
    if weights is None:
        w = np.ones_like(a)
    else:
        w = np.asarray(weights, dtype=float).ravel()
        if w.shape != a.shape:
            raise ValueError(f"weights must match the incomes' length {a.size}, got {w.size}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
            raise ValueError("weights must be finite, non-negative and not all zero")
    return a, w / w.sum()


def gini(x: Any, weights: Any = None, *, allow_negative: bool = False) -> float:
    """Gini coefficient ``Σ_i Σ_j w_i w_j |x_i - x_j| / (2 μ)`` with population weights ``w``
    (normalised; default equal): 0 when everyone has the same, ``(n - 1) / n`` when one of ``n``
    has everything. All-zero incomes give 0.
    Interpretation tool; the paper does not specify this mechanism."""
    a, w = _incomes(x, weights, allow_negative, hint=True)
    mu = float(np.dot(w, a))
    if mu == 0:
        if np.all(a == 0):
            return 0.0
        raise ValueError("the mean income is 0 with non-zero incomes: the Gini is undefined")
    order = np.argsort(a)
    a, w = a[order], w[order]
    # Σ_i Σ_j w_i w_j |a_i - a_j| = 2 Σ_i w_i a_i (W_<i - W_>i), W_<i the weight below i
    cw = np.cumsum(w)
    below = cw - w
    above = 1.0 - cw
    g = float(np.sum(w * a * (below - above)) / mu)
    return max(g, 0.0) if not allow_negative else g  # rounding can give -1e-17 for equal incomes


def theil(x: Any, weights: Any = None) -> float:
    """Theil T index ``Σ_i w_i (x_i/μ) ln(x_i/μ)`` (zero incomes contribute 0).
    Interpretation tool; the paper does not specify this mechanism."""
    a, w = _incomes(x, weights, False)
    mu = float(np.dot(w, a))
    if mu == 0:
        return 0.0
    r = a / mu
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(r > 0, r * np.log(np.where(r > 0, r, 1.0)), 0.0)
    return float(np.dot(w, terms))


def top_share(x: Any, q: float = 0.1, weights: Any = None) -> float:
    """Share of the total held by the richest fraction ``q`` of the population (interpolating
    inside the unit that straddles the cut).
    Interpretation tool; the paper does not specify this mechanism."""
    q = as_real("q", q, low=0, high=1, low_open=True)
    a, w = _incomes(x, weights, False)
    tot = float(np.dot(w, a))
    if tot == 0:
        return 0.0
    order = np.argsort(-a)
    a, w = a[order], w[order]
    need, got = float(q), 0.0
    for ai, wi in zip(a, w):
        take = min(wi, need)
        got += take * ai
        need -= take
        if need <= 1e-15:
            break
    return float(got / tot)


def lorenz(x: Any, weights: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """The Lorenz curve: ``(population share, income share)``, both from 0 to 1.
    Interpretation tool; the paper does not specify this mechanism."""
    a, w = _incomes(x, weights, False)
    order = np.argsort(a)
    a, w = a[order], w[order]
    pop = np.concatenate([[0.0], np.cumsum(w)])
    inc = np.concatenate([[0.0], np.cumsum(w * a)])
    return pop, inc / inc[-1] if inc[-1] > 0 else pop.copy()
