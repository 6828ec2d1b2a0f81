"""Cost of one query-selection round (paper 02's benchmark), one process.

DistQ (``select_dq``, M*B = 200 candidate distinguishability queries = 800 segment draws) next to
PEBBLE's disagreement selection (``select_pcq``, 200 candidate pairs = 400 draws), with B-Pref's
reward network (K = 3 members, 3 x 256 hidden) and segments of H = 50 steps of a 3-D observation
and 1-D action (Pendulum's shapes). The target: one DQ round in < 50 ms on CPU.

Rows: float32 scoring (chunks of 64 segments), bfloat16 autocast scoring (where the CPU has bf16
units), and precomputed per-member returns (``returns=``, what a caller that already scored the
buffer passes). Beside each row, the physical floor: the reward network's forward matmuls alone
(float32 or bf16) on the same distinct segments, and the ratio to it. "same picks" counts the
rounds (of 20 seeds) whose selected queries equal the float32 ones.

Run: ``python benchmarks/distinguishability_select.py [--threads 2] [--repeats 20]``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
from _timing import median_time

from icml25.distinguishability import RewardEnsemble, SegmentBuffer, select_dq, select_pcq


def floor_fn(ens: RewardEnsemble, x: torch.Tensor, dtype: torch.dtype):
    """The forward pass's matmuls on the distinct segments' steps, nothing else."""
    ws = [w.detach().to(dtype) for w in ens.weights]

    def run():
        with torch.no_grad():
            h = x.to(dtype)
            for w in ws:
                h = torch.matmul(h, w)  # (K, rows, fan_out)
        return h

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n_seg, H = 4000, 50
    buf = SegmentBuffer(torch.randn(n_seg, H, 3), torch.randn(n_seg, H, 1), torch.randn(n_seg, H))
    has_bf16 = torch.backends.mkldnn.is_available()
    print(f"torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats}\n")
    print(
        "| reward net | scoring | DistQ round (200 DQs) | PEBBLE round (200 PCQs) | "
        "floor (matmuls, 800 draws) | DistQ / floor | same picks |"
    )
    print("|---|---|---|---|---|---|---|")
    for hidden, layers in ((256, 3), (64, 2)):
        ens = RewardEnsemble(3, 1, 3, hidden, layers)
        idx = np.unique(np.random.default_rng(0).integers(0, n_seg, 800))
        x = torch.cat([buf.obs[idx], buf.act[idx]], -1).reshape(1, -1, 4).expand(3, -1, -1)
        with torch.no_grad():
            all_ret = ens.segment_returns(buf.obs, buf.act)
        modes = [("float32", None, torch.float32, None)]
        if has_bf16:
            modes.append(("bfloat16", "bfloat16", torch.bfloat16, None))
        modes.append(("precomputed returns", None, torch.float32, all_ret))
        ref = {s: select_dq(ens, buf, 20, "distq", 10, rng=s) for s in range(20)}
        for name, sd, fdt, ret in modes:

            def dq(ens=ens, sd=sd, ret=ret):
                return select_dq(ens, buf, 20, "distq", 10, rng=1, score_dtype=sd, returns=ret)

            def pcq(ens=ens, sd=sd, ret=ret):
                return select_pcq(
                    ens, buf, 20, "disagreement", 10, rng=1, score_dtype=sd, returns=ret
                )

            t_dq, t_pcq = median_time(dq, args.repeats), median_time(pcq, args.repeats)
            t_floor = median_time(floor_fn(ens, x, fdt), args.repeats)
            same = sum(
                select_dq(ens, buf, 20, "distq", 10, rng=s, score_dtype=sd, returns=ret) == ref[s]
                for s in range(20)
            )
            fl = "—" if ret is not None else f"{t_floor * 1e3:.1f} ms"
            ratio = "—" if ret is not None else f"{t_dq / t_floor:.2f}x"
            print(
                f"| K=3, {layers} x {hidden} | {name} | {t_dq * 1e3:.1f} ms | "
                f"{t_pcq * 1e3:.1f} ms | {fl} | {ratio} | {same}/20 |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
