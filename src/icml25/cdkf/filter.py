"""The continuous-discrete Kalman filter (docs/cdkf.md): exact prediction between events, Joseph-form
updates at measurement times."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import scipy.linalg
import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.cdkf.smoother import _check_grid, _check_ys, log_likelihood, rts_smooth
from icml25.cdkf.ssm import LinearSDE, NumericalError, Sensor, van_loan

__all__ = ["ContinuousDiscreteKF", "joseph_update"]


def joseph_update(mu: Tensor, Sigma: Tensor, y: Tensor | None, C: Tensor, R: Tensor):
    """One measurement update in Joseph form; ``y=None`` updates the covariance only.

    ``K = Sigma C^T (C Sigma C^T + R)^{-1}`` through a Cholesky solve; the covariance equals the
    information form ``(Sigma^{-1} + C^T R^{-1} C)^{-1}``. Batched: ``mu (..., n)``, ``Sigma
    (..., n, n)`` and ``y (..., p)`` with any leading batch shape (``C``, ``R`` broadcast).
    """
    n = Sigma.shape[-1]
    if C.shape[-1] != n:
        raise ValueError(f"C must have {n} columns to match the state, got shape {tuple(C.shape)}")
    if R.shape[-1] != C.shape[-2] or R.shape[-2] != C.shape[-2]:
        raise ValueError(
            f"R must be ({C.shape[-2]}, {C.shape[-2]}) to match C's rows, got {tuple(R.shape)}"
        )
    Sy = C @ Sigma @ C.mT + R
    L = torch.linalg.cholesky(Sy)
    K = torch.cholesky_solve(C @ Sigma.mT, L).mT  # Sigma C^T Sy^{-1}
    if y is not None:
        innov = y - (C @ mu.unsqueeze(-1)).squeeze(-1)
        mu = mu + (K @ innov.unsqueeze(-1)).squeeze(-1)
    I_KC = torch.eye(n, dtype=Sigma.dtype, device=Sigma.device) - K @ C
    Sigma = I_KC @ Sigma @ I_KC.mT + K @ R @ K.mT
    return mu, 0.5 * (Sigma + Sigma.mT)


# RK4's stability interval on the negative real axis ends near -2.785; the covariance equation
# ``P' = A P + P A^T + Qc`` has rates up to ``2 rho(A)``, so ``h rho(A) <= 1`` keeps every mode of
# it inside (z >= -2) with a margin
_STABLE_H_RHO = 1.0
# the most halvings of one ``max_step`` sub-step (2^30 RK4 steps): past it the model is refused
_MAX_HALVINGS = 30


def _moment_tolerance(rtol: float, dtype: torch.dtype) -> float:
    """The relative local error each accepted RK4 step must meet: ``rtol``, but no less than a
    few hundred units of round-off of ``dtype`` (step doubling cannot see below round-off)."""
    return max(rtol, 256 * torch.finfo(dtype).eps)


def _rk4_moments(
    sde: LinearSDE,
    mu: Tensor,
    Sigma: Tensor,
    t0: float,
    t1: float,
    xi,
    max_step: float,
    rtol: float = 1e-8,
):
    """Mean ``m' = A m`` and covariance ``P' = A P + P A^T + Qc`` integrated by RK4 on a sub-grid
    of steps <= ``max_step`` with ``A(xi, t)`` and ``Qc(xi, t)`` evaluated at every stage: a
    time-varying model (a frozen ``A`` is exact only when it does not vary).

    Every step is checked before it is taken (docs/cdkf.md, stiff time-varying models): it must
    lie inside RK4's stability region (``h rho(A) <= 1`` at both ends) and its local error,
    estimated by step doubling (one step of ``h`` against two of ``h/2``), must be below
    ``rtol`` (at least 256 units of round-off of the dtype) relative to the moments' size. A step that fails is halved until it
    passes, so a stiff model (``A = -150``: rates far beyond ``1 / max_step``) is integrated on
    the finer grid it needs; an accepted step returns the single-step value, so a model that
    never needs refining gives exactly the plain RK4 result on the ``max_step`` grid. A step
    still failing after 30 halvings raises :class:`NumericalError` naming it."""
    import math

    k = max(1, math.ceil((t1 - t0) / max_step))
    h = (t1 - t0) / k
    rtol = _moment_tolerance(rtol, Sigma.dtype)
    mats: dict[float, tuple[Tensor, Tensor, float]] = {}

    def matrices(t: float) -> tuple[Tensor, Tensor, float]:
        if t not in mats:
            if len(mats) > 64:
                mats.clear()
            A, Qc = sde.matrices(xi(t) if callable(xi) else xi, t)
            A, Qc = A.to(Sigma.dtype), Qc.to(Sigma.dtype)
            Ad = A.detach()
            ok = bool(torch.isfinite(Ad).all()) and bool(torch.isfinite(Qc.detach()).all())
            rho = float(torch.linalg.eigvals(Ad).abs().max()) if ok else math.inf
            mats[t] = (A, Qc, rho)
        return mats[t]

    def f(t: float, m: Tensor, P: Tensor) -> tuple[Tensor, Tensor]:
        A, Qc, _ = matrices(t)
        return m @ A.mT, A @ P + P @ A.mT + Qc

    def step(t: float, h: float, m: Tensor, P: Tensor) -> tuple[Tensor, Tensor]:
        k1 = f(t, m, P)
        k2 = f(t + h / 2, m + h / 2 * k1[0], P + h / 2 * k1[1])
        k3 = f(t + h / 2, m + h / 2 * k2[0], P + h / 2 * k2[1])
        k4 = f(t + h, m + h * k3[0], P + h * k3[1])
        m = m + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        P = P + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        return m, P

    def size(x: Tensor) -> float:
        return float(x.detach().abs().max()) if x.numel() else 0.0

    def accept(t: float, h: float, m: Tensor, P: Tensor):
        """The single RK4 step over ``[t, t + h]`` if it is stable and accurate, else None."""
        rho = max(matrices(t)[2], matrices(t + h / 2)[2], matrices(t + h)[2])
        if not h * rho <= _STABLE_H_RHO:
            return None, rho
        m1, P1 = step(t, h, m, P)
        mh, Ph = step(t, h / 2, m, P)
        m2, P2 = step(t + h / 2, h / 2, mh, Ph)
        # step doubling: |one step - two half steps| is 15/16 of the single step's local error
        scale_P = max(size(P), size(P2), h * size(matrices(t)[1]))
        scale_m = max(size(m), size(m2))
        err_P, err_m = size(P1 - P2), size(m1 - m2)
        if err_P <= rtol * scale_P and err_m <= rtol * scale_m:  # False for NaN
            return (m1, P1), rho
        return None, rho

    m, P = mu, Sigma
    level = 0  # sub-steps of h / 2^level; carried to the next max_step step (stiffness persists)
    for i in range(k):
        t, end, j = t0 + i * h, t0 + (i + 1) * h, 0  # j: position in units of h / 2^level
        level = max(level - 1, 0)
        while True:
            s = h / 2**level
            ts = t + j * s
            out, rho = accept(ts, s, m, P)
            if out is None:
                if level >= _MAX_HALVINGS or not math.isfinite(rho):
                    raise NumericalError(
                        f"the time-varying prediction cannot meet its error tolerance "
                        f"{rtol:.1e} on the step [{ts:.6g}, {ts + s:.6g}] (h = {s:.3g}, "
                        f"|eig(A)| = {rho:.3g}) after {level} halvings of max_step: A(xi, t) or "
                        "Qc(xi, t) is not finite or too stiff there"
                    )
                level, j = level + 1, 2 * j
                continue
            m, P = out
            j += 1
            if j == 2**level:
                break
            if level > 0 and j % 2 == 0:  # aligned on the coarser grid: try a step twice as long
                level, j = level - 1, j // 2
        del end
    return m, 0.5 * (P + P.mT)


class ContinuousDiscreteKF:
    """CD-KF for a :class:`LinearSDE` observed by :class:`Sensor` s at irregular times."""

    def __init__(
        self, sde: LinearSDE, sensors: list[Sensor], *, max_step: float = 0.01, rtol: float = 1e-8
    ) -> None:
        if not sensors:
            raise ValueError("ContinuousDiscreteKF needs at least one sensor")
        max_step = as_real("max_step", max_step, low=0, low_open=True)
        # rtol: the relative local error of each RK4 step of a time-varying model (docs/cdkf.md)
        rtol = as_real("rtol", rtol, low=0, high=1, low_open=True, high_open=True)
        self.sde, self.sensors, self.max_step, self.rtol = sde, list(sensors), max_step, rtol

    def predict(self, mu: Tensor, Sigma: Tensor, t0: float, t1: float, xi: Tensor | None = None):
        """Propagate over ``[t0, t1]``. A time-invariant model: ``mu <- Phi mu``, ``Sigma <- Phi
        Sigma Phi^T + Qd`` (Van Loan, exact). A time-varying ``A(xi, t)`` / ``Qc(xi, t)``: RK4 on
        the moment equations over sub-steps of at most ``max_step``, each halved until it is stable
        and its step-doubling error estimate is below ``rtol`` (docs/cdkf.md: RK4 sub-grid; a step
        that cannot meet it raises :class:`NumericalError` naming it)."""
        t0 = as_real("t0", t0)
        t1 = as_real("t1", t1)
        if t1 < t0:
            raise ValueError(f"predict needs t1 >= t0, got t0={t0}, t1={t1}")
        if t1 == t0:
            return mu, Sigma
        if not self.sde.time_invariant:
            return _rk4_moments(self.sde, mu, Sigma, t0, t1, xi, self.max_step, self.rtol)
        Phi, Qd = self._discretize(t1 - t0, Sigma.dtype)
        Sigma = Phi @ Sigma @ Phi.mT + Qd
        return mu @ Phi.mT, 0.5 * (Sigma + Sigma.mT)

    def _discretize(self, h: float, dtype) -> tuple[Tensor, Tensor]:
        """Van Loan over ``h``, memoised per step length (a regular grid costs one exponential);
        not memoised when the model's matrices carry gradients."""
        A, Qc = self.sde.matrices(None, 0.0)
        if A.requires_grad or Qc.requires_grad:
            Phi, Qd = van_loan(A, Qc, h)
            return Phi.to(dtype), Qd.to(dtype)
        cache = self.__dict__.setdefault("_vl_cache", {})
        # keyed by the matrices too: an in-place change of A or Qc (their _version) is a new model
        key = (float(h), dtype, id(A), A._version, id(Qc), Qc._version)
        if key not in cache:
            if len(cache) > 512:
                cache.clear()
            Phi, Qd = van_loan(A, Qc, h)
            cache[key] = (Phi.to(dtype), Qd.to(dtype))
        return cache[key]

    def update(
        self,
        mu: Tensor,
        Sigma: Tensor,
        y: Tensor | None,
        sensor_idx: int,
        t: float,
        xi: Tensor | None = None,
    ):
        sensor_idx = as_int("sensor_idx", sensor_idx, 0, len(self.sensors) - 1)
        t = as_real("t", t)
        C, R = self.sensors[sensor_idx].matrices(xi(t) if callable(xi) else xi, t)
        if y is not None:
            y = _observation(y, sensor_idx, C.shape[-2], t, Sigma.dtype)
        try:
            return joseph_update(mu, Sigma, y, C.to(Sigma.dtype), R.to(Sigma.dtype))
        except torch.linalg.LinAlgError as exc:
            raise NumericalError(
                f"sensor {sensor_idx} at t = {t}: C Sigma C^T + R is not positive definite (is "
                f"R(xi, t) symmetric positive definite? R = {R.tolist()})"
            ) from exc

    def filter(
        self,
        times: Tensor,
        sensor_ids: Tensor,
        ys: list[Tensor] | None,
        t_grid: Tensor,
        xi_path: Callable[[float], Tensor] | None = None,
    ):
        """Filter the events (``times``, one sensor id and observation each; ``ys=None`` for
        covariance only) and report the predicted state at every ``t_grid`` time.

        An event at a grid time is applied before that grid point is reported; simultaneous events
        are applied in sensor-index order. ``xi_path(t)`` gives the auxiliary state at time ``t``
        (models and sensors whose matrices depend on it, docs/cdkf.md). The state follows the model's
        dtype, promoted to float64 when the model or a sensor is float64. Returns ``mu (G, n)``
        and ``Sigma (G, n, n)``; ``NumericalError`` when a covariance stops being positive
        semi-definite.
        """
        times, sensor_ids, events = self._events(times, sensor_ids)
        if ys is not None:
            _check_ys(ys, len(events))
        t_grid = _check_grid(t_grid)
        dtype = self._dtype()
        if self._plain(ys, xi_path):
            with np.errstate(all="ignore"):  # a breakdown is named below, as on the torch path
                mus, sigmas = _plain_filter(self, times, sensor_ids, events, ys, t_grid, dtype)
            self._check_covariances(sigmas, t_grid)
            return mus, sigmas
        mu, Sigma = self.sde.mu0.clone().to(dtype), self.sde.Sigma0.clone().to(dtype)
        t = 0.0
        mus, sigmas = [], []
        e = 0
        for g in t_grid.tolist():
            while e < len(events) and float(times[events[e]]) <= g:
                k = events[e]
                te = float(times[k])
                mu, Sigma = self.predict(mu, Sigma, t, te, xi_path)
                t = te
                y = None if ys is None else _given(ys[k], int(sensor_ids[k]), te)
                mu, Sigma = self.update(mu, Sigma, y, int(sensor_ids[k]), te, xi_path)
                e += 1
            mu, Sigma = self.predict(mu, Sigma, t, g, xi_path)
            t = g
            mus.append(mu)
            sigmas.append(Sigma)
        sigmas_t = torch.stack(sigmas)
        self._check_covariances(sigmas_t, t_grid)
        return torch.stack(mus), sigmas_t

    def _check_covariances(self, sigmas: Tensor, t_grid: Tensor) -> None:
        diag = sigmas.diagonal(dim1=-2, dim2=-1)
        bad = ~torch.isfinite(sigmas).flatten(1).all(1) | (
            diag < -1e-9 * diag.detach().abs().nan_to_num(0.0, 0.0, 0.0).amax().clamp(min=1)
        ).any(1)
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            raise NumericalError(
                f"the filtered covariance at t = {float(t_grid[i])} is not finite or has a "
                f"negative variance: {self._failure_cause()}"
            )

    def _plain(self, ys, xi_path) -> bool:
        """Whether :func:`_plain_filter` may run: a time-invariant model with constant sensors on
        the CPU, no auxiliary path, and nothing that needs a gradient (``ICML25_CDKF_PLAIN=0``
        turns it off)."""
        if os.environ.get("ICML25_CDKF_PLAIN", "1").strip().lower() in ("0", "false", "off", "no"):
            return False
        if xi_path is not None or not self.sde.time_invariant:
            return False
        mats = [self.sde.A, self.sde.Qc, self.sde.mu0, self.sde.Sigma0]
        for sensor in self.sensors:
            if callable(sensor.C) or callable(sensor.R):
                return False
            mats += [sensor.C, sensor.R]
        if ys is not None:
            mats += [y for y in ys if isinstance(y, Tensor)]
        return all(m.device.type == "cpu" and not m.requires_grad for m in mats)

    def _failure_cause(self) -> str:
        """Why a covariance may have broken down, from the model: an eigenvalue of ``A`` with a
        positive real part (an unstable model) only when there is one."""
        if not self.sde.time_invariant:
            return (
                "an unstable A(xi, t), or max_step too large for this time-varying model "
                "(docs/cdkf.md, Stiff time-varying models)"
            )
        A = self.sde.A.detach().to(torch.float64)
        re = float(torch.linalg.eigvals(A).real.max())
        if re > 0:
            return (
                f"the model is unstable (A has an eigenvalue with real part {re:.6g} > 0, so the "
                "covariance grows like e^(2 re t) and overflows)"
            )
        return (
            f"the model is stable (largest real part of an eigenvalue of A: {re:.6g}), so this "
            "is round-off: are Sigma0, Qc and the sensors' R well scaled?"
        )

    def _events(self, times, sensor_ids) -> tuple[Tensor, Tensor, list[int]]:
        """``(times, sensor_ids, order)``: the inputs as tensors (lists and arrays accepted) and
        the event indices in time order (ties in sensor order), after checking them."""
        if not isinstance(times, Tensor):
            times = torch.as_tensor(times, dtype=torch.float64)
        ids = (
            sensor_ids
            if isinstance(sensor_ids, Tensor)
            else torch.as_tensor(np.asarray(sensor_ids))
        )
        if (
            ids.dtype == torch.bool
            or ids.is_complex()
            or (ids.is_floating_point() and not bool((ids == ids.round()).all()))
        ):  # 0.7 would be truncated to sensor 0
            raise ValueError(
                f"sensor ids must be integers in [0, {len(self.sensors)}), got {ids.tolist()}"
            )
        sensor_ids = ids.long()
        if times.ndim != 1 or sensor_ids.shape != times.shape:
            raise ValueError(
                "times and sensor_ids must be 1-D and of equal length, got shapes "
                f"{tuple(times.shape)} and {tuple(sensor_ids.shape)}"
            )
        if times.numel() and not bool(torch.isfinite(times).all()):
            raise ValueError(
                f"event times must be finite, got {times[~torch.isfinite(times)].tolist()}"
            )
        if times.numel() and bool((times < 0).any()):
            raise ValueError(
                f"event times must be >= 0 (the filter starts at t = 0), got {times.min().item()}"
            )
        if sensor_ids.numel() and (
            int(sensor_ids.min()) < 0 or int(sensor_ids.max()) >= len(self.sensors)
        ):
            raise ValueError(
                f"sensor ids must be in [0, {len(self.sensors)}), got {sensor_ids.tolist()}"
            )
        tl, il = times.tolist(), sensor_ids.tolist()
        order = sorted(range(len(tl)), key=lambda e: (tl[e], il[e]))
        return times, sensor_ids, order

    def log_likelihood(
        self,
        times: Tensor,
        sensor_ids: Tensor,
        ys: list[Tensor],
        xi_path: Callable[[float], Tensor] | None = None,
    ) -> Tensor:
        """``log p(y_1, ..., y_K)`` by the prediction-error decomposition: the sum over events of
        ``log N(y_k; C mu_k^-, C Sigma_k^- C^T + R)``. Differentiable (fit a GP's kernel
        hyper-parameters by maximising it)."""
        return log_likelihood(self, times, sensor_ids, ys, xi_path)

    def smooth(
        self,
        times: Tensor,
        sensor_ids: Tensor,
        ys: list[Tensor],
        t_grid: Tensor,
        xi_path: Callable[[float], Tensor] | None = None,
    ):
        """Rauch-Tung-Striebel smoothing: ``E[x(t) | all y]`` and its covariance at every
        ``t_grid`` time (time-invariant models; ``xi_path`` for sensors that depend on an
        auxiliary state). Returns ``mu (G, n)``, ``Sigma (G, n, n)``."""
        return rts_smooth(self, times, sensor_ids, ys, t_grid, xi_path)

    def _dtype(self) -> torch.dtype:
        dtypes = {self.sde.mu0.dtype, self.sde.Sigma0.dtype}
        for m in (self.sde.A, self.sde.Qc):
            if not callable(m):
                dtypes.add(m.dtype)
        for sensor in self.sensors:
            for m in (sensor.C, sensor.R):
                if not callable(m):
                    dtypes.add(m.dtype)
        if torch.float64 in dtypes:
            return torch.float64
        return (
            torch.float32
            if dtypes <= {torch.float32, torch.float16, torch.bfloat16}
            else torch.float64
        )

    def covariance_path(
        self,
        event_times_per_sensor: list[Tensor],
        t_grid: Tensor,
        xi_path: Callable[[float], Tensor] | None = None,
    ) -> Tensor:
        """The covariance path for given measurement times (no observations needed)."""
        if len(event_times_per_sensor) != len(self.sensors):
            raise ValueError(
                f"need one time tensor per sensor ({len(self.sensors)}), got "
                f"{len(event_times_per_sensor)}"
            )
        event_times_per_sensor = [
            torch.as_tensor(t, dtype=torch.float64) if not isinstance(t, Tensor) else t
            for t in event_times_per_sensor
        ]
        times = (
            torch.cat([t.reshape(-1) for t in event_times_per_sensor])
            if event_times_per_sensor
            else torch.zeros(0)
        )
        ids = torch.cat(
            [
                torch.full((t.numel(),), s, dtype=torch.long)
                for s, t in enumerate(event_times_per_sensor)
            ]
        )
        order = torch.argsort(times, stable=True)
        return self.filter(times[order], ids[order], None, t_grid, xi_path)[1]


