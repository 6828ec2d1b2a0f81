"""Monte-Carlo evaluation of measurement schedules and filter calibration (docs/cdkf.md)."""

from __future__ import annotations

import torch
from torch import Tensor

from icml25._validate import as_int
from icml25.cdkf.filter import ContinuousDiscreteKF, joseph_update
from icml25.cdkf.schedule import RateSchedule, sample_poisson_times
from icml25.cdkf.ssm import LinearSDE, Sensor

__all__ = ["monte_carlo_covariance", "schedule_trace", "simulate_and_filter", "time_average"]


def time_average(values: Tensor, T: float) -> Tensor:
    """Time average of ``values`` on a uniform grid (trapezoid), over the last dimension."""
    n = values.shape[-1] - 1
    h = T / n
    return h * (values.sum(-1) - 0.5 * (values[..., 0] + values[..., -1])) / T


def monte_carlo_covariance(
    sde: LinearSDE,
    sensors: list[Sensor],
    rates: RateSchedule,
    M: int,
    n_fine: int,
    generator: torch.Generator,
    W: Tensor,
    costs: list[float] | Tensor | None = None,
) -> dict:
    """``tr(W Sigma)`` under Poisson measurement times: mean path, its standard error, and the time
    average with its standard error over ``M`` realisations (``time_avgs``: each realisation's
    time average, ``(M,)``). Events are applied at the end of the fine step they fall in
    (``T / n_fine``); all paths are propagated as one batch. With ``costs``
    (per measurement and sensor) also ``cost_paths``: the cumulative realised cost of each path on
    the grid, ``(M, n_fine + 1)``."""
    if not sde.time_invariant:
        raise ValueError("monte_carlo_covariance needs a time-invariant SDE")
    M = as_int("M", M, 1)
    n_fine = as_int("n_fine", n_fine, 1)
    T = rates.T
    h = T / n_fine
    Phi, Qd = sde.discretize(h)
    counts = torch.zeros(M, rates.S, n_fine, dtype=torch.long)
    for m in range(M):
        for s, times in enumerate(sample_poisson_times(rates, generator)):
            idx = torch.clamp((times / h).long(), max=n_fine - 1)
            counts[m, s].index_put_((idx,), torch.ones_like(idx), accumulate=True)
    Sigma = sde.Sigma0.expand(M, -1, -1).clone()
    dummy = torch.zeros(sde.n, dtype=Sigma.dtype)  # covariance-only updates ignore the mean
    traces = [torch.einsum("ij,mji->m", W, Sigma)]
    grid = torch.linspace(0, T, n_fine + 1, dtype=torch.float64)
    for j in range(n_fine):
        Sigma = Phi @ Sigma @ Phi.mT + Qd
        for s, sensor in enumerate(sensors):
            c = counts[:, s, j]
            if not bool(c.any()):
                continue
            C, R = sensor.matrices(None, float(grid[j + 1]))
            for k in range(1, int(c.max()) + 1):
                rows = c >= k
                _, upd = joseph_update(dummy, Sigma[rows], None, C, R)
                Sigma[rows] = upd
        traces.append(torch.einsum("ij,mji->m", W, Sigma))
    tr = torch.stack(traces, dim=1)  # (M, n_fine + 1)
    avg = time_average(tr, T)
    extra = {}
    if costs is not None:
        c = torch.as_tensor(costs, dtype=torch.float64).reshape(1, -1, 1)
        if c.shape[1] != rates.S:
            raise ValueError(f"costs needs one entry per sensor ({rates.S}), got {c.shape[1]}")
        spent = (counts.to(torch.float64) * c).sum(1).cumsum(-1)
        extra["cost_paths"] = torch.cat([torch.zeros(M, 1, dtype=torch.float64), spent], 1)
    return {
        **extra,
        "grid": grid,
        "mean_path": tr.mean(0),
        "se_path": tr.std(0) / M**0.5,
        "time_avg": float(avg.mean()),
        "time_avg_se": float(avg.std() / M**0.5),
        "time_avgs": avg,
    }


