"""Labelers (docs/distinguishability.md): the B-Pref scripted teacher, its extension to distinguishability queries,
and a callback teacher for a human or any other labeler.

Orientation: ``y = 1`` means the first segment of the pair is preferred; ``d = 1`` the first pair
is easier to distinguish. Random draws (numpy ``Generator``), in this order per batch: the
preference Bernoulli draws (``beta > 0``), the mistake draws; for DQs first the strength draws
(``beta_dist > 0``), the strength-mistake draws and the random pair for ``d = 1/2``. One uniform
vector per stage over the whole batch, so results do not depend on which queries are skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from icml25.distinguishability.queries import (
    DistinguishabilityQuery,
    DQAnswer,
    PairwiseQuery,
    PCQAnswer,
)
from icml25.distinguishability.segments import SegmentBuffer

__all__ = ["CallbackTeacher", "ScriptedTeacher", "Teacher"]

PRESETS = {  # B-Pref's scripted teachers
    "oracle": {"beta": -1.0},
    "stoc": {"beta": 1.0},
    "mistake": {"eps_mistake": 0.1},
    "skip": {"eps_skip": 0.1},
    "equal": {"eps_equal": 0.1},
    "myopic": {"gamma": 0.9},
}


class Teacher(Protocol):
    """What a labeler provides: ``answer_pcq`` and ``answer_dq`` for lists of queries over a segment
    buffer (``None`` for a query it skips)."""

    def answer_pcq(
        self, buf: SegmentBuffer, queries: list[PairwiseQuery]
    ) -> list[PCQAnswer | None]: ...

    def answer_dq(
        self, buf: SegmentBuffer, queries: list[DistinguishabilityQuery]
    ) -> list[DQAnswer | None]: ...


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


class ScriptedTeacher:
    """B-Pref's scripted teacher (``get_label``) for PCQs, extended to DQs (docs/distinguishability.md).

    Args:
        beta: Boltzmann rationality on returns; ``<= 0`` answers rationally (B-Pref ``teacher_beta``).
        gamma: myopic weights ``gamma^(H - t)`` on the returns that decide the answer.
        eps_mistake: probability of flipping an answer (and, for DQs, the easier-pair answer).
        eps_skip, eps_equal: thresholds ``margin * eps`` (set by :meth:`set_thresholds`): skip when
            every shown undiscounted return is below ``thres_skip``; answer "equal" when the
            undiscounted returns differ by less than ``thres_equal``.
        beta_dist: rationality of the easier-pair answer (default: ``beta``).
        bpref_compat: reproduce B-Pref's thresholds (``margin * eps`` at the first call of
            ``set_thresholds``, ``margin * eps^2`` afterwards).
        ties: a rational answer on exactly equal returns: ``"first"`` (B-Pref: the first segment)
            or ``"half"`` (imitation's synthetic gatherer: ``y = 1/2``); the same for the easier
            pair of a DQ (``d = 1`` or ``d = 1/2``).
        rng: ``numpy.random.Generator`` or seed.

    The "equal" answers compare undiscounted returns (B-Pref's ``thres_equal`` on
    ``sum r_t``) in both query types: the pair ``|G_a - G_b| < thres_equal`` for PCQs, both pairs'
    undiscounted strengths below it for "equally easy" DQs; the myopic ``gamma`` only enters the
    preference and easier-pair decisions, as in B-Pref.
    """

    def __init__(
        self,
        beta: float = -1.0,
        gamma: float = 1.0,
        eps_mistake: float = 0.0,
        eps_skip: float = 0.0,
        eps_equal: float = 0.0,
        beta_dist: float | None = None,
        bpref_compat: bool = False,
        rng: np.random.Generator | int | None = None,
        ties: str = "first",
    ) -> None:
        for name, v in (
            ("eps_mistake", eps_mistake),
            ("eps_skip", eps_skip),
            ("eps_equal", eps_equal),
        ):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {v}")
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        if ties not in ("first", "half"):
            raise ValueError(f"ties must be 'first' or 'half', got {ties!r}")
        self.ties = ties
        self.beta, self.gamma = float(beta), float(gamma)
        self.eps_mistake, self.eps_skip, self.eps_equal = eps_mistake, eps_skip, eps_equal
        self.beta_dist = self.beta if beta_dist is None else float(beta_dist)
        self.bpref_compat = bpref_compat
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        self.thres_skip = 0.0
        self.thres_equal = 0.0
        self._calls = 0
        self.answered = 0
        self.errors = 0  # answers that disagree with the noise-free teacher (the "easiness" log)

    @classmethod
    def preset(cls, name: str, **kw) -> ScriptedTeacher:
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; valid: {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **kw})

    @classmethod
    def relative(cls, buf: SegmentBuffer, beta_rel: float = 5.0, **kw) -> ScriptedTeacher:
        """A Boltzmann teacher with ``beta = beta_rel / std(R over buf)`` (docs/distinguishability.md "Scale")."""
        std = float(buf.returns(kw.get("gamma", 1.0)).std())
        if not std > 0:
            raise ValueError("the buffer's returns have zero spread; cannot scale beta")
        beta = beta_rel / std
        return cls(beta=beta, **{"beta_dist": beta, **kw})

    def set_thresholds(self, margin: float) -> None:
        """``margin`` = mean true return of recent episodes scaled to a segment (docs/distinguishability.md)."""
        power = 2 if (self.bpref_compat and self._calls > 0) else 1
        self.thres_skip = margin * self.eps_skip**power
        self.thres_equal = margin * self.eps_equal**power
        self._calls += 1

    # -- the PCQ rule on arrays of undiscounted (G) and discounted (R) returns ------------------
    def _pcq_rule(self, G0, G1, R0, R1):
        n = len(G0)
        if self.beta > 0:
            u = self.rng.random(n)
            y = (u < _sigmoid(self.beta * (R0 - R1))).astype(float)
        else:
            y = (R0 >= R1).astype(float)  # B-Pref: ties go to the first segment
            if self.ties == "half":
                y = np.where(R0 == R1, 0.5, y)
        truth = (R0 >= R1).astype(float)
        flip = self.rng.random(n) < self.eps_mistake
        y = np.where(flip, 1.0 - y, y)
        equal = np.abs(G0 - G1) < self.thres_equal if self.thres_equal > 0 else np.zeros(n, bool)
        wrong = (y != truth) & ~equal & (R0 != R1)
        return np.where(equal, 0.5, y), wrong

    def _returns(self, buf: SegmentBuffer, idx: np.ndarray):
        pos = buf.positions(idx).numpy()  # segment ids -> rows (raises on evicted ids)
        G = buf.returns(1.0).double().numpy()
        R = G if self.gamma == 1.0 else buf.returns(self.gamma).double().numpy()
        return G[pos], R[pos]

    def answer_pcq(
        self, buf: SegmentBuffer, queries: list[PairwiseQuery]
    ) -> list[PCQAnswer | None]:
        if not queries:
            return []
        idx = np.array([[q.i0, q.i1] for q in queries])
        G, R = self._returns(buf, idx)
        skip = (
            np.maximum(G[:, 0], G[:, 1]) < self.thres_skip
            if self.thres_skip > 0
            else np.zeros(len(queries), bool)
        )
        y, wrong = self._pcq_rule(G[:, 0], G[:, 1], R[:, 0], R[:, 1])
        self.answered += int((~skip).sum())
        self.errors += int((wrong & ~skip).sum())
        return [None if s else PCQAnswer(float(v)) for s, v in zip(skip, y)]

    def answer_dq(
        self, buf: SegmentBuffer, queries: list[DistinguishabilityQuery]
    ) -> list[DQAnswer | None]:
        if not queries:
            return []
        n = len(queries)
        idx = np.array([q.segments for q in queries])
        G, R = self._returns(buf, idx)
        skip = (self.thres_skip > G).all(1) if self.thres_skip > 0 else np.zeros(n, bool)
        S1, S2 = np.abs(R[:, 0] - R[:, 1]), np.abs(R[:, 2] - R[:, 3])
        U1, U2 = np.abs(G[:, 0] - G[:, 1]), np.abs(G[:, 2] - G[:, 3])  # undiscounted: "equal"
        if self.beta_dist > 0:
            u = self.rng.random(n)
            d = np.where(u < _sigmoid(self.beta_dist * (S1 - S2)), 1.0, 2.0)
        else:
            d = np.where(S1 >= S2, 1.0, 2.0)  # ties -> the first pair
        d_truth = np.where(S1 >= S2, 1.0, 2.0)
        flip = self.rng.random(n) < self.eps_mistake
        d = np.where(flip, 3.0 - d, d)
        both_equal = (
            (self.thres_equal > U1) & (self.thres_equal > U2)
            if self.thres_equal > 0
            else np.zeros(n, bool)
        )
        if self.ties == "half" and self.beta_dist <= 0:
            both_equal |= S1 == S2
        coin = np.where(self.rng.random(n) < 0.5, 1, 2)
        d_pref = np.where(both_equal, coin, d).astype(int)
        d = np.where(both_equal, 0.5, d)
        rows = np.arange(n)
        a, b = 2 * (d_pref - 1), 2 * (d_pref - 1) + 1
        y, wrong_y = self._pcq_rule(G[rows, a], G[rows, b], R[rows, a], R[rows, b])
        wrong_d = (d != d_truth) & ~both_equal & (S1 != S2)
        self.answered += int((~skip).sum())
        self.errors += int(((wrong_d | wrong_y) & ~skip).sum())
        return [
            None if skip[i] else DQAnswer(float(d[i]), int(d_pref[i]), float(y[i]))
            for i in range(n)
        ]

    @property
    def error_rate(self) -> float:
        return self.errors / self.answered if self.answered else 0.0


class CallbackTeacher:
    """Any labeler as a callable, e.g. a human at a prompt.

    ``pcq_fn(seg0, seg1) -> y | None`` and ``dq_fn((seg_1a, seg_1b), (seg_2a, seg_2b)) -> (d, y) | None``
    where each ``seg`` is a dict with ``obs (H, d_s)`` and ``act (H, d_a)`` tensors; ``d in {1, 2,
    0.5}`` (for 0.5 the preference is taken on a random pair, drawn here), ``y in {1, 0, 0.5}``."""

    def __init__(
        self,
        pcq_fn: Callable | None = None,
        dq_fn: Callable | None = None,
        rng: np.random.Generator | int | None = None,
    ) -> None:
        self.pcq_fn, self.dq_fn = pcq_fn, dq_fn
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

    @staticmethod
    def _seg(buf: SegmentBuffer, i: int) -> dict[str, torch.Tensor]:
        p = int(buf.positions([i])[0])
        return {"obs": buf.obs[p], "act": buf.act[p]}

    def answer_pcq(self, buf, queries):
        if self.pcq_fn is None:
            raise ValueError("this CallbackTeacher has no pcq_fn")
        out = []
        for q in queries:
            y = self.pcq_fn(self._seg(buf, q.i0), self._seg(buf, q.i1))
            out.append(None if y is None else PCQAnswer(_answer("y", y, (0.0, 0.5, 1.0))))
        return out

    def answer_dq(self, buf, queries):
        if self.dq_fn is None:
            raise ValueError("this CallbackTeacher has no dq_fn")
        out = []
        for q in queries:
            ans = self.dq_fn(
                (self._seg(buf, q.q1.i0), self._seg(buf, q.q1.i1)),
                (self._seg(buf, q.q2.i0), self._seg(buf, q.q2.i1)),
            )
            if ans is None:
                out.append(None)
                continue
            if not isinstance(ans, (tuple, list)) or len(ans) != 2:
                raise ValueError(f"dq_fn must return (d, y) or None, got {ans!r}")
            d = _answer("d", ans[0], (1.0, 2.0, 0.5))
            y = _answer("y", ans[1], (0.0, 0.5, 1.0))
            d_pref = int(self.rng.integers(1, 3)) if d == 0.5 else int(d)
            out.append(DQAnswer(d, d_pref, y))
        return out


def _answer(name: str, v, allowed: tuple[float, ...]) -> float:
    """A labeler's answer as a float in ``allowed``; booleans and other types are refused (a
    ``True`` is not a preference)."""
    if isinstance(v, torch.Tensor) and v.numel() == 1 and v.dtype != torch.bool:
        v = v.item()
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ValueError(f"the labeler's {name} must be one of {allowed} (a number), got {v!r}")
    if float(v) not in allowed:
        raise ValueError(f"the labeler's {name} must be one of {allowed}, got {v!r}")
    return float(v)
