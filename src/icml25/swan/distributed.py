"""SWAN under data parallelism (DDP) and with sharded gradients (FSDP2 / DTensor), docs/swan.md.

- DDP: every rank holds the same all-reduced gradient, so plain SWAN is already correct; with
  ``SWAN(..., shard_work=True)`` each matrix is whitened once, by its owner rank
  (:func:`shard_assignment`, size-balanced), and the update is broadcast to the others.
- DTensor gradients sharded along rows (``Shard(0)``) or columns (``Shard(1)``) of a 1-D mesh:
  :func:`swan_direction_dtensor` never gathers the matrix. GradNorm needs whole rows (local for
  ``Shard(0)``, two all-reduced m-vectors for ``Shard(1)``), and polynomial whitening satisfies
  ``p(G G^T) G = G p(G^T G)``, so the Gram is taken on the side that is not sharded and
  all-reduced. Other layouts, and NSDS (not a polynomial in the Gram), gather the full matrix,
  compute, and keep the local slice.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from icml25._validate import as_int
from icml25.swan.functional import _narrows, grad_norm, newton_schulz_inv_sqrt, swan_direction

__all__ = ["shard_assignment", "sharded_swan_updates", "swan_direction_dtensor"]


def shard_assignment(params: list[Tensor], world_size: int) -> list[int]:
    """Owner rank of each parameter: largest first, each to the least-loaded rank (ties: lowest)."""
    world_size = as_int("world_size", world_size, 1)
    load = [0] * world_size
    owner = [0] * len(params)
    order = sorted(range(len(params)), key=lambda i: (-params[i].numel(), i))
    for i in order:
        r = min(range(world_size), key=lambda k: (load[k], k))
        owner[i] = r
        load[r] += params[i].numel()
    return owner


def sharded_swan_updates(opt: Any, jobs: list[tuple[Tensor, dict]]) -> list[Tensor]:
    """The SWAN updates of ``jobs``, each computed by its owner rank and broadcast (DDP)."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("shard_work=True needs an initialised torch.distributed process group")
    group = opt.process_group
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    owners = shard_assignment([p for p, _ in jobs], world)
    deltas = []
    for (p, g), owner in zip(jobs, owners):
        if owner == rank:
            deltas.append(opt._update_of(p, g).contiguous())
        else:
            deltas.append(torch.empty(p.shape, dtype=g["compute_dtype"], device=p.device))
    for delta, owner in zip(deltas, owners):
        src = dist.get_global_rank(group, owner) if group is not None else owner
        dist.broadcast(delta, src=src, group=group)
    return deltas


def _inv_sqrt_apply(
    A: Tensor, method: str, steps: int, beta: float, rel_tol: float = 1e-7
) -> Tensor:
    """``q(A) ~ A^{-1/2}`` (pseudo-inverse) for a unit-trace Gram ``A``."""
    if method == "ns":
        return newton_schulz_inv_sqrt(A, steps, beta)[1]
    lam, V = torch.linalg.eigh(A)
    keep = lam > (rel_tol**2) * lam.amax().clamp(min=0)
    inv = torch.where(keep, lam.clamp(min=torch.finfo(lam.dtype).tiny).rsqrt(), 0)
    return (V * inv) @ V.mT


def swan_direction_dtensor(G: Any, **swan_kwargs: Any) -> Any:
    """:func:`~icml25.swan.functional.swan_direction` of a 2-D DTensor gradient, returned with
    the same placement. ``Shard(0)`` / ``Shard(1)`` on a 1-D mesh with ``whitening`` in
    {"ns", "eigh", "svd", None} and ``norm_dim=-1`` run without gathering; anything else gathers.
    """
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    if not isinstance(G, DTensor):
        raise TypeError(f"G must be a DTensor, got {type(G).__name__}")
    kw = {
        "norm": True,
        "norm_dim": -1,
        "center": True,
        "whitening": "ns",
        "ns_steps": 10,
        "ns_beta": 0.8,
        "rescale": "rms",
        "eps": 1e-8,
        "compute_dtype": torch.float32,
        **swan_kwargs,
    }
    placement = G.placements[0] if len(G.placements) == 1 else None
    fast = (
        isinstance(placement, Shard)
        and placement.dim in (0, 1)
        and G.ndim == 2
        and kw["whitening"] in ("ns", "eigh", "svd", None)
        and kw["norm_dim"] in (-1, 1)
        and kw["rescale"] == "rms"
    )
    if not fast:
        full = swan_direction(G.full_tensor(), **kw)
        return distribute_tensor(full, G.device_mesh, G.placements)
    group = G.device_mesh.get_group()
    local = G.to_local()
    # as on one process: GradNorm in G's own dtype where the cast would lose range
    if not (kw["norm"] and _narrows(local.dtype, kw["compute_dtype"])):
        local = local.to(kw["compute_dtype"])
    m, n = G.shape
    rows_split = placement.dim == 0

    def all_reduce(t: Tensor, op=dist.ReduceOp.SUM) -> Tensor:
        dist.all_reduce(t, op=op, group=group)
        return t

    X = local
    if kw["norm"]:
        if rows_split:  # whole rows are local
            X = grad_norm(X, dim=1, eps=kw["eps"], center=kw["center"])
        else:  # rows are spread over ranks: reduce the row statistics
            mean = all_reduce(X.sum(1, keepdim=True)) / n if kw["center"] else 0.0
            C = X - mean
            peak = all_reduce(C.abs().amax(1, keepdim=True), dist.ReduceOp.MAX)
            C = C / torch.where(peak > 0, peak, torch.ones_like(peak))
            s = (all_reduce(C.pow(2).sum(1, keepdim=True)) / n).sqrt()
            X = C / (s + kw["eps"])
        X = X.to(kw["compute_dtype"])
    # unit Frobenius norm over the whole matrix (max-abs first: exactly scale invariant)
    peak = all_reduce(X.abs().amax().reshape(1), dist.ReduceOp.MAX)
    if float(peak) == 0:
        return DTensor.from_local(torch.zeros_like(X), G.device_mesh, G.placements)
    X = X / peak
    X = X / all_reduce(X.pow(2).sum().reshape(1)).sqrt()
    if kw["whitening"] is not None:
        if rows_split:  # G = [G_1; ...]: right Gram G^T G = sum_r G_r^T G_r
            q = _inv_sqrt_apply(
                all_reduce(X.mT @ X), kw["whitening"], kw["ns_steps"], kw["ns_beta"]
            )
            X = X @ q
        else:  # G = [G_1, ...]: left Gram G G^T = sum_c G_c G_c^T
            q = _inv_sqrt_apply(
                all_reduce(X @ X.mT), kw["whitening"], kw["ns_steps"], kw["ns_beta"]
            )
            X = q @ X
    if kw["rescale"] == "rms":
        peak = all_reduce(X.abs().amax().reshape(1), dist.ReduceOp.MAX)
        X = X / torch.where(peak > 0, peak, torch.ones_like(peak))
        X = X * (math.sqrt(m * n) / all_reduce(X.pow(2).sum().reshape(1)).sqrt())
    return DTensor.from_local(X, G.device_mesh, G.placements)
