"""The shared numerical kernels of LapSum, in plain torch, on rows of shape ``(R, n)``.

Everything here works in scaled units (centres ``z = (r - c) / alpha``) and in the dtype it is
given; callers pass float64. References are to docs/lapsum.md and the paper
(arXiv:2503.06242).
"""

from __future__ import annotations

import math

import torch

LOG2 = math.log(2.0)


# -- scale-1 Laplace helpers --------------------------------------------------------------
def laplace_cdf(x: torch.Tensor) -> torch.Tensor:
    """``Lap(x)``: ``e^x / 2`` for ``x <= 0``, ``1 - e^{-x} / 2`` otherwise. Elementwise; its
    autograd derivative is the density, ``1/2`` at ``x = 0`` (``|x|``'s would give 0 there)."""
    return torch.where(
        x <= 0,
        0.5 * torch.exp(torch.clamp(x, max=0.0)),
        1.0 - 0.5 * torch.exp(-torch.clamp(x, min=0.0)),
    )


def laplace_log_cdf(x: torch.Tensor) -> torch.Tensor:
    """``log Lap(x)`` without forming ``Lap(x)``: ``x - log 2`` or ``log1p(-e^{-x} / 2)``."""
    neg = torch.clamp(x, max=0.0) - LOG2
    pos = torch.log1p(-0.5 * torch.exp(-torch.clamp(x, min=0.0)))
    return torch.where(x <= 0, neg, pos)


def laplace_pdf(x: torch.Tensor) -> torch.Tensor:
    """``f(x) = e^{-|x|} / 2``."""
    return 0.5 * torch.exp(-x.abs())


# -- exponential scans over ascending rows ------------------------------------------------------
#: largest row spread ``s_max - s_min`` (in units of alpha) for which the plain ``exp`` + ``cumsum``
#: scans stay inside the dtype's normal range: e^{-600} and e^{600} are float64 normals, e^{+-60}
#: float32 ones. Wider rows take the ``logcumsumexp`` path (about 40x slower on CPU).
_FAST_SPREAD = {torch.float64: 600.0, torch.float32: 60.0}


def _use_fast(s: torch.Tensor) -> torch.Tensor | None:
    """Per-row bool mask of the rows the plain scans handle, or None when none qualifies (or
    under ``torch.compile``, where a data-dependent branch would break the graph)."""
    lim = _FAST_SPREAD.get(s.dtype)
    if lim is None or torch.compiler.is_compiling() or s.shape[-1] == 0:
        return None
    if torch._C._functorch.is_functorch_wrapped_tensor(s):  # vmap / grad: no value branches
        return None
    return (s[:, -1] - s[:, 0]) <= lim


