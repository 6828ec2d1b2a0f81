"""Beyond filtering, what GP and filterpy users reach for next: the measurement log-likelihood
(prediction-error decomposition) and the Rauch-Tung-Striebel smoother of the continuous-discrete
model (Särkkä & Solin, *Applied Stochastic Differential Equations*, 2019, Ch. 10 and 12)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from icml25.cdkf.ssm import NumericalError

if TYPE_CHECKING:
    from icml25.cdkf.filter import ContinuousDiscreteKF

__all__ = ["log_likelihood", "rts_smooth"]


def _check_ys(ys: list[Tensor], n_events: int) -> None:
    if ys is None or len(ys) != n_events:
        raise ValueError(
            f"ys must hold one observation per event ({n_events}), got "
            f"{'None' if ys is None else len(ys)}"
        )


def _check_grid(t_grid, sort_ok: bool = False) -> Tensor:
    """``t_grid`` as a 1-D float tensor of finite times >= 0 (sorted, unless ``sort_ok``)."""
    t_grid = (
        torch.as_tensor(t_grid, dtype=torch.float64) if not isinstance(t_grid, Tensor) else t_grid
    )
    if t_grid.ndim != 1 or t_grid.numel() == 0:
        raise ValueError(
            f"t_grid must be a non-empty 1-D tensor of times, got shape {tuple(t_grid.shape)}"
        )
    if not bool(torch.isfinite(t_grid).all()):
        raise ValueError(f"t_grid must be finite, got {t_grid[~torch.isfinite(t_grid)].tolist()}")
    if bool((t_grid < 0).any()):
        raise ValueError(
            f"t_grid times must be >= 0 (the model starts at t = 0), got {float(t_grid.min())}"
        )
    if not sort_ok and t_grid.numel() > 1 and bool((t_grid[1:] < t_grid[:-1]).any()):
        i = int((t_grid[1:] < t_grid[:-1]).nonzero()[0])
        raise ValueError(
            f"t_grid must be sorted (non-decreasing), got {float(t_grid[i])} before "
            f"{float(t_grid[i + 1])}; sort it (torch.sort) and reorder the results"
        )
    return t_grid


def log_likelihood(
    kf: ContinuousDiscreteKF,
    times: Tensor,
    sensor_ids: Tensor,
    ys: list[Tensor],
    xi_path: Callable[[float], Tensor] | None = None,
) -> Tensor:
    """Sum over events of ``log N(y_k; C mu^-, S_k)``, ``S_k = C Sigma^- C^T + R`` (a scalar)."""
    times, sensor_ids, events = kf._events(times, sensor_ids)
    _check_ys(ys, len(events))
    dtype = kf._dtype()
    mu, Sigma = kf.sde.mu0.clone().to(dtype), kf.sde.Sigma0.clone().to(dtype)
    t, total = 0.0, torch.zeros((), dtype=dtype)
    for k in events:
        te = float(times[k])
        mu, Sigma = kf.predict(mu, Sigma, t, te, xi_path)
        t = te
        xi = xi_path(te) if xi_path is not None else None
        C, R = kf.sensors[int(sensor_ids[k])].matrices(xi, te)
        C, R = C.to(dtype), R.to(dtype)
        y = torch.as_tensor(ys[k]).to(dtype).reshape(-1)
        if y.numel() != C.shape[0]:
            raise ValueError(
                f"sensor {int(sensor_ids[k])} gives {C.shape[0]} value(s) per measurement, got an "
                f"observation of {y.numel()} at t = {te}"
            )
        S = C @ Sigma @ C.mT + R
        L, info = torch.linalg.cholesky_ex(S)
        if int(info) != 0 or not bool(torch.isfinite(L).all()):
            raise NumericalError(
                f"log_likelihood: event {k} (sensor {int(sensor_ids[k])} at t = {te}, after a "
                f"prediction step from the previous event): the innovation covariance C Sigma "
                f"C^T + R = {S.detach().tolist()} is not positive definite (is R(xi, t) "
                f"symmetric positive definite?); {kf._failure_cause()}"
            )
        r = y - C @ mu
        z = torch.linalg.solve_triangular(L, r[:, None], upper=False)[:, 0]
        total = (
            total
            - 0.5 * (z @ z)
            - torch.log(L.diagonal()).sum()
            - 0.5 * len(y) * math.log(2 * math.pi)
        )
        mu, Sigma = kf.update(mu, Sigma, y, int(sensor_ids[k]), te, xi_path)
    return total


def rts_smooth(
    kf: ContinuousDiscreteKF,
    times: Tensor,
    sensor_ids: Tensor,
    ys: list[Tensor],
    t_grid: Tensor,
    xi_path: Callable[[float], Tensor] | None = None,
):
    """Smoothed means and covariances at ``t_grid`` from all events (time-invariant models).

    Forward: the filter over the merged, sorted event and grid times, keeping the predicted and
    updated moments at each; backward: ``G = Sigma_f Phi^T (Sigma_p^next)^{-1}``,
    ``mu_s = mu_f + G (mu_s^next - mu_p^next)``, ``Sigma_s = Sigma_f + G (Sigma_s^next -
    Sigma_p^next) G^T`` with ``Phi`` the exact transition between consecutive times.
    ``xi_path(t)``: the auxiliary state, for sensors that depend on it (the model itself must be
    time-invariant).
    """
    if not kf.sde.time_invariant:
        raise NotImplementedError(
            "rts_smooth needs a time-invariant model (constant A and Qc): the backward pass uses "
            "the exact transition matrix"
        )
    times, sensor_ids, events = kf._events(times, sensor_ids)
    _check_ys(ys, len(events))
    t_grid = _check_grid(t_grid, sort_ok=True)
    dtype = kf._dtype()
    # the timeline: (time, kind, payload); at equal times events come before the grid point
    line = [(float(times[k]), 0, k) for k in events] + [
        (float(g), 1, i) for i, g in enumerate(t_grid.tolist())
    ]
    line.sort(key=lambda x: (x[0], x[1], int(sensor_ids[x[2]]) if x[1] == 0 else x[2]))
    mu, Sigma = kf.sde.mu0.clone().to(dtype), kf.sde.Sigma0.clone().to(dtype)
    t = 0.0
    pred, filt, steps, grid_at = [], [], [], {}
    for time, kind, idx in line:
        h = time - t
        Phi, Qd = kf.sde.discretize(h) if h > 0 else (torch.eye(len(mu), dtype=dtype), None)
        Phi = Phi.to(dtype)
        mu_p = Phi @ mu
        Sigma_p = Sigma if Qd is None else Phi @ Sigma @ Phi.mT + Qd.to(dtype)
        mu, Sigma = mu_p, Sigma_p
        if kind == 0:
            mu, Sigma = kf.update(
                mu,
                Sigma,
                torch.as_tensor(ys[idx]).to(dtype).reshape(-1),
                int(sensor_ids[idx]),
                time,
                xi_path,
            )
        else:
            grid_at.setdefault(idx, len(filt))
        pred.append((mu_p, Sigma_p))
        filt.append((mu, Sigma))
        steps.append(Phi)
        t = time
    n_pts = len(filt)
    smooth: list[tuple[Tensor, Tensor]] = [None] * n_pts  # type: ignore[list-item]
    smooth[-1] = filt[-1]
    for j in range(n_pts - 2, -1, -1):
        mu_f, S_f = filt[j]
        mu_pn, S_pn = pred[j + 1]
        Phi = steps[j + 1]
        G = torch.linalg.solve(S_pn, Phi @ S_f).mT  # S_f Phi^T S_pn^{-1} (S_pn symmetric)
        mu_sn, S_sn = smooth[j + 1]
        S_s = S_f + G @ (S_sn - S_pn) @ G.mT
        smooth[j] = (mu_f + G @ (mu_sn - mu_pn), 0.5 * (S_s + S_s.mT))
    mus = torch.stack([smooth[grid_at[i]][0] for i in range(len(t_grid))])
    sig = torch.stack([smooth[grid_at[i]][1] for i in range(len(t_grid))])
    return mus, sig
