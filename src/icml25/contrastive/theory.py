"""The paper's closed forms, so a user can check a full-batch setting against the theory
(Lee et al., ICML 2025: Thm 5.1-5.6, Eq. 10), and an embedding-optimisation sandbox."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from icml25._validate import as_int, as_real

__all__ = [
    "alignment_gap",
    "etf_threshold",
    "excessive_separation_condition",
    "minibatch_variance_bounds",
    "optimize_embeddings",
    "predicted_ind_add_optimum",
    "siglip_excessive_separation",
    "siglip_phi_psi",
    "simplex_etf",
]


def _check_n(n: int, least: int = 2) -> int:
    return as_int("n", n, least)


def etf_threshold(n: int) -> float:
    """``-1/(n-1)``: the negative similarity of the full-batch optimum (Thm 5.1), and the
    threshold below which perfect alignment is impossible (Thm 5.2). Independent of temperature."""
    n = _check_n(n)
    return -1.0 / (n - 1)


def simplex_etf(n: int, d: int, dtype: torch.dtype = torch.float64) -> Tensor:
    """``n`` unit vectors in ``R^d`` with pairwise inner product ``-1/(n-1)`` (needs ``d >= n-1``)."""
    n = _check_n(n)
    d = as_int("d", d, 1)
    if d < n - 1:
        raise ValueError(f"a simplex ETF of n={n} points needs d >= n-1 = {n - 1}, got d={d}")
    C = torch.eye(n, dtype=torch.float64) - 1.0 / n  # centred basis vectors, rank n-1
    Q, _ = torch.linalg.qr(C)  # orthonormal columns spanning the centred subspace (first n-1)
    coords = C @ Q[:, : n - 1]
    coords = F.normalize(coords, dim=-1)
    out = torch.zeros(n, d, dtype=torch.float64)
    out[:, : n - 1] = coords
    return out.to(dtype)


def minibatch_variance_bounds(n: int, m: int) -> tuple[float, float]:
    """Thm 5.5: bounds on the variance of cross-view negative similarities over all ``n(n-1)``
    pairs when ``n`` instances are split into fixed batches of ``m``."""
    n = _check_n(n)
    m = as_int("m", m, 2, n)
    if n % m:
        raise ValueError(
            f"m must be an integer with 2 <= m <= n and m dividing n, got m={m}, n={n}"
        )
    base = (n - m) / ((m - 1) * (n - 1) ** 2)
    return base, n * base


def excessive_separation_condition(dphi_at_1: float, dpsi_at_thr: float, n: int) -> bool:
    """Thm 5.3: ``phi'(1) < (n-2)/(2(n-1)) psi'(-1/(n-1))`` implies s_pos < 1, s_neg < -1/(n-1)."""
    n = _check_n(n)
    dphi_at_1 = as_real("dphi_at_1", dphi_at_1)
    dpsi_at_thr = as_real("dpsi_at_thr", dpsi_at_thr)
    return dphi_at_1 < (n - 2) / (2 * (n - 1)) * dpsi_at_thr


def siglip_excessive_separation(n: int, t: float, b_paper: float) -> bool:
    """Eq. 10 for SigLIP in the paper's convention (``b_paper = -bias`` of SigLIP's code)."""
    n = _check_n(n)
    t, b_paper = as_real("t", t, low=0.0, low_open=True), as_real("b_paper", b_paper)
    return (1 + math.exp(t / (n - 1) + b_paper)) / (1 + math.exp(t - b_paper)) < (n - 2) / 2


def siglip_phi_psi(n: int, t: float, b_paper: float):
    """SigLIP's (phi, psi) of Def. 3.2 in the paper's convention, for a full batch of ``n``."""

    def phi(x):
        return -F.softplus(-t * x + b_paper)

    def psi(x):
        return (n - 1) * F.softplus(t * x - b_paper)

    return phi, psi


def predicted_ind_add_optimum(phi: Callable, psi: Callable, n: int) -> tuple[float, float]:
    """Optimal (mean positive, mean negative) similarity of an independently additive loss with
    c = (1, 0) in full batch (from the proof of Thm 5.3): ``x* = argmin h`` on [-1, 1] with
    ``h(x) = -phi(x) + psi((n-2) x / (2(n-1)) - n / (2(n-1)))``."""
    from scipy.optimize import minimize_scalar

    n = _check_n(n, 3)
    a, b = (n - 2) / (2 * (n - 1)), n / (2 * (n - 1))

    def h(x: float) -> float:
        xt = torch.tensor(x, dtype=torch.float64)
        return float(-phi(xt) + psi(a * xt - b))

    res = minimize_scalar(h, bounds=(-1.0, 1.0), method="bounded", options={"xatol": 1e-10})
    x = float(res.x)
    for edge in (-1.0, 1.0):  # a bounded search can stop just inside an edge optimum
        if h(edge) <= h(x):
            x = edge
    return x, a * x - b


def alignment_gap(u: Tensor, v: Tensor) -> tuple[float, float]:
    """Thm 5.2's exact identity: ``mean s_ii - mean_{i != j} s_ij`` and its centred form
    ``(1/(n-1)) sum_i (u_i - u_bar)^T (v_i - v_bar)``; both are <= n/(n-1) for unit vectors."""
    n = u.shape[0]
    S = u @ v.T
    off = ~torch.eye(n, dtype=torch.bool)
    gap = float(S.diagonal().mean() - S[off].mean())
    centred = float(((u - u.mean(0)) * (v - v.mean(0))).sum() / (n - 1))
    return gap, centred


def optimize_embeddings(
    loss_fn: Callable[[Tensor, Tensor], Tensor],
    n: int,
    d: int,
    *,
    steps: int = 2000,
    lr: float = 0.05,
    seed: int = 0,
    partition: int | None = None,
    dtype: torch.dtype = torch.float64,
):
    """Minimise ``loss_fn(U, V)`` over free unit embeddings (Adam, cosine lr); ``partition=m`` sums
    the loss over fixed consecutive batches of ``m`` (Thm 5.5). Returns ``(U, V)`` detached."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, d, generator=g, dtype=dtype).requires_grad_(True)
    B = torch.randn(n, d, generator=g, dtype=dtype).requires_grad_(True)
    opt = torch.optim.Adam([A, B], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    blocks = (
        [slice(0, n)]
        if partition is None
        else [slice(i, i + partition) for i in range(0, n, partition)]
    )
    for _ in range(steps):
        U, V = F.normalize(A, dim=-1), F.normalize(B, dim=-1)
        loss = sum(loss_fn(U[s], V[s]) for s in blocks)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return F.normalize(A.detach(), dim=-1), F.normalize(B.detach(), dim=-1)
