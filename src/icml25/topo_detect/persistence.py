"""Differentiable Vietoris-Rips persistence (Vu et al., ICML 2025, §3; docs/topo_detect.md).

The filtration is computed by giotto-ph (``gph.ripser_parallel``) on the detached float64 distance
matrix; the diagram is rebuilt by indexing the autograd distance matrix with the critical edges
giotto-ph returns (the birth and death edges of every pair), as torch-topological's
``VietorisRipsComplex`` does. Gradients flow into the endpoints of critical edges; distances use a
safe square root, so duplicate points give finite gradients.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.topo_detect._inputs import plain_array

__all__ = [
    "PersistenceDiagram",
    "distance_matrix",
    "multiscale_kernel",
    "total_persistence",
    "vr_diagrams",
]


@dataclass
class PersistenceDiagram:
    """``diagram (k, 2)`` of (birth, death) pairs in dimension ``dim`` (autograd-connected, on the
    input's device); ``pairs``: the critical vertices, ``(k, 3)`` (vertex, death edge) for dim 0,
    ``(k, 4)`` (birth edge, death edge) otherwise; -1 pads essential classes."""

    dim: int
    diagram: Tensor
    pairs: Tensor

    def __len__(self) -> int:
        return self.diagram.shape[0]


def _check_points(name: str, x: Tensor) -> Tensor:
    x = torch.as_tensor(plain_array(x))
    if x.ndim != 2:
        raise ValueError(f"{name} must be (N, d), got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        x = x.to(torch.float32)
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} has non-finite coordinates")
    return x


def _unit_scale(x: Tensor) -> Tensor:
    """A detached power of two ``>= max |x|`` (1 for an all-zero ``x``): dividing by it is exact
    and keeps every square below overflow and above underflow whatever the cloud's scale."""
    big = x.detach().abs().max() if x.numel() else x.new_zeros(())
    if not bool(big > 0) or not bool(torch.isfinite(big)):
        return torch.ones((), dtype=x.dtype, device=x.device)
    _, e = torch.frexp(big)  # big = f * 2^e with f in [0.5, 1)
    return torch.ldexp(torch.ones_like(big), e)


# squared distances below this fraction of the largest centred squared norm are re-summed as
# sum_k (a_k - b_k)^2: there |a|^2 + |b|^2 - 2 a.b has lost more than half of its digits
_RESUM = 1e-6


def distance_matrix(x: Tensor, metric: str = "euclidean") -> Tensor:
    """Pairwise distances, homogeneous of degree 1 in ``x`` (``distance_matrix(s*x) =
    s*distance_matrix(x)`` for every scale that the dtype holds). Euclidean: computed in float64 on
    centred points divided by a power of two near their largest coordinate (exact, so scale 1 gives
    the same digits as before), as ``|a|^2 + |b|^2 - 2 a.b``, with the pairs closer than 1e-3 of
    the cloud's radius re-summed as ``sum (a_k - b_k)^2`` (no cancellation); exact duplicates give
    exactly 0 (no absolute floor) and a zero gradient (a safe square root, never NaN); returned in
    ``x``'s dtype. ``metric="cosine"``: ``1 - x_i.x_j`` on the normalised points (rows scaled by
    their max-abs first, so tiny or huge rows normalise too)."""
    if metric == "euclidean":
        # |a|^2 + |b|^2 - 2 a.b: O(N^2 d) memory-light (the broadcast difference is O(N^2 d) memory).
        # It cancels where the points lie far from the origin relative to their spacing (float32
        # points at 10 spaced 0.014: 1.5% off, issue 49): centre them, and sum in float64.
        xc = x.to(torch.float64) if x.dtype != torch.float64 else x
        xc = xc - xc.mean(0, keepdim=True)
        # an absolute floor (1e-6 before) merged every pair of a cloud at scale 1e-6 and float32
        # overflowed at 1e39 (issue 49): work in units of a power of two, exact both ways; the
        # scale is detached, which keeps the gradient exact (a distance is homogeneous of degree 1)
        m = _unit_scale(xc)
        xn = xc / m
        n2 = (xn * xn).sum(-1)
        sq = n2[:, None] + n2[None, :] - 2 * (xn @ xn.T)
        if xn.shape[0]:
            close = (sq <= _RESUM * n2.detach().max()).nonzero(as_tuple=True)
            if close[0].numel():
                diff = xn[close[0]] - xn[close[1]]
                sq = sq.index_put(close, (diff * diff).sum(-1))
        pos = sq > 0
        tiny = torch.finfo(torch.float64).tiny
        d = torch.where(pos, torch.sqrt(sq.clamp(min=tiny)), torch.zeros_like(sq))
        d = (d * m).to(x.dtype)
    elif metric == "cosine":
        xs = x / x.detach().abs().amax(-1, keepdim=True).clamp(min=torch.finfo(x.dtype).tiny)
        xn = torch.nn.functional.normalize(xs, dim=-1)
        d = (1 - xn @ xn.T).clamp(min=0)
    else:
        raise ValueError(f"metric must be 'euclidean' or 'cosine', got {metric!r}")
    eye = torch.eye(x.shape[0], dtype=torch.bool, device=x.device)
    return d.masked_fill(eye, 0.0)


def _generators(D: np.ndarray, max_dim: int, backend: str, n_threads: int):
    """giotto-ph's generator layout: (H0 finite (k,3), [H_k finite (m,4)], H0 essential,
    [H_k essential (m,2)])."""
    if backend == "giotto":
        from gph import ripser_parallel

        out = ripser_parallel(
            D, metric="precomputed", maxdim=max_dim, return_generators=True, n_threads=n_threads
        )
        return out["gens"]
    if backend == "gudhi":
        import gudhi

        st = gudhi.RipsComplex(distance_matrix=D).create_simplex_tree(max_dimension=max_dim + 1)
        st.compute_persistence()
        return st.flag_persistence_generators()
    raise ValueError(f"backend must be 'giotto' or 'gudhi', got {backend!r}")


def vr_diagrams(
    points: Tensor,
    *,
    max_dim: int = 1,
    metric: str = "euclidean",
    precomputed: bool = False,
    keep_infinite: bool = False,
    backend: str = "giotto",
    n_threads: int = 1,
) -> list[PersistenceDiagram]:
    """Vietoris-Rips diagrams in dimensions ``0..max_dim`` of a point cloud ``(N, d)`` (or of a
    distance matrix with ``precomputed=True``). Finite pairs only unless ``keep_infinite`` (the
    essential classes get death ``inf``). Zero-length bars are dropped (duplicates: ``N_distinct -
    1`` H0 bars). Persistence runs on the CPU; the diagrams are on the input's device and dtype."""
    max_dim = as_int("max_dim", max_dim, 0, 2)
    n_threads = as_int("n_threads", n_threads, -1)
    if precomputed:
        D = torch.as_tensor(points)
        if D.ndim != 2 or D.shape[0] != D.shape[1]:
            raise ValueError(f"a precomputed distance matrix must be (N, N), got {tuple(D.shape)}")
        if not bool(torch.isfinite(D).all()):
            raise ValueError("the distance matrix has non-finite entries")
        Dd = D.detach()
        if bool((Dd < 0).any()) or bool((Dd.diagonal() != 0).any()):
            raise ValueError("a distance matrix needs non-negative entries and a zero diagonal")
        if not torch.allclose(Dd, Dd.T):
            raise ValueError("a distance matrix must be symmetric")
        D = (
            D.float()
            if D.dtype in (torch.float16, torch.bfloat16) or not D.is_floating_point()
            else D
        )
    else:
        x = _check_points("points", points)
        D = distance_matrix(x, metric)
    N = D.shape[0]
    if max_dim == 2 and N > 300:
        warnings.warn(
            f"max_dim=2 on {N} points builds O(N^3) triangles: slow", UserWarning, stacklevel=2
        )
    dev, dt = D.device, D.dtype
    out: list[PersistenceDiagram] = []
    if N < 2:
        for k in range(max_dim + 1):
            out.append(
                PersistenceDiagram(
                    k, D.new_zeros(0, 2), torch.zeros(0, 3 if k == 0 else 4, dtype=torch.long)
                )
            )
        return out
    # duplicates are exact zeros (distance_matrix has no floor). giotto-ph filters in float32:
    # hand it the matrix over its largest entry (a power of two, exact), so no scale overflows or
    # underflows there; persistence is homogeneous of degree 1 in the distances and the diagram
    # is re-read from D at the critical edges below, so it keeps D's scale and autograd graph
    D_np = D.detach().double().cpu()
    D_np = D_np / _unit_scale(D_np)
    gens = _generators(D_np.numpy(), max_dim, backend, n_threads)
    fin0 = torch.as_tensor(np.asarray(gens[0], dtype=np.int64).reshape(-1, 3), device=dev)
    death0 = D[fin0[:, 1], fin0[:, 2]]
    dg0 = torch.stack([torch.zeros_like(death0), death0], 1)
    pairs0 = fin0
    if keep_infinite:
        ess = torch.as_tensor(np.asarray(gens[2], dtype=np.int64).reshape(-1), device=dev)
        inf = torch.full((ess.numel(), 2), math.inf, dtype=dt, device=dev)
        inf[:, 0] = 0.0
        dg0 = torch.cat([dg0, inf])
        pad = torch.full((ess.numel(), 3), -1, dtype=torch.long, device=dev)
        pad[:, 0] = ess
        pairs0 = torch.cat([pairs0, pad])
    out.append(PersistenceDiagram(0, dg0, pairs0.cpu()))
    for k in range(1, max_dim + 1):
        fin = gens[1][k - 1] if len(gens[1]) >= k else np.zeros((0, 4))
        fin = torch.as_tensor(np.asarray(fin, dtype=np.int64).reshape(-1, 4), device=dev)
        dg = (
            torch.stack([D[fin[:, 0], fin[:, 1]], D[fin[:, 2], fin[:, 3]]], 1)
            if len(fin)
            else D.new_zeros(0, 2)
        )
        keep = dg[:, 1] > dg[:, 0] if len(fin) else torch.zeros(0, dtype=torch.bool, device=dev)
        dg, fin = dg[keep], fin[keep]
        if keep_infinite and len(gens[3]) >= k:
            ess = torch.as_tensor(
                np.asarray(gens[3][k - 1], dtype=np.int64).reshape(-1, 2), device=dev
            )
            if len(ess):
                births = D[ess[:, 0], ess[:, 1]]
                dg = torch.cat([dg, torch.stack([births, torch.full_like(births, math.inf)], 1)])
                fin = torch.cat([fin, torch.cat([ess, torch.full_like(ess, -1)], 1)])
        out.append(PersistenceDiagram(k, dg, fin.cpu()))
    return out


def total_persistence(diagram: Tensor, alpha: float = 1.0) -> Tensor:
    """``sum (d - b)^alpha`` over the finite pairs (0 for an empty diagram); for ``alpha < 1``
    zero-length bars are masked (their gradient would be infinite)."""
    alpha = as_real("alpha", alpha, low=0, low_open=True)
    dg = diagram.diagram if isinstance(diagram, PersistenceDiagram) else torch.as_tensor(diagram)
    if dg.numel() == 0:
        return dg.new_zeros(())
    life = dg[:, 1] - dg[:, 0]
    life = life[torch.isfinite(life)]
    if alpha < 1:
        life = life[life > 0]
    return (life**alpha).sum()


def multiscale_kernel(F: Tensor, G: Tensor, sigma: float) -> Tensor:
    """Reininghaus et al. (2015) scale-space kernel ``1/(8 pi sigma) sum_p sum_q [exp(-|p-q|^2 /
    (8 sigma)) - exp(-|p - q_bar|^2 / (8 sigma))]``, ``q_bar`` the mirror of q across the
    diagonal; squared distances as sums of squared differences (finite gradients at p = q).
    Pairs below the diagonal are swapped (out of place); infinite pairs are dropped."""
    sigma = as_real("sigma", sigma, low=0, low_open=True)
    F = F.diagram if isinstance(F, PersistenceDiagram) else torch.as_tensor(F)
    G = G.diagram if isinstance(G, PersistenceDiagram) else torch.as_tensor(G)
    for name, t in (("F", F), ("G", G)):
        if t.ndim != 2 or t.shape[-1] != 2:
            raise ValueError(
                f"{name} must be a diagram of (birth, death) rows, shape (k, 2), got {tuple(t.shape)}"
            )
    for name, t in (("F", F), ("G", G)):
        if bool(torch.isnan(t).any()):
            raise ValueError(f"{name} holds NaN (birth, death) values; a diagram needs numbers")
    F = F[torch.isfinite(F).all(-1)]
    G = G[torch.isfinite(G).all(-1)]
    if F.numel() == 0 or G.numel() == 0:
        return (F.sum() + G.sum()) * 0.0
    F = torch.stack([F.min(-1).values, F.max(-1).values], -1)
    G = torch.stack([G.min(-1).values, G.max(-1).values], -1)
    Gm = G.flip(-1)
    d1 = ((F[:, None, :] - G[None, :, :]) ** 2).sum(-1)
    d2 = ((F[:, None, :] - Gm[None, :, :]) ** 2).sum(-1)
    return (torch.exp(-d1 / (8 * sigma)) - torch.exp(-d2 / (8 * sigma))).sum() / (
        8 * math.pi * sigma
    )
