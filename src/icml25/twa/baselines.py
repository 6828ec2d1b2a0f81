"""The paper's baselines on the same annotated data (paper §5; docs/twa.md): Filter + SFT (SFT on
the translations without annotated errors), DPO on pairs of translations of the same source
(chosen = lower MQM penalty; TRL's ``prompt``/``chosen``/``rejected`` columns, so
``trl.DPOTrainer`` takes them as they are) and TWA-seq (the whole translation as one unit).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from icml25.preference import IGNORE_INDEX, dpo_loss
from icml25.twa.align import TokenRoles
from icml25.twa.annotations import DEFAULT_SEVERITY_WEIGHTS, AnnotatedTranslation

__all__ = ["build_dpo_pairs", "dpo_loss", "filter_sft_examples", "sft_loss", "twa_seq_roles"]


def _check_data(data) -> list[AnnotatedTranslation]:
    if isinstance(data, (str, bytes, Mapping)) or not isinstance(data, Sequence):
        raise TypeError(f"data must be a list of AnnotatedTranslation, got {type(data).__name__}")
    for i, d in enumerate(data):
        if not isinstance(d, AnnotatedTranslation):
            raise TypeError(f"data[{i}] must be an AnnotatedTranslation, got {type(d).__name__}")
    return list(data)


def filter_sft_examples(
    data: Sequence[AnnotatedTranslation],
    max_penalty: float = 0.0,  # keep error-free translations (threshold unverified, docs/twa.md)
    weights: Mapping[str, float] | str = DEFAULT_SEVERITY_WEIGHTS,
) -> list[AnnotatedTranslation]:
    """The translations whose MQM penalty is at most ``max_penalty`` (Filter + SFT's data)."""
    if not max_penalty >= 0:
        raise ValueError(f"max_penalty must be >= 0, got {max_penalty!r}")
    return [d for d in _check_data(data) if d.mqm_penalty(weights) <= max_penalty]


def build_dpo_pairs(
    data: Sequence[AnnotatedTranslation],
    *,
    max_pairs_per_source: int = 3,
    min_gap: float = 0.0,
    rng: random.Random | int | None = None,
    prompt_template: str = "{source} =",
    completion_prefix: str = " ",
    weights: Mapping[str, float] | str = DEFAULT_SEVERITY_WEIGHTS,
) -> list[dict[str, str]]:
    """Preference pairs from translations of the same source: ``chosen`` has the lower penalty,
    by more than ``min_gap`` (equal penalties are never paired); at most
    ``max_pairs_per_source`` pairs per source, drawn at random (``rng``). Rows are TRL's
    ``{"prompt", "chosen", "rejected"}`` plus ``chosen_penalty``/``rejected_penalty``; the
    completions start with ``completion_prefix`` because TRL joins prompt and completion
    without a separator."""
    if isinstance(max_pairs_per_source, bool) or max_pairs_per_source < 1:
        raise ValueError(f"max_pairs_per_source must be >= 1, got {max_pairs_per_source!r}")
    if not min_gap >= 0:
        raise ValueError(f"min_gap must be >= 0, got {min_gap!r}")
    r = rng if isinstance(rng, random.Random) else random.Random(rng)
    by_src: dict[str, list[AnnotatedTranslation]] = {}
    for d in _check_data(data):
        by_src.setdefault(d.source, []).append(d)
    out = []
    for src, group in by_src.items():
        seen, cands = set(), []
        for a, b in itertools.combinations(group, 2):
            pa, pb = a.mqm_penalty(weights), b.mqm_penalty(weights)
            if abs(pa - pb) <= min_gap or a.target == b.target:
                continue
            w, l_, pw, pl = (a, b, pa, pb) if pa < pb else (b, a, pb, pa)
            key = (w.target, l_.target)
            if key in seen:
                continue
            seen.add(key)
            cands.append((w, l_, pw, pl))
        r.shuffle(cands)
        for w, l_, pw, pl in cands[:max_pairs_per_source]:
            out.append({
                "prompt": prompt_template.format(source=src),
                "chosen": completion_prefix + w.target,
                "rejected": completion_prefix + l_.target,
                "chosen_penalty": pw,
                "rejected_penalty": pl,
            })  # fmt: skip
    return out


def sft_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Token-mean cross-entropy over the labelled positions (``-100`` ignored), in float32."""
    if logits.ndim != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (B, T, V) and labels (B, T), got {tuple(logits.shape)} and "
            f"{tuple(labels.shape)}"
        )
    if not bool((labels != IGNORE_INDEX).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX
    )


def twa_seq_roles(T: int, total_weight: float, cap: float = 25.0) -> TokenRoles:
    """TWA-seq (the paper's sequence-level baseline; exact form unverified, docs/twa.md): an
    error-free translation (``total_weight = 0``) gets cross-entropy on all ``T`` tokens, EOS
    included; otherwise one unlikelihood term on the whole sequence with weight
    ``min(total_weight, cap)``."""
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise ValueError(f"T must be an integer >= 1, got {T!r}")
    if not total_weight >= 0:
        raise ValueError(f"total_weight must be >= 0, got {total_weight!r}")
    if total_weight == 0:
        return TokenRoles(torch.ones(T, dtype=torch.bool), torch.full((T,), -1), torch.zeros(0))
    return TokenRoles(
        torch.zeros(T, dtype=torch.bool),
        torch.zeros(T, dtype=torch.long),
        torch.tensor([min(float(total_weight), cap)]),
    )
