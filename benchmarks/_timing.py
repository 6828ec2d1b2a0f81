"""Shared timing helper of the benchmark scripts (imported as a sibling module)."""

from __future__ import annotations

import statistics
import time


def median_time(fn, reps: int) -> float:
    """Median wall time of ``fn()`` over ``reps`` calls after one warm-up call."""
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)
