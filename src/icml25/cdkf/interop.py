"""Conversions to and from ``filterpy.kalman.KalmanFilter`` at a fixed step ``dt`` (docs/cdkf.md).

filterpy filters on a fixed grid with ``(x, P, F, Q, H, R)``; our CD-KF works in continuous time. At
a step ``dt``, ``F = e^{A dt}`` and ``Q = int_0^dt e^{As} Qc e^{A^T s} ds`` (Van Loan). The way back
takes the principal matrix logarithm of ``F`` (so ``F`` must have no eigenvalue on the closed negative
real axis) and solves the linear map ``Qc -> Q`` exactly. filterpy is imported lazily (optional).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from icml25._validate import as_real
from icml25.cdkf.ssm import LinearSDE, Sensor

__all__ = ["from_filterpy", "to_filterpy"]


def to_filterpy(
    sde: LinearSDE,
    sensor: Sensor,
    dt: float,
    mu: Tensor | None = None,
    Sigma: Tensor | None = None,
):
    """A ``filterpy.kalman.KalmanFilter`` equal to the CD-KF of ``sde`` observed by ``sensor``
    every ``dt`` (time-invariant models only), started at ``(mu, Sigma)`` (default the prior)."""
    try:
        from filterpy.kalman import KalmanFilter
    except ImportError as exc:  # pragma: no cover - exercised only without filterpy
        raise ImportError("to_filterpy needs filterpy: pip install filterpy") from exc
    dt = as_real("dt", dt, low=0, low_open=True)
    if not sde.time_invariant or callable(sensor.C) or callable(sensor.R):
        raise ValueError("to_filterpy needs a time-invariant model and sensor (constant matrices)")
    F, Q = sde.discretize(dt)
    C, R = sensor.matrices()
    kf = KalmanFilter(dim_x=sde.n, dim_z=C.shape[0])
    kf.x = (sde.mu0 if mu is None else mu).detach().double().numpy().reshape(-1, 1).copy()
    kf.P = (sde.Sigma0 if Sigma is None else Sigma).detach().double().numpy().copy()
    kf.F, kf.Q = F.double().numpy(), Q.double().numpy()
    kf.H, kf.R = C.double().numpy(), R.double().numpy()
    return kf


def from_filterpy(kf, dt: float, cost: float = 0.0) -> tuple[LinearSDE, Sensor]:
    """The continuous-time model whose exact discretisation at ``dt`` is ``kf.F, kf.Q``:
    ``A = log(F) / dt`` and the ``Qc`` that reproduces ``Q``; prior ``(kf.x, kf.P)``, sensor
    ``(kf.H, kf.R)``. float64 tensors."""
    from scipy.linalg import expm, logm

    dt = as_real("dt", dt, low=0, low_open=True)
    F = np.asarray(kf.F, dtype=np.float64)
    n = F.shape[0]
    eig = np.linalg.eigvals(F)
    if np.any((np.abs(eig.imag) < 1e-12) & (eig.real <= 0)):
        raise ValueError(
            f"F has an eigenvalue on the closed negative real axis ({eig.tolist()}): no real "
            "continuous-time generator reproduces it"
        )
    A = np.real(logm(F)) / dt
    # vec(Q) = [int_0^dt e^{(A (+) A) s} ds] vec(Qc), the integral from one block exponential
    ksum = np.kron(A, np.eye(n)) + np.kron(np.eye(n), A)
    big = np.zeros((2 * n * n, 2 * n * n))
    big[: n * n, : n * n] = ksum
    big[: n * n, n * n :] = np.eye(n * n)
    integral = expm(big * dt)[: n * n, n * n :]
    Q = np.asarray(kf.Q, dtype=np.float64)
    Qc = np.linalg.solve(integral, Q.reshape(-1)).reshape(n, n)
    Qc = 0.5 * (Qc + Qc.T)

    def t(a) -> Tensor:
        return torch.tensor(np.asarray(a, dtype=np.float64))

    sde = LinearSDE(t(A), t(Qc), t(kf.x).reshape(-1), t(kf.P))
    return sde, Sensor(t(kf.H).reshape(-1, n), t(kf.R).reshape(kf.dim_z, kf.dim_z), cost=cost)
