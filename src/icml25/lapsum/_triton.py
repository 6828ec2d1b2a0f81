"""Triton kernels for LapSum on CUDA (docs/lapsum.md); also runnable on CPU under
``TRITON_INTERPRET=1`` (set before triton is imported), which is how the tests check them.

Torch sorts the rows; one program per row then builds ``B`` and ``A`` with associative scans of the
linear recurrences ``y_i = c_i y_{i-1} + 1`` (pairs combined as ``(a1, b1) o (a2, b2) = (a1 a2,
b1 a2 + b2)``), which only ever exponentiate differences <= 0 and are therefore accurate in float32.
Rows longer than ``MAX_N`` or with more than ``MAX_M`` values of k use the torch path.
"""

from __future__ import annotations

import os

import torch

from icml25.lapsum import _ref

MAX_N = 16384  # one program holds a whole row in registers/shared memory
MAX_M = 64


try:  # optional dependency: everything below is defined only when triton imports
    import triton
    import triton.language as tl

    _IMPORT_ERROR = ""
except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
    triton = tl = None
    _IMPORT_ERROR = f"triton does not import ({type(exc).__name__}: {exc})"


def available(x: torch.Tensor) -> tuple[bool, str]:
    """Whether the Triton kernels can run on ``x``'s device, and why not."""
    if triton is None:
        return False, _IMPORT_ERROR + "; pip install 'icml25[gpu]'"
    if x.is_cuda:
        return True, ""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True, ""
    return False, f"x is on {x.device}; Triton runs on CUDA (or on CPU with TRITON_INTERPRET=1)"


