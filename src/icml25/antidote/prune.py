"""Antidote's one-shot post-fine-tuning pruning (paper §4; official ``prune_wanda_outlier``).

``antidote_prune(model, realign_batches)`` scores every target weight by Wanda on harmful
re-alignment data and zeroes, in each output row, the ``rho`` fraction with the *highest* scores.
No training, no gradients (except the optional ``grad_magnitude`` ablation). The model is changed
in place; the mask is returned so it can be inspected, undone or re-applied elsewhere.

Single-process: one calibration pass and a sort on the fine-tuned model (the paper prunes on one
GPU); a base too large for one device is sharded inside the process (``device_map="auto"``). The
fine-tuning before it is what scales over processes (docs/antidote.md, "Several GPUs").
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from icml25._validate import as_int
from icml25.antidote.masks import apply_mask, check_ratio, random_mask, row_mask, tensor_mask
from icml25.antidote.scores import (
    activation_sq_norms,
    grad_magnitude_scores,
    magnitude_scores,
    wanda_scores,
)
from icml25.antidote.targets import inactive_adapters, select_target_layers

__all__ = ["AntidoteConfig", "AntidoteResult", "antidote_prune"]


@dataclass
class AntidoteConfig:
    """Defaults from the official scripts (``script/finetune/antidote_*.sh``) and ``train.py``."""

    dense_ratio: float = 0.1  # rho, fraction of each row removed (official SST2; 0.05 for GSM8K)
    score: Literal["wanda", "magnitude", "random", "grad_magnitude"] = "wanda"
    # official: the fine-tuning LoRA adapter; "qkv" = full-FT mode; "custom" = target_filter
    target: Literal["lora", "qkv", "custom"] = "lora"
    target_filter: Callable[[str, nn.Module], bool] | None = None
    # PEFT adapter(s) to prune; None = the active one(s). Official flow: the alignment adapter is
    # merged (merge_and_unload) and the user's adapter is the only one loaded, hence active.
    adapters: str | Sequence[str] | None = None
    # comparison group of score-based masks: "row" = per output row (official Wanda path, the
    # paper's method); "tensor" = the whole tensor (official, unused prune_with_FI for the
    # gradient score). Random masks are always per tensor (official --random_prune).
    granularity: Literal["row", "tensor"] = "row"
    exclude_padding: bool = True
    stat_dtype: torch.dtype = torch.float32
    batch_size: int = 1  # official; used by helpers that build batches (make_realign_batches)
    max_length: int | None = None
    seed: int = 0  # random mask

    def validate(self) -> None:
        """``ValueError`` naming the field, the value received and the valid choices."""
        check_ratio(self.dense_ratio)  # ValueError outside [0, 1]; warns at 0 and 1
        if self.score not in ("wanda", "magnitude", "random", "grad_magnitude"):
            raise ValueError(
                f"score must be 'wanda', 'magnitude', 'random' or 'grad_magnitude', got {self.score!r}"
            )
        if self.granularity not in ("row", "tensor"):
            raise ValueError(f"granularity must be 'row' or 'tensor', got {self.granularity!r}")
        as_int("batch_size", self.batch_size, 1)
        a = self.adapters
        if a is not None and not (
            isinstance(a, str)
            or (isinstance(a, Sequence) and a and all(isinstance(x, str) and x for x in a))
        ):
            raise ValueError(
                f"adapters must be None, an adapter name or a non-empty list of names, got {a!r}"
            )


@dataclass
class AntidoteResult:
    """The outcome of Antidote's pruning: the boolean masks per parameter, how many weights were
    pruned against the target, the pruned fraction per layer, and what was removed (for undo)."""

    mask: dict[str, Tensor]
    n_pruned: int
    n_target: int
    per_layer_fraction: dict[str, float]
    sq_norms: dict[str, Tensor] = field(default_factory=dict)
    removed: dict[str, Tensor] = field(default_factory=dict)  # for icml25.antidote.masks.undo_mask

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
    needed for ``score="magnitude"``/``"random"``; for ``"grad_magnitude"`` they must carry
    ``labels``. ``layers`` overrides the target selection (:func:`select_target_layers` with the
    config's ``target``, ``target_filter`` and ``adapters``).

    The mask is keyed like ``layers`` (by default ``model.named_parameters()`` names, the
    official ``bad_mask.pt`` keys); True = removed.

    Memory: scores are computed one target at a time and dropped once its boolean mask exists,
    so the extra memory is one target's float32 scores plus the masks and the removed values.

    Single-process: run it once, on the trained model (e.g. in a script after the data-parallel
    fine-tuning saved its adapter), not on every rank of a ``torchrun`` job."""
    config = config or AntidoteConfig()
    config.validate()  # warns once at dense_ratio 0 or 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rho = check_ratio(config.dense_ratio)
    if layers is None:
        # selection first: an adapter name that is not loaded is reported as such
        layers = select_target_layers(
            model, config.target, config.target_filter, adapters=config.adapters
        )
        if config.score in ("wanda", "grad_magnitude"):
            off = inactive_adapters(model, config.adapters)
            if off:
                raise ValueError(
                    f"adapter(s) {off} are not active, so their layers do not run in the forward "
                    f"pass and score={config.score!r} has no data for them; activate them "
                    "(PEFT: model.set_adapter(name)) or use score='magnitude' or 'random'"
                )
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
            mask[name] = row_mask(s, rho) if config.granularity == "row" else tensor_mask(s, rho)
            del s
    removed = apply_mask(layers, mask)
    per = {n: float(m.float().mean()) for n, m in mask.items()}
    n_pruned = int(sum(int(m.sum()) for m in mask.values()))
    n_target = int(sum(t.weight.numel() for t in layers.values()))
    return AntidoteResult(mask, n_pruned, n_target, per, sq, removed)
