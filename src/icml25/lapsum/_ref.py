"""Pure-PyTorch autograd functions of LapSum on rows ``(R, n)``: the CPU path and the fallback.

Each works in float64 on CPU whatever the input dtype, and in the input's precision (at least
float32) on CUDA (:func:`_cdt`), and returns the input's dtype. Backward passes use the exact closed-form VJPs of the paper's
§3-§5: no ``n x n`` matrix, O(n) saved memory (``r`` in its own dtype, ``t``, and for rank the sort
permutation). Backwards are ``once_differentiable``: double backward is not supported.

All functions take the "largest" / ascending convention; the public layer negates ``r`` for the
other direction.
"""

from __future__ import annotations

import math
import os

import torch
from torch.autograd.function import once_differentiable

from icml25.lapsum._stats import (
    LOG2,
    cross_kernel_logsum,
    cross_kernel_matvec,
    laplace_cdf,
    laplace_kernel_offdiag_matvec,
    laplace_log_cdf,
    lapsum_offdiag_stats,
    lapsum_stats,
    solve_inverse,
)


def _cdt(r: torch.Tensor) -> torch.dtype:
    """Compute dtype of the torch path: float64 on CPU (cheap there; the sorted statistics keep
    full precision); on CUDA the input's precision, at least float32 (float64 is slow on most
    GPUs): docs/lapsum.md, "Precision". ``ICML25_LAPSUM_COMPUTE=float32`` forces float32 (tests)."""
    if os.environ.get("ICML25_LAPSUM_COMPUTE", "") == "float32" and r.dtype != torch.float64:
        return torch.float32
    if r.dtype == torch.float64 or r.device.type == "cpu":
        return torch.float64
    return torch.float32


def _sorted_scaled(r: torch.Tensor, alpha: torch.Tensor):
    """Sort rows, centre on the row median (shift invariance, docs/lapsum.md), scale by alpha."""
    rs, perm = torch.sort(r, dim=-1)
    rs = rs.to(_cdt(r))
    center = rs[:, (rs.shape[-1] - 1) // 2 : (rs.shape[-1] - 1) // 2 + 1]
    s = (rs - center) / alpha
    return s, perm, center


class _LapSumInverseFn(torch.autograd.Function):
    """``t = LapSum_alpha^{-1}(r; w)``: r ``(R, n)``, w ``(R, m)`` in (0, n), alpha ``(R, 1)``.

    Returns ``(t in r's dtype, t in the compute dtype)``; the second is saved for backward (a
    non-differentiable output, so ``setup_context`` can keep it: what torch.func needs)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(r: torch.Tensor, w: torch.Tensor, alpha: torch.Tensor):
        a64 = alpha.to(_cdt(r))
        s, _, center = _sorted_scaled(r, a64)
        if w.shape[-1] == 0:
            t = torch.zeros(w.shape, dtype=_cdt(r), device=r.device)
        else:
            a, b, g = lapsum_stats(s)
            t = center + a64 * solve_inverse(s, a, b, g, w.to(_cdt(r)))
        # a distinct tensor for the public output (t.to(r.dtype) may return t itself)
        return t.to(r.dtype, copy=True), t

    @staticmethod
    def setup_context(ctx, inputs, output):
        r, w, alpha = inputs
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(r, output[1], alpha)
        ctx.w_dtype = w.dtype

    @staticmethod
    @once_differentiable
    def backward(ctx, u: torch.Tensor, _u_aux=None):
        r, t, alpha = ctx.saved_tensors
        if u is None:
            return None, None, None
        if t.shape[-1] == 0:
            return (
                torch.zeros_like(r),
                torch.zeros(t.shape, dtype=ctx.w_dtype),
                torch.zeros_like(alpha),
            )
        a64 = alpha.to(_cdt(r))
        u = u.to(_cdt(r))
        g_r, weights, c = _inverse_vjp(r, t, a64, u)
        g_w = a64 * weights if ctx.needs_input_grad[1] else None
        g_alpha = None
        if ctx.needs_input_grad[2]:
            g_alpha = (
                (u * (t - c)).sum(-1, keepdim=True)
                - (g_r * (r.to(_cdt(r)) - c)).sum(-1, keepdim=True)
            ) / a64
        return (
            g_r.to(r.dtype) if ctx.needs_input_grad[0] else None,
            g_w.to(ctx.w_dtype) if g_w is not None else None,
            g_alpha.to(alpha.dtype) if g_alpha is not None else None,
        )


def _inverse_vjp(r: torch.Tensor, t: torch.Tensor, a64: torch.Tensor, u: torch.Tensor):
    """``g_r_j = sum_l u_l W_lj`` for ``t = LapSum^{-1}(r; w)`` (docs/lapsum.md), plus ``u_l / F_l``.

    ``W_lj = f((t_l - r_j)/alpha) / F_l`` is never formed: two cross Laplace-kernel sums over the
    merged, sorted point sets. Returns ``(g_r, u / F, row mean used for centring)``.
    """
    c = r.to(_cdt(r)).mean(dim=-1, keepdim=True)
    z = (r.to(_cdt(r)) - c) / a64
    tau = (t - c) / a64
    log_f = cross_kernel_logsum(z, torch.zeros_like(z), tau) - LOG2  # log F_l
    weights = u * torch.exp(-log_f)
    g_r = 0.5 * cross_kernel_matvec(tau, weights, z)
    return g_r, weights, c


def save_topk_context(ctx, r, k, alpha, log: bool, t: torch.Tensor) -> None:
    """What soft top-k's backward needs, on either CPU path: the input, ``t`` (a
    non-differentiable output) and alpha; whether the output was the log; k's dtype."""
    ctx.mark_non_differentiable(t)
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(r, t, alpha)
    ctx.log = log
    ctx.k_dtype = k.dtype


