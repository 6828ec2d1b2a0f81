"""Run by test_triton.py in a subprocess with TRITON_INTERPRET=1 set before triton is imported.

Compares backend="auto" (Triton, via ICML25_LAPSUM_BACKEND=triton) with backend="torch" on
outputs and gradients; prints the worst scale-relative error and exits 1 above the tolerance.
"""

import itertools
import sys

import torch

from icml25.lapsum import soft_rank, soft_topk

TOL = 2e-5


def rel(a, b, scale=None):
    scale = float(b.abs().max()) if scale is None else scale
    return float((a - b).abs().max()) / (1.0 + scale)


def alpha_scale(x, grad):
    # d/d alpha = -(1/alpha) <g_r, x - c>: a sum whose float32 rounding scales with sum |terms|
    return float((grad.abs() * (x - x.mean(-1, keepdim=True)).abs()).sum())


def main(ns, batches, ms):
    torch.manual_seed(0)
    worst = 0.0
    for n, batch, m, largest, log in itertools.product(
        ns, batches, ms, (True, False), (False, True)
    ):
        x = torch.randn(batch, n)
        ks = torch.tensor([[min(n - 0.5, max(0.3, n * f)) for f in (0.3, 0.5, 0.9)[:m]]])
        results = []
        for backend in ("auto", "torch"):
            xr = x.clone().requires_grad_(True)
            kr = ks.clone().requires_grad_(True)
            ar = torch.tensor(0.7, requires_grad=True)
            p = soft_topk(xr, kr, ar, largest=largest, log=log, backend=backend)
            (p * torch.linspace(-1, 1, p.numel()).reshape(p.shape)).sum().backward()
            results.append((p.detach(), xr.grad, kr.grad, ar.grad))
        (p1, g1, k1, a1), (p2, g2, k2, a2) = results
        worst = max(worst, rel(p1, p2), rel(g1, g2), rel(k1, k2), rel(a1, a2, alpha_scale(x, g2)))
    for n, batch in itertools.product(ns, batches):
        x = torch.randn(batch, n)
        results = []
        for backend in ("auto", "torch"):
            xr = x.clone().requires_grad_(True)
            ar = torch.tensor(0.5, requires_grad=True)
            r = soft_rank(xr, ar, backend=backend)
            (r * torch.linspace(-1, 1, r.numel()).reshape(r.shape)).sum().backward()
            results.append((r.detach(), xr.grad, ar.grad))
        (r1, g1, a1), (r2, g2, a2) = results
        worst = max(worst, rel(r1, r2), rel(g1, g2), rel(a1, a2, alpha_scale(x, g2)))
    print(f"worst {worst:.3g}")
    return 0 if worst <= TOL else 1


if __name__ == "__main__":
    grid = sys.argv[1]
    if grid == "full":
        raise SystemExit(main([1, 2, 7, 128, 1000], [1, 3], [1, 3]))
    raise SystemExit(main([1, 7, 128], [1, 3], [1, 3]))
