"""Peers for the benchmark, the reproduction and the tests (docs/lapsum.md).

NeuralSort (Grover et al., ICLR 2019) and SoftSort (Prillo & Eisenschlos, ICML 2020) build n x n
relaxed permutation matrices: O(n^2) time and memory. SOFT top-k (Xie et al., NeurIPS 2020) solves
an entropic optimal-transport problem to two anchors with Sinkhorn iterations. torchsort (Blondel et
al. 2020) is used through an adapter when it is installed.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "hard_rank",
    "hard_topk",
    "neuralsort",
    "neuralsort_topk",
    "sinkhorn_topk",
    "softsort",
    "softsort_topk",
    "torchsort_available",
    "torchsort_soft_rank",
    "torchsort_soft_sort",
]


def neuralsort(s: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """Descending relaxed permutation ``P[b, i, :] = softmax(((n + 1 - 2i) s - A_s 1) / tau)``.

    ``s``: (B, n) scores; row i (1-based) of ``P`` is a distribution over which element sits at
    descending position i.
    """
    n = s.shape[-1]
    a_s = (s[..., :, None] - s[..., None, :]).abs()
    b = a_s.sum(-1)  # A_s 1
    scale = n + 1 - 2 * torch.arange(1, n + 1, dtype=s.dtype, device=s.device)
    logits = (scale[:, None] * s[..., None, :] - b[..., None, :]) / tau
    return torch.softmax(logits, dim=-1)


def softsort(s: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """SoftSort ``P[b, i, :] = softmax(-|sort_desc(s)_i - s| / tau)`` (descending positions)."""
    sorted_s = s.sort(dim=-1, descending=True).values
    return torch.softmax(-(sorted_s[..., :, None] - s[..., None, :]).abs() / tau, dim=-1)


def neuralsort_topk(s: torch.Tensor, k: int, tau: float = 1.0) -> torch.Tensor:
    """Top-k indicator from NeuralSort: the sum of the first k rows of the descending matrix."""
    return neuralsort(s, tau)[..., :k, :].sum(-2)


def softsort_topk(s: torch.Tensor, k: int, tau: float = 1.0) -> torch.Tensor:
    """Top-k indicator from SoftSort: the sum of the first k rows of the descending matrix."""
    return softsort(s, tau)[..., :k, :].sum(-2)


def sinkhorn_topk(x: torch.Tensor, k: float, eps: float = 0.01, iters: int = 100) -> torch.Tensor:
    """SOFT top-k: entropic OT of the n scores to anchors ``(0, 1)`` (our parametrisation).

    Rows are min-max normalised to [0, 1]; marginals ``mu = 1/n``, ``nu = [(n - k)/n, k/n]``, cost
    ``(x_i - y_j)^2``, log-domain Sinkhorn ending with the column-marginal update; returns
    ``n * Gamma[:, 1]``, which sums to k up to rounding. Gradients by unrolled autograd.
    """
    n = x.shape[-1]
    lo = x.min(-1, keepdim=True).values
    hi = x.max(-1, keepdim=True).values
    xn = (x - lo) / (hi - lo).clamp(min=1e-12)
    anchors = torch.tensor([0.0, 1.0], dtype=x.dtype, device=x.device)
    cost = (xn[..., :, None] - anchors) ** 2  # (B, n, 2)
    log_mu = torch.full_like(xn, -math.log(n))
    log_nu = torch.log(torch.tensor([(n - k) / n, k / n], dtype=x.dtype, device=x.device))
    f = torch.zeros_like(xn)
    g = torch.zeros(*x.shape[:-1], 2, dtype=x.dtype, device=x.device)
    for _ in range(iters):
        f = eps * (log_mu - torch.logsumexp((g[..., None, :] - cost) / eps, dim=-1))
        g = eps * (log_nu - torch.logsumexp((f[..., :, None] - cost) / eps, dim=-2))
    log_gamma = (f[..., :, None] + g[..., None, :] - cost) / eps
    return n * torch.exp(log_gamma[..., 1])


def hard_topk(x: torch.Tensor, k: int) -> torch.Tensor:
    """0/1 indicator of the k largest entries along the last dim."""
    out = torch.zeros_like(x)
    return out.scatter_(-1, x.topk(k, dim=-1).indices, 1.0)


def hard_rank(x: torch.Tensor) -> torch.Tensor:
    """0-based ascending ranks ``argsort(argsort(x))`` along the last dim."""
    return x.argsort(-1).argsort(-1).to(x.dtype)


def torchsort_available() -> bool:
    """Whether ``torchsort`` imports (a broken build counts as absent)."""
    try:
        import torchsort  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken build counts as absent
        return False
    return True


def torchsort_soft_rank(x: torch.Tensor, strength: float = 1.0) -> torch.Tensor:
    """torchsort's 1-based ascending soft rank (L2 regularisation) on (B, n)."""
    import torchsort

    return torchsort.soft_rank(x, regularization="l2", regularization_strength=strength)


def torchsort_soft_sort(x: torch.Tensor, strength: float = 1.0) -> torch.Tensor:
    """torchsort's ascending soft sort (L2 regularisation) on (B, n)."""
    import torchsort

    return torchsort.soft_sort(x, regularization="l2", regularization_strength=strength)
