"""The covariance bound of paper Proposition 6.1 and an information-form lower bound (spec §4)."""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from icml25.cdkf.schedule import RateSchedule
from icml25.cdkf.ssm import LinearSDE, Sensor

__all__ = ["covariance_bound", "information_lower_bound", "stable_steps"]


def _rk4(f, P: Tensor, t: float, h: float) -> Tensor:
    k1 = f(P, t)
    k2 = f(P + 0.5 * h * k1, t + 0.5 * h)
    k3 = f(P + 0.5 * h * k2, t + 0.5 * h)
    k4 = f(P + h * k3, t + h)
    out = P + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)
    return 0.5 * (out + out.mT)


def stable_steps(T: float, K: int, lam_max: float, n_steps: int | None = None) -> int:
    """The smallest multiple of ``K`` (>= ``n_steps``, default 5K) with ``h * lam_max <= 0.5``."""
    n = 5 * K if n_steps is None else n_steps
    need = math.ceil(2 * T * lam_max / K) * K if lam_max > 0 else K
    return max(n, need)


def _grid(rates: RateSchedule, T: float, n_steps: int) -> tuple[float, int]:
    if n_steps < rates.K or n_steps % rates.K:
        raise ValueError(f"n_steps must be a positive multiple of K={rates.K}, got {n_steps}")
    lam_max = float(rates.values.detach().max()) if rates.values.numel() else 0.0
    refined = stable_steps(T, rates.K, lam_max, n_steps)
    if refined != n_steps:
        warnings.warn(
            f"RK4 step T/n_steps = {T / n_steps:.3g} times the largest rate {lam_max:.3g} exceeds "
            f"0.5 (stiff): using n_steps = {refined}",
            UserWarning,
            stacklevel=3,
        )
    return T / refined, refined


def covariance_bound(
    sde: LinearSDE,
    sensors: list[Sensor],
    rates: RateSchedule,
    T: float | None = None,
    n_steps: int | None = None,
    xi_path=None,
) -> Tensor:
    """``Sigma_hat(t)`` on ``n_steps + 1`` grid points: the modified Riccati ODE

    ``dSigma/dt = A Sigma + Sigma A^T + Qc - sum_s lambda_s(t) Sigma C_s^T (C_s Sigma C_s^T + R_s)^{-1} C_s Sigma``

    from ``Sigma0``, which bounds the expected covariance under Poisson measurements in the Loewner
    order (Prop. 6.1). RK4 in the rates' dtype; differentiable with respect to the rates (autograd).
    ``xi_path(t)`` (optional) gives the auxiliary state for time-varying models.
    """
    T = rates.T if T is None else T
    n_steps = 5 * rates.K if n_steps is None else n_steps
    if len(sensors) != rates.S:
        raise ValueError(f"rates have {rates.S} sensors, {len(sensors)} sensors were given")
    h, n_steps = _grid(rates, T, n_steps)
    per = n_steps // rates.K

    def rhs(P: Tensor, t: float, lam: Tensor) -> Tensor:
        xi = None if xi_path is None else xi_path(t)
        A, Qc = sde.matrices(xi, t)
        out = A @ P + P @ A.mT + Qc
        for s, sensor in enumerate(sensors):
            C, R = sensor.matrices(xi, t)
            Sy = C @ P @ C.mT + R
            G = P @ C.mT @ torch.linalg.solve(Sy, C @ P)
            out = out - lam[s] * G
        return out

    P = sde.Sigma0.to(rates.values.dtype)
    path = [P]
    for i in range(n_steps):
        lam = rates.values[:, i // per]  # constant on the control interval
        P = _rk4(lambda X, t, lam=lam: rhs(X, t, lam), P, i * h, h)
        path.append(P)
    return torch.stack(path)


def information_lower_bound(
    sde: LinearSDE,
    sensors: list[Sensor],
    rates: RateSchedule,
    T: float | None = None,
    n_steps: int | None = None,
    xi_path=None,
) -> Tensor:
    """``Omega_hat^{-1}``, a lower bound on the expected covariance (our derivation, consistent with
    arXiv:2604.21302; not from the paper): ``dOmega/dt = -Omega A - A^T Omega - Omega Qc Omega +
    sum_s lambda_s C_s^T R_s^{-1} C_s``, ``Omega(0) = Sigma0^{-1}``. Returns the inverted path."""
    T = rates.T if T is None else T
    n_steps = 5 * rates.K if n_steps is None else n_steps
    h, n_steps = _grid(rates, T, n_steps)
    per = n_steps // rates.K

    def rhs(W: Tensor, t: float, lam: Tensor) -> Tensor:
        xi = None if xi_path is None else xi_path(t)
        A, Qc = sde.matrices(xi, t)
        out = -W @ A - A.mT @ W - W @ Qc @ W
        for s, sensor in enumerate(sensors):
            C, R = sensor.matrices(xi, t)
            out = out + lam[s] * C.mT @ torch.linalg.solve(R, C)
        return out

    W = torch.linalg.inv(sde.Sigma0.to(rates.values.dtype))
    path = [torch.linalg.inv(W)]
    for i in range(n_steps):
        lam = rates.values[:, i // per]
        W = _rk4(lambda X, t, lam=lam: rhs(X, t, lam), W, i * h, h)
        path.append(torch.linalg.inv(W))
    return torch.stack(path)
