"""Antidote's one-shot post-fine-tuning pruning (paper §4; official ``prune_wanda_outlier``).

``antidote_prune(model, realign_batches)`` scores every target weight by Wanda on harmful
re-alignment data and zeroes, in each output row, the ``rho`` fraction with the *highest* scores.
No training, no gradients (except the optional ``grad_magnitude`` ablation). The model is changed
in place; the mask is returned so it can be inspected, undone or re-applied elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from icml25.antidote.masks import apply_mask, check_ratio, random_mask, row_mask
from icml25.antidote.scores import (
    activation_sq_norms,
    grad_magnitude_scores,
    magnitude_scores,
    wanda_scores,
)
from icml25.antidote.targets import select_target_layers

__all__ = ["AntidoteConfig", "AntidoteResult", "antidote_prune"]


@dataclass
class AntidoteConfig:
    """Defaults from the official scripts (spec table "Official hyper-parameters")."""

    dense_ratio: float = 0.1  # rho, fraction of each row removed (official SST2; 0.05 for GSM8K)
    score: str = "wanda"  # "wanda" | "magnitude" | "random" | "grad_magnitude"
    target: str = "lora"  # official: the fine-tuning LoRA adapter; "qkv" = full-FT mode
    target_filter: Callable[[str, nn.Module], bool] | None = None
    exclude_padding: bool = True
    stat_dtype: torch.dtype = torch.float32
    batch_size: int = 1  # official; used by helpers that build batches (make_realign_batches)
    max_length: int | None = None
    seed: int = 0  # random mask

    def validate(self) -> None:
        check_ratio(self.dense_ratio)  # ValueError outside [0, 1]; warns at 0 and 1
        if self.score not in ("wanda", "magnitude", "random", "grad_magnitude"):
            raise ValueError(
                f"score must be 'wanda', 'magnitude', 'random' or 'grad_magnitude', got {self.score!r}"
            )
        if (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or self.batch_size < 1
        ):
            raise ValueError(f"batch_size must be a positive integer, got {self.batch_size!r}")


@dataclass
class AntidoteResult:
    mask: dict[str, Tensor]
    n_pruned: int
    n_target: int
    per_layer_fraction: dict[str, float]
    sq_norms: dict[str, Tensor] = field(default_factory=dict)
    removed: dict[str, Tensor] = field(default_factory=dict)  # for icml25.antidote.undo_mask

    @property
    def fraction(self) -> float:
        return self.n_pruned / max(1, self.n_target)


def antidote_prune(
    model: nn.Module,
    realign_batches: Iterable | None,
    config: AntidoteConfig | None = None,
    *,
    layers: dict | None = None,
) -> AntidoteResult:
    """Prune ``model`` in place. ``realign_batches``: harmful (prompt + harmful answer) sequences
    as dicts with ``input_ids``/``attention_mask`` (see ``make_realign_batches``) or tensors; not
    needed for ``score="magnitude"``/``"random"``. ``layers`` overrides the target selection.

    Memory: scores are computed one target at a time and dropped once its boolean mask exists,
    so the extra memory is one target's float32 scores plus the masks and the removed values."""
    config = config or AntidoteConfig()
    config.validate()
    rho = float(config.dense_ratio)
    layers = layers or select_target_layers(model, config.target, config.target_filter)
    sq: dict[str, Tensor] = {}
    if config.score == "random":
        mask = random_mask(layers, rho, seed=config.seed)
    else:
        if config.score == "wanda":
            if realign_batches is None:
                raise ValueError("score='wanda' needs realign_batches (harmful calibration data)")
            sq = activation_sq_norms(
                model,
                layers,
                realign_batches,
                exclude_padding=config.exclude_padding,
                stat_dtype=config.stat_dtype,
                max_length=config.max_length,
            )
        grads = (
            grad_magnitude_scores(model, layers, realign_batches)
            if config.score == "grad_magnitude"
            else None
        )
        mask = {}
        for name, t in layers.items():
            # one target at a time: only this target's float scores are alive at once
            if config.score == "wanda":
                s = wanda_scores({name: t}, {name: sq[name]})[name]
            elif config.score == "magnitude":
                s = magnitude_scores({name: t})[name]
            else:
                s = grads.pop(name)
            mask[name] = row_mask(s, rho)
            del s
    removed = apply_mask(layers, mask)
    per = {n: float(m.float().mean()) for n, m in mask.items()}
    n_pruned = int(sum(int(m.sum()) for m in mask.values()))
    n_target = int(sum(t.weight.numel() for t in layers.values()))
    return AntidoteResult(mask, n_pruned, n_target, per, sq, removed)