class _SoftTopKFn(torch.autograd.Function):
    """Soft top-k ("largest"): r ``(R, n)``, k ``(R, m)`` in (0, n), alpha ``(R, 1)`` -> ``(R, m, n)``.

    ``p_i = Lap((r_i - t)/alpha)`` with ``t = LapSum^{-1}(r; n - k)`` (docs/lapsum.md), or ``log p_i``.
    Returns ``(p, t)``; ``t`` is a non-differentiable output saved for backward.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(r, k, alpha, log: bool):
        a64 = alpha.to(_cdt(r))
        n = r.shape[-1]
        s, _, center = _sorted_scaled(r, a64)
        a, b, g = lapsum_stats(s)
        t = center + a64 * solve_inverse(s, a, b, g, n - k.to(_cdt(r)))  # (R, m)
        x = (r.to(_cdt(r))[:, None, :] - t[:, :, None]) / a64[:, :, None]
        out = laplace_log_cdf(x) if log else laplace_cdf(x)
        return out.to(r.dtype), t

    @staticmethod
    def setup_context(ctx, inputs, output):
        save_topk_context(ctx, *inputs[:4], output[1])

    @staticmethod
    @once_differentiable
    def backward(ctx, v, _v_aux=None):
        r, t, alpha = ctx.saved_tensors
        if v is None:
            return None, None, None, None
        a64 = alpha.to(_cdt(r))[:, :, None]  # (R, 1, 1)
        v = v.to(_cdt(r))
        x = (r.to(_cdt(r))[:, None, :] - t[:, :, None]) / a64  # (R, m, n)
        neg_abs = -x.abs()
        q = torch.softmax(neg_abs, dim=-1)
        log_f = torch.logsumexp(neg_abs, dim=-1) - LOG2  # (R, m)
        if ctx.log:
            # h = f(x)/p = 1 for x <= 0, e^{-x}/(2 - e^{-x}) otherwise
            em = torch.exp(-x.clamp(min=0.0))
            h = torch.where(x <= 0, torch.ones_like(x), em / (2.0 - em))
            h_bar = (h * v).sum(-1)
            g_r_slices = (h * v - q * h_bar[..., None]) / a64
            g_k = (h_bar * torch.exp(-log_f)).clamp(
                min=-torch.finfo(ctx.k_dtype).max, max=torch.finfo(ctx.k_dtype).max
            )
        else:
            g_bar = (q * v).sum(-1)
            g_r_slices = torch.exp(log_f)[..., None] / a64 * q * (v - g_bar[..., None])
            g_k = g_bar
        g_r = g_r_slices.sum(1)
        g_alpha = None
        if ctx.needs_input_grad[2]:
            # -(1/alpha) <g_r, r - t> per slice, summed over slices; (r - t)/alpha = x
            g_alpha = -(g_r_slices * x).sum((-1, -2))[:, None]
        return (
            g_r.to(r.dtype) if ctx.needs_input_grad[0] else None,
            g_k.to(ctx.k_dtype) if ctx.needs_input_grad[1] else None,
            g_alpha.to(alpha.dtype) if g_alpha is not None else None,
            None,
        )


class _SoftRankFn(torch.autograd.Function):
    """0-based ascending soft rank ``rank_i = sum_{j != i} Lap((r_i - r_j)/alpha)`` (docs/lapsum.md).

    Returns ``(rank, perm, k1)``; the sort permutation and the off-diagonal ``K 1`` in sorted
    order are non-differentiable outputs saved for backward (r + perm + k1 = 20 bytes/element).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(r, alpha):
        a64 = alpha.to(_cdt(r))
        s, perm, _ = _sorted_scaled(r, a64)
        a_ex, b_ex = lapsum_offdiag_stats(s)
        i = torch.arange(r.shape[-1], dtype=_cdt(r), device=r.device)
        ranks_sorted = i + 0.5 * (a_ex - b_ex)
        out = torch.empty_like(ranks_sorted).scatter(-1, perm, ranks_sorted)
        return out.to(r.dtype), perm, 0.5 * (a_ex + b_ex)

    @staticmethod
    def setup_context(ctx, inputs, output):
        r, alpha = inputs
        _, perm, k1 = output
        ctx.mark_non_differentiable(perm, k1)
        ctx.set_materialize_grads(False)  # no zero tensors for the saved-for-backward outputs
        ctx.save_for_backward(r, perm, k1, alpha)

    @staticmethod
    @once_differentiable
    def backward(ctx, v, _perm_grad=None, _k1_grad=None):
        r, perm, k1, alpha = ctx.saved_tensors
        if v is None:
            return None, None
        a64 = alpha.to(_cdt(r))
        r64 = r.to(_cdt(r))
        c = r64.mean(-1, keepdim=True)
        s = (r64.gather(-1, perm) - c) / a64  # sorted without a second sort
        v_sorted = v.to(_cdt(r)).gather(-1, perm)
        # d rank_i / d r_j over j != i only: exclusive scans, so the diagonal v_i / 2 never meets
        # (and never cancels against) a tiny off-diagonal part
        kv = laplace_kernel_offdiag_matvec(s, v_sorted)
        g_sorted = (v_sorted * k1 - kv) / a64
        g_r = torch.empty_like(g_sorted).scatter(-1, perm, g_sorted)
        g_alpha = None
        if ctx.needs_input_grad[1]:
            g_alpha = -(g_r * (r64 - c)).sum(-1, keepdim=True) / a64
        return (
            g_r.to(r.dtype) if ctx.needs_input_grad[0] else None,
            g_alpha.to(alpha.dtype) if g_alpha is not None else None,
        )