if triton is not None:

    @triton.jit
    def _combine(a1, b1, a2, b2):
        return a1 * a2, b1 * a2 + b2

    @triton.jit
    def _scans(s_ptr, row, n, BLOCK: tl.constexpr):
        """A, B (and the sorted row) of one row, masked beyond n."""
        i = tl.arange(0, BLOCK)
        inside = i < n
        s = tl.load(s_ptr + row * n + i, mask=inside, other=0.0)
        s_prev = tl.load(s_ptr + row * n + i - 1, mask=inside & (i > 0), other=0.0)
        s_next = tl.load(s_ptr + row * n + i + 1, mask=(i + 1) < n, other=0.0)
        c = tl.where(inside & (i > 0), tl.exp(s_prev - s), 0.0)
        d = tl.where((i + 1) < n, tl.exp(s - s_next), 0.0)
        one = tl.where(inside, 1.0, 0.0)
        c_id = tl.where(inside, c, 1.0)
        d_id = tl.where(inside, d, 1.0)
        _, b = tl.associative_scan((c_id, one), 0, _combine)
        _, a = tl.associative_scan((d_id, one), 0, _combine, reverse=True)
        return s, a, b, c_id, d_id, i, inside

    @triton.jit
    def solve_kernel(s_ptr, w_ptr, tau_ptr, n, m, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        s, a, b, _c, _d, i, inside = _scans(s_ptr, row, n, BLOCK)
        g = tl.where(inside, i.to(tl.float32) + 0.5 + 0.5 * (a - b), float("inf"))
        for q in range(m):
            w = tl.load(w_ptr + row * m + q)
            j = tl.sum((g < w).to(tl.int32), axis=0)
            lo = tl.maximum(j - 1, 0)
            hi = tl.minimum(j, n - 1)
            s_lo = tl.sum(tl.where(i == lo, s, 0.0), axis=0)
            s_hi = tl.sum(tl.where(i == hi, s, 0.0), axis=0)
            a_hat = tl.where(j < n, tl.sum(tl.where(i == hi, a, 0.0), axis=0), 0.0)
            b_hat = tl.where(j > 0, tl.sum(tl.where(i == lo, b, 0.0), axis=0), 0.0)
            e = w - j.to(tl.float32)
            log_a = tl.log(tl.where(a_hat > 0, a_hat, 1.0))
            log_b = tl.log(tl.where(b_hat > 0, b_hat, 1.0))
            both = (a_hat > 0) & (b_hat > 0)
            # log Z = log(|e| + sqrt(e^2 + A B e^{S - T})), in the log domain (docs/lapsum.md)
            ae = tl.abs(e)
            disc = tl.where(both, tl.exp(log_a + log_b + (s_lo - s_hi)), 0.0)
            log_z = tl.log(ae + tl.sqrt(ae * ae + disc))
            log_z = tl.where(ae > 0, log_z, 0.5 * (log_a + log_b + (s_lo - s_hi)))
            tau = tl.where(e > 0, s_hi + log_z - log_a, s_lo - log_z + log_b)
            tl.store(tau_ptr + row * m + q, tau)

    @triton.jit
    def topk_out_kernel(
        r_ptr, t_ptr, alpha_ptr, out_ptr, n, m, LOG: tl.constexpr, BLOCK: tl.constexpr
    ):
        row = tl.program_id(0)
        q = tl.program_id(1)
        blk = tl.program_id(2)
        i = blk * BLOCK + tl.arange(0, BLOCK)
        inside = i < n
        r = tl.load(r_ptr + row * n + i, mask=inside, other=0.0)
        t = tl.load(t_ptr + row * m + q)
        alpha = tl.load(alpha_ptr + row)
        x = (r - t) / alpha
        half = 0.5 * tl.exp(-tl.abs(x))
        if LOG:
            out = tl.where(
                x <= 0,
                tl.minimum(x, 0.0) - 0.6931471805599453,
                tl.log(1.0 - 0.5 * tl.exp(-tl.maximum(x, 0.0))),
            )
        else:
            out = tl.where(x <= 0, half, 1.0 - half)
        tl.store(out_ptr + (row * m + q) * n + i, out, mask=inside)

    @triton.jit
    def topk_bwd_kernel(
        r_ptr,
        t_ptr,
        alpha_ptr,
        v_ptr,
        gr_ptr,
        gk_ptr,
        ga_ptr,
        n,
        m,
        LOG: tl.constexpr,
        GK_MAX: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        row = tl.program_id(0)
        q = tl.program_id(1)
        i = tl.arange(0, BLOCK)
        inside = i < n
        r = tl.load(r_ptr + row * n + i, mask=inside, other=0.0)
        v = tl.load(v_ptr + (row * m + q) * n + i, mask=inside, other=0.0)
        t = tl.load(t_ptr + row * m + q)
        alpha = tl.load(alpha_ptr + row)
        x = (r - t) / alpha
        neg_abs = tl.where(inside, -tl.abs(x), -float("inf"))
        top = tl.max(neg_abs, axis=0)
        wgt = tl.exp(neg_abs - top)  # max-shifted f: never divide by an underflowed sum
        total = tl.sum(wgt, axis=0)
        qv = wgt / total
        log_f = tl.log(total) + top - 0.6931471805599453
        if LOG:
            em = tl.exp(-tl.maximum(x, 0.0))
            h = tl.where(x <= 0, 1.0, em / (2.0 - em))
            h = tl.where(inside, h, 0.0)
            h_bar = tl.sum(h * v, axis=0)
            g = (h * v - qv * h_bar) / alpha
            g_k = tl.minimum(tl.maximum(h_bar * tl.exp(-log_f), -GK_MAX), GK_MAX)
        else:
            g_bar = tl.sum(qv * v, axis=0)
            g = tl.exp(log_f) / alpha * qv * (v - g_bar)
            g_k = g_bar
        g = tl.where(inside, g, 0.0)
        tl.store(gr_ptr + (row * m + q) * n + i, g, mask=inside)
        tl.store(gk_ptr + row * m + q, g_k)
        tl.store(ga_ptr + row * m + q, -tl.sum(g * tl.where(inside, x, 0.0), axis=0))

    @triton.jit
    def rank_fwd_kernel(s_ptr, rank_ptr, k1_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        s, a, b, _c, _d, i, inside = _scans(s_ptr, row, n, BLOCK)
        tl.store(rank_ptr + row * n + i, i.to(tl.float32) + 0.5 * (a - b), mask=inside)
        tl.store(k1_ptr + row * n + i, 0.5 * (a + b - 1.0), mask=inside)

    @triton.jit
    def rank_bwd_kernel(s_ptr, v_ptr, k1_ptr, alpha_ptr, g_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        s, _a, _b, c, d, i, inside = _scans(s_ptr, row, n, BLOCK)
        u = tl.load(v_ptr + row * n + i, mask=inside, other=0.0)
        k1 = tl.load(k1_ptr + row * n + i, mask=inside, other=0.0)
        _, left = tl.associative_scan((c, u), 0, _combine)
        _, right = tl.associative_scan((d, u), 0, _combine, reverse=True)
        kv = 0.5 * (left + right - u)
        alpha = tl.load(alpha_ptr + row)
        tl.store(g_ptr + row * n + i, (u * k1 - kv) / alpha, mask=inside)


def _kernels():
    if triton is None:
        raise RuntimeError(_IMPORT_ERROR)
    return triton, {
        "solve": solve_kernel,
        "topk_out": topk_out_kernel,
        "topk_bwd": topk_bwd_kernel,
        "rank_fwd": rank_fwd_kernel,
        "rank_bwd": rank_bwd_kernel,
    }


def _block(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


def _sorted_scaled32(r: torch.Tensor, alpha32: torch.Tensor):
    rs, perm = torch.sort(r.float(), dim=-1)
    mid = (rs.shape[-1] - 1) // 2
    center = rs[:, mid : mid + 1]
    return ((rs - center) / alpha32).contiguous(), perm, center


class TritonSoftTopKFn(torch.autograd.Function):
    """Same contract as :class:`icml25.lapsum._ref.SoftTopKFn`, float32 inside."""

    @staticmethod
    def forward(ctx, r, k, alpha, log: bool):
        triton, kern = _kernels()
        R, n = r.shape
        m = k.shape[-1]
        a32 = alpha.float().reshape(R).contiguous()
        s, _, center = _sorted_scaled32(r, a32[:, None])
        tau = torch.empty((R, m), dtype=torch.float32, device=r.device)
        w = (n - k.float()).contiguous()
        kern["solve"][(R,)](s, w, tau, n, m, BLOCK=_block(n))
        t = (center + a32[:, None] * tau).contiguous()
        out = torch.empty((R, m, n), dtype=torch.float32, device=r.device)
        blk = min(1024, _block(n))
        r32 = r.float().contiguous()
        kern["topk_out"][(R, m, triton.cdiv(n, blk))](r32, t, a32, out, n, m, LOG=log, BLOCK=blk)
        ctx.save_for_backward(r, t, alpha)
        ctx.log, ctx.k_dtype = log, k.dtype
        return out.to(r.dtype)

    @staticmethod
    def backward(ctx, v):
        _triton, kern = _kernels()
        r, t, alpha = ctx.saved_tensors
        R, n = r.shape
        m = t.shape[-1]
        a32 = alpha.float().reshape(R).contiguous()
        g_slices = torch.empty((R, m, n), dtype=torch.float32, device=r.device)
        g_k = torch.empty((R, m), dtype=torch.float32, device=r.device)
        g_a = torch.empty((R, m), dtype=torch.float32, device=r.device)
        kern["topk_bwd"][(R, m)](
            r.float().contiguous(),
            t,
            a32,
            v.float().contiguous(),
            g_slices,
            g_k,
            g_a,
            n,
            m,
            LOG=ctx.log,
            GK_MAX=float(torch.finfo(torch.float32).max),
            BLOCK=_block(n),
        )
        return (
            g_slices.sum(1).to(r.dtype) if ctx.needs_input_grad[0] else None,
            g_k.to(ctx.k_dtype) if ctx.needs_input_grad[1] else None,
            g_a.sum(-1, keepdim=True).to(alpha.dtype) if ctx.needs_input_grad[2] else None,
            None,
        )


class TritonSoftRankFn(torch.autograd.Function):
    """Same contract as :class:`icml25.lapsum._ref.SoftRankFn`, float32 inside."""

    @staticmethod
    def forward(ctx, r, alpha):
        _triton, kern = _kernels()
        R, n = r.shape
        a32 = alpha.float().reshape(R).contiguous()
        s, perm, _ = _sorted_scaled32(r, a32[:, None])
        ranks = torch.empty_like(s)
        k1 = torch.empty_like(s)
        kern["rank_fwd"][(R,)](s, ranks, k1, n, BLOCK=_block(n))
        out = torch.empty_like(ranks).scatter_(-1, perm, ranks)
        ctx.save_for_backward(r, perm, k1, alpha)
        return out.to(r.dtype)

    @staticmethod
    def backward(ctx, v):
        _triton, kern = _kernels()
        r, perm, k1, alpha = ctx.saved_tensors
        R, n = r.shape
        a32 = alpha.float().reshape(R).contiguous()
        r32 = r.float()
        c = r32.mean(-1, keepdim=True)
        s = ((r32.gather(-1, perm) - c) / a32[:, None]).contiguous()
        v_sorted = v.float().gather(-1, perm).contiguous()
        g_sorted = torch.empty_like(s)
        kern["rank_bwd"][(R,)](s, v_sorted, k1, a32, g_sorted, n, BLOCK=_block(n))
        g_r = torch.empty_like(g_sorted).scatter_(-1, perm, g_sorted)
        g_alpha = None
        if ctx.needs_input_grad[1]:
            g_alpha = (-(g_r * (r32 - c)).sum(-1, keepdim=True) / a32[:, None]).to(alpha.dtype)
        return g_r.to(r.dtype) if ctx.needs_input_grad[0] else None, g_alpha


def soft_topk(r: torch.Tensor, k: torch.Tensor, alpha: torch.Tensor, log: bool) -> torch.Tensor:
    if r.shape[-1] > MAX_N or k.shape[-1] > MAX_M or r.shape[0] == 0:
        return _ref.SoftTopKFn.apply(r, k, alpha, log)
    return TritonSoftTopKFn.apply(r, k, alpha, log)


def soft_rank(r: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    if r.shape[-1] > MAX_N or r.shape[0] == 0:
        return _ref.SoftRankFn.apply(r, alpha)
    return TritonSoftRankFn.apply(r, alpha)
