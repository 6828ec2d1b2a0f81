"""FPO's efficiency claim (paper §3, Figure 4 left) as ratios, one process: the cost of one
optimizer step of FPO (offline reference cache + SAE features at one layer) beside DPO with an
online reference model, DPO with precomputed reference log-probs, TDPO-2 (online reference and a
vocabulary-sized KL per token) and SimPO, on a tiny random-init Llama.

The floor is SimPO's step: one policy forward/backward with no reference at all, the least work
any of these preference losses can do. Steps are interleaved (the order rotates every step) on
the same batches, so machine drift hits every method alike. Memory: on CUDA the measured
``torch.cuda.max_memory_allocated`` per step; on CPU the bytes of what each method keeps resident
beside the policy and its Adam state (reference model parameters, or the SAE and the cache).

Run: ``python benchmarks/fpo_step.py [--d 256 --layers 4 --vocab 2000 --seq 128 --pairs 8]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch

from icml25.fpo import PreferenceConfig, SparseAutoencoder, build_reference_cache
from icml25.fpo.trainer import preference_step_loss


def _tokenizer(vocab: int):
    from icml25.toy import build_tokenizer

    words = [f"w{i}" for i in range(vocab - 8)]
    return build_tokenizer([" ".join(words)], vocab, kind="word")


def _records(n: int, seq: int, vocab: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    half = seq // 2

    def text(k: int) -> str:
        return " ".join(f"w{int(i)}" for i in torch.randint(0, vocab - 8, (k,), generator=g))

    return [
        {"prompt": text(half - 4), "chosen": text(half - 2), "rejected": text(half - 3)}
        for _ in range(n)
    ]


def _bytes(*objs) -> int:
    n = 0
    for o in objs:
        if isinstance(o, torch.nn.Module):
            n += sum(p.numel() * p.element_size() for p in o.parameters())
        elif hasattr(o, "nbytes"):
            n += o.nbytes()
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--sae-width", type=int, default=8, help="SAE features = width x d")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from icml25.fpo import PreferenceCollator
    from icml25.toy import tiny_causal_lm

    dev = torch.device(args.device)
    tok = _tokenizer(args.vocab)
    ref = tiny_causal_lm(
        tok, d_model=args.d, n_layers=args.layers, n_heads=4, max_positions=args.seq + 8, seed=0
    ).to(dev)
    layer = args.layers - 1
    sae = SparseAutoencoder(args.d, args.sae_width * args.d, "topk", k_sae=32).to(dev)
    with torch.no_grad():
        torch.nn.init.normal_(sae.W_enc, std=args.d**-0.5)
        sae.W_dec.copy_(sae.W_enc.T)
    sae.requires_grad_(False)
    recs = _records(args.pairs * 8, args.seq, args.vocab, 0)
    col = PreferenceCollator(tok, max_length=args.seq, max_prompt_length=args.seq // 2)
    t0 = time.perf_counter()
    cache = build_reference_cache(ref, sae, recs, layer=layer, collator=col, progress=False)
    t_cache = time.perf_counter() - t0
    methods = {
        "FPO (offline cache)": PreferenceConfig(method="fpo", layer=layer, k=50, lr=1e-5),
        "DPO (offline log-probs)": PreferenceConfig(method="dpo", lr=1e-5),
        "DPO (online reference)": PreferenceConfig(method="tdpo1", alpha=0.0, lr=1e-5),
        "TDPO-2 (online reference + KL)": PreferenceConfig(method="tdpo2", lr=1e-5),
        "SimPO (no reference: floor)": PreferenceConfig(method="simpo", lr=1e-5),
    }
    online_dpo = "DPO (online reference)"
    pols = {m: copy.deepcopy(ref).train() for m in methods}
    opts = {m: torch.optim.Adam(p.parameters(), lr=1e-5) for m, p in pols.items()}
    times: dict[str, list[float]] = {m: [] for m in methods}
    peak: dict[str, int] = {m: 0 for m in methods}
    order = list(methods)
    g = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        idx = torch.randint(len(recs), (args.pairs,), generator=g).tolist()
        batch = col([dict(recs[i], idx=i) for i in idx])
        order = order[1:] + order[:1]
        for m in order:
            cfg = methods[m]
            if dev.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            if m == online_dpo:  # DPO with the reference run online: TDPO-1 with its KL weight 0
                from icml25.fpo.forward import preference_pass
                from icml25.fpo.losses import dpo_loss

                out = preference_pass(pols[m], batch)
                with torch.no_grad():
                    r = preference_pass(ref, batch)
                loss = dpo_loss(*out.halves("sum"), *r.halves("sum"))[0]
            else:
                loss, _ = preference_step_loss(
                    pols[m], batch, cfg, sae=sae, ref_cache=cache, ref_model=ref
                )
            opts[m].zero_grad(set_to_none=True)
            loss.backward()
            opts[m].step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
                peak[m] = max(peak[m], torch.cuda.max_memory_allocated())
            if step >= 4:
                times[m].append(time.perf_counter() - t0)
    med = {m: statistics.median(v) for m, v in times.items()}
    floor = med["SimPO (no reference: floor)"]
    tdpo = med["TDPO-2 (online reference + KL)"]
    resident = {
        "FPO (offline cache)": _bytes(sae, cache),
        "DPO (offline log-probs)": len(cache) * 4 * 4,  # 4 float32 per pair
        online_dpo: _bytes(ref),
        "TDPO-2 (online reference + KL)": _bytes(ref),
        "SimPO (no reference: floor)": 0,
    }
    print(
        f"tiny Llama d={args.d}, {args.layers} blocks, vocab {len(tok)}, {args.pairs} pairs x "
        f"{args.seq} tokens, SAE {sae.d_sae} features at block {layer}, device {dev}, "
        f"{args.threads} thread(s); cache for {len(recs)} pairs built in {t_cache:.2f} s"
    )
    mem_head = "peak CUDA memory" if dev.type == "cuda" else "kept beside the policy"
    print(f"| method | median step | / floor (SimPO step) | / TDPO-2 | {mem_head} |")
    print("|---|---|---|---|---|")
    for m in methods:
        mem = (
            f"{peak[m] / 2**20:.0f} MiB" if dev.type == "cuda" else f"{resident[m] / 2**20:.2f} MiB"
        )
        print(
            f"| {m} | {med[m] * 1e3:.1f} ms | {med[m] / floor:.2f}x | {med[m] / tdpo:.2f}x | {mem} |"
        )
    policy_b = _bytes(ref)
    print(
        f"\npolicy parameters {policy_b / 2**20:.2f} MiB (+ gradients and Adam state, the same for all)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
