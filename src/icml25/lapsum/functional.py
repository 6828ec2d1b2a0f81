"""The public LapSum operators (Struski et al., ICML 2025, arXiv:2503.06242).

Every operator takes any number of leading dimensions and a ``dim`` (default ``-1``), a scale
``alpha > 0`` (a number or a positive tensor broadcastable to the batch shape, which may require
grad), and returns the input's dtype on the input's device. Inputs are validated here; the math
lives in :mod:`icml25.lapsum._cpu` (compiled C++ kernels after the sort, float64; the default for
CPU tensors), :mod:`icml25.lapsum._ref` (torch, every device: float64 math on CPU, the input's
precision and at least float32 on CUDA; the default elsewhere and the fallback) and
:mod:`icml25.lapsum._triton` (CUDA kernels, opt-in with ``backend="triton"``). docs/lapsum.md,
"Backends and precision".

References: the paper (arXiv:2503.06242) and docs/lapsum.md; the LapSum definition is the
paper's Eq. (1)-(3) (sum of Laplace CDFs and its closed-form inverse).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np
import torch

from icml25.lapsum import _cpu, _ref
from icml25.lapsum._stats import laplace_cdf, laplace_log_cdf, laplace_pdf, lapsum_at, lapsum_stats

__all__ = [
    "knn_topk_loss",
    "lapsum",
    "lapsum_inverse",
    "laplace_cdf",
    "laplace_log_cdf",
    "laplace_pdf",
    "log_soft_topk",
    "permutation_cross_entropy",
    "soft_permutation_matrix",
    "soft_rank",
    "soft_sort",
    "soft_topk",
    "spearman_corr",
    "topk_cross_entropy",
]

Number = int | float

NONFINITE = (
    "{name} contains NaN/inf; LapSum is undefined for non-finite inputs "
    "(pass check_finite=False to let NaN propagate instead)"
)


# -- validation and reshaping -------------------------------------------------------------
def _value_check(ok: torch.Tensor, fail, what: str = "input values") -> None:
    """Raise ``fail()`` unless ``ok`` is all True. Under ``torch.compile`` the check is an async
    device assertion (no host sync, no graph break) whose message names ``what``; under a
    ``torch.func`` transform (vmap, grad) it is skipped, since a transform cannot branch on
    values."""
    if torch.compiler.is_compiling():
        torch._assert_async(ok.all(), f"LapSum: invalid {what} (call it eagerly for the values)")
        return
    if torch._C._functorch.is_functorch_wrapped_tensor(ok) or ok.device.type == "meta":
        return  # no values to check (a meta tensor has shapes only)
    if not bool(ok.all()):
        fail()


def _as_float(x: torch.Tensor, name: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.is_complex():
        raise TypeError(f"{name} has complex dtype {x.dtype}; LapSum needs real values")
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    return x


def _rows(x: torch.Tensor, dim: int, check_finite: bool, name: str = "x"):
    """``x`` as rows ``(R, n)``, plus the batch shape and the normalised ``dim``."""
    x = _as_float(x, name)
    if x.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension, got a 0-d tensor")
    if isinstance(dim, np.integer):  # numpy integers as Python's (see _param_tensor)
        dim = int(dim)
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {dim!r} ({type(dim).__name__})")
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"dim={dim!r} is out of range for {name} of shape {tuple(x.shape)}")
    d = dim % x.ndim
    n = x.shape[d]
    if n == 0:
        raise ValueError(f"{name} has n = 0 elements along dim={dim}; LapSum needs n >= 1")
    moved = x if d == x.ndim - 1 else x.movedim(d, -1)
    batch = tuple(moved.shape[:-1])
    rows = moved.reshape(-1, n)
    if check_finite and rows.numel():

        def fail():
            raise ValueError(NONFINITE.format(name=name))

        _value_check(torch.isfinite(rows), fail, f"{name}: it contains NaN/inf")
    return rows, batch, d, n


def _routed_rows(x: torch.Tensor, dim: int, check_finite: bool, backend: str):
    """The path of a call (:func:`_backend`) and :func:`_rows`; on the compiled CPU path the
    finiteness check is left to the kernels, which read every value anyway (one pass less)."""
    x = _as_float(x, "x")
    path = _backend(backend, x)
    return (path, *_rows(x, dim, check_finite and path != "cpu"))


def _param_tensor(value, name: str, x: torch.Tensor) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.is_complex():
            raise TypeError(f"{name} has complex dtype {value.dtype}; it must be real")
        if value.device != x.device:
            if value.ndim == 0 and value.device.type == "cpu":
                value = value.to(x.device)
            else:
                raise ValueError(
                    f"{name} is on {value.device} but x is on {x.device}; put them on one device"
                )
        return value if value.is_floating_point() else value.to(torch.float64)
    # a Python or numpy number (the range and finiteness are checked by the caller). numpy
    # scalars and 0-d arrays become Python numbers here, before any compiled region: dynamo
    # traces the isinstance checks below as constants (icml25._validate's numbers.Real checks
    # would break the graph, docs/lapsum.md)
    if (
        isinstance(value, (np.generic, np.ndarray))
        and value.shape == ()
        and value.dtype.kind in "iuf"
    ):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a number or a tensor (Python, numpy or torch), got {value!r} "
            f"({type(value).__module__}.{type(value).__name__})"
        )
    return torch.tensor(float(value), dtype=torch.float64, device=x.device)


def _alpha_rows(alpha, batch: tuple[int, ...], x: torch.Tensor) -> torch.Tensor:
    if type(alpha) in (int, float):  # the common case, checked without a tensor round trip
        if not (math.isfinite(alpha) and alpha > 0):
            raise ValueError(f"alpha must be finite and > 0 (the Laplace scale), got [{alpha!r}]")
        return torch.full((math.prod(batch), 1), float(alpha), dtype=torch.float64, device=x.device)
    a = _param_tensor(alpha, "alpha", x)
    bad = ~torch.isfinite(a.detach()) | (a.detach() <= 0)

    def fail():
        shown = a.detach().flatten()[bad.flatten()][:3].tolist()
        raise ValueError(f"alpha must be finite and > 0 (the Laplace scale), got {shown}")

    _value_check(~bad, fail, "alpha: it must be finite and > 0")
    try:
        a = torch.broadcast_to(a, batch)
    except RuntimeError:
        raise ValueError(
            f"alpha of shape {tuple(a.shape)} does not broadcast to the batch shape {batch} "
            "(x's shape without dim)"
        ) from None
    return a.reshape(-1, 1)


def _targets(value, name: str, batch, x, lo: float, hi: float, dim: int | None):
    """k (or w) as ``(R, m)`` and whether it carries an m axis; values strictly in (lo, hi)."""
    v = _param_tensor(value, name, x)
    multi = False
    if dim is not None and v.ndim == x.ndim and v.ndim > 0:
        multi = True
        v = v.movedim(dim, -1)
        target = (*batch, v.shape[-1])
    elif dim is None:
        if v.ndim == 0:
            v = v.reshape(1)
        target = (*batch, v.shape[-1])
        multi = True
    else:
        target = batch
    try:
        v = torch.broadcast_to(v, target)
    except RuntimeError:
        raise ValueError(
            f"{name} of shape {tuple(_param_tensor(value, name, x).shape)} does not broadcast to "
            f"{target}"
        ) from None
    vd = v.detach()
    bad = ~((vd > lo) & (vd < hi))  # NaN fails too

    def fail():
        bad_values = vd.flatten()[bad.flatten()]
        shown = (bad_values if bool(bad_values.isnan().any()) else bad_values.unique())[:3].tolist()
        raise ValueError(
            f"{name} must lie strictly inside ({lo:g}, {hi:g}) for n = {int(hi)}, got {shown}"
        )

    # the message of the compiled check names the bound, not its value: under torch.compile with
    # a dynamic row length n is symbolic, and formatting it breaks the trace
    _value_check(~bad, fail, f"{name}: it must lie strictly inside (0, n)")
    return v.reshape(-1, v.shape[-1] if multi else 1), multi


_BACKENDS = ("auto", "torch", "cpu", "triton")


def _backend(backend: str, x: torch.Tensor) -> str:
    """The path a call takes: ``"cpu"`` (the compiled kernels, :mod:`._cpu`), ``"torch"``
    (:mod:`._ref`) or ``"triton"``. ``"auto"`` picks the compiled kernels for CPU tensors when
    they built, else the torch path, unless ``ICML25_LAPSUM_BACKEND`` names a path: a process-wide
    choice, so it applies where it can (``cpu`` to CPU tensors, ``triton`` where Triton runs) and
    leaves other calls on the torch path. The Triton kernels are opt-in until their gpu tests
    have passed on a real device. docs/lapsum.md, "Backends and precision"."""
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    from_env = False
    if backend == "auto":
        env = os.environ.get("ICML25_LAPSUM_BACKEND", "").lower()
        if env and env not in _BACKENDS:
            raise ValueError(
                f"ICML25_LAPSUM_BACKEND must be one of {_BACKENDS} (or unset), got {env!r}"
            )
        if env and env != "auto":
            backend, from_env = env, True
    on_cpu = x.device.type == "cpu"
    if backend == "torch":
        return "torch"
    if backend == "auto":
        return "cpu" if on_cpu and _cpu.usable() else "torch"
    if backend == "cpu":
        if not on_cpu:
            if from_env:
                return "torch"
            raise ValueError(f"backend='cpu' needs CPU tensors, x is on {x.device}")
        if not _cpu.usable():
            raise RuntimeError(f"backend='cpu' is not available here: {_cpu.available()[1]}")
        return "cpu"
    from icml25.lapsum import _triton

    ok, why = _triton.available(x)
    if ok:
        return "triton"
    if from_env:
        return "torch"
    raise RuntimeError(f"backend='triton' is not available here: {why}")


def _apply(path: str, fn: str, *args):
    """``fn`` of the compiled CPU path (whose kernels take the finiteness flag last) or of the
    torch path; Triton has no inverse kernel, so ``lapsum_inverse`` and ``soft_sort`` run on the
    torch path there."""
    if path == "cpu":
        return getattr(_cpu, fn).apply(*args)
    return getattr(_ref, fn).apply(*args[:-1])


def _unrows(out: torch.Tensor, batch, d: int, n: int, m: int | None) -> torch.Tensor:
    if m is None:
        out = out.reshape(*batch, n)
        return out if d == out.ndim - 1 else out.movedim(-1, d)
    return out.reshape(*batch, m, n).movedim((-2, -1), (d, d + 1))


# -- LapSum and its inverse -------------------------------------------------------------
def lapsum(x: torch.Tensor, t, alpha=1.0, dim: int = -1) -> torch.Tensor:
    """``LapSum_alpha(x; t) = sum_i Lap((t_j - x_i)/alpha)`` (paper Eq. 1).

    Args:
        x: scores, any shape; the sum runs over ``dim`` (n entries).
        t: points, shape ``batch + (m,)`` (broadcastable), batch = x's shape without ``dim``.
        alpha: Laplace scale > 0 (number or tensor broadcastable to the batch shape).
    Returns:
        Values in ``(0, n)`` of shape ``batch + (m,)``, x's dtype. Differentiable (autograd).
    """
    rows, batch, d, n = _rows(x, dim, True)
    a = _alpha_rows(alpha, batch, rows).to(torch.float64)
    tv = _param_tensor(t, "t", rows)
    tv = tv.reshape(1) if tv.ndim == 0 else tv
    try:
        tv = torch.broadcast_to(tv, (*batch, tv.shape[-1]))
    except RuntimeError:
        raise ValueError(
            f"t of shape {tuple(tv.shape)} does not broadcast to {(*batch, 'm')}"
        ) from None
    m = tv.shape[-1]
    r64 = rows.to(torch.float64)
    rs, _ = torch.sort(r64, dim=-1)
    c = rs[:, (n - 1) // 2 : (n - 1) // 2 + 1].detach()
    s = (rs - c) / a
    sa, sb, _g = lapsum_stats(s)
    tau = (tv.reshape(-1, m).to(torch.float64) - c) / a
    return lapsum_at(s, sa, sb, tau).to(rows.dtype).reshape(*batch, m)


def lapsum_inverse(
    x: torch.Tensor,
    w,
    alpha=1.0,
    dim: int = -1,
    *,
    backend: str = "auto",
    check_finite: bool = True,
) -> torch.Tensor:
    """The closed-form inverse: ``t`` with ``lapsum(x, t, alpha) == w`` (paper Eq. 3, docs/lapsum.md).

    Args:
        x: scores; n entries along ``dim``.
        w: targets of shape ``batch + (m,)`` (broadcastable), each strictly inside ``(0, n)``.
    Returns:
        ``t`` of shape ``batch + (m,)``, x's dtype. Gradients to x, w and alpha (the VJP in docs/lapsum.md).
    """
    path, rows, batch, _d, n = _routed_rows(x, dim, check_finite, backend)
    a = _alpha_rows(alpha, batch, rows)
    wr, _ = _targets(w, "w", batch, rows, 0.0, float(n), None)
    t = _apply(path, "LapSumInverseFn", rows, wr, a, check_finite)
    return t.reshape(*batch, wr.shape[-1])


# -- soft top-k -----------------------------------------------------------------------------
def soft_topk(
    x: torch.Tensor,
    k,
    alpha=1.0,
    dim: int = -1,
    largest: bool = True,
    *,
    log: bool = False,
    backend: str = "auto",
    check_finite: bool = True,
) -> torch.Tensor:
    """Soft top-k membership probabilities ``p_i = Lap((x_i - t)/alpha)`` with ``sum_i p_i = k``.

    Args:
        x: scores (any shape); selection runs along ``dim`` of length n.
        k: a number in ``(0, n)`` (real-valued allowed), a tensor of the batch shape (per-row k),
            or a tensor with ``x.ndim`` dims whose ``dim`` axis holds m values (multi-k: the output
            gets an m axis inserted right before ``dim``).
        alpha: Laplace scale > 0 (paper default 1.0; smaller is closer to hard top-k).
        largest: select the largest (default) or the smallest entries.
        log: return ``log p`` computed stably (for cross-entropy losses).
    Returns:
        Probabilities in (0, 1) (or their logs), x's shape (plus the m axis for multi-k), x's
        dtype and device. Differentiable w.r.t. x, k and alpha (exact VJPs, docs/lapsum.md).
    """
    path, rows, batch, d, n = _routed_rows(x, dim, check_finite, backend)
    a = _alpha_rows(alpha, batch, rows)
    kr, multi = _targets(k, "k", batch, x, 0.0, float(n), d)  # x: k's layout follows x's dims
    r = rows if largest else -rows
    if path == "triton":
        from icml25.lapsum import _triton

        out = _triton.soft_topk(r, kr, a, log)
    else:
        out = _apply(path, "SoftTopKFn", r, kr, a, log, check_finite)
    return _unrows(out, batch, d, n, kr.shape[-1] if multi else None)


def log_soft_topk(
    x: torch.Tensor, k, alpha=1.0, dim: int = -1, largest: bool = True, **kw
) -> torch.Tensor:
    """``log`` of :func:`soft_topk`, computed without forming the probabilities."""
    return soft_topk(x, k, alpha, dim, largest, log=True, **kw)


# -- soft rank and soft sort -------------------------------------------------------------
def soft_rank(
    x: torch.Tensor,
    alpha=1.0,
    dim: int = -1,
    descending: bool = False,
    one_based: bool = False,
    *,
    backend: str = "auto",
    check_finite: bool = True,
) -> torch.Tensor:
    """Soft ranks ``rank_i = sum_{j != i} Lap((x_i - x_j)/alpha)``: 0-based, ascending by default.

    Ties get the average of their hard ranks; ``sum_i rank_i = n(n-1)/2`` exactly; ``alpha -> 0``
    gives ``argsort(argsort(x))``. ``one_based=True`` adds 1 (torchsort / scipy convention).
    O(n log n) forward and backward (docs/lapsum.md). Returns x's shape and dtype.
    """
    path, rows, batch, d, n = _routed_rows(x, dim, check_finite, backend)
    a = _alpha_rows(alpha, batch, rows)
    r = -rows if descending else rows
    if path == "triton":
        from icml25.lapsum import _triton

        out = _triton.soft_rank(r, a)
    else:
        out = _apply(path, "SoftRankFn", r, a, check_finite)
    if one_based:
        out = out + 1
    return _unrows(out, batch, d, n, None)


def soft_sort(
    x: torch.Tensor,
    alpha=1.0,
    dim: int = -1,
    descending: bool = False,
    *,
    backend: str = "auto",
    check_finite: bool = True,
) -> torch.Tensor:
    """Soft sort: ``sort_l = LapSum^{-1}(x; l + 1/2)``, increasing in l (decreasing if descending).

    ``alpha -> 0`` gives ``torch.sort``; the row mean is not preserved exactly. Gradients to x and
    alpha through the exact inverse VJP (docs/lapsum.md).
    """
    path, rows, batch, d, n = _routed_rows(x, dim, check_finite, backend)
    a = _alpha_rows(alpha, batch, rows)
    r = -rows if descending else rows
    w = (torch.arange(n, dtype=torch.float64, device=rows.device) + 0.5).expand(rows.shape[0], n)
    out = _apply(path, "LapSumInverseFn", r, w, a, check_finite)
    if descending:
        out = -out
    return _unrows(out, batch, d, n, None)


# -- permutations ---------------------------------------------------------------------------
def _cut_points(r: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``b_0 = -inf, b_l = LapSum^{-1}(r; l) (l = 1..n-1), b_n = +inf``, float64, ``(R, n + 1)``."""
    n = r.shape[-1]
    w = torch.arange(1, n, dtype=torch.float64, device=r.device).expand(r.shape[0], n - 1)
    inner = _ref.LapSumInverseFn.apply(r, w, a).to(torch.float64)
    inf = torch.full((r.shape[0], 1), math.inf, dtype=torch.float64, device=r.device)
    return torch.cat([-inf, inner, inf], dim=-1)


