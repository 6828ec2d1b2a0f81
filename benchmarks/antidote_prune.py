"""Antidote's one-shot pruning: ours (hooks on every target in one calibration pass, per-target
score -> mask) against an official-style loop (the official ``prune_wanda_outlier`` collects each
decoder layer's statistics in its own pass over the calibration set, batch size 1).

Target (docs/antidote.md): a 6-layer, 256-wide toy Llama with a LoRA adapter (r 16 on q, k, v) and 2000
calibration sequences finishes in < 10 s on CPU. Prints both timings and their ratio, and checks
that the two masks are identical.

    python benchmarks/antidote_prune.py [--n 2000] [--threads 2]
"""

from __future__ import annotations

import argparse
import math
import random
import time

import torch

from icml25.antidote import AntidoteConfig, antidote_prune, wanda_scores
from icml25.antidote.masks import harmful_mask
from icml25.antidote.scores import activation_sq_norms
from icml25.antidote.targets import select_target_layers
from icml25.lora import inject_lora
from icml25.toy.safety_lang import HarmfulFinetuneWorld


def build(n: int):
    world = HarmfulFinetuneWorld(0)
    model = world.model(0, hidden=256, intermediate=512, layers=6)
    torch.manual_seed(0)
    inject_lora(model, ["q_proj", "k_proj", "v_proj"], r=16, alpha=16, init_a=math.sqrt(5))
    for name, p in model.named_parameters():
        if name.endswith("lora_B"):
            p.data.normal_(0, 0.02)
    rng = random.Random(0)
    pairs = [world.harmful("cal", rng) for _ in range(n)]
    return world, model, pairs


def official_style(model, world, pairs, rho):
    """Layer by layer, one calibration pass per decoder layer, batch size 1 (as the official
    code), then the same per-row top-rho rule."""
    layers = select_target_layers(model, "lora")
    sq = {}
    for li in range(len(model.model.layers)):
        prefix = f"model.layers.{li}."
        mine = {k: v for k, v in layers.items() if k.startswith(prefix)}
        batches = [world.encode([p]) for p in pairs]
        sq.update(activation_sq_norms(model, mine, batches))
    return harmful_mask(wanda_scores(layers, sq), rho)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    world, model, pairs = build(args.n)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    t = time.perf_counter()
    ref = official_style(model, world, pairs, 0.1)
    t_off = time.perf_counter() - t
    t = time.perf_counter()
    batches = world.batches(pairs, args.batch)
    res = antidote_prune(model, batches, AntidoteConfig(dense_ratio=0.1))
    t_ours = time.perf_counter() - t
    diff = sum(int((res.mask[k] != ref[k]).sum()) for k in ref)
    total = sum(int(ref[k].sum()) for k in ref)
    model.load_state_dict(state)
    print(f"calibration sequences: {args.n}; targets: {len(ref)} LoRA factors in 6 layers")
    print(f"official-style layer loop (batch 1): {t_off:8.2f} s")
    print(f"ours (one pass, batch {args.batch}):       {t_ours:8.2f} s")
    print(
        f"ratio official / ours: {t_off / t_ours:.1f}x; mask entries that differ: {diff} of "
        f"{total} pruned (float32 sums in a different order can swap near-ties)"
    )
    print(f"target (< 10 s for ours): {'met' if t_ours < 10 else 'NOT met'}")


if __name__ == "__main__":
    main()
