"""Similarity statistics of two views of embeddings, streamed in row blocks."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from icml25._validate import as_int
from icml25.contrastive.losses import _unit_rows

__all__ = ["SimilarityStats", "embed_two_views", "similarity_stats"]


@dataclass
class SimilarityStats:
    """Cosine-similarity statistics of two views: positives ``s_ii`` (mean, population variance),
    cross-view negatives ``s_ij, i != j`` (mean, population variance over the n(n-1) pairs),
    within-view negatives (mean), and ``theorem52_gap``, the *slack* of Thm 5.2's bound
    ``pos_mean - neg_mean <= n/(n-1)``: ``n/(n-1) - (pos_mean - neg_mean) >= 0`` (0 at the
    simplex ETF). :func:`icml25.contrastive.theory.alignment_gap` returns the gap itself,
    ``pos_mean - neg_mean``, so the two add up to ``n/(n-1)``."""

    pos_mean: float
    pos_var: float
    neg_mean: float
    neg_var: float
    within_neg_mean: float
    theorem52_gap: float  # n/(n-1) - (pos_mean - neg_mean) >= 0, the slack of Thm 5.2

    def to_dict(self) -> dict:
        return asdict(self)


@torch.no_grad()
def similarity_stats(
    u: Tensor, v: Tensor, index: Tensor | None = None, block: int = 2048
) -> SimilarityStats:
    """Population mean/variance of positive (``u_i^T v_i``) and cross-view negative (``u_i^T v_j``,
    different ids) similarities, and the within-view negative mean, in row blocks (no n x n)."""
    for name, x in (("u", u), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    block = as_int("block", block, 1)
    if u.ndim != 2 or u.shape != v.shape or u.shape[0] < 2:
        raise ValueError(
            f"u and v must be (n, d) with n >= 2 and equal shapes, got {tuple(u.shape)}, {tuple(v.shape)}"
        )
    n = u.shape[0]
    u, v = _unit_rows(u.double()), _unit_rows(v.double())
    index = torch.arange(n) if index is None else index.to(u.device)
    pos = (u * v).sum(-1)
    s1 = s2 = cnt = w1 = wc = 0.0
    for start in range(0, n, block):
        rows = slice(start, start + block)
        S = u[rows] @ v.T
        W = u[rows] @ u.T
        mask = index[rows, None] != index[None, :]
        neg = S[mask]
        s1 += float(neg.sum())
        s2 += float(neg.pow(2).sum())
        cnt += neg.numel()
        w1 += float(W[mask].sum())
        wc += W[mask].numel()
    neg_mean = s1 / cnt
    return SimilarityStats(
        pos_mean=float(pos.mean()),
        pos_var=float(pos.var(unbiased=False)),
        neg_mean=neg_mean,
        neg_var=s2 / cnt - neg_mean**2,
        within_neg_mean=w1 / wc,
        theorem52_gap=1 + neg_mean + 1 / (n - 1) - float(pos.mean()),
    )


@torch.no_grad()
def embed_two_views(model, data: Tensor, augment, generator: torch.Generator, batch: int = 1024):
    """Projector outputs of two independent augmentations of ``data`` (eval mode)."""
    was = model.training
    model.eval()
    us, vs = [], []
    for i in range(0, len(data), batch):
        x = data[i : i + batch]
        us.append(model(augment(x, generator))[1])
        vs.append(model(augment(x, generator))[1])
    model.train(was)
    return torch.cat(us), torch.cat(vs)