class PermutationCEFn(torch.autograd.Function):
    """Per-row ``-sum_i log P[i, target_i]`` (docs/lapsum.md) with an O(n log n) closed-form backward.

    r ``(R, n)``, target ``(R, n)`` int64 positions, alpha ``(R, 1)`` -> ``(R,)``. Saves r, target
    and the n - 1 cut points: O(n) memory, the n x n matrix is never formed.
    """

    @staticmethod
    def forward(ctx, r, target, alpha):
        a64 = alpha.to(_cdt(r))
        n = r.shape[-1]
        if n > 1:
            s, _, center = _sorted_scaled(r, a64)
            sa, sb, sg = lapsum_stats(s)
            w = torch.arange(1, n, dtype=_cdt(r), device=r.device).expand(r.shape[0], n - 1)
            cuts = center + a64 * solve_inverse(s, sa, sb, sg, w)
        else:
            cuts = torch.zeros((r.shape[0], 0), dtype=_cdt(r), device=r.device)
        x_lo, x_hi = _position_bounds(r, target, cuts, a64)
        log_d = log_cdf_difference(x_lo, x_hi)
        ctx.save_for_backward(r, target, cuts, alpha)
        return (-log_d.sum(-1)).to(r.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        r, target, cuts, alpha = ctx.saved_tensors
        a64 = alpha.to(_cdt(r))
        g = g.to(_cdt(r))[:, None]  # (R, 1)
        n = r.shape[-1]
        x_lo, x_hi = _position_bounds(r, target, cuts, a64)
        log_d = log_cdf_difference(x_lo, x_hi)
        # f(a)/D and f(c)/D as exp(-|x| - log 2 - log D): never divide by an underflowed D
        ratio_lo = torch.exp(-x_lo.abs() - LOG2 - log_d)
        ratio_hi = torch.exp(-x_hi.abs() - LOG2 - log_d)
        # loss = -sum log D; dlogD/da = -f(a)/D, dlogD/dc = f(c)/D; da/dr = dc/dr = -1/alpha
        g_r = -g * (ratio_lo - ratio_hi) / a64
        if n > 1:
            # through the cut points: b_T feeds a (dlogD/db = -f(a)/D/alpha), b_{T+1} feeds c
            g_cut_full = torch.zeros((r.shape[0], n + 1), dtype=_cdt(r), device=r.device)
            g_cut_full.scatter_add_(-1, target, g * ratio_lo / a64)
            g_cut_full.scatter_add_(-1, target + 1, -g * ratio_hi / a64)
            g_via_cuts, _, _ = _inverse_vjp(r, cuts, a64, g_cut_full[:, 1:n])
            g_r = g_r + g_via_cuts
        g_alpha = None
        if ctx.needs_input_grad[2]:
            # the loss is a function of r / alpha only, and J 1 = 0 (docs/lapsum.md)
            rc = r.to(_cdt(r)) - r.to(_cdt(r)).mean(-1, keepdim=True)
            g_alpha = -(g_r * rc).sum(-1, keepdim=True) / a64
        return (
            g_r.to(r.dtype) if ctx.needs_input_grad[0] else None,
            None,
            g_alpha.to(alpha.dtype) if g_alpha is not None else None,
        )


def _position_bounds(r, target, cuts, a64):
    """Scaled interval ``(a_i, c_i) = ((b_T - r_i)/alpha, (b_{T+1} - r_i)/alpha)`` of each element."""
    R, n = r.shape
    inf = torch.full((R, 1), math.inf, dtype=_cdt(r), device=r.device)
    b = torch.cat([-inf, cuts, inf], dim=-1)
    lo, hi = b.gather(-1, target), b.gather(-1, target + 1)
    r64 = r.to(_cdt(r))
    return (lo - r64) / a64, (hi - r64) / a64


def log_cdf_difference(a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``log(Lap(c) - Lap(a))`` for ``a < c``; ``a = -inf`` (first position) and ``c = +inf`` (last
    position) allowed (docs/lapsum.md). Each ``torch.where`` branch gets finite stand-ins where it is not
    used, so neither the forward nor autograd meets inf or NaN.
    """
    first = torch.isinf(a) & (a < 0)
    last = torch.isinf(c) & (c > 0)
    mid = ~first & ~last
    right = mid & (c <= 0)
    left = mid & (a >= 0)
    straddle = mid & ~right & ~left
    tiny = -1e-300  # cut points are strictly increasing; this only guards exact rounding ties

    def pick(mask: torch.Tensor, x: torch.Tensor, fill: float) -> torch.Tensor:
        return torch.where(mask, x, torch.full_like(x, fill))

    a_r, c_r = pick(right, a, -2.0), pick(right, c, -1.0)
    a_l, c_l = pick(left, a, 1.0), pick(left, c, 2.0)
    a_s, c_s = pick(straddle, a, -1.0), pick(straddle, c, 1.0)
    v_right = c_r - LOG2 + torch.log(-torch.expm1(torch.clamp(a_r - c_r, max=tiny)))
    v_left = -a_l - LOG2 + torch.log(-torch.expm1(torch.clamp(a_l - c_l, max=tiny)))
    v_straddle = torch.log(-(torch.expm1(-c_s) + torch.expm1(a_s))) - LOG2
    only_first, only_last = first & ~last, last & ~first
    v_first = laplace_log_cdf(pick(only_first, c, 0.0))
    v_last = laplace_log_cdf(-pick(only_last, a, 0.0))
    out = torch.zeros_like(v_right)  # n = 1: the only position has probability 1
    out = torch.where(only_last, v_last, out)
    out = torch.where(only_first, v_first, out)
    out = torch.where(straddle, v_straddle, out)
    out = torch.where(left, v_left, out)
    return torch.where(right, v_right, out)


__all__ = [
    "LapSumInverseFn",
    "PermutationCEFn",
    "SoftRankFn",
    "SoftTopKFn",
    "log_cdf_difference",
]


#: autograd's C entry point, which ``Function.apply`` ends in when no torch.func transform is
#: active; ``Function.apply`` first binds the arguments with ``inspect.signature`` (about 15 us,
#: a tenth of a small soft rank's forward + backward), which positional calls do not need
_C_APPLY = torch._C._FunctionBase.__dict__.get("apply")


class _First:
    """``Fn.apply(...)[0]``: the public value of a function with saved-for-backward outputs.
    Callers pass every argument positionally, so outside torch.compile and torch.func the
    argument binding of ``Function.apply`` is skipped."""

    def __init__(self, fn: type[torch.autograd.Function]) -> None:
        self.fn = fn
        self._fast = _C_APPLY.__get__(None, fn) if _C_APPLY is not None else None

    def apply(self, *args):
        if (
            self._fast is not None
            and not torch.compiler.is_compiling()
            and not torch._C._are_functorch_transforms_active()
        ):
            return self._fast(*args)[0]
        return self.fn.apply(*args)[0]


LapSumInverseFn = _First(_LapSumInverseFn)
SoftTopKFn = _First(_SoftTopKFn)
SoftRankFn = _First(_SoftRankFn)