_TORCH = {np.float64: torch.float64, np.float32: torch.float32}


def _observations(ys, events, kf: ContinuousDiscreteKF, sensor_ids, times, npdt) -> list:
    """Each event's observation as a 1-D numpy array (None when ``ys`` is None), checked as
    :meth:`ContinuousDiscreteKF.update` checks it, in event order."""
    if ys is None:
        return [None] * len(events)
    dims = {sensor.C.shape[0] for sensor in kf.sensors}
    if (
        len(dims) == 1
        and len(ys) > 0
        and all(isinstance(y, Tensor) and y.ndim <= 1 for y in ys)
        and len({tuple(y.shape) for y in ys}) == 1
    ):  # the common case at once: one stack, one check
        Y = torch.stack([y.detach() for y in ys]).to(_TORCH[npdt]).numpy()
        Y = Y.reshape(len(ys), 1) if Y.ndim == 1 else Y
        if Y.shape[-1] in dims and bool(np.isfinite(Y).all()):
            return list(Y)
    out = [None] * len(ys)
    tl, il = times.tolist(), sensor_ids.tolist()
    for k in events:
        sid, t = int(il[k]), float(tl[k])
        y = _observation(_given(ys[k], sid, t), sid, kf.sensors[sid].C.shape[0], t, _TORCH[npdt])
        out[k] = y.detach().numpy()
    return out


