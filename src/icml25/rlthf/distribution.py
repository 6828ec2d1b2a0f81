"""The reward distribution of RLTHF (arXiv:2502.13417, §3.2): the sorted margins of a reward
model on its own training pairs, their zero crossing and the two bends.

The margin of a pair is ``m_i = r(x_i, y_i^+) - r(x_i, y_i^-)`` under the label currently attached
to it (the reward model's agreement with that label). Sorted in descending order the curve falls
steeply at the head (confident agreement), is flat in the middle (hard pairs) and falls steeply
at the tail (confident disagreement: likely wrong AI labels). The bends are located with Kneedle's
offline rule (Satopää et al., 2011: the point farthest from the chord of the normalised curve);
which of "knee" and "elbow" the paper attaches to which bend is not stated in the sources we could
read, so the API says ``upper_bend`` / ``lower_bend`` (docs/rlthf.md, "Decisions").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from icml25._validate import as_int, as_real

__all__ = ["RewardDistribution", "find_bend", "window_accuracy"]


def find_bend(y: Any) -> int:
    """Index of the bend of a monotone non-increasing curve ``y`` (length ``n``): the argmax of
    the distance between the min-max normalised curve and its chord (first index on ties).

    Returns 0 for ``1 <= n < 3``, for a flat curve and for a straight line (no point farther than
    ``1e-9`` from the chord: there is no bend, and floating-point noise must not pick one).
    ``ValueError`` for NaN/inf, an empty or a 2-D input. Torch tensors of any float dtype
    (bf16 included) are accepted. The curve is not checked for monotonicity; on a
    non-monotone one the rule still returns the point farthest from the chord.
    """
    if hasattr(y, "detach") and hasattr(y, "dtype"):  # a torch tensor (bf16 has no numpy form)
        y = y.detach().cpu().double().numpy()
    try:
        arr = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"find_bend takes a curve of real numbers, got {y!r:.80}") from None
    if arr.ndim != 1:
        raise ValueError(f"find_bend takes a 1-D curve, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        i = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise ValueError(f"find_bend: y[{i}] = {arr[i]} is not finite")
    n = len(arr)
    if n == 0:
        raise ValueError("find_bend takes a non-empty curve, got 0 points")
    if n < 3:
        return 0
    lo, hi = arr.min(), arr.max()
    if hi == lo:
        return 0
    yn = (arr - lo) / (hi - lo)
    xn = np.arange(n) / (n - 1)
    chord = yn[0] + (yn[-1] - yn[0]) * xn
    dist = np.abs(yn - chord)
    k = int(np.argmax(dist))
    return k if dist[k] > 1e-9 else 0


def _smooth(y: np.ndarray, window: int | None) -> np.ndarray:
    if window is None or window <= 1 or len(y) < window:
        return y
    kernel = np.ones(window) / window
    pad = window // 2
    padded = np.pad(y, (pad, window - 1 - pad), mode="edge")
    return np.convolve(padded, kernel, mode="valid")


class RewardDistribution:
    """Margins of ``len(indices)`` pairs, sorted in descending order (stable: ties keep the pairs'
    index order), with the zero crossing and the two bends.

    Args:
        margins: ``(M,)`` finite margins, one per pair in ``indices``.
        indices: ``(M,)`` pool indices of those pairs (default ``0..M-1``).
        smoothing_window: optional moving-average window applied before bend detection (very
            large pools); the zero crossing and the order use the raw margins.

    Attributes:
        order: positions -> pool indices (``indices`` sorted by margin, descending).
        sorted: the margins in that order.
        zero_crossing: ``k_0 = #{m > 0}``.
        upper_bend: ``k_u``, the bend of the positive head ``[0, k_0)`` (0 if ``k_0 < 3``).
        lower_bend: ``k_l``, ``k_0`` + the bend of the tail ``[k_0, M)`` (``M`` if ``M - k_0 < 3``).
    """

    def __init__(self, margins: Any, indices: Any = None, smoothing_window: int | None = None):
        try:
            m = np.asarray(margins, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"margins must be real numbers, got {margins!r:.80}") from None
        if m.ndim != 1:
            raise ValueError(f"margins must be 1-D, got shape {m.shape}")
        if len(m) == 0:
            raise ValueError("margins is empty: the distribution needs at least one scored pair")
        if not np.all(np.isfinite(m)):
            i = int(np.flatnonzero(~np.isfinite(m))[0])
            raise FloatingPointError(
                f"margin {i} is {m[i]}: the reward model diverged (NaN/inf margins)"
            )
        if indices is None:
            idx = np.arange(len(m), dtype=np.int64)
        else:
            raw = np.asarray(indices)
            if raw.size and not np.issubdtype(raw.dtype, np.integer):
                raise TypeError(f"indices must be integers (pool indices), got dtype {raw.dtype}")
            idx = raw.astype(np.int64)
        if idx.shape != m.shape:
            raise ValueError(f"indices has shape {idx.shape}, margins {m.shape}: one per pair")
        if idx.size and idx.min() < 0:
            raise ValueError(f"indices holds {int(idx.min())}; pool indices are >= 0")
        uniq, counts = np.unique(idx, return_counts=True)
        if (counts > 1).any():
            raise ValueError(
                f"indices holds pair {int(uniq[counts > 1][0])} more than once; one margin per pair"
            )
        if smoothing_window is not None:
            smoothing_window = as_int("smoothing_window", smoothing_window, 1)
        self.margins = m
        self.indices = idx
        # descending by margin, ties by pool index (lexsort: last key is primary)
        perm = np.lexsort((idx, -m))
        self.order = idx[perm]
        self.sorted = m[perm]
        self._pos = {int(i): p for p, i in enumerate(self.order)}
        M = len(m)
        self.zero_crossing = int((m > 0).sum())
        k0 = self.zero_crossing
        curve = _smooth(self.sorted, smoothing_window)
        self.upper_bend = find_bend(curve[:k0]) if k0 >= 3 else 0
        self.lower_bend = k0 + find_bend(curve[k0:]) if M - k0 >= 3 else M

    def __len__(self) -> int:
        return len(self.order)

    def position(self, i: int) -> int:
        """Position of pool index ``i`` on the sorted curve (``KeyError`` if it is not in it)."""
        try:
            return self._pos[int(i)]
        except KeyError:
            raise KeyError(f"pair {i} is not in this reward distribution") from None

    def positions(self, indices: Any) -> np.ndarray:
        """Positions of several pool indices."""
        return np.array([self.position(i) for i in np.asarray(indices).tolist()], dtype=np.int64)

    def bends(self) -> dict[str, int]:
        return {
            "zero_crossing": self.zero_crossing,
            "upper_bend": self.upper_bend,
            "lower_bend": self.lower_bend,
            "n": len(self),
        }


def window_accuracy(
    dist: RewardDistribution, ai_labels: Any, human_labels: Any, window_frac: float = 0.02
) -> np.ndarray:
    """Running accuracy of the AI labels against the human ones along the sorted curve: the mean
    of ``ai == human`` over a centred window of ``max(1, round(window_frac * M))`` positions, one
    value per position (the diagnostic of the paper's reward-distribution figure).

    ``ai_labels`` and ``human_labels`` are indexed by pool index (length ``>= max(indices) + 1``).
    """
    window_frac = as_real("window_frac", window_frac, low=0, high=1, low_open=True)
    from icml25.rlthf.data import check_binary_labels

    if np.ndim(ai_labels) != 1:
        raise ValueError(
            f"ai_labels must be 1-D (one label per pool pair), got shape {np.shape(ai_labels)}"
        )
    ai = check_binary_labels(ai_labels, len(ai_labels), "ai_labels", allow_invalid=True)
    hu = check_binary_labels(human_labels, len(ai), "human_labels", allow_invalid=True)
    if len(dist) and int(dist.order.max()) >= len(ai):
        raise ValueError(
            f"labels have {len(ai)} entries but the distribution holds pair {int(dist.order.max())}"
        )
    correct = (ai[dist.order] == hu[dist.order]).astype(np.float64)
    w = max(1, round(window_frac * len(correct)))
    if len(correct) == 0:
        return correct
    csum = np.concatenate([[0.0], np.cumsum(correct)])
    half = w // 2
    lo = np.clip(np.arange(len(correct)) - half, 0, len(correct))
    hi = np.clip(lo + w, 0, len(correct))
    lo = np.clip(hi - w, 0, len(correct))
    return (csum[hi] - csum[lo]) / (hi - lo)
