"""Time to optimise measurement rates with icml25.cdkf (issue 7's benchmark), one process.

1. The quick reproduction's setting (Matern-3/2 GP, 2 sensors, K = 20 control intervals).
2. A larger problem: 3 sensors on a 4-state model (sum of a Matern-3/2 and a Matern-5/2 GP plus an
   OU component is 2 + 3 = 5 states; we use Matern-3/2 + Matern-3/2 = 4 states), K = 100.
Prints wall time, iterations, objective and time per objective+gradient evaluation for the SLSQP
and projected-gradient solvers.
3. Sensor scaling (docs/cdkf.md): S in {2, 4, 8} sensors on the 4-state model, K = 20: one SLSQP
   solve through the paper's bound next to the same solve through the Kalman-Bucy relaxation (the
   literature anchor), with the time ratio.

0. Before/after (issue 19), each timed as the median of repeated calls in this process: the
   bound + gradient on the pass-by problem through the numpy RK4 with its discrete adjoint
   (``icml25.cdkf.adjoint``) vs autograd through the torch RK4 loop it replaced; the same for the
   robot problem's joint objective (rates and control); the robot's mean-energy constraint
   Jacobian in closed form vs ``torch.autograd.functional.jacobian``; and one filter step (predict
   + update on a regular grid) vs filterpy's ``KalmanFilter``. The floor printed beside the
   bound is the numpy forward alone (the recursion the gradient has to run backwards through).

Run: ``python benchmarks/cdkf_optimize.py [--maxiter N] [--skip-large] [--only-speed]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

import numpy as np
import torch
from _timing import median_time

from icml25.cdkf import RateSchedule, SchedulingProblem, Sensor, matern_ssm
from icml25.cdkf.evaluate import time_average
from icml25.cdkf.passby import pass_by_problem
from icml25.cdkf.ssm import sum_ssm

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


def speed_rows(reps: int) -> None:
    from icml25.cdkf import bound as bound_mod
    from icml25.cdkf.robot import baseline_controls, robot_problem

    print("| what | ours | before / peer | ratio | floor | ours / floor |")
    print("|---|---|---|---|---|---|")
    prob = pass_by_problem()[3]
    v0 = prob.initial_rates()

    def ours():
        v = v0.clone().requires_grad_(True)
        torch.autograd.grad(prob.objective(v), v)

    def before():
        v = v0.clone().requires_grad_(True)
        rates = RateSchedule(v, prob.T)
        h = prob.T / prob.n_steps
        path = bound_mod._covariance_bound_torch(
            prob.sde, prob.sensors, rates, h, prob.n_steps, None
        )
        tr = torch.einsum("ij,tji->t", prob.W, path)
        torch.autograd.grad(time_average(tr, prob.T), v)

    def floor():
        with torch.no_grad():
            prob.bound(v0)

    a, b, f = (median_time(fn, reps) for fn in (ours, before, floor))
    print(
        f"| pass-by bound + gradient ({prob.n_steps} RK4 steps) | {a * 1e3:.1f} ms | "
        f"{b * 1e3:.1f} ms (torch loop + autograd) | {b / a:.1f}x | {f * 1e3:.1f} ms "
        f"(numpy forward) | {a / f:.1f}x |",
        flush=True,
    )

    _, rob = robot_problem()
    u0 = baseline_controls()
    r0 = rob.initial_rates()

    def joint():
        v, u = r0.clone().requires_grad_(True), u0.clone().requires_grad_(True)
        torch.autograd.grad(rob.objective_with(v, u), [v, u])

    a = median_time(joint, max(3, reps // 4))
    real = bound_mod.stage_matrices
    bound_mod.stage_matrices = lambda *args, **kw: None  # the torch loop, as before issue 19
    try:
        b = median_time(joint, 3)
    finally:
        bound_mod.stage_matrices = real
    print(
        f"| robot joint objective + gradient ({rob.n_steps} steps, {rob.S * rob.K + rob.K} "
        f"variables) | {a * 1e3:.0f} ms | {b * 1e3:.0f} ms (torch loop + autograd) | "
        f"{b / a:.1f}x | | |",
        flush=True,
    )

    rob1 = robot_problem()[1]
    rob1.constraint_stride = 1  # every RK4 node, the docs' example and our default
    z = torch.cat([r0.reshape(-1), u0.reshape(-1)])
    nl = rob1.S * rob1.K

    def split(z):
        return z[:nl].reshape(rob1.S, rob1.K), z[nl:].reshape(1, rob1.K)

    a = median_time(lambda: rob1.aux_constraints_jacobian(*split(z)), reps)
    rob1.aux = dataclasses.replace(rob1.aux, input_only=False)  # the RK4 path, as before
    b = median_time(
        lambda: torch.autograd.functional.jacobian(
            lambda z: rob1.aux_constraints(*split(z)), z, vectorize=True
        ),
        3,
    )
    rows = rob1.aux_constraints(*split(z)).numel()
    print(
        f"| robot energy constraint Jacobian ({rows} x {z.numel()}) | {a * 1e3:.1f} ms | "
        f"{b * 1e3:.0f} ms (autograd, vectorize=True) | {b / a:.0f}x | | |",
        flush=True,
    )

    try:
        from icml25.cdkf.interop import to_filterpy
    except ImportError:
        return
    from icml25.cdkf import ContinuousDiscreteKF, matern_ssm

    m = matern_ssm(2.5, 0.7, 1.3)
    sensor = Sensor(m.H, torch.tensor([[0.2]], dtype=D))
    dt, n = 0.05, 200
    ys = torch.randn(n, 1, generator=torch.Generator().manual_seed(0), dtype=D)
    try:
        fp = to_filterpy(m, sensor, dt)
    except ImportError:
        return
    kf = ContinuousDiscreteKF(m, [sensor])
    times = dt * torch.arange(1, n + 1, dtype=D)
    ids = torch.zeros(n, dtype=torch.long)
    grid = torch.tensor([n * dt], dtype=D)
    ys_list = list(ys)

    def ours_filter():
        kf.filter(times, ids, ys_list, grid)

    def ours_torch():  # the autograd-capable recursion, which a model needing gradients takes
        os.environ["ICML25_CDKF_PLAIN"] = "0"
        try:
            kf.filter(times, ids, ys_list, grid)
        finally:
            del os.environ["ICML25_CDKF_PLAIN"]

    def theirs():
        f = to_filterpy(m, sensor, dt)
        for i in range(n):
            f.predict()
            f.update(ys_list[i].numpy())

    F, Q = fp.F, fp.Q
    Hm, Rm, eye = fp.H, fp.R, np.eye(3)
    y_np = ys.numpy()

    def floor():  # the step's numpy arithmetic alone: predict, Joseph update, no bookkeeping
        x, P = np.zeros(3), np.eye(3)
        for i in range(n):
            x = F @ x
            P = F @ P @ F.T + Q
            PHt = P @ Hm.T
            K = PHt / (Hm @ PHt + Rm)[0, 0]
            x = x + K @ (y_np[i] - Hm @ x)
            IKH = eye - K @ Hm
            P = IKH @ P @ IKH.T + K @ Rm @ K.T

    a, b = median_time(ours_filter, 7) / n, median_time(theirs, 7) / n
    c, f0 = median_time(ours_torch, 3) / n, median_time(floor, 7) / n
    print(
        f"| filter step (predict + update, n = 3) | {a * 1e6:.0f} us | {b * 1e6:.0f} us "
        f"(filterpy KalmanFilter) | {b / a:.2f}x | {f0 * 1e6:.0f} us (the numpy arithmetic) | "
        f"{a / f0:.2f}x |",
        flush=True,
    )
    print(
        f"| filter step, torch recursion (a model that needs gradients) | {c * 1e6:.0f} us | "
        f"{b * 1e6:.0f} us (filterpy KalmanFilter) | {b / c:.2f}x | | |",
        flush=True,
    )
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--maxiter", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-large", action="store_true", help="skip the K=100 problem")
    ap.add_argument("--only-speed", action="store_true", help="only the before/after table")
    ap.add_argument("--reps", type=int, default=20, help="repetitions per timing (median)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    speed_rows(args.reps)
    if args.only_speed:
        return 0
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
