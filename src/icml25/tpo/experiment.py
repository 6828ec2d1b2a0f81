"""The TPO experiment of the reproduction (docs/tpo.md, "Reproduction"): every compared method on
one seed's held-out queries with a role model behind :class:`icml25.tpo.tiny.TinyRoleBackend`,
and the width x depth grid against Best-of-N. :mod:`icml25.tpo.repro` runs it as the
pre-registered reproduction; the functions can be called on their own with any role model.
"""

from __future__ import annotations

import random
import statistics as st
import time
from functools import partial
from typing import Any

import numpy as np

from icml25.llm import CallableReward
from icml25.tpo.engine import TPOConfig, best_of_n, tpo_optimize
from icml25.tpo.tiny import L, ScrambledCritiqueBackend, TinyRoleBackend, digit_reward, make_query

__all__ = ["CONFIG", "MAX_DEPTH", "SAMPLES", "WIDTHS", "compare_methods", "width_depth_grid"]

WIDTHS, MAX_DEPTH = (5, 10, 15, 20), 5
#: policy samples per query of every compared method
SAMPLES = {
    "BoN-5": 5,
    "BoN-15": 15,
    "BoN-30": 30,
    "BoN-60": 60,
    "TPO-D2-N5": 15,
    "TPO scrambled critiques": 15,
    "revision-D2-N5": 15,
    "TPO-D2-N5 seed increment": 15,
}
# candidates at temperature 1: the tiny policy's learned distribution is the noisy
# ("unaligned") generator; 0.7 would sharpen it towards the answer (see docs)
CONFIG = TPOConfig(width=5, depth=2, temperature=1.0, top_p=1.0)


def _curves(res, depth: int) -> tuple[list[float], list[float]]:
    """Mean reward of the fresh candidates and the best-so-far reward per iteration (0 = the
    initial samples), for one query."""
    fresh = [st.mean([e.reward for e in res.cache if e.iteration == -1])]
    for it in res.iterations[:depth]:
        fresh.append(st.mean(it.new_rewards) if it.new_rewards else float("nan"))
    best = [res.best_reward_at(d) for d in range(len(res.iterations[:depth]) + 1)]
    return fresh, best


def compare_methods(model, seed: int, size: dict[str, int], *, grid: bool) -> dict[str, Any]:
    """Every method on the same ``size["queries"]`` held-out queries of ``seed`` with the role
    model ``model``: per-query final rewards (``best``) and exact solves, per-query fresh and
    best-so-far curves of the TPO variants, seconds per query, and (``grid``) the width x depth
    grid with its Best-of-N curve."""
    cfg = CONFIG
    reward = CallableReward(digit_reward)
    rev = TPOConfig(**{**cfg.__dict__, "mode": "revision"})
    # report only: a new seed on every seeded call instead of the official fixed 7
    inc = TPOConfig(**{**cfg.__dict__, "seed_policy": "increment"})
    backend = TinyRoleBackend(model)
    scrambled = ScrambledCritiqueBackend(backend, seed=seed)
    rng = random.Random(10_000 + seed)
    queries = [make_query([rng.randrange(10) for _ in range(L)]) for _ in range(size["queries"])]
    runs = {
        f"BoN-{k}": partial(best_of_n, backend=backend, reward=reward, n=k, config=cfg)
        for k in (5, 15, 30, 60)
    }
    runs["TPO-D2-N5"] = partial(tpo_optimize, backend=backend, reward=reward, config=cfg)
    runs["TPO scrambled critiques"] = partial(
        tpo_optimize, backend=scrambled, reward=reward, config=cfg
    )
    runs["revision-D2-N5"] = partial(tpo_optimize, backend=backend, reward=reward, config=rev)
    runs["TPO-D2-N5 seed increment"] = partial(
        tpo_optimize, backend=backend, reward=reward, config=inc
    )
    out: dict[str, Any] = {"best": {}, "exact": {}, "secs": {}, "fresh": {}, "best curve": {}}
    for name, fn in runs.items():
        t = time.perf_counter()
        rs = [fn(q) for q in queries]
        out["secs"][name] = (time.perf_counter() - t) / max(1, len(queries))
        out["best"][name] = [float(r.best_reward) for r in rs]
        out["exact"][name] = [float(r.best_reward == 1.0) for r in rs]
        if not name.startswith("BoN"):
            fr, be = zip(*(_curves(r, cfg.depth) for r in rs))
            out["fresh"][name] = [list(c) for c in fr]
            out["best curve"][name] = [list(c) for c in be]
    out["grid"] = out["bon curve"] = None
    if grid and size["grid_queries"]:
        out["grid"], out["bon curve"] = width_depth_grid(
            queries[: size["grid_queries"]], backend, reward, cfg
        )
    return out


def width_depth_grid(
    queries: list[str], backend, reward, config: TPOConfig
) -> tuple[np.ndarray, np.ndarray]:
    """TPO at each of ``WIDTHS`` to depth ``MAX_DEPTH`` on ``queries`` (one depth-5 run per width
    gives every depth: :meth:`TPOResult.best_reward_at`) and Best-of-N with as many samples as the
    widest, deepest run: ``(G, B)`` with ``G[w, d]`` the mean final reward of width ``WIDTHS[w]`` at
    depth ``d`` and ``B[k - 1]`` the mean Best-of-k reward."""
    g = np.zeros((len(WIDTHS), MAX_DEPTH + 1))
    for wi, w in enumerate(WIDTHS):
        c = TPOConfig(**{**config.__dict__, "width": w, "depth": MAX_DEPTH})
        rs = [tpo_optimize(q, backend, reward, c) for q in queries]
        g[wi] = [np.mean([r.best_reward_at(d) for r in rs]) for d in range(MAX_DEPTH + 1)]
    kmax = max(WIDTHS) * (MAX_DEPTH + 1)
    bon = [best_of_n(q, backend, reward, kmax, config) for q in queries]
    # any prefix of k i.i.d. samples is a Best-of-k draw
    bon_curve = np.mean([np.maximum.accumulate([e.reward for e in r.cache]) for r in bon], 0)
    return g, bon_curve