def schedule_trace(
    sde: LinearSDE,
    sensors: list[Sensor],
    times_per_sensor: list[Tensor],
    T: float,
    n_fine: int,
    W: Tensor,
) -> tuple[Tensor, float]:
    """Exact ``tr(W Sigma)`` path of a deterministic schedule on a uniform grid, and its time average."""
    kf = ContinuousDiscreteKF(sde, sensors)
    grid = torch.linspace(0, T, n_fine + 1, dtype=torch.float64)
    path = kf.covariance_path(times_per_sensor, grid)
    tr = torch.einsum("ij,tji->t", W, path)
    return tr, float(time_average(tr, T))


def simulate_and_filter(
    sde: LinearSDE,
    sensors: list[Sensor],
    times_per_sensor: list[Tensor],
    T: float,
    n_paths: int,
    n_fine: int,
    generator: torch.Generator,
    H: Tensor,
) -> dict:
    """Sample ``n_paths`` true trajectories and measurements at the given times, run the CD-KF, and
    compare the empirical squared error of ``H x`` with the predicted variance ``H Sigma H^T``
    (time averages on the fine grid). All paths share the schedule, hence one covariance path.
    ``path_mse``: each path's time-averaged squared error, ``(n_paths,)``; ``mse`` is their mean."""
    grid = torch.linspace(0, T, n_fine + 1, dtype=torch.float64).tolist()
    events = sorted((float(t), s) for s, ts in enumerate(times_per_sensor) for t in ts.tolist())
    points = sorted({*grid, *(t for t, _ in events)})
    n = sde.n
    L0 = torch.linalg.cholesky(sde.Sigma0 + 1e-12 * torch.eye(n, dtype=torch.float64))
    x = sde.mu0 + torch.randn(n_paths, n, generator=generator, dtype=torch.float64) @ L0.mT
    mu = sde.mu0.expand(n_paths, n).clone()
    Sigma = sde.Sigma0.clone()
    kf = ContinuousDiscreteKF(sde, sensors)
    err, var = [], []
    grid_set = set(grid)
    e, t = 0, 0.0
    for p in points:
        if p > t:
            Phi, Qd = sde.discretize(p - t)
            Lq = torch.linalg.cholesky(Qd + 1e-14 * torch.eye(n, dtype=torch.float64))
            x = (
                x @ Phi.mT
                + torch.randn(n_paths, n, generator=generator, dtype=torch.float64) @ Lq.mT
            )
            mu, Sigma = (
                mu @ Phi.mT,
                0.5 * (Phi @ Sigma @ Phi.mT + Qd + (Phi @ Sigma @ Phi.mT + Qd).mT),
            )
            t = p
        while e < len(events) and events[e][0] == p:
            s = events[e][1]
            C, R = kf.sensors[s].matrices(None, p)
            Lr = torch.linalg.cholesky(R)
            y = (
                x @ C.mT
                + torch.randn(n_paths, R.shape[0], generator=generator, dtype=torch.float64) @ Lr.mT
            )
            Sy = C @ Sigma @ C.mT + R
            K = torch.linalg.solve(Sy, C @ Sigma).mT
            mu = mu + (y - mu @ C.mT) @ K.mT
            _, Sigma = joseph_update(torch.zeros(n, dtype=torch.float64), Sigma, None, C, R)
            e += 1
        if p in grid_set:
            err.append(((x - mu) @ H.mT).pow(2).mean(-1))
            var.append((H @ Sigma @ H.mT).squeeze())
    err_t, var_t = torch.stack(err, dim=-1), torch.stack(var)  # (n_paths, grid), (grid,)
    path_mse = time_average(err_t, T)
    mse, pred = float(path_mse.mean()), float(time_average(var_t, T))
    return {"mse": mse, "predicted": pred, "ratio": mse / pred, "path_mse": path_mse}
