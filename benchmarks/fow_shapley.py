"""Exact Shapley values for group data valuation (paper 07's attribution royalties,
docs/future_of_work.md): our bitmask enumeration beside the textbook permutation definition and,
where installed, shap's exact explainer, on random games, one process.

The floor is evaluating the utility on all 2^n subsets once (a table lookup here; model fits in
practice), which every exact method must do at least; the ratio says what the weighting adds.

Run: ``python benchmarks/fow_shapley.py [--n 6 8 10 12]``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from icml25.future_of_work import shapley_exact  # noqa: E402
from icml25.future_of_work.valuation import utility_table  # noqa: E402


def game(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    vals = rng.normal(size=2**n)
    idx = {frozenset(i for i in range(n) if m >> i & 1): m for m in range(2**n)}
    return lambda S: float(vals[idx[frozenset(S)]])


def by_permutations(u, n):
    acc = np.zeros(n)
    for perm in itertools.permutations(range(n)):
        pre: frozenset = frozenset()
        for h in perm:
            acc[h] += u(pre | {h}) - u(pre)
            pre = pre | {h}
    return acc / math.factorial(n)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[6, 8, 10, 12])
    args = ap.parse_args()
    try:
        import shap
    except ImportError:
        shap = None
    print(
        "| players | ours (ms) | floor: 2^n utilities (ms) | ours / floor | permutations (ms) | shap Exact (ms) | max |diff| |"
    )
    print("|---|---|---|---|---|---|---|")
    for n in args.n:
        u = game(n)
        g = list(range(n))
        ours, t_ours = timed(lambda u=u, g=g: shapley_exact(u, g))
        _, t_floor = timed(lambda u=u, g=g: utility_table(u, g))
        diffs = []
        t_perm = t_shap = float("nan")
        if n <= 8:
            ref, t_perm = timed(lambda u=u, n=n: by_permutations(u, n))
            diffs.append(np.max(np.abs(ref - [ours[h] for h in g])))
        if shap is not None:

            def f(masks, u=u):
                return np.array([u(frozenset(np.flatnonzero(m))) for m in masks])

            ex = shap.explainers.Exact(f, shap.maskers.Independent(np.zeros((1, n))))
            sv, t_shap = timed(lambda ex=ex, n=n: ex(np.ones((1, n))).values[0])
            diffs.append(np.max(np.abs(sv - [ours[h] for h in g])))
        d = f"{max(diffs):.1e}" if diffs else "-"
        shap_cell = f"{t_shap * 1e3:.1f}" if shap is not None else "not installed"
        perm_cell = f"{t_perm * 1e3:.1f}" if n <= 8 else "- (n! orders)"
        print(
            f"| {n} | {t_ours * 1e3:.1f} | {t_floor * 1e3:.1f} | {t_ours / t_floor:.2f}x | {perm_cell} | {shap_cell} | {d} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
