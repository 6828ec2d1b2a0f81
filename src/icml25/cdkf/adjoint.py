"""A fast path for the covariance bound of Proposition 6.1 and its gradient (docs/cdkf.md, "Speed").

The bound's RK4 integration works on ``n x n`` matrices with ``n`` of 2-5: through torch every
one of the ~30 operations per RK4 stage costs its dispatch (and autograd bookkeeping) many times
over its arithmetic. Here the same RK4 recursion runs in numpy on matrices evaluated once at the
``2 n_steps + 1`` stage times (grid points and midpoints), and the gradient comes from the discrete
adjoint of that recursion, so it equals autograd through the torch loop to rounding.

For one stage, with ``Sigma`` symmetric, ``S_s = C_s Sigma C_s^T + R_s``, ``L_s = S_s^-1 C_s Sigma``
and ``G_s = Sigma C_s^T L_s``, the right-hand side is
``f = A Sigma + Sigma A^T + Qc - sum_s lambda_s G_s``. With ``N_s = I - C_s^T L_s`` (so that
``Sigma N_s = Sigma - G_s``) a perturbation gives ``dG_s = dSigma - N_s^T dSigma N_s`` and the
vector-Jacobian products for an output cotangent ``F`` are

- ``Sigma``: ``A^T F + F A - sum_s lambda_s (F - N_s F N_s^T)``
- ``lambda_s``: ``-<F, G_s>``; ``A``: ``(F + F^T) Sigma``; ``Qc``: ``F``
- ``R_s``: ``-L_s B_s L_s^T`` and ``C_s``: ``L_s (B_s + B_s^T) (Sigma - G_s)`` with ``B_s = -lambda_s F``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["riccati_rk4"]


def _stage(Y, A, Q, Cf, R, lamr, S: int, p: int):
    """The right-hand side at one stage, with ``C`` stacked as ``Cf (S p, n)``: returns ``f``,
    ``C Sigma`` and ``L`` (both ``(S p, n)``), the terms the adjoint needs."""
    CPf = Cf @ Y
    if p == 1:  # scalar innovations: R is (S,)
        Lf = CPf / ((CPf * Cf).sum(1) + R)[:, None]
    else:
        CPb, Cb = CPf.reshape(S, p, -1), Cf.reshape(S, p, -1)
        Lf = np.linalg.solve(CPb @ Cb.transpose(0, 2, 1) + R, CPb).reshape(S * p, -1)
    AY = A @ Y
    return AY + AY.T + Q - CPf.T @ (lamr * Lf), CPf, Lf


def _stage_adjoint(F, Y, A, Cf, CfT, lam, lamr, CPf, Lf, S: int, p: int, mats: bool):
    """Cotangents of one stage's inputs for a symmetric output cotangent ``F`` (every cotangent
    of the recursion is symmetric: the path is symmetrised each step): ``(Sigma, lambda, A, Qc, C,
    R)``, the last four None unless ``mats``."""
    LF = Lf @ F
    T1 = CfT @ (lamr * LF)  # sum_s lambda_s C_s^T L_s F; its transpose is the F L_s^T C_s term
    if p == 1:
        x = (LF * Lf).sum(1)  # L_s F L_s^T
        T3 = CfT @ ((lam * x)[:, None] * Cf)
    else:
        Lb, Cb = Lf.reshape(S, p, -1), Cf.reshape(S, p, -1)
        X = LF.reshape(S, p, -1) @ Lb.transpose(0, 2, 1)
        T3 = CfT @ (lamr * (X @ Cb).reshape(S * p, -1))
    Z = F @ A - T1
    Ybar = Z + Z.T + T3
    glam = -(LF * CPf).sum(1) if p == 1 else -(LF * CPf).reshape(S, -1).sum(1)
    if not mats:
        return Ybar, glam, None, None, None, None
    LFs = 2.0 * LF
    if p == 1:
        gR = lam * x
        inner = (LFs * CPf).sum(1)[:, None] * Lf
    else:
        gR = lam[:, None, None] * X
        inner = ((LFs.reshape(S, p, -1) @ CPf.reshape(S, p, -1).transpose(0, 2, 1)) @ Lb).reshape(
            S * p, -1
        )
    gC = -lamr * (LFs @ Y - inner)
    return Ybar, glam, 2.0 * F @ Y, F, gC, gR


class _RiccatiRK4(torch.autograd.Function):
    @staticmethod
    def forward(ctx, lam, A, Qc, C, R, P0, h, per):  # noqa: D401 - autograd API
        dev, dt = lam.device, lam.dtype
        np_dt = np.float32 if dt == torch.float32 else np.float64
        lam_, A_, Q_, C_, R_, P = (
            x.detach().cpu().numpy().astype(np_dt, copy=False) for x in (lam, A, Qc, C, R, P0)
        )
        Tc, S, p, n = C_.shape
        Cf = C_.reshape(Tc, S * p, n)
        Rf = R_.reshape(Tc, S) if p == 1 else R_
        lamr_all = np.repeat(lam_, p, axis=0)[:, None, :]  # (S p, 1, K)
        n_steps = per * lam_.shape[1]
        ix = _index(A_.shape[0], n_steps), _index(Tc, n_steps)
        path = np.empty((n_steps + 1, n, n), dtype=np_dt)
        stages = np.empty((n_steps, 4, n, n), dtype=np_dt)
        cps = np.empty((n_steps, 4, S * p, n), dtype=np_dt)  # C Sigma and L per stage
        ls = np.empty_like(cps)
        path[0] = P
        for i in range(n_steps):
            k = i // per
            lr = lamr_all[:, :, k]
            (a1, a2, a4), (c1, c2, c4) = ix[0][i], ix[1][i]
            stages[i, 0] = P
            k1, cps[i, 0], ls[i, 0] = _stage(P, A_[a1], Q_[a1], Cf[c1], Rf[c1], lr, S, p)
            Y = P + 0.5 * h * k1
            stages[i, 1] = Y
            k2, cps[i, 1], ls[i, 1] = _stage(Y, A_[a2], Q_[a2], Cf[c2], Rf[c2], lr, S, p)
            Y = P + 0.5 * h * k2
            stages[i, 2] = Y
            k3, cps[i, 2], ls[i, 2] = _stage(Y, A_[a2], Q_[a2], Cf[c2], Rf[c2], lr, S, p)
            Y = P + h * k3
            stages[i, 3] = Y
            k4, cps[i, 3], ls[i, 3] = _stage(Y, A_[a4], Q_[a4], Cf[c4], Rf[c4], lr, S, p)
            P = P + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)
            P = 0.5 * (P + P.T)
            path[i + 1] = P
        ctx.saved = (
            lam_,
            lamr_all,
            A_,
            Q_,
            Cf,
            Rf,
            stages,
            cps,
            ls,
            ix,
            h,
            per,
            np_dt,
            (S, p),
            C_.shape,
        )
        ctx.dev = dev
        return torch.from_numpy(path).to(dev)

    @staticmethod
    def backward(ctx, gpath):
        lam_, lamr_all, A_, Q_, Cf, Rf, stages, cps, ls, ix, h, per, np_dt, (S, p), cshape = (
            ctx.saved
        )
        need = ctx.needs_input_grad
        g = gpath.detach().cpu().numpy().astype(np_dt, copy=False)
        n_steps = stages.shape[0]
        gA, gQ = np.zeros_like(A_), np.zeros_like(Q_)
        gC, gR = np.zeros_like(Cf), np.zeros_like(Rf)
        mats = any(need[1:5])
        CfT = np.ascontiguousarray(Cf.transpose(0, 2, 1))
        Pbar = g[n_steps].copy()
        gl_st = np.empty((n_steps, 4, S), dtype=np_dt)  # d objective / d lambda per stage
        h6, h3, h2 = h / 6.0, h / 3.0, h / 2.0
        for i in range(n_steps - 1, -1, -1):
            k = i // per
            lk, lr = lam_[:, k], lamr_all[:, :, k]
            (a1, a2, a4), (c1, c2, c4) = ix[0][i], ix[1][i]
            Qbar = 0.5 * (Pbar + Pbar.T)  # through the symmetrisation
            # the stages backwards; stage j's cotangent is its RK4 weight times Qbar plus what
            # the next stage's input (P + c k_j) sends back
            Ybar, acc = None, 0.0  # acc: the sum of the stages' input cotangents
            for j, a, c, F0 in ((3, a4, c4, h6), (2, a2, c2, h3), (1, a2, c2, h3), (0, a1, c1, h6)):
                F = F0 * Qbar if Ybar is None else F0 * Qbar + (h if j == 2 else h2) * Ybar
                Ybar, gl_st[i, j], dA, dQ, dC, dR = _stage_adjoint(
                    F, stages[i, j], A_[a], Cf[c], CfT[c], lk, lr, cps[i, j], ls[i, j], S, p, mats
                )
                if mats:
                    gA[a] += dA
                    gQ[a] += dQ
                    gC[c] += dC
                    gR[c] += dR
                acc = acc + Ybar
            Pbar = Qbar + acc + g[i]
        glam = gl_st.sum(1).reshape(-1, per, S).sum(1).T.copy()  # (S, K)
        dev = ctx.dev

        def out(x, flag, shape=None):
            if not flag:
                return None
            return torch.from_numpy(x if shape is None else x.reshape(shape)).to(dev)

        rshape = (cshape[0], S, p, p)
        return (
            out(glam, need[0]),
            out(gA, need[1]),
            out(gQ, need[2]),
            out(gC, need[3], cshape),
            out(gR, need[4], rshape),
            out(Pbar, need[5]),
            None,
            None,
        )


def _index(size: int, n_steps: int) -> list[tuple[int, int, int]]:
    """Stage-time indices of step ``i`` (start, midpoint, end) into matrices evaluated at the
    ``2 n_steps + 1`` half-step times, or all 0 for matrices evaluated once (time-invariant)."""
    if size == 1:
        return [(0, 0, 0)] * n_steps
    if size != 2 * n_steps + 1:
        raise ValueError(f"stage matrices must have 1 or {2 * n_steps + 1} times, got {size}")
    return [(2 * i, 2 * i + 1, 2 * i + 2) for i in range(n_steps)]


def riccati_rk4(
    lam: Tensor, A: Tensor, Qc: Tensor, C: Tensor, R: Tensor, P0: Tensor, h: float, per: int
) -> Tensor:
    """The bound's RK4 path ``(n_steps + 1, n, n)``, ``n_steps = per * K``, differentiable in every
    input. ``lam (S, K)``: rates, constant on each of the K intervals of ``per`` steps of size
    ``h``. ``A, Qc (T', n, n)``, ``C (T', S, p, n)``, ``R (T', S, p, p)`` with ``T' = 1``
    (time-invariant) or ``2 n_steps + 1`` (evaluated at the times ``j h / 2``). Runs on the CPU in
    numpy; the result is on ``lam``'s device."""
    return _RiccatiRK4.apply(lam, A, Qc, C, R, P0, float(h), int(per))
