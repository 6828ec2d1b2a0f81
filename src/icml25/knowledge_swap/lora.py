"""Knowledge swapping's use of LoRA (paper §3, official ``loralib`` usage): the group-sparse
loss's grouping of the LoRA matrices (:func:`lora_groups`) and head expansion for the classes to
learn (:func:`expand_head`). The LoRA layers themselves live in :mod:`icml25.lora` (shared with
Antidote) and are re-exported here, so ``icml25.knowledge_swap.inject_lora`` keeps working.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from icml25._validate import as_int
from icml25.lora import (
    LoRAConv2d,
    LoRALinear,
    inject_lora,
    load_lora,
    lora_layers,
    lora_parameters,
    lora_state_dict,
    mark_only_lora_trainable,
    merge_lora,
    save_lora,
    unload_lora,
    unmerge_lora,
)

__all__ = [
    "LoRAConv2d",
    "LoRALinear",
    "expand_head",
    "inject_lora",
    "load_lora",
    "lora_groups",
    "lora_layers",
    "lora_parameters",
    "lora_state_dict",
    "mark_only_lora_trainable",
    "merge_lora",
    "save_lora",
    "unload_lora",
    "unmerge_lora",
]


def _default_block(name: str) -> str:
    """The path up to the first numeric component (``encoder.layer.3`` / ``blocks.3``), else the
    module that owns the LoRA matrices."""
    parts = name.split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    cut = next(i for i, p in enumerate(parts) if p.startswith("lora_"))
    return ".".join(parts[:cut])


def lora_groups(
    model: nn.Module,
    by: str = "block",
    block_of: Callable[[str], str] | None = None,
) -> list[list[nn.Parameter]]:
    """LoRA matrices grouped for the group-sparse loss: ``by="block"`` (official: one group per
    Transformer block; ``block_of(param_name) -> key`` overrides the rule), ``"module"`` (one per
    wrapped layer) or ``"matrix"`` (each A and B alone). Groups keep the model's order."""
    if by not in ("block", "module", "matrix"):
        raise ValueError(f"by must be 'block', 'module' or 'matrix', got {by!r}")
    params = lora_parameters(model)
    if by == "matrix":
        return [[p] for _, p in params]

    def module_key(n: str) -> str:
        return n[: n.index("lora_")]

    key = module_key if by == "module" else (block_of or _default_block)
    groups: dict[str, list[nn.Parameter]] = {}
    for n, p in params:
        groups.setdefault(key(n), []).append(p)
    return list(groups.values())


def expand_head(linear: nn.Linear, n_new: int, init: str = "xavier", generator=None) -> nn.Linear:
    """A head with ``n_new`` extra output rows: old rows and biases copied (old logits unchanged),
    new rows ``xavier_uniform`` (or zeros with ``init="zeros"``), new biases 0."""
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"expand_head takes an nn.Linear, got {type(linear).__name__}")
    n_new = as_int("n_new", n_new, 1)
    if init not in ("xavier", "zeros"):
        raise ValueError(f"init must be 'xavier' or 'zeros', got {init!r}")
    w = linear.weight
    new = nn.Linear(linear.in_features, linear.out_features + n_new, bias=linear.bias is not None)
    new = new.to(device=w.device, dtype=w.dtype)
    with torch.no_grad():
        new.weight[: linear.out_features] = w
        if init == "xavier":
            bound = math.sqrt(6.0 / (linear.in_features + n_new))
            rows = torch.rand(n_new, linear.in_features, generator=generator, dtype=w.dtype) * 2 - 1
            new.weight[linear.out_features :] = (rows * bound).to(w.device)
        else:
            new.weight[linear.out_features :] = 0
        if linear.bias is not None:
            new.bias[: linear.out_features] = linear.bias
            new.bias[linear.out_features :] = 0
    return new