def _given(y, sid: int, t: float):
    """An event's observation, refusing None (an event without a value is not an update)."""
    if y is None:
        raise ValueError(
            f"the observation of sensor {sid} at t = {t} is None; drop the event (a missing "
            "measurement) instead, or pass ys=None for covariances only"
        )
    return y


def _observation(y, sid: int, d: int, t: float, dtype: torch.dtype) -> Tensor:
    """One observation as a ``(d,)`` tensor of ``dtype`` (a number for a one-output sensor),
    checked: numeric, the sensor's size, finite. Tensors keep their graph."""
    if not isinstance(y, Tensor):
        try:
            y = torch.as_tensor(np.asarray(y, dtype=np.float64))
        except (TypeError, ValueError):
            raise ValueError(
                f"the observation of sensor {sid} at t = {t} must be a number or a 1-D array of "
                f"{d} number(s), got {y!r}"
            ) from None
    elif not (y.is_floating_point() or y.dtype in (torch.int32, torch.int64, torch.int16)):
        raise ValueError(
            f"the observation of sensor {sid} at t = {t} must be real numbers, got a {y.dtype} "
            "tensor"
        )
    y = y.to(dtype)
    y = y.reshape(1) if y.ndim == 0 else y
    if y.ndim != 1 or y.shape[0] != d:
        raise ValueError(
            f"sensor {sid} gives {d} value(s) per measurement, got an observation of shape "
            f"{tuple(y.shape)} at t = {t}"
        )
    if not bool(torch.isfinite(y.detach()).all()):
        raise ValueError(
            f"the observation of sensor {sid} at t = {t} is not finite ({y.tolist()}); drop the "
            "event (a missing measurement) instead"
        )
    return y


