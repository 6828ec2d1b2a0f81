"""Judging answers and the attack metrics of DPS's evaluation (arXiv:2412.12722, §5)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "LabelJudge",
    "attack_success_rate",
    "clean_accuracy",
    "misleading_asr",
    "relative_asr_reduction",
]


class LabelJudge:
    """The first digit (``0``-``9``) in an answer, or ``None`` ("no answer": neither correct nor
    an attack success)."""

    _DIGIT = re.compile(r"\d")

    def __call__(self, answer: str) -> int | None:
        m = self._DIGIT.search(str(answer))
        return int(m.group()) if m else None


def _check(pred: Sequence[Any], labels: Sequence[Any]) -> None:
    if len(pred) != len(labels) or not len(pred):
        raise ValueError(
            f"{len(pred)} predictions for {len(labels)} labels (both must be non-empty and equal)"
        )


def clean_accuracy(pred: Sequence[int | None], labels: Sequence[int]) -> float:
    """Share of answers equal to the label (``None`` counts as wrong)."""
    _check(pred, labels)
    return sum(p == y for p, y in zip(pred, labels)) / len(labels)


def attack_success_rate(pred: Sequence[int | None], targets: Sequence[int]) -> float:
    """Targeted ASR: share of answers equal to the attacker's target."""
    _check(pred, targets)
    return sum(p == t for p, t in zip(pred, targets)) / len(targets)


def misleading_asr(
    pred_attacked: Sequence[int | None], labels: Sequence[int], clean_correct: Sequence[bool]
) -> float:
    """P(answer != label | the undefended model answered the clean image correctly): the paper's
    misleading-attack notion, untargeted. ``None`` answers are not successes."""
    _check(pred_attacked, labels)
    idx = [i for i, ok in enumerate(clean_correct) if ok]
    if not idx:
        raise ValueError("no image was answered correctly when clean: misleading ASR is undefined")
    return sum(pred_attacked[i] is not None and pred_attacked[i] != labels[i] for i in idx) / len(
        idx
    )


def relative_asr_reduction(asr_defended: float, asr_vanilla: float) -> float:
    """``1 - ASR_defended / ASR_vanilla`` (``ValueError`` when the undefended ASR is 0)."""
    if asr_vanilla <= 0:
        raise ValueError("the undefended ASR is 0: there is nothing to reduce")
    return 1.0 - asr_defended / asr_vanilla
