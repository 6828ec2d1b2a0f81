"""Masks (official ``prune_wanda_outlier``): per output row, the ``k_row = d_in - floor(d_in (1 -
rho))`` highest-scoring weights are the harmful mask (stable ascending sort: among equal scores
the lower column index is kept); :func:`tensor_mask` is the per-tensor rule of the official
``prune_with_FI`` (the ``floor(numel rho)`` highest scores of the flattened tensor); random masks
are per tensor (official ``--random_prune``); pruning is ``W <- W * (1 - M)`` with nothing else
changed (official ``train.py``). Masks are boolean (True = removed); the official float 0/1 masks
are accepted wherever a mask is taken."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from icml25._validate import as_real

__all__ = [
    "apply_mask",
    "check_ratio",
    "harmful_mask",
    "magnitude_mask",
    "random_mask",
    "row_mask",
    "tensor_mask",
    "undo_mask",
]


def _shortest_decimal(v: float, same: Callable[[float], bool]) -> float:
    """The decimal with the fewest significant digits that ``same`` maps back to ``v``."""
    if not math.isfinite(v):
        return v
    for digits in range(1, 18):
        x = float(f"{v:.{digits}g}")
        if same(x):
            return x
    return v


def _as_real(name: str, value: object, *, low: float = 0.0, high: float = 1.0) -> float:
    """``value`` as a Python float in ``[low, high]`` (checked by :func:`icml25._validate.as_real`:
    numpy scalars, 0-d arrays and 0-d tensors are accepted; bools, strings, NaN and infinities are
    refused with a ``ValueError`` naming ``name``). Half- and single-precision values are read as
    the shortest decimal that rounds to them (``np.float32(0.1)`` is 0.1, not 0.10000000149), so a
    ratio means the same whatever type carried it."""
    v = as_real(name, value, low=low, high=high)
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    if isinstance(value, Tensor):
        dt = value.dtype
        if dt.is_floating_point and dt != torch.float64:
            return _shortest_decimal(v, lambda x: torch.tensor(x, dtype=dt).item() == v)
    elif isinstance(value, np.floating) and value.dtype.itemsize < 8:
        t = type(value)
        return _shortest_decimal(v, lambda x: float(t(x)) == v)
    return v


def _ratio(dense_ratio: object) -> float:
    """``dense_ratio`` read as in :func:`check_ratio`, without its warnings."""
    return _as_real("dense_ratio", dense_ratio)


def check_ratio(dense_ratio: object) -> float:
    """``dense_ratio`` as a float in ``[0, 1]`` (the fraction of each row removed; official
    ``--dense_ratio``). Accepts any real number type (numpy scalars, 0-d tensors); ``ValueError``
    for bools, strings, NaN and values outside ``[0, 1]``. Warns at 0 (nothing is pruned) and 1
    (everything is)."""
    rho = _ratio(dense_ratio)
    if rho == 0:
        warnings.warn(
            "dense_ratio=0: the mask is empty, nothing is pruned", UserWarning, stacklevel=3
        )
    elif rho == 1:
        warnings.warn("dense_ratio=1: every target weight is removed", UserWarning, stacklevel=3)
    return rho


def _check_scores(scores: object) -> None:
    """A real score tensor without NaN (a NaN sorts above every score, so it would be removed
    first without a word); infinities order as usual."""
    if not isinstance(scores, Tensor) or scores.dtype == torch.bool or scores.is_complex():
        raise TypeError(
            f"scores must be a real-valued tensor, got {type(scores).__name__}"
            + (f" of {scores.dtype}" if isinstance(scores, Tensor) else "")
        )
    if scores.is_floating_point() and bool(torch.isnan(scores).any()):
        raise ValueError(f"scores hold NaN ({int(torch.isnan(scores).sum())} entries)")


def row_mask(scores: Tensor, dense_ratio: float, *, remove: str = "highest") -> Tensor:
    """Boolean mask of one score matrix. ``remove="highest"`` (Antidote): per row the top
    ``d_in - floor(d_in (1 - rho))`` scores; ``remove="lowest"`` (plain Wanda): the bottom
    ``floor(d_in rho)`` scores. Stable sorts, so ties resolve by column index."""
    _check_scores(scores)
    if scores.dim() != 2:
        raise ValueError(f"scores must be 2-D (d_out, d_in), got shape {tuple(scores.shape)}")
    dense_ratio = _ratio(dense_ratio)
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


def tensor_mask(scores: Tensor, dense_ratio: float) -> Tensor:
    """Boolean mask of one score tensor of any shape: the ``floor(numel * rho)`` highest scores
    of the whole tensor (official ``prune_with_FI``). Stable ascending sort of the flattened
    scores, so among equal scores the lower flat index is kept (the official sort is unstable)."""
    _check_scores(scores)
    flat = scores.reshape(-1)
    k = int(flat.numel() * _ratio(dense_ratio))
    mask = torch.zeros(flat.shape, dtype=torch.bool, device=scores.device)
    if k:
        order = torch.sort(flat, stable=True).indices
        mask[order[flat.numel() - k :]] = True
    return mask.view(scores.shape)


def harmful_mask(
    scores: dict[str, Tensor], dense_ratio: float, *, remove: str = "highest"
) -> dict[str, Tensor]:
    """Per-row top-``rho`` masks of every score matrix (Antidote's harmful weights)."""
    if not isinstance(scores, dict):
        raise TypeError(
            f"scores must be a dict {{name: (d_out, d_in) tensor}} (as wanda_scores returns), "
            f"got {type(scores).__name__}; for one matrix use row_mask(scores, dense_ratio)"
        )
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


def _as_bool(name: str, m: Tensor) -> Tensor:
    """A boolean mask from ours (bool) or the official format (float/int 0/1, 1 = removed)."""
    if m.dtype == torch.bool:
        return m
    if not bool(((m == 0) | (m == 1)).all()):
        raise ValueError(
            f"mask entry {name!r} holds values other than 0 and 1 ({m.dtype}); a mask is bool "
            "or 0/1 (1 = the weight is removed)"
        )
    return m != 0


@torch.no_grad()
def apply_mask(layers: dict, mask: dict[str, Tensor], *, inplace: bool = True) -> dict[str, Tensor]:
    """``W <- W * (1 - M)`` for every masked target (in the weight's dtype). Returns the removed
    values (``{name: W[M]}``) for :func:`undo_mask`; idempotent on an already pruned model. With
    ``inplace=False`` only the removed values are returned. ``mask`` may be the official
    ``bad_mask.pt`` (float 0/1, keyed by ``named_parameters()`` names like the targets of
    :func:`~icml25.antidote.targets.select_target_layers`)."""
    removed = {}
    for name, m in mask.items():
        if name not in layers:
            raise KeyError(f"mask entry {name!r} is not a target layer")
        w = layers[name].weight
        if m.shape != w.shape:
            raise ValueError(f"{name}: mask of shape {tuple(m.shape)} for weight {tuple(w.shape)}")
        m = _as_bool(name, m).to(w.device)
        removed[name] = w.detach()[m].clone()
        if inplace:
            w.data[m] = 0
    return removed


@torch.no_grad()
def undo_mask(layers: dict, mask: dict[str, Tensor], removed: dict[str, Tensor]) -> None:
    """Put back the values :func:`apply_mask` removed (exact)."""
    for name, m in mask.items():
        w = layers[name].weight
        w.data[_as_bool(name, m).to(w.device)] = removed[name].to(w.dtype)
