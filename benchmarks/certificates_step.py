"""Real-time cost of the safety certificate on ConfoundedDriving (issue 20), one process.

1. Per-step latency of the filter: one environment (``SafetyCertificate.filter``) and a batch of
   B environments at once (``filter_batch``), next to the floor of one step, a table lookup of the
   precomputed closed-loop action (``table[t, x]`` indexing) and DTCBF's filter, the paper's
   baseline. Target: < 1 ms per step on CPU.
2. Cost of learning Q: the tabular front-door and naive fits against the number of offline
   trajectories (10 steps each), beside the time to sample the data.

Run: ``python benchmarks/certificates_step.py [--reps N]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from _timing import median_time

from icml25.certificates import (
    DTCBFFilter,
    FrontDoorFQE,
    NaiveFQE,
    SafetyCertificate,
    make_confounded_driving,
)
from icml25.certificates.envs import safety_barrier


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    mdp, codec = make_confounded_driving()
    data = mdp.sample_offline(10_000, 10, generator=torch.Generator().manual_seed(0))
    q = FrontDoorFQE(10, mdp.safe, n_actions=5, n_mediators=5).fit(data)
    cert = SafetyCertificate(q, action_values=(-3, -2, -1, 0, 1))
    table = cert.table(torch.tensor([0, 0, 0, 0.3, 0.7], dtype=torch.float64))
    dtcbf = DTCBFFilter(data, safety_barrier(), 0.5, 10, (-3, -2, -1, 0, 1))
    x0 = codec.encode(2, 3)
    print("| what | per call | per environment-step | floor (table lookup) | ours / floor |")
    print("|---|---|---|---|---|")
    floor1 = median_time(lambda: table[3, x0].argmax(), args.reps)
    one = median_time(lambda: cert.filter(x0, 3, 4), args.reps)
    print(
        f"| certificate filter, 1 environment | {one * 1e6:.0f} us | {one * 1e6:.0f} us | "
        f"{floor1 * 1e6:.1f} us | {one / floor1:.0f}x |"
    )
    d1 = median_time(lambda: dtcbf(x0, 3, 4), args.reps)
    print(
        f"| DTCBF filter, 1 environment | {d1 * 1e6:.0f} us | {d1 * 1e6:.0f} us | "
        f"{floor1 * 1e6:.1f} us | {d1 / floor1:.0f}x |"
    )
    for B in (100, 10_000):
        g = torch.Generator().manual_seed(B)
        xs = torch.randint(mdp.n_states, (B,), generator=g)
        un = torch.randint(5, (B,), generator=g)
        fb = median_time(
            lambda xs=xs, un=un: cert.filter_batch(xs, 3, un), max(10, args.reps // 10)
        )
        fl = median_time(lambda xs=xs: table[3, xs].argmax(-1), max(10, args.reps // 10))
        print(
            f"| certificate filter_batch, B = {B} | {fb * 1e3:.2f} ms | {fb / B * 1e6:.2f} us | "
            f"{fl / B * 1e6:.3f} us | {fb / fl:.1f}x |"
        )
    print()
    print("| offline trajectories | transitions | sample | front-door fit | naive fit |")
    print("|---|---|---|---|---|")
    for n in (1_000, 3_000, 10_000, 30_000, 100_000):
        g = torch.Generator().manual_seed(n)
        t0 = time.perf_counter()
        ds = mdp.sample_offline(n, 10, generator=g)
        ts = time.perf_counter() - t0
        tf = median_time(
            lambda ds=ds: FrontDoorFQE(10, mdp.safe, n_actions=5, n_mediators=5).fit(ds), 5
        )
        tn = median_time(lambda ds=ds: NaiveFQE(10, mdp.safe, n_actions=5).fit(ds), 5)
        print(
            f"| {n} | {len(ds)} | {ts * 1e3:.0f} ms | {tf * 1e3:.1f} ms | {tn * 1e3:.1f} ms |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
