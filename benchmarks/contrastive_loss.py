"""Contrastive-loss cost, side by side in one process (forward + backward, CPU, median of runs).

Rows at m = 256 rows per view, d = 128:
1. the physical floor: the similarity matmuls a SimCLR loss cannot avoid (u v^T, u u^T, v v^T and
   their backward);
2. pytorch-metric-learning's ``NTXentLoss`` on the concatenated views (the peer);
3. our ``nt_xent_loss`` (function);
4. ``ContrastiveLoss("simclr")`` (module, logging every step; and every 10 steps);
5. the same with VRNS (``vrns_weight=30``): VRNS's overhead over the base loss (target < 15%).

Each row prints its time, the ratio to the peer and to the floor.
Run: ``python benchmarks/contrastive_loss.py`` (or ``icml25 bench contrastive_loss``).
"""

from __future__ import annotations

import statistics
import time

import torch

from icml25.contrastive import ContrastiveLoss
from icml25.contrastive.losses import nt_xent_loss

M, D, T = 256, 128, 0.2
REPS = 30


def timed(fn, u, v) -> float:
    for _ in range(3):
        fn(u, v).backward()
    times = []
    for _ in range(REPS):
        u.grad = v.grad = None
        t0 = time.perf_counter()
        fn(u, v).backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> int:
    torch.manual_seed(0)
    torch.set_num_threads(2)
    u = torch.randn(M, D, requires_grad=True)
    v = torch.randn(M, D, requires_grad=True)

    def floor(a, b):
        return (a @ b.T).sum() + (a @ a.T).sum() + (b @ b.T).sum()

    rows = [("floor: the three similarity matmuls", floor)]
    try:
        from pytorch_metric_learning.losses import NTXentLoss

        pml = NTXentLoss(temperature=T)
        labels = torch.arange(M).repeat(2)
        rows.append(
            ("pytorch-metric-learning NTXentLoss", lambda a, b: pml(torch.cat([a, b]), labels))
        )
    except ImportError:
        print("pytorch-metric-learning is not installed: no peer row")
    rows += [
        ("ours: nt_xent_loss", lambda a, b: nt_xent_loss(a, b, T)),
        ("ours: ContrastiveLoss('simclr'), logging every step", ContrastiveLoss("simclr", T)),
        (
            "ours: ContrastiveLoss('simclr'), logging every 10 steps",
            ContrastiveLoss("simclr", T, log_every=10),
        ),
        (
            "ours: ContrastiveLoss('simclr') + VRNS, logging every 10",
            ContrastiveLoss("simclr", T, vrns_weight=30, n_train=50000, log_every=10),
        ),
    ]
    res = {name: timed(fn, u, v) for name, fn in rows}
    floor_ms = res[rows[0][0]]
    peer = res.get("pytorch-metric-learning NTXentLoss")
    print(f"m = {M}, d = {D}, forward + backward, median of {REPS}, 2 threads\n")
    print("| row | ms | vs peer | vs floor |\n|---|---|---|---|")
    for name, ms in res.items():
        vs_peer = f"{ms / peer:.2f}x" if peer else "-"
        print(f"| {name} | {ms:.2f} | {vs_peer} | {ms / floor_ms:.2f}x |")
    base = res["ours: ContrastiveLoss('simclr'), logging every 10 steps"]
    with_vrns = res["ours: ContrastiveLoss('simclr') + VRNS, logging every 10"]
    overhead = with_vrns / base - 1
    print(f"\nVRNS overhead over the base loss: {100 * overhead:.0f}% (target < 15%)")
    return 0 if overhead < 0.15 else 1


if __name__ == "__main__":
    raise SystemExit(main())
