"""Unlabelled preference pools and TRL's preference format (RLTHF, arXiv:2502.13417, §3).

A pool holds ``N`` pairs ``(x_i, a_i, b_i)``; a label ``z_i = 1`` means ``a_i`` is preferred, ``0``
means ``b_i`` is. :meth:`PreferencePairs.to_trl` orients pairs by labels into TRL's rows
(``prompt``/``chosen``/``rejected``, or the implicit-prompt ``chosen``/``rejected``, plain strings
or chat-message lists) and :meth:`PreferencePairs.from_trl` reads such rows back with the A/B
order randomised, so the exported labels are not all 1 (cleanlab and any label-noise tool need
both classes).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PreferencePairs", "check_binary_labels", "check_indices"]


def _texts(name: str, values: Any) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a list of strings, got {type(values).__name__}")
    out = list(values)
    for i, v in enumerate(out):
        if not isinstance(v, str):
            raise TypeError(f"{name}[{i}] must be a string, got {type(v).__name__}: {v!r:.60}")
    return out


def check_binary_labels(labels: Any, n: int, name: str = "labels", *, allow_invalid: bool = False):
    """``labels`` as an ``int8`` array of length ``n`` with values in {0, 1} (and -1 = tie/invalid
    where ``allow_invalid``). ``ValueError`` naming the length or the first bad index."""
    if labels is None:
        raise ValueError(f"{name} is required, got None")
    try:
        raw = np.asarray(labels, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be numbers 0/1, got {labels!r:.80}") from None
    if raw.ndim != 1 or len(raw) != n:
        raise ValueError(f"{name} has shape {raw.shape}; expected ({n},), one label per pair")
    ok = (raw == 0) | (raw == 1) | ((raw == -1) if allow_invalid else False)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        valid = "0, 1 or -1 (tie/invalid)" if allow_invalid else "0 or 1"
        raise ValueError(f"{name}[{i}] = {raw[i]:g}; labels must be {valid} (1 = response A wins)")
    return raw.astype(np.int8)


def check_indices(indices: Any, n: int, name: str = "indices") -> np.ndarray:
    """``indices`` as a 1-D ``int64`` array of valid pair indices (``ValueError`` naming the first
    out-of-range one; ``None`` means all ``n``)."""
    if indices is None:
        return np.arange(n, dtype=np.int64)
    arr = np.asarray(indices)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise TypeError(f"{name} must be a 1-D sequence of integers, got {arr.dtype} {arr.shape}")
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= n)
    if bad.any():
        raise ValueError(f"{name} holds {int(arr[bad][0])}, outside 0..{n - 1}")
    return arr


@dataclass
class PreferencePairs:
    """``N`` prompts with two candidate responses each, and optionally their human labels.

    Args:
        prompts, responses_a, responses_b: lists of ``N`` strings.
        human_labels: ``None`` or ``N`` labels in {0, 1} (1 = ``responses_a`` preferred), e.g. the
            dataset's own human preference, used as the human oracle and for evaluation.
    """

    prompts: list[str]
    responses_a: list[str]
    responses_b: list[str]
    human_labels: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.prompts = _texts("prompts", self.prompts)
        self.responses_a = _texts("responses_a", self.responses_a)
        self.responses_b = _texts("responses_b", self.responses_b)
        lens = (len(self.prompts), len(self.responses_a), len(self.responses_b))
        if len(set(lens)) != 1:
            raise ValueError(
                f"prompts, responses_a and responses_b need one entry per pair; got lengths {lens}"
            )
        if self.human_labels is not None:
            self.human_labels = check_binary_labels(self.human_labels, lens[0], "human_labels")

    def __len__(self) -> int:
        return len(self.prompts)

    def fingerprint(self) -> str:
        """A short hash of the texts (checkpoints refuse to resume on another pool)."""
        h = hashlib.sha256()
        for p, a, b in zip(self.prompts, self.responses_a, self.responses_b):
            for t in (p, a, b):
                h.update(t.encode("utf-8"))
                h.update(b"\x00")
        return h.hexdigest()[:16]

    def identical(self) -> np.ndarray:
        """Boolean mask of the pairs whose two responses are the same text (no preference)."""
        return np.array([a == b for a, b in zip(self.responses_a, self.responses_b)], dtype=bool)

    def subset(self, indices: Any) -> PreferencePairs:
        """The pairs at ``indices`` (their human labels with them)."""
        idx = check_indices(indices, len(self))
        h = None if self.human_labels is None else self.human_labels[idx]
        return PreferencePairs(
            [self.prompts[i] for i in idx],
            [self.responses_a[i] for i in idx],
            [self.responses_b[i] for i in idx],
            h,
        )

    def oriented(self, indices: Any, labels: Any) -> tuple[list[str], list[str], list[str]]:
        """``(prompts, chosen, rejected)`` of the pairs at ``indices`` under ``labels``."""
        idx = check_indices(indices, len(self))
        z = check_binary_labels(labels, len(idx))
        ch = [self.responses_a[i] if zi == 1 else self.responses_b[i] for i, zi in zip(idx, z)]
        rj = [self.responses_b[i] if zi == 1 else self.responses_a[i] for i, zi in zip(idx, z)]
        return [self.prompts[i] for i in idx], ch, rj

    # -- TRL -------------------------------------------------------------------------------------
    def to_trl(
        self,
        indices: Any = None,
        labels: Any = None,
        *,
        implicit_prompt: bool = False,
        conversational: bool = False,
        weights: Any = None,
        separator: str = "\n\n",
    ) -> list[dict[str, Any]]:
        """TRL preference rows of the pairs at ``indices`` (default all) oriented by ``labels``
        (default the human labels).

        Explicit prompt (default): ``{prompt, chosen, rejected}``, what ``DPOTrainer`` and
        ``RewardTrainer`` take; plain strings get ``separator`` appended to the prompt, because
        TRL joins prompt and response with no separator. ``implicit_prompt=True``: ``{chosen,
        rejected}`` with the prompt prepended to both. ``conversational=True``: chat-message lists
        (``[{"role": "user", ...}]`` and ``[{"role": "assistant", ...}]``) instead of strings, the
        rendering ``icml25.llm.HFRewardModel`` scores. ``weights`` adds a ``weight`` column (the
        amplification weights of :class:`~icml25.rlthf.trl_trainer.WeightedRewardTrainer`).
        """
        idx = check_indices(indices, len(self))
        if labels is None:
            if self.human_labels is None:
                raise ValueError("to_trl needs labels: these pairs have no human_labels")
            labels = self.human_labels[idx]
        prompts, chosen, rejected = self.oriented(idx, labels)
        w = None
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (len(idx),) or not np.all(np.isfinite(w)) or (w < 0).any():
                raise ValueError(f"weights must be {len(idx)} finite values >= 0, got {w!r:.80}")
        rows = []
        for j, (p, c, r) in enumerate(zip(prompts, chosen, rejected)):
            if conversational:
                user = [{"role": "user", "content": p}]
                ca = [{"role": "assistant", "content": c}]
                ra = [{"role": "assistant", "content": r}]
                row = (
                    {"chosen": user + ca, "rejected": user + ra}
                    if implicit_prompt
                    else {"prompt": user, "chosen": ca, "rejected": ra}
                )
            elif implicit_prompt:
                row = {"chosen": p + separator + c, "rejected": p + separator + r}
            else:
                row = {"prompt": p + separator, "chosen": c, "rejected": r}
            if w is not None:
                row["weight"] = float(w[j])
            rows.append(row)
        return rows

    @classmethod
    def from_trl(
        cls, rows: Any, *, seed: int = 0, separator: str = "\n\n", shuffle_order: bool = True
    ) -> PreferencePairs:
        """Pairs from TRL preference rows (a list of dicts, a ``datasets.Dataset``, a path to
        JSONL/JSON/CSV/Parquet or a ``save_to_disk`` folder): ``chosen`` becomes response A or B
        by a coin flip seeded by ``seed`` (``shuffle_order=False``: always A), and the label
        records which. A trailing ``separator`` on string prompts (as :meth:`to_trl` writes it) is
        removed. Conversational rows: a one-message prompt becomes its content; a multi-turn
        prompt is kept whole, rendered as ``role: content`` lines (the reward model sees the
        conversation, and :meth:`to_trl` writes it back as one user message); the response is
        the assistant text."""
        from icml25.preference import load_preferences

        if isinstance(rows, (str, os.PathLike)) or not _is_record_list(rows):
            rows = load_preferences(rows)
        rng = np.random.default_rng(seed)
        prompts, a, b, z = [], [], [], []
        for i, row in enumerate(rows):
            p, c, r = _unpack(i, row, separator)
            flip = bool(rng.integers(2)) if shuffle_order else False
            prompts.append(p)
            a.append(r if flip else c)
            b.append(c if flip else r)
            z.append(0 if flip else 1)
        if not prompts:
            raise ValueError("no preference rows given")
        return cls(prompts, a, b, np.asarray(z, dtype=np.int8))


def _is_record_list(rows: Any) -> bool:
    return isinstance(rows, (list, tuple)) and all(hasattr(r, "keys") for r in rows)


def _message_text(i: int, what: str, value: Any, role: str | None) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        msgs = [m for m in value if m.get("role") == role] if role else value
        if not msgs:
            raise ValueError(f"row {i}: {what} has no {role!r} message")
        if len(msgs) == 1:
            return str(msgs[0].get("content", ""))
        return "\n".join(f"{m.get('role')}: {m.get('content', '')}" for m in msgs)
    raise TypeError(f"row {i}: {what} must be a string or a list of chat messages")


def _unpack(i: int, row: Any, separator: str) -> tuple[str, str, str]:
    row = dict(row) if not isinstance(row, dict) and hasattr(row, "keys") else row
    if not isinstance(row, dict) or "chosen" not in row or "rejected" not in row:
        raise ValueError(f"row {i} must have 'chosen' and 'rejected' (TRL's preference format)")
    c, r = row["chosen"], row["rejected"]
    if "prompt" in row and row["prompt"] is not None:
        p = _message_text(i, "prompt", row["prompt"], None)
        if isinstance(row["prompt"], str) and separator and p.endswith(separator):
            p = p[: -len(separator)]
        return (
            p,
            _message_text(i, "chosen", c, "assistant"),
            _message_text(i, "rejected", r, "assistant"),
        )
    # implicit prompt: the common prefix of the two texts (conversational: the shared turns)
    if isinstance(c, list) and isinstance(r, list):
        k = 0
        while k < min(len(c), len(r)) and c[k] == r[k]:
            k += 1
        return (
            _message_text(i, "prompt", c[:k], None) if k else "",
            _message_text(i, "chosen", c[k:], "assistant"),
            _message_text(i, "rejected", r[k:], "assistant"),
        )
    if not isinstance(c, str) or not isinstance(r, str):
        raise TypeError(f"row {i}: chosen and rejected must both be strings or message lists")
    if separator:
        pc, sep, rest_c = c.partition(separator)
        pr, _, rest_r = r.partition(separator)
        if sep and pc == pr:
            return pc, rest_c, rest_r
    k = len(os.path.commonprefix([c, r]))
    return c[:k], c[k:], r[k:]
