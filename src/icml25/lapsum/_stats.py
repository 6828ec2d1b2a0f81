"""The shared numerical kernels of LapSum, in plain torch, on rows of shape ``(R, n)``.

Everything here works in scaled units (centres ``z = (r - c) / alpha``) and in the dtype it is
given; callers pass float64. References are to the spec's sections (``shared/papers/04-lapsum.md``)
and the paper (arXiv:2503.06242).
"""

from __future__ import annotations

import math

import torch

LOG2 = math.log(2.0)


# -- scale-1 Laplace helpers (spec §1) --------------------------------------------------------------
def laplace_cdf(x: torch.Tensor) -> torch.Tensor:
    """``Lap(x)``: ``e^x / 2`` for ``x <= 0``, ``1 - e^{-x} / 2`` otherwise. Elementwise."""
    half = 0.5 * torch.exp(-x.abs())
    return torch.where(x <= 0, half, 1.0 - half)


def laplace_log_cdf(x: torch.Tensor) -> torch.Tensor:
    """``log Lap(x)`` without forming ``Lap(x)``: ``x - log 2`` or ``log1p(-e^{-x} / 2)``."""
    neg = torch.clamp(x, max=0.0) - LOG2
    pos = torch.log1p(-0.5 * torch.exp(-torch.clamp(x, min=0.0)))
    return torch.where(x <= 0, neg, pos)


def laplace_pdf(x: torch.Tensor) -> torch.Tensor:
    """``f(x) = e^{-|x|} / 2``."""
    return 0.5 * torch.exp(-x.abs())


