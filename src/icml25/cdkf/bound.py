"""The covariance bound of paper Proposition 6.1 and an information-form lower bound (docs/cdkf.md)."""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from icml25._validate import as_int
from icml25.cdkf.schedule import RateSchedule
from icml25.cdkf.ssm import LinearSDE, NumericalError, Sensor

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


def _horizon(rates: RateSchedule, T: float | None) -> float:
    if T is not None and abs(float(T) - rates.T) > 1e-12 * max(1.0, rates.T):
        raise ValueError(
            f"T = {T} differs from the rates' horizon {rates.T}: the rates' K intervals cover "
            f"[0, {rates.T}]; leave T out or build RateSchedule(values, {T})"
        )
    return rates.T


def model_rate(sde: LinearSDE, T: float) -> float:
    """The model's fastest rate: spectral radius of ``A`` (the largest over ``t = 0, T/2, T``
    for a callable ``A`` that can be evaluated without ``xi``; 0 if it cannot). The Riccati ODE's
    linear part ``P -> A P + P A^T`` has rates up to twice it, so RK4 needs ``h rho(A) <= 0.5``
    as it needs ``h lambda_max <= 0.5`` (stable_steps takes the larger of the two)."""
    try:
        mats = [sde.A] if not callable(sde.A) else [sde.A(None, t) for t in (0.0, T / 2, T)]
        return max(
            float(torch.linalg.eigvals(torch.as_tensor(a).detach()).abs().max()) for a in mats
        )
    except Exception:  # noqa: BLE001 - A needs xi: no estimate
        return 0.0


