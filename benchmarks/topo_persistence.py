"""Differentiable persistence cost (issue 21), one process.

1. H0 + H1 Vietoris-Rips persistence and the gradient of the TP loss on N points in D dimensions:
   ours (giotto-ph filtration, autograd re-read of the critical edges) next to torch-topological's
   ``VietorisRipsComplex(dim=1)`` with its total persistence (the strongest installable peer;
   skipped when absent), and the floor: giotto-ph's filtration alone on the distance matrix.
2. The MMD permutation test's cost against n (B = 100 permutations, vectorised), beside the floor
   of one Gram matrix.

Run: ``python benchmarks/topo_persistence.py [--reps N]``.
"""

from __future__ import annotations

import argparse
import sys

import torch
from _timing import median_time

from icml25.topo_detect.mmd import gaussian_gram, permutation_test
from icml25.topo_detect.persistence import total_persistence, vr_diagrams


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        import torch_topological.nn as ttn
    except ImportError:
        ttn = None
    from gph import ripser_parallel

    print(
        "| N x D | ours: diagrams + TP gradient | torch-topological | peer / ours | floor: giotto-ph alone | ours / floor |"
    )
    print("|---|---|---|---|---|---|")
    for N, Dm in ((100, 32), (512, 512)):
        x0 = torch.randn(N, Dm, generator=torch.Generator().manual_seed(N), dtype=torch.float64)

        def ours(x0=x0):
            x = x0.clone().requires_grad_(True)
            dg = vr_diagrams(x)
            (total_persistence(dg[0]) + total_persistence(dg[1])).backward()

        def peer(x0=x0):
            x = x0.clone().requires_grad_(True)
            info = ttn.VietorisRipsComplex(dim=1)(x)
            sum(
                ((d.diagram[:, 1] - d.diagram[:, 0])[torch.isfinite(d.diagram[:, 1])]).sum()
                for d in info
            ).backward()

        Dnp = torch.cdist(x0, x0).numpy()
        floor = median_time(
            lambda Dnp=Dnp: ripser_parallel(
                Dnp, metric="precomputed", maxdim=1, return_generators=True
            ),
            args.reps,
        )
        a = median_time(ours, args.reps)
        if ttn is not None:
            b = median_time(peer, args.reps)
            peer_txt, ratio = f"{b * 1e3:.0f} ms", f"{b / a:.2f}x"
        else:
            peer_txt, ratio = "not installed", "-"
        print(
            f"| {N} x {Dm} | {a * 1e3:.0f} ms | {peer_txt} | {ratio} | {floor * 1e3:.0f} ms | {a / floor:.2f}x |",
            flush=True,
        )
    print()
    print("| n per sample | permutation test (B = 100) | floor: one Gram matrix | ratio |")
    print("|---|---|---|---|")
    g = torch.Generator().manual_seed(0)
    for n in (50, 100, 200, 500):
        Z = torch.randn(2 * n, 32, generator=g, dtype=torch.float64)
        K = gaussian_gram(Z)
        t = median_time(lambda K=K, n=n: permutation_test(K, n, 100, g), args.reps)
        f = median_time(lambda Z=Z: gaussian_gram(Z), args.reps)
        print(f"| {n} | {t * 1e3:.1f} ms | {f * 1e3:.2f} ms | {t / f:.1f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
