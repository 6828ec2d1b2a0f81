"""Cost of one query-selection round (paper 02's benchmark), one process.

DistQ (``select_dq``, M*B = 200 candidate distinguishability queries = 800 segments) next to PEBBLE's
disagreement selection (``select_pcq``, 200 candidate pairs = 400 segments), with B-Pref's reward
network (K = 3 members, 3 x 256 hidden) and segments of H = 50 steps of a 3-D observation and 1-D
action (Pendulum's shapes). The spec's target: one DQ round in < 50 ms on CPU.

Run: ``python benchmarks/distinguishability_select.py [--threads 2] [--repeats 20]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

from icml25.distinguishability import RewardEnsemble, SegmentBuffer, select_dq, select_pcq


def _time(fn, repeats: int) -> float:
    fn()  # warm-up
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return float(np.median(t))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n_seg, H = 4000, 50
    buf = SegmentBuffer(torch.randn(n_seg, H, 3), torch.randn(n_seg, H, 1), torch.randn(n_seg, H))
    print("| reward net | DistQ round (200 DQs) | PEBBLE disagreement round (200 PCQs) | ratio |")
    print("|---|---|---|---|")
    for hidden, layers in ((256, 3), (64, 2)):
        ens = RewardEnsemble(3, 1, 3, hidden, layers)
        rng = np.random.default_rng(0)
        t_dq = _time(
            lambda ens=ens, rng=rng: select_dq(ens, buf, 20, "distq", 10, rng=rng), args.repeats
        )
        t_pcq = _time(
            lambda ens=ens, rng=rng: select_pcq(ens, buf, 20, "disagreement", 10, rng=rng),
            args.repeats,
        )
        print(
            f"| K=3, {layers} x {hidden} | {t_dq * 1e3:.1f} ms | {t_pcq * 1e3:.1f} ms | "
            f"{t_dq / t_pcq:.2f}x |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
