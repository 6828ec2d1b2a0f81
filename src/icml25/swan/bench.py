"""Whitening-cost benchmark (docs/swan.md): time and accuracy per method."""

from __future__ import annotations

import statistics
import time

import torch

from icml25.swan.functional import muon_orthogonalize, whiten

__all__ = ["METHODS", "bench_whitening", "powerlaw_matrix"]

METHODS = {
    "ns_b0.5_k10": lambda G: whiten(G, "ns", steps=10, beta=0.5),
    "ns_b0.5_k20": lambda G: whiten(G, "ns", steps=20, beta=0.5),
    "ns_b0.8_k10": lambda G: whiten(G, "ns", steps=10, beta=0.8),
    "ns_b0.5_k40": lambda G: whiten(G, "ns", steps=40, beta=0.5),
    "nsds_b0.4_k2": lambda G: whiten(G, "nsds", steps=2, beta=0.4),
    "muon5": lambda G: muon_orthogonalize(G),
    "muon5_bf16": lambda G: muon_orthogonalize(G.bfloat16()).float(),
    "eigh32": lambda G: whiten(G, "eigh"),
    "eigh64": lambda G: whiten(G.double(), "eigh").float(),
    "svd32": lambda G: whiten(G, "svd"),
}


def powerlaw_matrix(m: int, n: int, seed: int = 0, device="cpu") -> torch.Tensor:
    """``U diag(i^-1) V^T`` with random orthogonal U, V: condition number min(m, n)."""
    g = torch.Generator().manual_seed(seed)
    p = min(m, n)
    U, _ = torch.linalg.qr(torch.randn(m, p, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(n, p, generator=g, dtype=torch.float64))
    s = 1.0 / torch.arange(1, p + 1, dtype=torch.float64)
    return ((U * s) @ V.T).float().to(device)


def bench_whitening(
    sizes=((128, 344), (256, 688), (512, 1376)),
    methods=None,
    repeats: int = 5,
    seed: int = 0,
    device="cpu",
) -> list[dict]:
    """One row per (size, method): median seconds, relative error to the fp64 polar factor after
    Frobenius matching, min/max output singular value, ``||O O^T - I||_F / sqrt(p)`` after scaling O
    to spectral norm 1, and finiteness."""
    rows = []
    names = list(methods or METHODS)
    for m, n in sizes:
        G = powerlaw_matrix(m, n, seed, device)
        ref = whiten(G.double(), "svd")
        p = min(m, n)
        for name in names:
            fn = METHODS[name]
            fn(G)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                O = fn(G)
                if G.is_cuda:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            O64 = O.double()
            finite = bool(torch.isfinite(O64).all())
            if finite:
                scaled = O64 * (torch.linalg.matrix_norm(ref) / torch.linalg.matrix_norm(O64))
                rel = float(torch.linalg.matrix_norm(scaled - ref) / torch.linalg.matrix_norm(ref))
                sv = torch.linalg.svdvals(O64)
                unit = O64 / sv.max()
                gram = unit @ unit.T if m <= n else unit.T @ unit
                orth = float(
                    torch.linalg.matrix_norm(gram - torch.eye(p, dtype=torch.float64)) / p**0.5
                )
                smin, smax = float(sv.min()), float(sv.max())
            else:
                rel = orth = smin = smax = float("nan")
            rows.append(
                {
                    "size": f"{m}x{n}",
                    "method": name,
                    "seconds": statistics.median(times),
                    "rel_error": rel,
                    "sv_min": smin,
                    "sv_max": smax,
                    "orth_error": orth,
                    "finite": finite,
                }
            )
    return rows