def _log_position_probs(r, a, pos_lo, b):
    """``log P[i, pos_i]`` for the positions ``pos_lo`` (R, n) given cut points ``b``."""
    a64 = a.to(torch.float64)
    r64 = r.to(torch.float64)
    lo = b.gather(-1, pos_lo)
    hi = b.gather(-1, pos_lo + 1)
    first, last = torch.isinf(lo), torch.isinf(hi)
    lo_f = torch.where(first, torch.zeros_like(lo), lo)
    hi_f = torch.where(last, torch.zeros_like(hi), hi)
    x_lo = torch.where(first, torch.full_like(lo, -math.inf), (lo_f - r64) / a64)
    x_hi = torch.where(last, torch.full_like(hi, math.inf), (hi_f - r64) / a64)
    return _ref.log_cdf_difference(x_lo, x_hi)


def soft_permutation_matrix(
    x: torch.Tensor, alpha=1.0, dim: int = -1, descending: bool = False
) -> torch.Tensor:
    """``P[..., i, l]``: probability that element i sits at position l (l = 0 smallest; docs/lapsum.md).

    Doubly stochastic, strictly positive, ``alpha -> 0`` gives the hard permutation matrix. Shape
    ``(*batch, n, n)``: O(n^2) memory by nature (the permutation loss never builds it).
    """
    rows, batch, _d, n = _rows(x, dim, True)
    a = _alpha_rows(alpha, batch, rows)
    r = -rows if descending else rows
    b = _cut_points(r, a)  # (R, n + 1)
    R = r.shape[0]
    pos = torch.arange(n, device=r.device).expand(R, n, n)  # [row, i, l] = l
    r_rep = r[:, :, None].expand(R, n, n).reshape(R, n * n)
    a_rep = a
    logp = _log_position_probs(r_rep, a_rep, pos.reshape(R, n * n), b)
    return torch.exp(logp).reshape(*batch, n, n).to(rows.dtype)