def _plain_filter(kf: ContinuousDiscreteKF, times, sensor_ids, events, ys, t_grid, dtype):
    """:meth:`ContinuousDiscreteKF.filter`'s recursion in numpy, for the case that needs no
    autograd (a time-invariant model, constant sensors, CPU tensors that need no gradient): the
    same Van Loan steps (memoised per step length), the same Joseph-form update through a
    Cholesky factor (a division for a scalar sensor), the same checks and messages. A torch step
    of 3 x 3 matrices spends most of its time in dispatch; this one runs at filterpy's speed
    (docs/cdkf.md, Benchmark). Equal to the torch recursion to round-off (tests)."""
    npdt = np.float64 if dtype == torch.float64 else np.float32
    mu = kf.sde.mu0.detach().to(dtype).numpy().astype(npdt, copy=True)
    P = kf.sde.Sigma0.detach().to(dtype).numpy().astype(npdt, copy=True)
    n = mu.shape[-1]
    eye = np.eye(n, dtype=npdt)
    sens = []
    for sensor in kf.sensors:
        C = sensor.C.detach().to(dtype).numpy().astype(npdt)
        if C.shape[-1] != n:
            raise ValueError(f"C must have {n} columns to match the state, got shape {C.shape}")
        R = sensor.R.detach().to(dtype).numpy().astype(npdt)
        sens.append((C, C.T.copy(), R, R.tolist()))
    obs = _observations(ys, events, kf, sensor_ids, times, npdt)
    steps: dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    tl, ids = times.tolist(), sensor_ids.tolist()
    grid = t_grid.tolist()
    out_mu = np.empty((len(grid), n), dtype=npdt)
    out_P = np.empty((len(grid), n, n), dtype=npdt)
    t, e, n_ev = 0.0, 0, len(events)
    for gi, g in enumerate(grid):
        while True:
            if e < n_ev and tl[events[e]] <= g:
                k = events[e]
                target = tl[k]
            else:
                k, target = -1, g
            if target > t:  # predict over [t, target]: the memoised Van Loan step
                h = target - t
                step = steps.get(h)
                if step is None:
                    if len(steps) > 512:
                        steps.clear()
                    Phi, Qd = kf._discretize(h, dtype)
                    Phi = Phi.numpy().astype(npdt)
                    step = steps[h] = (Phi, Phi.T.copy(), Qd.numpy().astype(npdt))
                Phi, PhiT, Qd = step
                mu = Phi @ mu
                P = Phi @ P @ PhiT + Qd
                P = 0.5 * (P + P.T)
                t = target
            if k < 0:
                break
            sid = ids[k]  # the Joseph-form update, as joseph_update
            C, CT, R, R_list = sens[sid]
            PCt = P @ CT
            S = C @ PCt + R
            if S.shape[0] == 1:
                s00 = S[0, 0]
                if not s00 > 0:  # also NaN
                    raise _not_pd(sid, target, R_list)
                K = PCt / s00
            else:
                try:
                    K = scipy.linalg.cho_solve((np.linalg.cholesky(S), True), PCt.T).T
                except np.linalg.LinAlgError as exc:
                    raise _not_pd(sid, target, R_list) from exc
            y = obs[k]
            if y is not None:
                mu = mu + K @ (y - C @ mu)
            I_KC = eye - K @ C
            P = I_KC @ P @ I_KC.T + K @ R @ K.T
            P = 0.5 * (P + P.T)
            e += 1
        out_mu[gi], out_P[gi] = mu, P
    return torch.from_numpy(out_mu), torch.from_numpy(out_P)


def _not_pd(sid: int, t: float, R: list) -> NumericalError:
    return NumericalError(
        f"sensor {sid} at t = {t}: C Sigma C^T + R is not positive definite (is R(xi, t) "
        f"symmetric positive definite? R = {R})"
    )
