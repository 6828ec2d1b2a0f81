"""Time to optimise measurement rates with icml25.cdkf (issue 7's benchmark), one process.

1. The quick reproduction's setting (Matern-3/2 GP, 2 sensors, K = 20 control intervals).
2. A larger problem: 3 sensors on a 4-state model (sum of a Matern-3/2 and a Matern-5/2 GP plus an
   OU component is 2 + 3 = 5 states; we use Matern-3/2 + Matern-3/2 = 4 states), K = 100.
Prints wall time, SLSQP iterations, objective and time per objective+gradient evaluation.

Run: ``python benchmarks/cdkf_optimize.py [--maxiter N]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from icml25.cdkf import SchedulingProblem, Sensor, matern_ssm, sum_ssm
from icml25.cdkf.repro import pass_by_problem

D = torch.float64


def large_problem() -> SchedulingProblem:
    m = sum_ssm(matern_ssm(1.5, 1.0, 1.0), matern_ssm(1.5, 3.0, 0.5))
    H = torch.tensor([[1.0, 0.0, 1.0, 0.0]], dtype=D)
    sensors = [
        Sensor(H, torch.tensor([[0.01]], dtype=D), cost=1.0),
        Sensor(
            torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=D), torch.tensor([[0.05]], dtype=D), cost=0.3
        ),
        Sensor(
            torch.tensor([[0.0, 0.0, 1.0, 0.0]], dtype=D), torch.tensor([[0.05]], dtype=D), cost=0.3
        ),
    ]
    return SchedulingProblem(m, sensors, 10.0, 100, W=H.T @ H, budget=20.0, lam_max=8.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maxiter", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(
        "| problem | variables | RK4 steps | objective+grad | SLSQP iterations | wall time | objective |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, prob in (
        ("GP pass-by, 2 sensors, K=20", pass_by_problem()[3]),
        ("4-state, 3 sensors, K=100", large_problem()),
    ):
        v = prob.initial_rates().requires_grad_(True)
        t0 = time.perf_counter()
        prob.objective(v).backward()
        one = time.perf_counter() - t0
        t0 = time.perf_counter()
        sol = prob.solve(maxiter=args.maxiter)
        wall = time.perf_counter() - t0
        print(
            f"| {name} | {prob.S * prob.K} | {prob.n_steps} | {one * 1e3:.0f} ms | "
            f"{sol.info['iterations']} | {wall:.1f} s | {sol.objective:.4f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
