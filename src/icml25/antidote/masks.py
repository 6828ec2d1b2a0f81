"""Masks (spec "Granularity and mask"): per output row, the ``k_row = d_in - floor(d_in (1 - rho))``
highest-scoring weights are the harmful mask (stable ascending sort: among equal scores the lower
column index is kept); random masks are per tensor (official ``--random_prune``); pruning is
``W <- W * (1 - M)`` with nothing else changed."""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

__all__ = [
    "apply_mask",
    "check_ratio",
    "harmful_mask",
    "magnitude_mask",
    "random_mask",
    "row_mask",
    "undo_mask",
]


def check_ratio(dense_ratio: float) -> float:
    if isinstance(dense_ratio, bool) or not isinstance(dense_ratio, (int, float)):
        raise ValueError(f"dense_ratio must be a number in [0, 1], got {dense_ratio!r}")
    if not 0.0 <= float(dense_ratio) <= 1.0 or math.isnan(dense_ratio):
        raise ValueError(
            f"dense_ratio must be in [0, 1] (the fraction of each row removed), got {dense_ratio!r}"
        )
    if dense_ratio == 0:
        warnings.warn(
            "dense_ratio=0: the mask is empty, nothing is pruned", UserWarning, stacklevel=3
        )
    elif dense_ratio == 1:
        warnings.warn("dense_ratio=1: every target weight is removed", UserWarning, stacklevel=3)
    return float(dense_ratio)


def row_mask(scores: Tensor, dense_ratio: float, *, remove: str = "highest") -> Tensor:
    """Boolean mask of one score matrix. ``remove="highest"`` (Antidote): per row the top
    ``d_in - floor(d_in (1 - rho))`` scores; ``remove="lowest"`` (plain Wanda): the bottom
    ``floor(d_in rho)`` scores. Stable sorts, so ties resolve by column index."""
    if scores.dim() != 2:
        raise ValueError(f"scores must be 2-D (d_out, d_in), got shape {tuple(scores.shape)}")
    d_in = scores.shape[1]
    order = torch.sort(scores, dim=1, stable=True).indices
    mask = torch.zeros_like(scores, dtype=torch.bool)
    if remove == "highest":
        keep = int(d_in * (1 - dense_ratio))
        idx = order[:, keep:]
    elif remove == "lowest":
        idx = order[:, : int(d_in * dense_ratio)]
    else:
        raise ValueError(f"remove must be 'highest' or 'lowest', got {remove!r}")
    mask.scatter_(1, idx, True)
    return mask


def harmful_mask(
    scores: dict[str, Tensor], dense_ratio: float, *, remove: str = "highest"
) -> dict[str, Tensor]:
    """Per-row top-``rho`` masks of every score matrix (Antidote's harmful weights)."""
    rho = check_ratio(dense_ratio)
    return {name: row_mask(s, rho, remove=remove) for name, s in scores.items()}


def magnitude_mask(layers: dict, dense_ratio: float) -> dict[str, Tensor]:
    """The no-data ablation: ``S = |W|``, the same per-row top-``rho`` rule."""
    rho = check_ratio(dense_ratio)
    return {n: row_mask(t.weight.detach().float().abs(), rho) for n, t in layers.items()}


def random_mask(
    layers: dict, dense_ratio: float, *, generator: torch.Generator | None = None, seed: int = 0
) -> dict[str, Tensor]:
    """Official random pruning: per tensor, ``floor(numel * rho)`` entries chosen uniformly
    (``randperm``), independently across tensors; reproducible from ``generator`` or ``seed``."""
    rho = check_ratio(dense_ratio)
    gen = generator if generator is not None else torch.Generator().manual_seed(seed)
    out = {}
    for name, t in layers.items():
        w = t.weight
        k = int(w.numel() * rho)
        flat = torch.zeros(w.numel(), dtype=torch.bool)
        flat[torch.randperm(w.numel(), generator=gen)[:k]] = True
        out[name] = flat.view(w.shape).to(w.device)
    return out


@torch.no_grad()
def apply_mask(layers: dict, mask: dict[str, Tensor], *, inplace: bool = True) -> dict[str, Tensor]:
    """``W <- W * (1 - M)`` for every masked target (in the weight's dtype). Returns the removed
    values (``{name: W[M]}``) for :func:`undo_mask`; idempotent on an already pruned model. With
    ``inplace=False`` only the removed values are returned."""
    removed = {}
    for name, m in mask.items():
        if name not in layers:
            raise KeyError(f"mask entry {name!r} is not a target layer")
        w = layers[name].weight
        if m.shape != w.shape:
            raise ValueError(f"{name}: mask of shape {tuple(m.shape)} for weight {tuple(w.shape)}")
        m = m.to(w.device)
        removed[name] = w.detach()[m].clone()
        if inplace:
            w.data[m] = 0
    return removed


@torch.no_grad()
def undo_mask(layers: dict, mask: dict[str, Tensor], removed: dict[str, Tensor]) -> None:
    """Put back the values :func:`apply_mask` removed (exact)."""
    for name, m in mask.items():
        w = layers[name].weight
        w.data[m.to(w.device)] = removed[name].to(w.dtype)