def _grid(rates: RateSchedule, T: float, n_steps: int, sde: LinearSDE | None = None):
    if as_int("n_steps", n_steps, rates.K) % rates.K:
        raise ValueError(f"n_steps must be a positive multiple of K={rates.K}, got {n_steps}")
    lam_max = float(rates.values.detach().max()) if rates.values.numel() else 0.0
    rho = 0.0 if sde is None else model_rate(sde, T)
    refined = stable_steps(T, rates.K, max(lam_max, rho), n_steps)
    if refined != n_steps:
        what = (
            f"the largest rate {lam_max:.3g}"
            if lam_max >= rho
            else f"the model's fastest mode |eig(A)| = {rho:.3g}"
        )
        warnings.warn(
            f"RK4 step T/n_steps = {T / n_steps:.3g} times {what} exceeds 0.5 (stiff): using "
            f"n_steps = {refined}",
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
    order (Prop. 6.1). RK4 in the rates' dtype; differentiable with respect to the rates and to
    any tensor the model's matrices are built from (autograd). ``xi_path(t)`` (optional) gives the
    auxiliary state for time-varying models. The model and sensor matrices are evaluated once per
    stage time and the recursion and its gradient run in numpy (``icml25.cdkf.adjoint``); sensors
    of different output sizes fall back to a torch loop with the same result. The result is on
    the rates' device.
    """
    T = _horizon(rates, T)
    n_steps = 5 * rates.K if n_steps is None else n_steps
    if len(sensors) != rates.S:
        raise ValueError(f"rates have {rates.S} sensors, {len(sensors)} sensors were given")
    h, n_steps = _grid(rates, T, n_steps, sde)
    stages = stage_matrices(sde, sensors, h, n_steps, xi_path, rates.values.dtype)
    if stages is None:
        return check_psd(_covariance_bound_torch(sde, sensors, rates, h, n_steps, xi_path), h)
    return bound_from_stages(stages, rates, h, n_steps)


def check_psd(path: Tensor, h: float) -> Tensor:
    """Raise :class:`~icml25.cdkf.NumericalError` when a bound path leaves the PSD cone (min
    eigenvalue below ``-1e-9 tr``); no clamp inside the differentiable path (docs/cdkf.md)."""
    P = path.detach()
    ev = torch.linalg.eigvalsh(P).min(-1).values
    tr = torch.diagonal(P, dim1=-2, dim2=-1).sum(-1).abs().clamp(min=1e-300)
    bad = ev < -1e-9 * tr
    if bool(bad.any()) or not bool(torch.isfinite(P).all()):
        i = int(bad.nonzero()[0]) if bool(bad.any()) else int((~torch.isfinite(P)).nonzero()[0, 0])
        raise NumericalError(
            f"the bound left the positive semi-definite cone at grid point {i} (t = {i * h:.4g}, "
            f"min eigenvalue {float(ev[i]):.3g}): the RK4 step h = {h:.3g} is too large for this "
            f"model; pass n_steps = {4 * (len(P) - 1)} or more"
        )
    return path


def stage_matrices(
    sde: LinearSDE, sensors: list[Sensor], h: float, n_steps: int, xi_path=None, dtype=None
) -> tuple[Tensor, ...] | None:
    """``(A, Qc, C, R, Sigma0)`` at the RK4 stage times ``j h / 2``, ``j = 0..2 n_steps`` (one time
    when every matrix is constant): ``A, Qc (T', n, n)``, ``C (T', S, p, n)``, ``R (T', S, p, p)``.
    None when the sensors' outputs differ in size (the torch loop handles that case). Callables
    are evaluated over all times at once with ``torch.func.vmap`` when they allow it (checked
    against a direct call), else one time after another."""
    dtype = torch.float64 if dtype is None else dtype
    times = [0.5 * j * h for j in range(2 * n_steps + 1)]
    xis = None
    if xi_path is not None:  # a path may carry its values at the stage times (half_grid)
        half = getattr(xi_path, "half_grid", None)
        xis = half if half is not None and len(half) == len(times) else None
        xis = torch.stack([torch.as_tensor(xi_path(t)) for t in times]) if xis is None else xis
    fns = [sde.A, sde.Qc] + [m for s in sensors for m in (s.C, s.R)]
    vals = [_over_times(fn, xis, times, dtype) for fn in fns]
    T2 = max(v.shape[0] for v in vals)
    vals = [v.expand(T2, *v.shape[1:]) for v in vals]
    A, Qc, Cs, Rs = vals[0], vals[1], vals[2::2], vals[3::2]
    if len({(tuple(c.shape[1:]), tuple(r.shape[1:])) for c, r in zip(Cs, Rs)}) != 1:
        return None
    return A, Qc, torch.stack(Cs, 1), torch.stack(Rs, 1), sde.Sigma0.to(dtype)


_NO_VMAP: set[int] = set()  # ids of callables that failed under vmap (evaluated in a loop)


def _over_times(fn, xis: Tensor | None, times: list[float], dtype) -> Tensor:
    """``fn`` at every time as ``(len(times), ...)``, or ``(1, ...)`` for a constant tensor."""
    if not callable(fn):
        return torch.as_tensor(fn).to(dtype)[None]
    if id(fn) not in _NO_VMAP:
        t = torch.tensor(times, dtype=dtype, device=None if xis is None else xis.device)
        try:
            if xis is None:
                out = torch.func.vmap(lambda tt: torch.as_tensor(fn(None, tt)).to(dtype))(t)
            else:
                out = torch.func.vmap(lambda x, tt: torch.as_tensor(fn(x, tt)).to(dtype))(xis, t)
            ends = (0, len(times) - 1)
            direct = [
                torch.as_tensor(fn(None if xis is None else xis[j], times[j])).to(dtype)
                for j in ends
            ]
            if all(torch.allclose(out[j], d, rtol=1e-12, atol=1e-14) for j, d in zip(ends, direct)):
                return out
        except Exception:  # noqa: BLE001 - any failure under vmap means: evaluate in a loop
            pass
        _NO_VMAP.add(id(fn))
    return torch.stack(
        [
            torch.as_tensor(fn(None if xis is None else xis[j], t)).to(dtype)
            for j, t in enumerate(times)
        ]
    )


def bound_from_stages(stages: tuple[Tensor, ...], rates: RateSchedule, h: float, n_steps: int):
    """:func:`covariance_bound` from precomputed :func:`stage_matrices` (reused across calls by
    :class:`~icml25.cdkf.SchedulingProblem` when the model does not change)."""
    from icml25.cdkf.adjoint import riccati_rk4

    A, Qc, C, R, P0 = stages
    return check_psd(riccati_rk4(rates.values, A, Qc, C, R, P0, h, n_steps // rates.K), h)


def _covariance_bound_torch(sde, sensors, rates, h, n_steps, xi_path) -> Tensor:
    """The RK4 recursion in torch (autograd); for sensors with different output sizes."""
    per = n_steps // rates.K

    def rhs(P: Tensor, t: float, lam: Tensor) -> Tensor:
        xi = None if xi_path is None else xi_path(t)
        A, Qc = (m.to(P.dtype) for m in sde.matrices(xi, t))
        out = A @ P + P @ A.mT + Qc
        for s, sensor in enumerate(sensors):
            C, R = (torch.as_tensor(m).to(P.dtype) for m in sensor.matrices(xi, t))
            CP = C @ P
            out = out - lam[s] * CP.mT @ torch.linalg.solve(CP @ C.mT + R, CP)
        return out

    P = sde.Sigma0.to(rates.values.dtype)
    path = [P]
    for i in range(n_steps):
        lam = rates.values[:, i // per]  # constant on the control interval
        P = _rk4(lambda X, t, lam=lam: rhs(X, t, lam), P, i * h, h)
        path.append(P)
    return torch.stack(path)


def _riccati_step(P: Tensor, A: Tensor, Qc: Tensor, M: Tensor, h: float) -> Tensor:
    """Exact step of ``dP/dt = AP + PA^T + Qc - P M P`` with constant coefficients: ``P = X Y^-1``
    where ``[X; Y]' = [[A, Qc], [M, -A^T]] [X; Y]``, ``[X; Y](0) = [P; I]`` (Radon's lemma). Split
    into sub-steps so that ``h ||H|| <= 4`` keeps the exponential well conditioned."""
    n = P.shape[-1]
    H = torch.cat([torch.cat([A, Qc], 1), torch.cat([M, -A.mT], 1)], 0)
    subs = max(1, math.ceil(h * float(torch.linalg.matrix_norm(H.detach(), 1)) / 4.0))
    E = torch.linalg.matrix_exp(H * (h / subs))
    for _ in range(subs):
        X = E[:n, :n] @ P + E[:n, n:]
        Y = E[n:, :n] @ P + E[n:, n:]
        P = torch.linalg.solve(Y.mT, X.mT).mT
        P = 0.5 * (P + P.mT)
    return P


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
    sum_s lambda_s C_s^T R_s^{-1} C_s``, ``Omega(0) = Sigma0^{-1}`` (``Sigma0`` must be invertible).

    ``P = Omega^{-1}`` obeys the Kalman-Bucy Riccati ODE with measurement information
    ``sum_s lambda_s C_s^T R_s^{-1} C_s``; it is integrated in that form, exactly per step for
    coefficients frozen at the step's midpoint (the ODE is stiff, ``||Qc|| ||Omega||``, so RK4 is not
    used here). Differentiable in the rates. Returns ``(n_steps + 1, n, n)``."""
    T = _horizon(rates, T)
    n_steps = 5 * rates.K if n_steps is None else n_steps
    h, n_steps = _grid(rates, T, n_steps)
    per = n_steps // rates.K
    P = sde.Sigma0.to(rates.values.dtype)
    ev = torch.linalg.eigvalsh(P)
    if not bool(ev.min() > 1e-12 * ev.abs().max().clamp(min=1e-300)):
        raise ValueError(
            f"information_lower_bound needs an invertible Sigma0 (it starts from Sigma0^-1); "
            f"its eigenvalues are {ev.tolist()}"
        )
    path = [P]
    for i in range(n_steps):
        lam = rates.values[:, i // per]
        t = (i + 0.5) * h
        xi = None if xi_path is None else xi_path(t)
        A, Qc = (m.to(P.dtype) for m in sde.matrices(xi, t))
        M = torch.zeros_like(P)
        for s, sensor in enumerate(sensors):
            C, R = (m.to(P.dtype) for m in sensor.matrices(xi, t))
            M = M + lam[s] * C.mT @ torch.linalg.solve(R, C)
        P = _riccati_step(P, A, Qc, M, h)
        path.append(P)
    return torch.stack(path)
