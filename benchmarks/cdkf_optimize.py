"""Time to optimise measurement rates with icml25.cdkf (issue 7's benchmark), one process.

1. The quick reproduction's setting (Matern-3/2 GP, 2 sensors, K = 20 control intervals).
2. A larger problem: 3 sensors on a 4-state model (sum of a Matern-3/2 and a Matern-5/2 GP plus an
   OU component is 2 + 3 = 5 states; we use Matern-3/2 + Matern-3/2 = 4 states), K = 100.
Prints wall time, iterations, objective and time per objective+gradient evaluation for the SLSQP
and projected-gradient solvers.
3. Sensor scaling (spec "Anchors"): S in {2, 4, 8} sensors on the 4-state model, K = 20: one SLSQP
   solve through the paper's bound next to the same solve through the Kalman-Bucy relaxation (the
   literature anchor), with the time ratio.

Run: ``python benchmarks/cdkf_optimize.py [--maxiter N] [--skip-large]``.
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


def scaling_problem(S: int, surrogate: str) -> SchedulingProblem:
    m = sum_ssm(matern_ssm(1.5, 1.0, 1.0), matern_ssm(1.5, 3.0, 0.5))
    g = torch.Generator().manual_seed(S)
    sensors = []
    for s in range(S):
        C = torch.zeros(1, 4, dtype=D)
        C[0, 2 * (s % 2)] = 1.0
        if s % 3 == 2:
            C[0, 2] = 1.0  # some sensors see the sum
        noise = 0.01 + 0.2 * float(torch.rand(1, generator=g))
        sensors.append(Sensor(C, torch.tensor([[noise]], dtype=D), cost=0.2 + 0.1 * s))
    H = torch.tensor([[1.0, 0.0, 1.0, 0.0]], dtype=D)
    return SchedulingProblem(
        m, sensors, 10.0, 20, W=H.T @ H, budget=12.0, lam_max=8.0, surrogate=surrogate
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maxiter", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-large", action="store_true", help="skip the K=100 problem")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(
        "| problem | method | variables | RK4 steps | objective+grad | iterations | wall time | objective |"
    )
    print("|---|---|---|---|---|---|---|---|")
    problems = [("GP pass-by, 2 sensors, K=20", pass_by_problem()[3])]
    if not args.skip_large:
        problems.append(("4-state, 3 sensors, K=100", large_problem()))
    for name, prob in problems:
        v = prob.initial_rates().requires_grad_(True)
        t0 = time.perf_counter()
        prob.objective(v).backward()
        one = time.perf_counter() - t0
        for method in ("slsqp", "pgd"):
            t0 = time.perf_counter()
            sol = prob.solve(method, maxiter=args.maxiter, progress=False)
            wall = time.perf_counter() - t0
            print(
                f"| {name} | {method} | {prob.S * prob.K} | {prob.n_steps} | {one * 1e3:.0f} ms | "
                f"{sol.info['iterations']} | {wall:.1f} s | {sol.objective:.4f} |",
                flush=True,
            )
    print()
    print(
        "| sensors S | bound: solve (iterations) | Kalman-Bucy relaxation: solve (iterations) | ratio |"
    )
    print("|---|---|---|---|")
    for S in (2, 4, 8):
        row = []
        for surrogate in ("bound", "kalman_bucy"):
            prob = scaling_problem(S, surrogate)
            t0 = time.perf_counter()
            sol = prob.solve(maxiter=args.maxiter)
            row.append((time.perf_counter() - t0, sol.info["iterations"]))
        print(
            f"| {S} | {row[0][0]:.1f} s ({row[0][1]}) | {row[1][0]:.1f} s ({row[1][1]}) | "
            f"{row[0][0] / row[1][0]:.2f}x |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
