"""The reproduction's experiment on synthetic expert/proxy worlds (docs/proxy_feedback.md,
"Reproduction"): every method on one world and seed (:func:`measure`: stage 1 once, then each
expert-sample size on nested prefixes of one sample) and the condition diagnostics of a world
(:func:`diagnostics`)."""

from __future__ import annotations

import copy
from typing import Any

import torch

from icml25.proxy_feedback.conditions import check_conditions
from icml25.proxy_feedback.data import sample_preferences
from icml25.proxy_feedback.evaluate import evaluate
from icml25.proxy_feedback.model import MLPPolicy, SimplexPolicy
from icml25.proxy_feedback.train import (
    fit_finetune_all,
    fit_pooled,
    fit_proxy_stage,
    fit_true_only,
    fit_true_stage,
)
from icml25.proxy_feedback.worlds import SyntheticPreferenceWorld

__all__ = ["diagnostics", "measure", "variant_counts"]

N_PROXY = 8000  # proxy triples (the paper's appendix)
N_TEST = 5000


def measure(
    world_kw: dict[str, Any],
    seed: int,
    ns: tuple[int, ...],
    *,
    methods: tuple[str, ...],
    n_proxy: int = N_PROXY,
    stage2_steps: int = 300,
    true_steps: int = 2000,
    proxy_epochs: int = 30,
    n_test: int = N_TEST,
) -> dict[str, Any]:
    """Every method on one world and seed; expert data for the sizes ``ns`` are nested
    prefixes of one sample. Returns ``{"tv": {method: {n: tv}}, "other": ..., ...}``."""
    world = SyntheticPreferenceWorld(D=2, seed=seed, **world_kw)
    g = torch.Generator().manual_seed(10_000 + seed)
    proxy = sample_preferences(world.proxy_policy, n_proxy, generator=g)
    true = sample_preferences(world.true_policy, max(ns), generator=g)

    def ev(model, use_adapter=True) -> dict[str, float]:
        gen = torch.Generator().manual_seed(20_000 + seed)  # the same test inputs for all
        return evaluate(model, world, n_test, gen, use_adapter=use_adapter)

    def fresh(cls, *args):
        torch.manual_seed(seed)
        return cls(*args)

    d_x, k = world.d_x, world.n_outputs
    base = fresh(SimplexPolicy, d_x, k, 2)
    fit_proxy_stage(base, proxy, epochs=proxy_epochs, seed=seed)
    proxy_world = _ProxyAsTruth(world)
    out: dict[str, Any] = {"tv": {m: {} for m in methods}, "all": {m: {} for m in methods}}
    po = ev(base, use_adapter=False)
    out["stage1_fit_tv"] = evaluate(
        base, proxy_world, n_test, torch.Generator().manual_seed(20_000 + seed), use_adapter=False
    )["tv"]
    out["true_only_variant"] = {}
    for n in ns:
        sub = true[:n]
        if "proxy_only" in methods:
            out["tv"]["proxy_only"][n], out["all"]["proxy_only"][n] = po["tv"], po
        if "two_stage" in methods:
            m = copy.deepcopy(base)
            fit_true_stage(m, sub, steps=stage2_steps, seed=seed)
            e = ev(m)
            out["tv"]["two_stage"][n], out["all"]["two_stage"][n] = e["tv"], e
        if "true_only" in methods:
            cands = {}
            for name, model in (
                ("simplex", fresh(SimplexPolicy, d_x, k, 2)),
                ("mlp", fresh(MLPPolicy, d_x, k)),
            ):
                fit_true_only(model, sub, steps=true_steps)
                cands[name] = ev(model)
            best = min(cands, key=lambda c: cands[c]["tv"])
            out["tv"]["true_only"][n], out["all"]["true_only"][n] = cands[best]["tv"], cands[best]
            out["true_only_variant"][n] = best
        if "finetune_all" in methods:
            m = copy.deepcopy(base)
            fit_finetune_all(m, sub, steps=true_steps)
            e = ev(m)
            out["tv"]["finetune_all"][n], out["all"]["finetune_all"][n] = e["tv"], e
        if "pooled" in methods:
            m = fresh(SimplexPolicy, d_x, k, 2)
            fit_pooled(m, proxy, sub, epochs=proxy_epochs, seed=seed)
            e = ev(m, use_adapter=False)
            out["tv"]["pooled"][n], out["all"]["pooled"][n] = e["tv"], e
    return out


class _ProxyAsTruth:
    """A world view whose 'true' policy is the proxy (to score stage 1's fit to the proxy)."""

    def __init__(self, world: SyntheticPreferenceWorld) -> None:
        self.d_x, self.true_policy, self.sample_x = world.d_x, world.proxy_policy, world.sample_x


def diagnostics(world_kw: dict[str, Any], seed: int, n: int = 5000) -> dict[str, float]:
    world = SyntheticPreferenceWorld(D=2, seed=seed, **world_kw)
    x = world.sample_x(n, torch.Generator().manual_seed(30_000 + seed), dtype=torch.float64)
    rep = check_conditions(world.true_policy, world.proxy_policy, x)
    d = {k: v for k, v in rep.to_dict().items() if isinstance(v, float)}
    d.update({f"holds_{c}": float(h) for c, h in rep.holds.items()})
    return d


def variant_counts(res) -> dict[str, int]:
    """How often each expert-only variant (simplex net or MLP) was the better one, over every
    world, size and seed."""
    out: dict[str, int] = {}
    for runs in res.values():
        for x in runs:
            for v in x["true_only_variant"].values():
                out[v] = out.get(v, 0) + 1
    return out
