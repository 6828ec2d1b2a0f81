"""Targeted human annotation and back-off sanitization (RLTHF, arXiv:2502.13417, §3.3-§3.4).

:func:`select_targets` picks the pairs sent to the human from the reward distribution;
:func:`backoff_drop_mask` marks the AI-labelled pairs left out of the next reward-model training
set. The paper names both steps; the exact rules are our reconstruction (docs/rlthf.md,
"Decisions"), and every alternative is a strategy name here.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from icml25._validate import as_int, as_prob
from icml25.rlthf.distribution import RewardDistribution

__all__ = ["SANITIZE_RULES", "SELECTIONS", "backoff_drop_mask", "drop_position", "select_targets"]

#: ``bottom``: the most negative margins (the RM most strongly contradicts the AI label);
#: ``lower_bend_window``: the budget centred on the lower bend; ``uncertainty``: smallest ``|m|``
#: (active learning's margin sampling); ``random``; ``self_confidence``: lowest out-of-fold margin
#: (confident learning's ranking; needs ``oof_margins``).
SELECTIONS = ("bottom", "lower_bend_window", "uncertainty", "random", "self_confidence")
#: ``bend_backoff``: drop positions >= ``k_l - floor(ratio (k_l - k_u))``; ``upper_bend``: drop
#: positions >= ``k_u``; ``zero``: drop positions >= ``k_0`` (every AI label the RM disagrees
#: with); ``None``: no sanitization (the paper's ablation).
SANITIZE_RULES = ("bend_backoff", "upper_bend", "zero", None)


def _budget(budget: Any, m: int) -> int:
    return min(as_int("budget (pairs to annotate)", budget, 0), m)


def select_targets(
    dist: RewardDistribution,
    budget: int,
    strategy: Literal[
        "bottom", "lower_bend_window", "uncertainty", "random", "self_confidence"
    ] = "bottom",
    rng: np.random.Generator | int | None = None,
    oof_margins: Any = None,
) -> np.ndarray:
    """Pool indices of the ``budget`` pairs to send to the human (at most ``len(dist)``).

    ``strategy`` is one of :data:`SELECTIONS`; ``rng`` (a Generator or a seed) drives
    ``"random"``; ``oof_margins`` are the out-of-fold margins of ``dist.indices`` (same order)
    for ``"self_confidence"``. Ties are broken by pool index, so the result is deterministic.
    """
    if strategy not in SELECTIONS:
        raise ValueError(f"strategy must be one of {SELECTIONS}, got {strategy!r}")
    m = len(dist)
    b = _budget(budget, m)
    if b == 0:
        return np.zeros(0, dtype=np.int64)
    if strategy == "bottom":
        return dist.order[m - b :].copy()
    if strategy == "lower_bend_window":
        start = min(max(dist.lower_bend - b // 2, 0), m - b)
        return dist.order[start : start + b].copy()
    if strategy == "uncertainty":
        key = np.lexsort((dist.indices, np.abs(dist.margins)))
        return dist.indices[key[:b]].copy()
    if strategy == "random":
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        return np.sort(gen.choice(dist.indices, size=b, replace=False))
    if oof_margins is None:
        raise ValueError("strategy='self_confidence' needs oof_margins (out-of-fold margins)")
    oof = np.asarray(oof_margins, dtype=np.float64)
    if oof.shape != dist.margins.shape or not np.all(np.isfinite(oof)):
        raise ValueError(
            f"oof_margins must be {dist.margins.shape[0]} finite values aligned with "
            f"dist.indices, got shape {oof.shape}"
        )
    key = np.lexsort((dist.indices, oof))
    return dist.indices[key[:b]].copy()


def drop_position(
    dist: RewardDistribution,
    rule: Literal["bend_backoff", "upper_bend", "zero", None] = "bend_backoff",
    ratio: float = 0.5,
):
    """``p_drop``: the first position on the sorted curve that sanitization leaves out (``M``
    when nothing is dropped)."""
    if rule not in SANITIZE_RULES:
        raise ValueError(f"rule must be one of {SANITIZE_RULES}, got {rule!r}")
    ratio = as_prob("ratio (backoff_ratio)", ratio)
    m = len(dist)
    if rule is None:
        return m
    if rule == "zero":
        return dist.zero_crossing
    if rule == "upper_bend":
        return dist.upper_bend
    k_u, k_l = dist.upper_bend, dist.lower_bend
    return k_l - math.floor(float(ratio) * (k_l - k_u))


def backoff_drop_mask(
    dist: RewardDistribution,
    rule: Literal["bend_backoff", "upper_bend", "zero", None] = "bend_backoff",
    ratio: float = 0.5,
    protected: Any = None,
) -> np.ndarray:
    """Boolean mask over ``dist.indices`` (its input order): True for pairs left out of the next
    training set, i.e. at position ``>= p_drop`` (:func:`drop_position`). Pool indices in
    ``protected`` (the human-annotated ones) are never dropped."""
    p = drop_position(dist, rule, ratio)
    pos = np.empty(len(dist), dtype=np.int64)
    pos[np.lexsort((dist.indices, -dist.margins))] = np.arange(len(dist))
    drop = pos >= p
    if protected is not None:
        prot = np.asarray(protected)
        if prot.size and (
            prot.ndim != 1
            or not np.issubdtype(prot.dtype, np.integer)
            or np.issubdtype(prot.dtype, np.bool_)
        ):
            raise TypeError(
                f"protected must be a 1-D sequence of pool indices (integers), got dtype "
                f"{prot.dtype} shape {prot.shape}; a boolean mask would be read as indices 0/1"
            )
        if prot.size:
            drop &= ~np.isin(dist.indices, prot.astype(np.int64))
    return drop
