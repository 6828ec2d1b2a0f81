"""Optimising measurement rates through the covariance bound (docs/cdkf.md, direct transcription).

Rates are piecewise constant on ``K`` intervals; the objective integrates ``tr(W Sigma_hat)`` over
the RK4 grid (trapezoid) plus ``w_lam ||lambda||^2``; the expected-cost budget
``sum_s c_s int lambda_s <= B`` is linear. SLSQP (scipy) with autograd gradients in float64.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.cdkf.bound import (
    _grid,
    bound_from_stages,
    covariance_bound,
    information_lower_bound,
    model_rate,
    stable_steps,
    stage_matrices,
)
from icml25.cdkf.evaluate import time_average
from icml25.cdkf.schedule import RateSchedule, deterministic_schedule
from icml25.cdkf.ssm import LinearSDE, Sensor

__all__ = ["SchedulingProblem", "Solution"]


@dataclass
class Solution:
    """An optimised measurement schedule: the piecewise-constant ``rates``, the ``objective``, the
    covariance-bound path and solver ``info``; :meth:`schedule` gives the measurement times."""

    rates: RateSchedule
    objective: float
    bound_path: Tensor
    info: dict = field(default_factory=dict)

    def schedule(self, count: str = "round") -> list[Tensor]:
        return deterministic_schedule(self.rates, count)


def _weight(W, n: int) -> Tensor:
    """``W`` as a float64 ``(n, n)`` symmetric positive semi-definite weight, or a ValueError."""
    W = torch.as_tensor(W).to(torch.float64)
    if W.shape != (n, n):
        raise ValueError(f"W must be ({n}, {n}) to match the state, got shape {tuple(W.shape)}")
    if not torch.allclose(W, W.mT, atol=1e-12 * max(1.0, float(W.abs().max()))):
        raise ValueError(f"W must be symmetric, got {W.tolist()}")
    ev = torch.linalg.eigvalsh(W)
    if bool((ev < -1e-12 * max(1.0, float(ev.abs().max()))).any()):
        raise ValueError(
            f"W must be positive semi-definite (it weights a covariance), got eigenvalues {ev.tolist()}"
        )
    return W


class SchedulingProblem:
    """Choose sensor rates on ``[0, T]`` to minimise the time-averaged bound ``tr(W Sigma_hat)``.

    Args:
        sde, sensors: the target model and the sensors (each sensor's ``cost`` per measurement).
        T, K: horizon and number of control intervals (default 20).
        W: weight on the covariance (default identity; ``H^T H`` for a GP's variance of f).
        budget: expected-cost budget ``B`` (None: unconstrained).
        lam_max: upper bound on every rate.
        w_lam: weight of ``int ||lambda||^2 dt`` (paper's running cost; default 0).
        cov_cap, w_eps: soft covariance cap ``tr(W Sigma_hat(t)) <= cov_cap + eps(t)``, ``eps >= 0``,
            with cost ``w_eps int eps^2 dt`` (docs/cdkf.md; ``w_eps = 1e3``). The slack is eliminated
            exactly at every RK4 node (``eps = max(0, tr - cap)``); a solution that still needs
            slack reports ``info["status"] = "infeasible"`` and ``info["max_slack"]``.
        running_cost: optional extra running cost ``L(t, Sigma, lam, xi, u) -> (G,)``, vectorised
            over ``G`` nodes (``t (G,)``, ``Sigma (G, n, n)``, ``lam (G, S)``, ``xi (G, m)``, ``u (G,
            m_c)``; ``xi`` and ``u`` are None without an auxiliary model). Integrated by the
            trapezoid rule on the RK4 grid, each step with its own piecewise-constant rates and
            control at both ends (so it is called twice: on the steps' left and right nodes), and
            added to the objective; e.g. ``lambda t, P, lam, xi, u: lam @ costs`` for the paper's
            ``sum_s c_s lambda_s``, which then integrates exactly to the expected cost.
        w_T, terminal_cost: terminal cost ``w_T tr(W Sigma_hat(T))`` (default ``w_T = 0``) plus
            ``terminal_cost(Sigma_T, xi_T) -> scalar`` if given (``xi_T`` None without aux).
        surrogate: ``"bound"`` (the paper's Prop. 6.1 bound, default) or ``"kalman_bucy"``, the
            continuous-measurement relaxation of Le Ny, Feron & Dahleh (IEEE TAC 2011):
            ``dP/dt = AP + PA^T + Qc - P (sum_s lambda_s C_s^T R_s^-1 C_s) P``, integrated in information
            form (a baseline; it is also our ``information_lower_bound``).
    """

    def __init__(
        self,
        sde: LinearSDE,
        sensors: list[Sensor],
        T: float,
        K: int = 20,
        *,
        W: Tensor | None = None,
        budget: float | None = None,
        lam_max: float = 8.0,
        w_lam: float = 0.0,
        n_steps: int | None = None,
        surrogate: str = "bound",
        cov_cap: float | None = None,
        w_eps: float = 1e3,
        running_cost=None,
        terminal_cost=None,
        w_T: float = 0.0,
    ) -> None:
        if surrogate not in ("bound", "kalman_bucy"):
            raise ValueError(f"surrogate must be 'bound' or 'kalman_bucy', got {surrogate!r}")
        T = as_real("T", T, low=0, low_open=True)
        K = as_int("K", K, 1)
        lam_max = as_real("lam_max", lam_max, low=0, low_open=True)
        if budget is not None:
            budget = as_real("budget", budget, low=0)
        if cov_cap is not None:
            cov_cap = as_real("cov_cap", cov_cap, low=0, low_open=True)
        w_eps = as_real("w_eps", w_eps, low=0)
        if running_cost is not None and not callable(running_cost):
            raise ValueError(f"running_cost must be a callable or None, got {running_cost!r}")
        if terminal_cost is not None and not callable(terminal_cost):
            raise ValueError(f"terminal_cost must be a callable or None, got {terminal_cost!r}")
        w_T = as_real("w_T", w_T, low=0)
        self.running_cost, self.terminal_cost, self.w_T = running_cost, terminal_cost, w_T
        self.cov_cap, self.w_eps = cov_cap, w_eps
        w_lam = as_real("w_lam", w_lam, low=0)
        self.sde, self.sensors, self.T, self.K = sde, list(sensors), float(T), K
        n = sde.n
        self.W = torch.eye(n, dtype=torch.float64) if W is None else _weight(W, n)
        self.budget, self.lam_max, self.w_lam = budget, float(lam_max), float(w_lam)
        if n_steps is not None:
            n_steps = as_int("n_steps", n_steps, K)
            if n_steps % K:
                raise ValueError(f"n_steps must be a positive multiple of K={K}, got {n_steps!r}")
        # fixed over the optimisation: h * max(lam_max, |eig(A)|) <= 0.5
        self.n_steps = stable_steps(self.T, K, max(self.lam_max, model_rate(sde, self.T)), n_steps)
        if n_steps is not None and self.n_steps != n_steps:
            warnings.warn(
                f"n_steps = {n_steps} gives an RK4 step T/n_steps = {self.T / n_steps:.3g} with "
                f"h * lam_max > 0.5 (stiff): using n_steps = {self.n_steps}",
                UserWarning,
                stacklevel=2,
            )
        self.costs = torch.tensor([s.cost for s in self.sensors], dtype=torch.float64)
        self.surrogate = surrogate

    def _path(self, values: Tensor, xi_path=None) -> Tensor:
        rates = RateSchedule(values, self.T)
        if self.surrogate == "bound" and xi_path is None:
            # the model's matrices at the RK4 stage times do not depend on the rates: evaluate them
            # once per problem (unless they carry gradients a caller wants back)
            h, n = _grid(rates, self.T, self.n_steps, self.sde)
            key = (n, values.dtype)
            cached = self.__dict__.setdefault("_stages", {})
            if key not in cached:
                stages = stage_matrices(self.sde, self.sensors, h, n, None, values.dtype)
                if stages is None or any(m.requires_grad for m in stages):
                    return covariance_bound(self.sde, self.sensors, rates, n_steps=self.n_steps)
                cached[key] = stages
            return bound_from_stages(cached[key], rates, h, n)
        fn = covariance_bound if self.surrogate == "bound" else information_lower_bound
        return fn(
            self.sde,
            self.sensors,
            RateSchedule(values, self.T),
            n_steps=self.n_steps,
            xi_path=xi_path,
        )

    @property
    def S(self) -> int:
        return len(self.sensors)

    def bound(self, values: Tensor) -> Tensor:
        """The surrogate covariance path (the Prop. 6.1 bound unless ``surrogate="kalman_bucy"``)."""
        return self._path(values)

    def objective(self, values: Tensor) -> Tensor:
        """``(1/T) int tr(W Sigma_hat) dt`` (trapezoid on the RK4 grid) ``+ w_lam int ||lambda||^2``
        plus the covariance-cap penalty, the user's running cost and the terminal cost."""
        path = self.bound(values)
        tr = torch.einsum("ij,tji->t", self.W.to(path), path)
        avg = time_average(tr, self.T)
        return (
            avg
            + self.w_lam * (values**2).sum() * (self.T / self.K)
            + self.cap_penalty(tr)
            + self.extra_cost(path, values)
        )

    def extra_cost(
        self, path: Tensor, values: Tensor, xi: Tensor | None = None, controls: Tensor | None = None
    ) -> Tensor:
        """The user's running cost (integrated) and the terminal cost along a bound path."""
        out = path.new_zeros(())
        if self.w_T:
            out = out + self.w_T * torch.einsum("ij,ji->", self.W.to(path), path[-1])
        if self.terminal_cost is not None:
            val = torch.as_tensor(self.terminal_cost(path[-1], None if xi is None else xi[-1]))
            if val.numel() != 1:
                raise ValueError(
                    f"terminal_cost must return a scalar, got shape {tuple(val.shape)}"
                )
            out = out + val.reshape(()).to(path)
        if self.running_cost is not None:
            # trapezoid per RK4 step with the step's own (piecewise-constant) rates and control at
            # both ends, so that a cost in the rates alone integrates exactly
            n = path.shape[0] - 1
            h = self.T / n
            k = torch.arange(n, device=path.device) * self.K // n
            t = torch.arange(n + 1, dtype=path.dtype, device=path.device) * h
            lam = values[:, k].mT
            u = None if controls is None else controls[:, k].mT
            total = 0.0
            for ends in (slice(0, n), slice(1, n + 1)):
                val = torch.as_tensor(
                    self.running_cost(t[ends], path[ends], lam, None if xi is None else xi[ends], u)
                )
                if val.shape != (n,):
                    raise ValueError(
                        f"running_cost must return one value per node it is given, shape ({n},), "
                        f"got {tuple(val.shape)}"
                    )
                total = total + val.to(path).expand(n).sum()
            if not bool(torch.isfinite(total)):
                raise ValueError("running_cost returned a non-finite value")
            out = out + 0.5 * h * total
        return out

    def cap_penalty(self, tr: Tensor) -> Tensor:
        """``w_eps int eps^2 dt`` with the optimal slack ``eps = max(0, tr - cov_cap)``."""
        if self.cov_cap is None:
            return tr.new_zeros(())
        eps = torch.relu(tr - self.cov_cap)
        return self.w_eps * time_average(eps * eps, self.T) * self.T

    def slack(self, path: Tensor) -> float:
        if self.cov_cap is None:
            return 0.0
        tr = torch.einsum("ij,tji->t", self.W.to(path), path.detach())
        return float(torch.relu(tr - self.cov_cap).max())

    def expected_cost(self, values: Tensor) -> Tensor:
        return (self.costs.to(values)[:, None] * values).sum() * (self.T / self.K)

    def initial_rates(self) -> Tensor:
        """Constant rates that spend the budget exactly, split equally across sensors (docs/cdkf.md)."""
        lam = torch.ones(self.S, dtype=torch.float64)
        if self.budget is not None:
            share = self.budget / self.S
            lam = torch.where(self.costs > 0, share / (self.costs.clamp(min=1e-300) * self.T), lam)
        return lam.clamp(max=self.lam_max)[:, None].expand(self.S, self.K).clone()

    def solve(
        self,
        method: str = "slsqp",
        *,
        constant: bool = False,
        maxiter: int = 200,
        ftol: float = 1e-8,
        x0: Tensor | None = None,
        progress: bool | None = None,
        **opts,
    ) -> Solution:
        """Optimise the rates. ``method``: ``"slsqp"`` (scipy, default), ``"adam_al"`` (Adam on
        sigmoid-parameterised rates; the linear budget is held exactly by rescaling the rates,
        ``lambda * min(1, B / cost)``; ``opts`` go to :func:`~icml25.cdkf.solvers.adam_al`) or ``"pgd"`` (projected gradient onto the box and
        the budget). ``constant=True`` optimises one rate per sensor (the ``best_constant``
        baseline)."""
        if method not in ("slsqp", "adam_al", "pgd"):
            raise ValueError(f"method must be 'slsqp', 'adam_al' or 'pgd', got {method!r}")
        cols = 1 if constant else self.K
        if x0 is not None:
            x0 = torch.as_tensor(x0).to(torch.float64).cpu()
            if x0.shape not in ((self.S, self.K), (self.S, cols)):
                raise ValueError(
                    f"x0 must be ({self.S}, {self.K}) rates (sensors x intervals), got shape "
                    f"{tuple(x0.shape)}"
                )
        start = self.initial_rates()[:, :cols] if x0 is None else x0[:, :cols]

        def full(v: Tensor) -> Tensor:
            v = v.reshape(self.S, cols)
            return v.expand(self.S, self.K) if constant else v

        if method == "slsqp":
            values, info = self._slsqp(full, start, cols, maxiter, ftol)
        else:
            from icml25.cdkf import solvers

            dt = self.T / cols
            if method == "adam_al":
                lo = torch.zeros(self.S * cols, dtype=torch.float64)
                hi = torch.full_like(lo, self.lam_max)
                feasible = self._budget_scaler(cols)
                z, info = solvers.adam_al(
                    lambda z: self.objective(full(feasible(z))),
                    None,
                    lo,
                    hi,
                    start.reshape(-1),
                    progress=progress,
                    **opts,
                )
                z = feasible(z)
            else:

                def project(z):
                    v = z.reshape(self.S, cols)
                    if self.budget is None:
                        return v.clamp(0.0, self.lam_max).reshape(-1)
                    return solvers.project_budget(
                        v, self.costs, self.budget, self.lam_max, dt
                    ).reshape(-1)

                z, info = solvers.pgd(
                    lambda z: self.objective(full(z)),
                    project,
                    start.reshape(-1),
                    maxiter=opts.pop("maxiter", maxiter),
                    progress=progress,
                    **opts,
                )
            values = full(z.clamp(0.0, self.lam_max))
        with torch.no_grad():
            obj = float(self.objective(values))
            path = self.bound(values)
        info = {**info, "method": method, "expected_cost": float(self.expected_cost(values))}
        self._cap_status(info, path)
        return Solution(RateSchedule(values, self.T), obj, path, info)

    def _cap_status(self, info: dict, path: Tensor) -> None:
        if self.cov_cap is not None:
            info["max_slack"] = self.slack(path)
            if info["max_slack"] > 1e-6:
                info["status"] = "infeasible"
                info["success"] = False

    def _budget_scaler(self, cols: int):
        """``lambda -> lambda * min(1, B / cost(lambda))``: the linear budget held exactly inside
        the first-order solver's parameterisation (an augmented Lagrangian on it oscillated)."""
        if self.budget is None:
            return lambda z: z
        w = (self.costs[:, None] * (self.T / cols)).expand(self.S, cols).reshape(-1)

        def scale(z: Tensor) -> Tensor:
            cost = (w * z[: w.numel()]).sum()
            factor = torch.clamp(self.budget / cost.clamp(min=1e-300), max=1.0)
            return torch.cat([z[: w.numel()] * factor, z[w.numel() :]])

        return scale

    def _slsqp(self, full, start: Tensor, cols: int, maxiter: int, ftol: float):
        from scipy.optimize import minimize

        def fun(z):
            v = torch.tensor(z, dtype=torch.float64, requires_grad=True)
            obj = self.objective(full(v))
            (g,) = torch.autograd.grad(obj, v)
            return obj.item(), g.numpy()

        cons = []
        if self.budget is not None:
            grad = (self.costs[:, None] * (self.T / cols)).expand(self.S, cols).reshape(-1).numpy()
            cons.append(
                {
                    "type": "ineq",
                    "fun": lambda z: self.budget - float(grad @ z),
                    "jac": lambda z: -grad,
                }
            )
        from icml25.progress import counter

        with counter(f"SLSQP over {self.S * cols} rates", maxiter) as step:
            res = minimize(
                fun,
                start.reshape(-1).numpy(),
                jac=True,
                method="SLSQP",
                bounds=[(0.0, self.lam_max)] * (self.S * cols),
                constraints=cons,
                callback=lambda z: step(),
                options={"maxiter": maxiter, "ftol": ftol},
            )
        values = full(torch.tensor(np.clip(res.x, 0.0, self.lam_max), dtype=torch.float64))
        return values, {
            "iterations": int(res.nit),
            "status": res.message,
            "success": bool(res.success),
        }