# -- sorted statistics (spec §2 steps 2-3) --------------------------------------------------------
def lapsum_stats(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``A``, ``B`` and ``G`` for ascending rows ``s`` of shape ``(R, n)``.

    ``B_i = sum_{j<=i} e^{s_j - s_i}``, ``A_i = sum_{j>=i} e^{s_i - s_j}`` (both in ``[1, n]``) and
    ``G_i = LapSum(s_i) = i + 1/2 + (A_i - B_i) / 2`` (strictly increasing in ``i``).
    """
    b = torch.exp(torch.logcumsumexp(s, dim=-1) - s)
    a = torch.exp(torch.logcumsumexp((-s).flip(-1), dim=-1).flip(-1) + s)
    # Rounding can push the exact-at-the-ends values a hair below 1; they are >= 1 by definition.
    a, b = a.clamp(min=1.0), b.clamp(min=1.0)
    i = torch.arange(s.shape[-1], dtype=s.dtype, device=s.device)
    g = i + 0.5 + 0.5 * (a - b)
    return a, b, g


def solve_inverse(
    s: torch.Tensor, a: torch.Tensor, b: torch.Tensor, g: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """``tau`` with ``sum_i Lap(tau - s_i) = w`` for each target ``w`` (spec §2 steps 4-6).

    ``s``, ``a``, ``b``, ``g``: ``(R, n)`` from :func:`lapsum_stats`; ``w``: ``(R, m)`` in ``(0, n)``.
    The positive root of the bracket's quadratic is taken in the log domain, so it neither overflows
    nor hits ``log 0`` (the official notebook's ``e = 0`` underflow, spec §2.6).
    """
    n = s.shape[-1]
    j = torch.searchsorted(g.contiguous(), w.contiguous(), side="left")  # (R, m) in 0..n
    lo = (j - 1).clamp(min=0)
    hi = j.clamp(max=n - 1)
    s_lo, s_hi = s.gather(-1, lo), s.gather(-1, hi)
    a_hat = torch.where(j < n, a.gather(-1, hi), torch.zeros_like(s_hi))
    b_hat = torch.where(j > 0, b.gather(-1, lo), torch.zeros_like(s_lo))
    e = w - j.to(w.dtype)
    # Unused branches see harmless finite stand-ins (log 1 = 0), so no inf/NaN is ever formed.
    log_a = torch.log(torch.where(a_hat > 0, a_hat, torch.ones_like(a_hat)))
    log_b = torch.log(torch.where(b_hat > 0, b_hat, torch.ones_like(b_hat)))
    both = (a_hat > 0) & (b_hat > 0)
    big_l = torch.where(both, log_a + log_b + (s_lo - s_hi), torch.full_like(s_lo, -math.inf))
    ell = torch.log(e.abs())  # -inf when e == 0, handled by logaddexp
    log_z = torch.logaddexp(ell, 0.5 * torch.logaddexp(2.0 * ell, big_l))
    return torch.where(e > 0, s_hi + log_z - log_a, s_lo - log_z + log_b)


def lapsum_at(s: torch.Tensor, a: torch.Tensor, b: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """``G(tau) = sum_i Lap(tau - s_i)`` for ascending ``s`` (R, n) and points ``tau`` (R, m).

    Uses the bracket form of spec §2.5; differentiable by autograd through ``s``, ``a``, ``b``.
    """
    n = s.shape[-1]
    j = torch.searchsorted(s.detach().contiguous(), tau.detach().contiguous(), side="left")
    lo, hi = (j - 1).clamp(min=0), j.clamp(max=n - 1)
    right = torch.where(
        j < n,
        0.5 * a.gather(-1, hi) * torch.exp(torch.clamp(tau - s.gather(-1, hi), max=0.0)),
        torch.zeros_like(tau),
    )
    left = torch.where(
        j > 0,
        0.5 * b.gather(-1, lo) * torch.exp(torch.clamp(s.gather(-1, lo) - tau, max=0.0)),
        torch.zeros_like(tau),
    )
    return j.to(tau.dtype) + right - left


# -- Laplace-kernel mat-vecs (spec §4, §5) ----------------------------------------------------------
def _signed_log_parts(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.where(u > 0, u, torch.zeros_like(u))
    neg = torch.where(u < 0, -u, torch.zeros_like(u))
    return torch.log(pos), torch.log(neg)  # log 0 = -inf is fine inside logcumsumexp


def laplace_kernel_matvec(
    s: torch.Tensor, u: torch.Tensor, k1: torch.Tensor | None = None
) -> torch.Tensor:
    """``(K u)_i = sum_j e^{-|s_i - s_j|} u_j / 2`` for ascending ``s`` (R, n), signed ``u`` (R, n).

    O(n) after the sort: one left and one right cumulative sum in the log domain (spec §4). Signed
    ``u`` is shifted to ``u - min(u) >= 0`` and corrected with ``min(u) K 1``: two scans instead of
    the four of a positive/negative split, at an absolute cost of ``eps |min u| n`` in float64.
    ``k1`` (``K 1 = (A + B - 1) / 2``) may be passed when the caller has it.
    """
    if k1 is None:
        a, b, _ = lapsum_stats(s)
        k1 = 0.5 * (a + b - 1.0)
    low = u.min(dim=-1, keepdim=True).values
    shifted = u - low
    log_u = torch.log(shifted)  # log 0 = -inf is fine inside logcumsumexp
    left = torch.exp(torch.logcumsumexp(s + log_u, dim=-1) - s)
    right = torch.exp(torch.logcumsumexp((log_u - s).flip(-1), dim=-1).flip(-1) + s)
    return 0.5 * (left + right - shifted) + low * k1


def cross_kernel_logsum(src: torch.Tensor, log_c: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``log sum_i exp(log_c_i - |dst_l - src_i|)`` for every ``dst_l``, in O((n + m) log(n + m)).

    ``src``/``log_c``: ``(R, n)`` (any order; ``log_c`` may hold ``-inf``), ``dst``: ``(R, m)``.
    The two point sets are merged and sorted once; destinations carry weight ``-inf`` so each
    source term is counted exactly once (spec §5).
    """
    n = src.shape[-1]
    points = torch.cat([src, dst], dim=-1)
    weights = torch.cat([log_c, torch.full_like(dst, -math.inf)], dim=-1)
    p_sorted, order = torch.sort(points, dim=-1, stable=True)
    w_sorted = weights.gather(-1, order)
    left = torch.logcumsumexp(p_sorted + w_sorted, dim=-1) - p_sorted
    right = torch.logcumsumexp((w_sorted - p_sorted).flip(-1), dim=-1).flip(-1) + p_sorted
    total = torch.logaddexp(left, right)
    # undo the sort, keep the destination slots
    unsorted = torch.empty_like(total).scatter_(-1, order, total)
    return unsorted[..., n:]


def cross_kernel_matvec(src: torch.Tensor, c: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``sum_i c_i e^{-|dst_l - src_i|}`` with signed weights ``c`` (R, n), at ``dst`` (R, m)."""
    out = torch.zeros_like(dst)
    for sign, log_c in zip((1.0, -1.0), _signed_log_parts(c)):
        out = out + sign * torch.exp(cross_kernel_logsum(src, log_c, dst))
    return out
