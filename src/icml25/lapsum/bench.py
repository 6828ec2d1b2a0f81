"""Timing and saved-memory harness shared by ``benchmarks/lapsum_bench.py`` and the reproduction.

``saved_bytes`` counts what autograd keeps for the backward pass (every tensor packed through
``torch.autograd.graph.saved_tensors_hooks`` during the forward); ``time_fwd_bwd`` is the median
wall time of forward + backward with a random cotangent (``fwd_bwd_times`` gives every repeat).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

__all__ = ["METHODS", "fwd_bwd_times", "saved_bytes", "time_fwd", "time_fwd_bwd"]


def saved_bytes(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> int:
    """Bytes of all tensors saved for backward while computing ``fn(x)`` (x requires grad).

    A tensor packed twice (torch packs a custom Function's saved input once per use) is memory
    held once, so tensors are counted once per (storage, offset, shape, dtype).
    """
    seen: dict[tuple, int] = {}

    def pack(t: torch.Tensor):
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
        seen[key] = t.numel() * t.element_size()
        return t

    x = x.detach().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(x)
    del out
    return sum(seen.values())


def fwd_bwd_times(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    repeats: int = 5,
    warmup: int = 1,
) -> list[float]:
    """Seconds of each of ``repeats`` timed ``fn(x).backward(v)`` calls after ``warmup`` untimed
    ones, with ``v ~ N(0, 1)`` (fixed across repeats): the replicates behind ``time_fwd_bwd``."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    x = x.detach().requires_grad_(True)
    v = None
    times = []
    for i in range(warmup + repeats):
        x.grad = None
        t0 = time.perf_counter()
        out = fn(x)
        if v is None:
            v = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out)
        out.backward(v)
        if x.is_cuda:
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def time_fwd_bwd(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    repeats: int = 5,
    warmup: int = 1,
) -> float:
    """Median seconds of ``fn(x).backward(v)`` with ``v ~ N(0, 1)`` (fixed across repeats)."""
    return statistics.median(fwd_bwd_times(fn, x, repeats=repeats, warmup=warmup))


def time_fwd(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    repeats: int = 5,
    warmup: int = 1,
) -> float:
    """Median seconds of ``fn(x)`` without autograd."""
    times = []
    with torch.no_grad():
        for i in range(warmup + repeats):
            t0 = time.perf_counter()
            fn(x)
            if x.is_cuda:
                torch.cuda.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _methods() -> dict[str, Callable[[int], Callable[[torch.Tensor], torch.Tensor]]]:
    """The benchmarked methods by name: each maps a row length ``n`` to a function of ``x (B, n)``
    (LapSum's top-k, rank and sort next to NeuralSort, SoftSort, Sinkhorn and torchsort)."""
    from icml25.lapsum import baselines
    from icml25.lapsum.functional import soft_rank, soft_sort, soft_topk

    return {
        # top-k with k = n / 2 (docs/lapsum.md, part A)
        "lapsum_topk": lambda n: lambda x: soft_topk(x, n / 2, 1.0),
        "neuralsort_topk": lambda n: lambda x: baselines.neuralsort_topk(x, n // 2, 1.0),
        "softsort_topk": lambda n: lambda x: baselines.softsort_topk(x, n // 2, 1.0),
        "sinkhorn_topk": lambda n: lambda x: baselines.sinkhorn_topk(x, n / 2, 0.01, 100),
        # rank / sort
        "lapsum_rank": lambda n: lambda x: soft_rank(x, 0.1),
        "lapsum_sort": lambda n: lambda x: soft_sort(x, 0.1),
        "torchsort_rank": lambda n: lambda x: baselines.torchsort_soft_rank(x, 0.1),
        "torchsort_sort": lambda n: lambda x: baselines.torchsort_soft_sort(x, 0.1),
    }


METHODS = _methods