def _scans(
    s: torch.Tensor, w: torch.Tensor | None, exclusive: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``L_i = sum_{j<=i} e^{s_j - s_i} w_j`` and ``Rt_i = sum_{j>=i} e^{s_i - s_j} w_j`` for
    ascending rows ``s`` and weights ``w`` (``None``: all ones); ``exclusive`` drops ``j = i``.
    Plain scans on the rows whose spread allows it, ``logcumsumexp`` on the others (which needs
    ``w >= 0``: :func:`_signed_kernel` splits signed weights for it)."""
    fast = _use_fast(s)
    left = right = None
    if fast is not None:
        # one exp per element: el = e^{s - hi} in [e^-spread, 1] and inv = e^{hi - s} <= e^spread;
        # e^{s_j - s_i} = el_j inv_i and e^{s_i - s_j} = el_i inv_j, so no other exponential.
        # The rows left to logcumsumexp get s = 0 here: their e^{+-spread} would overflow, and the
        # torch.where below would turn its zero weight times inf into a NaN gradient.
        sf = s if bool(fast.all()) else torch.where(fast[:, None], s, torch.zeros_like(s))
        d = sf - sf[:, -1:]
        el = torch.exp(d)
        # under autograd a second exp: the reciprocal's derivative -1/el^2 overflows once the
        # spread passes ~354 (float64) or ~44 (float32), a NaN gradient of a finite value
        inv = torch.exp(-d) if d.requires_grad else torch.reciprocal(el)
        wl, wr = (el, inv) if w is None else (el * w, inv * w)
        cl = torch.cumsum(wl, -1)
        cr = torch.cumsum(wr.flip(-1), -1).flip(-1)
        if not exclusive:
            left, right = cl * inv, cr * el
        else:  # shift, never subtract the own term (it would cancel the tiny rest)
            zero = torch.zeros_like(s[:, :1])
            left = torch.cat([zero, cl[:, :-1] * inv[:, 1:]], -1)
            right = torch.cat([cr[:, 1:] * el[:, :-1], zero], -1)
        if bool(fast.all()):
            return left, right
    log_w = None if w is None else torch.log(w)  # log 0 = -inf is fine inside logcumsumexp
    ls = s if log_w is None else s + log_w
    rs = -s if log_w is None else log_w - s
    cl = torch.logcumsumexp(ls, -1)
    cr = torch.logcumsumexp(rs.flip(-1), -1).flip(-1)
    if exclusive:
        ninf = torch.full_like(s[:, :1], -math.inf)
        cl = torch.cat([ninf, cl[:, :-1]], -1)
        cr = torch.cat([cr[:, 1:], ninf], -1)
    sl, sr = torch.exp(cl - s), torch.exp(cr + s)
    if left is None:
        return sl, sr
    keep = fast[:, None]
    return torch.where(keep, left, sl), torch.where(keep, right, sr)


# -- sorted statistics --------------------------------------------------------
def lapsum_stats(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``A``, ``B`` and ``G`` for ascending rows ``s`` of shape ``(R, n)``.

    ``B_i = sum_{j<=i} e^{s_j - s_i}``, ``A_i = sum_{j>=i} e^{s_i - s_j}`` (both in ``[1, n]``) and
    ``G_i = LapSum(s_i) = i + 1/2 + (A_i - B_i) / 2`` (strictly increasing in ``i``).
    """
    b_ex, a_ex = _scans(s, None, exclusive=True)
    a, b = 1.0 + a_ex, 1.0 + b_ex
    i = torch.arange(s.shape[-1], dtype=s.dtype, device=s.device)
    g = i + 0.5 + 0.5 * (a_ex - b_ex)
    return a, b, g


def lapsum_offdiag_stats(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``A_i - 1`` and ``B_i - 1`` (the sums over ``j != i``) by exclusive scans: accurate even
    when they are far below 1 (small alpha), where ``A - 1`` would cancel."""
    b_ex, a_ex = _scans(s, None, exclusive=True)
    return a_ex, b_ex


def solve_inverse(
    s: torch.Tensor, a: torch.Tensor, b: torch.Tensor, g: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """``tau`` with ``sum_i Lap(tau - s_i) = w`` for each target ``w`` (docs/lapsum.md).

    ``s``, ``a``, ``b``, ``g``: ``(R, n)`` from :func:`lapsum_stats`; ``w``: ``(R, m)`` in ``(0, n)``.
    The positive root of the bracket's quadratic is taken in the log domain, so it neither overflows
    nor hits ``log 0`` (the official notebook's ``e = 0`` underflow, docs/lapsum.md).
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

    Uses the bracket form of docs/lapsum.md; differentiable by autograd through ``s``, ``a``, ``b``.
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


# -- Laplace-kernel mat-vecs  ----------------------------------------------------------
def _signed_log_parts(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.where(u > 0, u, torch.zeros_like(u))
    neg = torch.where(u < 0, -u, torch.zeros_like(u))
    return torch.log(pos), torch.log(neg)  # log 0 = -inf is fine inside logcumsumexp


def laplace_kernel_matvec(
    s: torch.Tensor, u: torch.Tensor, k1: torch.Tensor | None = None
) -> torch.Tensor:
    """``(K u)_i = sum_j e^{-|s_i - s_j|} u_j / 2`` for ascending ``s`` (R, n), signed ``u`` (R, n).

    O(n) after the sort: left and right cumulative sums (docs/lapsum.md), of the positive and the
    negative part of ``u`` separately (no cancellation against a shift). ``k1`` is unused (kept
    for callers of the former signature).
    """
    return 0.5 * (_signed_kernel(s, u, exclusive=True) + u)


def laplace_kernel_offdiag_matvec(s: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``sum_{j != i} e^{-|s_i - s_j|} u_j / 2``: :func:`laplace_kernel_matvec` without the
    diagonal, by exclusive scans, so nothing cancels against the ``u_i / 2`` term when the
    off-diagonal part is tiny (small alpha)."""
    return 0.5 * _signed_kernel(s, u, exclusive=True)


def _signed_kernel(s: torch.Tensor, u: torch.Tensor, exclusive: bool) -> torch.Tensor:
    """Left + right scans of signed ``u``: one pair of plain scans where every row allows them
    (signed terms are fine in a plain cumsum), else the log-domain scans of the positive and
    the negative part."""
    fast = _use_fast(s)
    if fast is not None and bool(fast.all()):
        left, right = _scans(s, u, exclusive)
        return left + right
    pos = torch.where(u > 0, u, torch.zeros_like(u))
    neg = torch.where(u < 0, -u, torch.zeros_like(u))
    lp, rp = _scans(s, pos, exclusive)
    ln, rn = _scans(s, neg, exclusive)
    return (lp + rp) - (ln + rn)


def cross_kernel_logsum(src: torch.Tensor, log_c: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """``log sum_i exp(log_c_i - |dst_l - src_i|)`` for every ``dst_l``, in O((n + m) log(n + m)).

    ``src``/``log_c``: ``(R, n)`` (any order; ``log_c`` may hold ``-inf``), ``dst``: ``(R, m)``.
    The two point sets are merged and sorted once; destinations carry weight ``-inf`` so each
    source term is counted exactly once (docs/lapsum.md).
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
