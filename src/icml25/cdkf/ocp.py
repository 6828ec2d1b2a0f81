"""Optimising measurement rates through the covariance bound (spec §6, direct transcription).

Rates are piecewise constant on ``K`` intervals; the objective integrates ``tr(W Sigma_hat)`` over
the RK4 grid (trapezoid) plus ``w_lam ||lambda||^2``; the expected-cost budget
``sum_s c_s int lambda_s <= B`` is linear. SLSQP (scipy) with autograd gradients in float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from icml25.cdkf.bound import covariance_bound, stable_steps
from icml25.cdkf.evaluate import time_average
from icml25.cdkf.schedule import RateSchedule, deterministic_schedule
from icml25.cdkf.ssm import LinearSDE, Sensor

__all__ = ["SchedulingProblem", "Solution"]


@dataclass
class Solution:
    rates: RateSchedule
    objective: float
    bound_path: Tensor
    info: dict = field(default_factory=dict)

    def schedule(self, count: str = "round") -> list[Tensor]:
        return deterministic_schedule(self.rates, count)


class SchedulingProblem:
    """Choose sensor rates on ``[0, T]`` to minimise the time-averaged bound ``tr(W Sigma_hat)``.

    Args:
        sde, sensors: the target model and the sensors (each sensor's ``cost`` per measurement).
        T, K: horizon and number of control intervals (default 20).
        W: weight on the covariance (default identity; ``H^T H`` for a GP's variance of f).
        budget: expected-cost budget ``B`` (None: unconstrained).
        lam_max: upper bound on every rate.
        w_lam: weight of ``int ||lambda||^2 dt`` (paper's running cost; default 0).
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
    ) -> None:
        if not T > 0:
            raise ValueError(f"T must be > 0, got {T}")
        if isinstance(K, bool) or not isinstance(K, int) or K < 1:
            raise ValueError(f"K must be a positive integer, got {K!r}")
        if not lam_max > 0:
            raise ValueError(f"lam_max must be > 0, got {lam_max}")
        if budget is not None and budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        self.sde, self.sensors, self.T, self.K = sde, list(sensors), float(T), K
        n = sde.n
        self.W = torch.eye(n, dtype=torch.float64) if W is None else W.to(torch.float64)
        self.budget, self.lam_max, self.w_lam = budget, float(lam_max), float(w_lam)
        self.n_steps = stable_steps(self.T, K, self.lam_max, n_steps)  # fixed over the optimisation
        self.costs = torch.tensor([s.cost for s in self.sensors], dtype=torch.float64)

    @property
    def S(self) -> int:
        return len(self.sensors)

    def bound(self, values: Tensor) -> Tensor:
        return covariance_bound(
            self.sde, self.sensors, RateSchedule(values, self.T), n_steps=self.n_steps
        )

    def objective(self, values: Tensor) -> Tensor:
        """``(1/T) int tr(W Sigma_hat) dt`` (trapezoid on the RK4 grid) ``+ w_lam int ||lambda||^2``."""
        path = self.bound(values)
        tr = torch.einsum("ij,tji->t", self.W, path)
        avg = time_average(tr, self.T)
        return avg + self.w_lam * (values**2).sum() * (self.T / self.K)

    def expected_cost(self, values: Tensor) -> Tensor:
        return (self.costs[:, None] * values).sum() * (self.T / self.K)

    def initial_rates(self) -> Tensor:
        """Constant rates that spend the budget exactly, split equally across sensors (spec)."""
        lam = torch.ones(self.S, dtype=torch.float64)
        if self.budget is not None:
            share = self.budget / self.S
            lam = torch.where(self.costs > 0, share / (self.costs.clamp(min=1e-300) * self.T), lam)
        return lam.clamp(max=self.lam_max)[:, None].expand(self.S, self.K).clone()

    def solve(
        self,
        *,
        constant: bool = False,
        maxiter: int = 200,
        ftol: float = 1e-8,
        x0: Tensor | None = None,
    ) -> Solution:
        """SLSQP over the rates (``constant=True``: one rate per sensor, the ``best_constant`` baseline)."""
        from scipy.optimize import minimize

        cols = 1 if constant else self.K

        def expand(z: np.ndarray) -> Tensor:
            v = torch.tensor(z, dtype=torch.float64).reshape(self.S, cols)
            return v.expand(self.S, self.K) if constant else v

        calls = {"k": 0, "last": float("nan")}

        def fun(z):
            v = torch.tensor(z, dtype=torch.float64, requires_grad=True)
            vals = v.reshape(self.S, cols)
            vals = vals.expand(self.S, self.K) if constant else vals
            obj = self.objective(vals)
            calls["last"] = obj.item()
            (g,) = torch.autograd.grad(obj, v)
            return obj.item(), g.numpy()

        start = self.initial_rates()[:, :cols] if x0 is None else x0[:, :cols]
        cons = []
        if self.budget is not None:
            grad = (
                (
                    self.costs[:, None]
                    * torch.full(
                        (self.S, cols), self.T / self.K * (self.K / cols), dtype=torch.float64
                    )
                )
                .reshape(-1)
                .numpy()
            )

            cons.append(
                {
                    "type": "ineq",
                    "fun": lambda z: self.budget - float(grad @ z),
                    "jac": lambda z: -grad,
                }
            )
        res = minimize(
            fun,
            start.reshape(-1).numpy(),
            jac=True,
            method="SLSQP",
            bounds=[(0.0, self.lam_max)] * (self.S * cols),
            constraints=cons,
            options={"maxiter": maxiter, "ftol": ftol},
        )
        values = expand(np.clip(res.x, 0.0, self.lam_max))
        with torch.no_grad():
            obj = float(self.objective(values))
            path = self.bound(values)
        return Solution(
            RateSchedule(values, self.T),
            obj,
            path,
            {
                "iterations": int(res.nit),
                "status": res.message,
                "success": bool(res.success),
                "expected_cost": float(self.expected_cost(values)),
            },
        )