def permutation_cross_entropy(
    scores: torch.Tensor,
    target: torch.Tensor,
    alpha=1.0,
    dim: int = -1,
    descending: bool = False,
    reduction: str = "mean",
) -> torch.Tensor:
    """``-sum_i log P[i, target_i]`` per row without building P (docs/lapsum.md), O(n log n).

    Args:
        scores: one score per element; n along ``dim``.
        target: int64, same shape; each row a permutation of ``0..n-1`` giving every element's true
            position (ascending, or descending with ``descending=True``).
        reduction: ``"mean"`` over rows of the per-row sums (default), ``"sum"`` or ``"none"``.
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    rows, batch, d, n = _rows(scores, dim, True, name="scores")
    if not isinstance(target, torch.Tensor) or target.dtype != torch.int64:
        got = target.dtype if isinstance(target, torch.Tensor) else type(target).__name__
        raise TypeError(f"target must be an int64 tensor of positions, got {got}")
    if target.shape != scores.shape:
        raise ValueError(
            f"target shape {tuple(target.shape)} must equal scores shape {tuple(scores.shape)}"
        )
    tgt = target.to(rows.device).movedim(d, -1).reshape(-1, n)
    ok = torch.equal(tgt.sort(dim=-1).values, torch.arange(n, device=tgt.device).expand_as(tgt))
    if not ok:
        raise ValueError(f"every row of target must be a permutation of 0..{n - 1}")
    a = _alpha_rows(alpha, batch, rows)
    r = -rows if descending else rows
    loss_rows = _ref.PermutationCEFn.apply(r, tgt, a)
    if reduction == "none":
        return loss_rows.reshape(batch)
    return loss_rows.mean() if reduction == "mean" else loss_rows.sum()


# -- losses built on the operators ---------------------------------------------------------
def _check_p_k(p_k: Sequence[float]) -> list[float]:
    try:
        probs = [float(p) for p in p_k]
    except (TypeError, ValueError):
        raise TypeError(f"p_k must be a sequence of numbers, got {p_k!r}") from None
    if not probs:
        raise ValueError("p_k must not be empty")
    if any(not math.isfinite(p) or p < 0 for p in probs):
        raise ValueError(f"p_k entries must be finite and >= 0, got {probs}")
    if abs(sum(probs) - 1.0) > 1e-4:
        raise ValueError(f"p_k must sum to 1 (±1e-4), got {probs} (sum {sum(probs):.6g})")
    return probs


def topk_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    p_k: Sequence[float],
    alpha=1.0,
    top1_mode: str = "smce",
    reduction: str = "mean",
) -> torch.Tensor:
    """Top-k cross-entropy with a distribution ``p_k`` over k (difftopk protocol, docs/lapsum.md).

    ``loss = -log sum_k p_k P(label in top-k)``, ``P(label in top-k) = soft_topk(logits, k)[label]``,
    over all C classes in one multi-k call. ``top1_mode``: ``"smce"`` (default: ``p_1 CE + (1 - p_1)
    x`` the mixture over k >= 2 renormalised), ``"sm"`` (the k = 1 term uses softmax) or ``"lapsum"``
    (k = 1 from LapSum too). For k >= C the membership probability is exactly 1.
    """
    if top1_mode not in ("smce", "sm", "lapsum"):
        raise ValueError(f"top1_mode must be 'smce', 'sm' or 'lapsum', got {top1_mode!r}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    logits = _as_float(logits, "logits")
    if logits.ndim != 2:
        raise ValueError(f"logits must be (B, C), got shape {tuple(logits.shape)}")
    B, C = logits.shape
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64 or labels.shape != (B,):
        raise ValueError(f"labels must be an int64 tensor of shape ({B},), got {labels!r:.80}")
    if B and (int(labels.min()) < 0 or int(labels.max()) >= C):
        raise ValueError(
            f"labels must lie in [0, {C}), got range [{int(labels.min())}, {int(labels.max())}]"
        )
    probs = _check_p_k(p_k)
    beyond = sum(p for k, p in enumerate(probs, 1) if k >= C)
    if beyond >= 1 - 1e-12:
        raise ValueError(
            f"p_k puts all its mass on k >= C = {C} (p_k has {len(probs)} entries): every label is "
            "always in the top-C, so the loss would be 0 with no gradient; use k < C"
        )
    if beyond > 0:
        import warnings

        warnings.warn(
            f"p_k puts mass {beyond:g} on k >= C = {C}: those terms are constant (membership 1) "
            "and carry no gradient",
            UserWarning,
            stacklevel=2,
        )
    log_sm = torch.log_softmax(logits.to(torch.float64), dim=-1).gather(-1, labels[:, None])[:, 0]
    start = 1 if top1_mode == "lapsum" else 2  # smallest k taken from LapSum
    ks = [k for k in range(start, len(probs) + 1) if probs[k - 1] > 0 and k < C]
    terms: dict[int, torch.Tensor] = {}
    if ks:
        kt = torch.tensor(ks, dtype=torch.float64, device=logits.device)[None, :]
        lp = log_soft_topk(logits, kt, alpha, dim=-1)  # (B, m, C)
        idx = labels[:, None, None].expand(B, len(ks), 1)
        picked = lp.gather(-1, idx)[..., 0].to(torch.float64)
        for j, k in enumerate(ks):
            terms[k] = picked[:, j]
    zero = torch.zeros(B, dtype=torch.float64, device=logits.device)

    def log_member(k: int) -> torch.Tensor:
        if k >= C:
            return zero
        if k == 1 and top1_mode != "lapsum":
            return log_sm
        return terms[k]

    def mixture(weights: dict[int, float]) -> torch.Tensor:
        parts = [math.log(w) + log_member(k) for k, w in weights.items() if w > 0]
        return -torch.logsumexp(torch.stack(parts), dim=0)

    p1 = probs[0]
    if top1_mode == "smce":
        rest = {k: p for k, p in enumerate(probs[1:], start=2) if p > 0}
        loss = p1 * (-log_sm)
        if rest and p1 < 1:
            total = sum(rest.values())
            loss = loss + (1 - p1) * mixture({k: p / total for k, p in rest.items()})
    else:
        loss = mixture({k: p for k, p in enumerate(probs, start=1) if p > 0})
    loss = loss.to(logits.dtype)
    if reduction == "none":
        return loss
    return loss.mean() if reduction == "mean" else loss.sum()


def knn_topk_loss(
    query: torch.Tensor,
    candidates: torch.Tensor,
    query_labels: torch.Tensor,
    candidate_labels: torch.Tensor,
    k,
    alpha=1.0,
    metric: str = "sqeuclidean",
) -> torch.Tensor:
    """Differentiable kNN loss: ``-(1/k) sum_c p_c [y_c = y_q]`` with ``p = soft_topk(-d(q, c), k)``.

    ``query`` (Q, D), ``candidates`` (N, D), integer labels (Q,) and (N,); mean over queries.
    ``metric``: ``"sqeuclidean"`` (default, docs/lapsum.md) or ``"cosine"``.
    """
    if metric not in ("sqeuclidean", "cosine"):
        raise ValueError(f"metric must be 'sqeuclidean' or 'cosine', got {metric!r}")
    query, candidates = _as_float(query, "query"), _as_float(candidates, "candidates")
    if query.ndim != 2 or candidates.ndim != 2 or query.shape[1] != candidates.shape[1]:
        raise ValueError(
            f"query (Q, D) and candidates (N, D) must share D, got {tuple(query.shape)} and "
            f"{tuple(candidates.shape)}"
        )
    if query_labels.shape != (query.shape[0],) or candidate_labels.shape != (candidates.shape[0],):
        raise ValueError("query_labels must be (Q,) and candidate_labels (N,)")
    if metric == "sqeuclidean":
        scores = -torch.cdist(query, candidates).pow(2)
    else:
        qn = torch.nn.functional.normalize(query, dim=-1)
        cn = torch.nn.functional.normalize(candidates, dim=-1)
        scores = qn @ cn.T
    p = soft_topk(scores, k, alpha, dim=-1)
    same = (query_labels[:, None] == candidate_labels[None, :]).to(p.dtype)
    kf = float(k) if not isinstance(k, torch.Tensor) else k
    return (-(p * same).sum(-1) / kf).mean()


def spearman_corr(
    pred: torch.Tensor, target: torch.Tensor, alpha=1.0, dim: int = -1
) -> torch.Tensor:
    """Differentiable Spearman correlation: Pearson correlation of the soft ranks along ``dim``.

    A row where ``pred`` or ``target`` is constant has no correlation (its ranks have zero
    variance): it is NaN there, as ``scipy.stats.spearmanr`` gives (docs/lapsum.md), not 0. So is a
    row whose centred soft ranks have collapsed to round-off: norm at or below ``16 eps n^1.5``
    (``eps`` of the soft ranks' dtype, ``n`` the row length; e.g. a float32 row spread 1e-8 with
    ``alpha = 1``, whose ranks are all equal in float32). Such a row gave exactly 0 before (issue
    49), a silent "uncorrelated"; above the floor the relative error is about ``0.01 floor /
    norm`` at most (measured, docs/lapsum.md)."""
    if pred.shape != target.shape:
        raise ValueError(f"pred {tuple(pred.shape)} and target {tuple(target.shape)} must match")
    rp = soft_rank(pred, alpha, dim)
    rt = soft_rank(target, alpha, dim)
    rp = rp - rp.mean(dim, keepdim=True)
    rt = rt - rt.mean(dim, keepdim=True)
    n = rp.shape[dim] if rp.ndim else 1
    floor = 16 * torch.finfo(rp.dtype).eps * max(n, 1) ** 1.5
    np_ = rp.norm(dim=dim, keepdim=True)
    nt_ = rt.norm(dim=dim, keepdim=True)
    rp = rp / np_.clamp(min=floor)
    rt = rt / nt_.clamp(min=floor)
    rho = (rp * rt).sum(dim)
    # a constant row (or one value), or ranks lost to round-off: undefined, NaN as scipy; the
    # where keeps other rows' gradients
    constant = (pred == pred.amax(dim, keepdim=True)).all(dim) | (
        target == target.amax(dim, keepdim=True)
    ).all(dim)
    collapsed = (np_ <= floor).squeeze(dim) | (nt_ <= floor).squeeze(dim)
    constant = constant | collapsed
    return torch.where(constant, torch.full_like(rho, math.nan), rho)
