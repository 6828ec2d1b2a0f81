"""SWAN side by side with AdamW and torch.optim.Muon, in one process, printing ratios (issue 5).

1. ``optimizer.step()`` time on a stack of weight matrices (4 x 1024x1024 and 2 x 4096x1024, ~8.4 M
   parameters) with fresh random gradients each step: AdamW, SWAN (NS beta 0.8 k 10, NSDS, eigh),
   SinkGD and Muon; ratio to AdamW. Target from the issue: SWAN <= 1.5x AdamW.
2. Whitening alone, per matrix: Newton-Schulz vs NSDS vs eigendecomposition vs SVD.
3. Optimizer-state bytes on the matrices: target 0 for SWAN.

Run: ``python benchmarks/swan_bench.py [--device cuda] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from icml25.swan import SWAN, SinkGD, optimizer_state_bytes, whiten

SHAPES = [(1024, 1024)] * 4 + [(4096, 1024)] * 2


def timed(fn, repeats: int, sync) -> float:
    fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    reps = 2 if args.quick else 5
    g = torch.Generator().manual_seed(0)
    shapes = SHAPES[:2] + SHAPES[4:5] if args.quick else SHAPES

    def fresh():
        ps = [torch.nn.Parameter(torch.randn(*s, generator=g).to(dev) * 0.02) for s in shapes]
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g).to(dev)
        return ps

    makers = {
        "AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-3),
        "SWAN (NS b0.8 k10)": lambda ps: SWAN([{"params": ps, "use_swan": True}]),
        "SWAN-NSDS (b0.4 k2)": lambda ps: SWAN(
            [{"params": ps, "use_swan": True}], variant="swan_nsds"
        ),
        "SWAN exact (eigh)": lambda ps: SWAN(
            [{"params": ps, "use_swan": True}], variant="swan_exact"
        ),
        "SinkGD": lambda ps: SinkGD([{"params": ps, "use_swan": True}]),
    }
    if hasattr(torch.optim, "Muon"):
        makers["torch.optim.Muon"] = lambda ps: torch.optim.Muon(ps, lr=1e-3)
    n_params = sum(a * b for a, b in shapes)
    print(
        f"# SWAN benchmark ({dev}, {args.threads} threads, {len(shapes)} matrices, "
        f"{n_params / 1e6:.1f} M parameters, median of {reps})\n"
    )
    print(
        "## 1. optimizer.step() time\n\n| optimizer | step | / AdamW | state bytes |\n|---|---|---|---|"
    )
    base = None
    verdicts = []
    for name, make in makers.items():
        ps = fresh()
        opt = make(ps)
        t = timed(opt.step, reps, sync)
        base = base or t
        state = optimizer_state_bytes(opt)
        print(f"| {name} | {t * 1e3:.1f} ms | {t / base:.2f}x | {state:,} |")
        if name == "SWAN (NS b0.8 k10)":
            verdicts.append(("SWAN step <= 1.5x AdamW", t / base <= 1.5, f"{t / base:.2f}x"))
            verdicts.append(("SWAN state bytes on the matrices == 0", state == 0, f"{state}"))
    print(
        "\n## 2. whitening one matrix\n\n| shape | NS b0.8 k10 | NSDS | eigh fp32 | svd fp32 | NS / eigh |"
    )
    print("|---|---|---|---|---|---|")
    for shape in sorted(set(shapes)):
        G = torch.randn(*shape, generator=g).to(dev)
        ts = {
            m: timed(lambda m=m, kw=kw, G=G: whiten(G, m, **kw), reps, sync)
            for m, kw in (
                ("ns", {}),
                ("nsds", {"steps": 2, "beta": 0.4}),
                ("eigh", {}),
                ("svd", {}),
            )
        }
        print(
            f"| {shape[0]}x{shape[1]} | {ts['ns'] * 1e3:.1f} ms | {ts['nsds'] * 1e3:.1f} ms | "
            f"{ts['eigh'] * 1e3:.1f} ms | {ts['svd'] * 1e3:.1f} ms | {ts['ns'] / ts['eigh']:.2f}x |"
        )
    print("\n## Targets\n")
    for what, ok, value in verdicts:
        print(f"- {'PASS' if ok else 'FAIL'}: {what} ({value})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
