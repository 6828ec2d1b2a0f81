"""The two Topological-Contrastive losses (§3): Total Persistence (TP) and Multi-scale Kernel (MK)
between the image and text embedding clouds."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from icml25._validate import as_int, as_real
from icml25.topo_detect.persistence import (
    PersistenceDiagram,
    multiscale_kernel,
    total_persistence,
    vr_diagrams,
)

__all__ = ["TopologicalContrastiveLoss", "mk_loss", "tp_loss"]


def _dims(dims) -> tuple[int, ...]:
    if isinstance(dims, (int, float)) and not isinstance(dims, bool):
        raise TypeError(f"dims must be a tuple of homology dimensions, e.g. (0, 1), got {dims!r}")
    try:
        items = list(dims)
    except TypeError:
        raise TypeError(
            f"dims must be a tuple of homology dimensions in 0..2, e.g. (0, 1), got {dims!r}"
        ) from None
    dims = tuple(as_int("dims", d, 0, 2) for d in items)  # 0.5 is refused, not truncated to 0
    if not dims:
        raise ValueError(f"dims must be homology dimensions in 0..2, got {dims}")
    if len(set(dims)) != len(dims):
        raise ValueError(f"dims must not repeat a dimension (it would count twice), got {dims}")
    return dims


def _positive(name: str, value) -> float:
    return as_real(name, value, low=0, low_open=True)


def _diagrams(X, dims, metric) -> dict[int, PersistenceDiagram]:
    if isinstance(X, (list, tuple)) and X and isinstance(X[0], PersistenceDiagram):
        out = {d.dim: d for d in X}
        missing = [k for k in dims if k not in out]
        if missing:
            raise ValueError(
                f"the diagram list has no dimension(s) {missing}; compute them (max_dim) or change dims"
            )
        return out
    if hasattr(X, "shape") and len(X.shape) >= 1 and X.shape[0] == 0:
        raise ValueError(f"a point cloud must hold at least 1 point, got shape {tuple(X.shape)}")
    return {d.dim: d for d in vr_diagrams(X, max_dim=max(dims), metric=metric)}


def _link(value, *clouds):
    """Keep the loss in the autograd graph of its inputs even when every diagram is empty (a
    zero gradient instead of a detached result)."""
    for c in clouds:
        if isinstance(c, torch.Tensor) and c.requires_grad:
            value = value + 0.0 * c.sum()
    # bf16/fp16 clouds are computed in float32 (persistence needs the digits) and the result is
    # returned in the input's floating dtype, as everywhere in the package (issue 49)
    dts = [c.dtype for c in clouds if isinstance(c, torch.Tensor) and c.is_floating_point()]
    if dts and isinstance(value, torch.Tensor):
        dt = dts[0]
        for other in dts[1:]:
            dt = torch.promote_types(dt, other)
        if dt in (torch.float16, torch.bfloat16):
            value = value.to(dt)
    return value


def tp_loss(X, Y, *, alpha: float = 1.0, dims=(0, 1), metric: str = "euclidean") -> Tensor:
    """``sum_k |Pers^alpha_k(X) - Pers^alpha_k(Y)|`` over homology dimensions ``dims`` (default
    alpha = 1, dims (0, 1); unverified in the paper, docs/topo_detect.md). ``X``, ``Y``: point
    clouds ``(N, d)`` (N may differ) or lists of diagrams."""
    alpha = _positive("alpha", alpha)
    dims = _dims(dims)
    dx, dy = _diagrams(X, dims, metric), _diagrams(Y, dims, metric)
    value = sum(
        (total_persistence(dx[k], alpha) - total_persistence(dy[k], alpha)).abs() for k in dims
    )
    return _link(value, X, Y)


def mk_loss(
    X, Y, *, sigmas=(0.1,), dims=(0, 1), reduction: str = "distance", metric: str = "euclidean"
) -> Tensor:
    """``sum_sigma sum_k [k(F,F) + k(G,G) - 2 k(F,G)]`` (``reduction="distance"``, default) or
    ``sum k(F, G)`` (``"kernel"``), Reininghaus' multi-scale kernel, ``F = PD_k(X)``, ``G =
    PD_k(Y)``; default sigma 0.1 (unverified)."""
    if reduction not in ("distance", "kernel"):
        raise ValueError(f"reduction must be 'distance' or 'kernel', got {reduction!r}")
    raw = sigmas if isinstance(sigmas, (list, tuple)) else (sigmas,)
    if not raw:
        raise ValueError("sigmas must hold at least one bandwidth > 0")
    sigmas = tuple(_positive("sigmas", s) for s in raw)
    dims = _dims(dims)
    dx, dy = _diagrams(X, dims, metric), _diagrams(Y, dims, metric)
    total = 0.0
    for s in sigmas:
        for k in dims:
            F, G = dx[k], dy[k]
            if reduction == "kernel":
                total = total + multiscale_kernel(F, G, s)
            else:
                total = (
                    total
                    + multiscale_kernel(F, F, s)
                    + multiscale_kernel(G, G, s)
                    - 2 * multiscale_kernel(F, G, s)
                )
    if not isinstance(total, torch.Tensor):
        total = torch.zeros((), dtype=torch.float64)
    return _link(total, X, Y)


class TopologicalContrastiveLoss(nn.Module):
    """``kind="tp"`` (:func:`tp_loss`) or ``"mk"`` (:func:`mk_loss`) as a module; keyword
    arguments go to the loss."""

    def __init__(self, kind: str = "tp", **kw) -> None:
        super().__init__()
        if kind not in ("tp", "mk"):
            raise ValueError(f"kind must be 'tp' or 'mk', got {kind!r}")
        allowed = {
            "tp": {"alpha", "dims", "metric"},
            "mk": {"sigmas", "dims", "reduction", "metric"},
        }
        unknown = sorted(set(kw) - allowed[kind])
        if unknown:
            raise TypeError(
                f"unknown keyword(s) {unknown} for the {kind!r} loss; valid: {sorted(allowed[kind])}"
            )
        if "alpha" in kw:
            _positive("alpha", kw["alpha"])
        if "dims" in kw:
            _dims(kw["dims"])
        self.kind, self.kw = kind, kw

    def forward(self, X, Y) -> Tensor:
        return (tp_loss if self.kind == "tp" else mk_loss)(X, Y, **self.kw)
