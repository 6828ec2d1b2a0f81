"""Queries and answers (docs/distinguishability.md): pairwise comparisons (PCQ) and distinguishability queries (DQ).

A PCQ shows two segments; the answer ``y in {1, 0, 1/2}`` says the first / the second is preferred /
they are equally preferable. A DQ shows two pairs; the answer says which pair is easier to
distinguish (``d in {1, 2, 1/2}``), then gives the preference ``y`` on that pair only (on a pair
chosen uniformly at random when ``d = 1/2``; its index is ``d_pref``). Segments are indices into a
:class:`~icml25.distinguishability.segments.SegmentBuffer`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["AnswerBuffer", "DQAnswer", "DistinguishabilityQuery", "PCQAnswer", "PairwiseQuery"]


@dataclass(frozen=True)
class PairwiseQuery:
    """A pairwise comparison query (PCQ) between segments ``i0`` and ``i1`` of a segment buffer."""

    i0: int
    i1: int


@dataclass(frozen=True)
class DistinguishabilityQuery:
    """A distinguishability query (DQ): which of two pairwise queries ``q1``, ``q2`` is easier to
    tell apart, then a preference on that pair."""

    q1: PairwiseQuery
    q2: PairwiseQuery

    @property
    def segments(self) -> tuple[int, int, int, int]:
        return (self.q1.i0, self.q1.i1, self.q2.i0, self.q2.i1)


def _check_y(y: float) -> float:
    if y not in (0.0, 0.5, 1.0):
        raise ValueError(f"a preference answer y must be 0, 0.5 or 1, got {y!r}")
    return float(y)


@dataclass(frozen=True)
class PCQAnswer:
    """The answer to a pairwise query: ``y`` = 1 (first segment preferred), 0 (second) or 0.5
    (equally preferable)."""

    y: float  # 1: the first segment preferred, 0: the second, 0.5: equally preferable

    def __post_init__(self) -> None:
        _check_y(self.y)


@dataclass(frozen=True)
class DQAnswer:
    """The answer to a distinguishability query: ``d`` the easier pair (1, 2, or 0.5 for equally
    easy), ``d_pref`` the pair the preference was given on, ``y`` that preference."""

    d: float  # 1 or 2: the easier pair; 0.5: equally easy
    d_pref: int  # the pair the preference was given on (= d unless d = 0.5)
    y: float  # preference on pair d_pref (1: its first segment)

    def __post_init__(self) -> None:
        if self.d not in (1, 2, 0.5):
            raise ValueError(f"d must be 1, 2 or 0.5, got {self.d!r}")
        if self.d_pref not in (1, 2):
            raise ValueError(f"d_pref must be 1 or 2, got {self.d_pref!r}")
        if self.d in (1, 2) and self.d_pref != self.d:
            raise ValueError(f"d_pref ({self.d_pref}) must equal d ({self.d}) unless d = 0.5")
        _check_y(self.y)

    @classmethod
    def from_index(cls, d_index: int, y: float) -> DQAnswer:
        """The 0/1 index form (0: first pair, 1: second pair), accepted only through this call."""
        if d_index not in (0, 1):
            raise ValueError(f"d_index must be 0 or 1, got {d_index!r}")
        return cls(float(d_index + 1), d_index + 1, y)


_FIELDS = ("pcq_idx", "pcq_y", "dq_idx", "dq_d", "dq_pref", "dq_y")


class AnswerBuffer:
    """Answered queries as index tensors and targets, appended round by round."""

    def __init__(self) -> None:
        self.pcq_idx: list[tuple[int, int]] = []
        self.pcq_y: list[float] = []
        self.dq_idx: list[tuple[int, int, int, int]] = []
        self.dq_d: list[float] = []
        self.dq_pref: list[int] = []
        self.dq_y: list[float] = []

    def add(self, queries, answers) -> int:
        """Store the answered ones (``None`` = skipped); returns how many were stored."""
        if len(queries) != len(answers):
            raise ValueError(f"{len(queries)} queries but {len(answers)} answers")
        stored = 0
        for q, a in zip(queries, answers):
            if a is None:
                continue
            if isinstance(q, PairwiseQuery) and isinstance(a, PCQAnswer):
                self.pcq_idx.append((q.i0, q.i1))
                self.pcq_y.append(a.y)
            elif isinstance(q, DistinguishabilityQuery) and isinstance(a, DQAnswer):
                self.dq_idx.append(q.segments)
                self.dq_d.append(float(a.d))
                self.dq_pref.append(int(a.d_pref))
                self.dq_y.append(a.y)
            else:
                raise TypeError(f"answer {type(a).__name__} does not fit query {type(q).__name__}")
            stored += 1
        return stored

    def __len__(self) -> int:
        return len(self.pcq_y) + len(self.dq_y)

    def tensors(self) -> dict[str, Tensor]:
        long = torch.long
        return {
            "pcq_idx": torch.tensor(self.pcq_idx, dtype=long).reshape(-1, 2),
            "pcq_y": torch.tensor(self.pcq_y, dtype=torch.float64),
            "dq_idx": torch.tensor(self.dq_idx, dtype=long).reshape(-1, 4),
            "dq_d": torch.tensor(self.dq_d, dtype=torch.float64),
            "dq_pref": torch.tensor(self.dq_pref, dtype=torch.float64),
            "dq_y": torch.tensor(self.dq_y, dtype=torch.float64),
        }

    def state_dict(self) -> dict:
        """Plain lists, for saving."""
        return {k: list(getattr(self, k)) for k in _FIELDS}

    @classmethod
    def from_state(cls, state: dict) -> AnswerBuffer:
        buf = cls()
        for k in _FIELDS:
            v = state[k]
            setattr(buf, k, [tuple(x) for x in v] if k.endswith("_idx") else list(v))
        return buf

    def segment_ids(self) -> Tensor:
        """Every segment that occurs in a stored answer (sorted, unique)."""
        t = self.tensors()
        return torch.unique(torch.cat([t["pcq_idx"].reshape(-1), t["dq_idx"].reshape(-1)]))
