"""Non-topological per-sample features for the control of claim 2 (docs/topo_detect.md,
"Reproduction"): k-nearest-neighbour distances and the local intrinsic dimension, computed in the
same label-independent chunks as the topological signatures of §6.

The H0 part of an attribution signature splits each minimum-spanning-tree edge over its two
endpoints, so it is close to a nearest-neighbour distance. A test that uses these plain
neighbourhood features in place of the signatures asks whether the topology adds anything that a
sample's local density does not already carry.
"""

from __future__ import annotations

import torch
from torch import Tensor

from icml25._validate import as_int
from icml25.topo_detect.signatures import chunks

__all__ = ["knn_features"]

KINDS = ("knn", "lid")
#: default neighbourhood sizes: the mean over 3 neighbours next to the nearest one (knn), and 10
#: neighbours for the LID estimate, a fifth of a default chunk of 50 (our choices)
DEFAULT_K = {"knn": 3, "lid": 10}


def knn_features(
    points: Tensor,
    *,
    kind: str = "knn",
    k: int | None = None,
    chunk_size: int = 50,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Per-sample neighbourhood features of ``points`` ``(N, d)`` within label-independent random
    chunks (Euclidean distances to the other points of the sample's chunk).

    ``kind="knn"``: ``(N, 2)``, the distance to the nearest neighbour and the mean distance to
    the ``k`` nearest (``k = 3`` by default). ``kind="lid"``: ``(N, 1)``, the maximum-likelihood
    local intrinsic dimension of Levina & Bickel (2004) in the minibatch form of Ma et al. (2018,
    "Characterizing Adversarial Subspaces Using Local Intrinsic Dimensionality"),
    ``-(1/k sum_{i<=k} log(r_i / r_k))^{-1}`` over the sorted distances ``r_1 <= ... <= r_k`` to
    the ``k`` nearest (``k = 10`` by default).

    The chunks are :func:`~icml25.topo_detect.signatures.chunks` ``(N, chunk_size, generator)``,
    the first draw from ``generator``, as in
    :func:`~icml25.topo_detect.signatures.sample_signatures`: two generators in the same state
    give both functions the same chunks. Returns float64 for float64 input, else float32, on the
    input's device. Raises ``ValueError`` for non-finite points, a chunk with ``k`` points or
    fewer, or an LID that is infinite (``k + 1`` points at equal distances, e.g. duplicates)."""
    X = torch.as_tensor(points)
    if X.ndim != 2 or len(X) < 2:
        raise ValueError(f"points must be (N, d) with N >= 2, got shape {tuple(X.shape)}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    k = DEFAULT_K[kind] if k is None else k
    k = as_int("k", k, 1)
    chunk_size = as_int("chunk_size", chunk_size, 2)
    if not X.is_floating_point():
        X = X.float()
    if not bool(torch.isfinite(X).all()):
        raise ValueError("points has non-finite values")
    out_dtype = torch.float64 if X.dtype == torch.float64 else torch.float32
    out = torch.zeros(len(X), 2 if kind == "knn" else 1, dtype=torch.float64, device=X.device)
    for idx in chunks(len(X), chunk_size, generator):
        idx = idx.to(X.device)
        if len(idx) <= k:
            raise ValueError(
                f"a chunk of {len(idx)} points has fewer than k + 1 = {k + 1} (the point and its "
                f"{k} neighbours): lower k or raise chunk_size (got N = {len(X)}, chunk_size = "
                f"{chunk_size})"
            )
        x = X[idx].detach().double()
        D = torch.cdist(x, x)
        D.fill_diagonal_(float("inf"))
        r = D.topk(k, dim=1, largest=False).values  # (c, k), ascending
        if kind == "knn":
            out[idx] = torch.stack([r[:, 0], r.mean(1)], 1)
        else:
            ratio = r.clamp(min=1e-300) / r[:, -1:].clamp(min=1e-300)
            lid = -1.0 / ratio.log().mean(1)
            if not bool(torch.isfinite(lid).all()):
                raise ValueError(
                    f"the LID is infinite for {int((~torch.isfinite(lid)).sum())} point(s): their "
                    f"{k} nearest neighbours are all at the same distance (duplicates?)"
                )
            out[idx, 0] = lid
    return out.to(out_dtype)
