"""Joint optimisation of measurement rates and an auxiliary control (docs/cdkf.md): e.g. a robot
carrying a sensor whose noise grows with distance, under a mean-energy constraint."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.cdkf.aux import AuxiliaryModel, mean_aux_bound, mean_aux_jacobian
from icml25.cdkf.evaluate import time_average
from icml25.cdkf.ocp import SchedulingProblem, Solution
from icml25.cdkf.schedule import RateSchedule

__all__ = ["ControlledSchedulingProblem"]


class ControlledSchedulingProblem(SchedulingProblem):
    """:class:`SchedulingProblem` plus a piecewise-constant control ``u (m_c, K)`` driving an
    :class:`AuxiliaryModel`; sensor and model matrices may depend on the auxiliary state ``xi``.

    Args (beyond :class:`SchedulingProblem`):
        aux: the auxiliary dynamics (mean bound of Prop. 6.2 along the plan).
        n_controls, u_bounds: control dimension and box.
        aux_lower: ``(m,)`` lower bounds on ``xi_hat`` at every RK4 node (``-inf`` for none), e.g.
            energy >= 0. They constrain the mean, not every path (docs/cdkf.md).
        w_u: weight of ``int ||u||^2 dt``.
        constraints: general path constraints ``h(xi, u, t) >= 0`` (docs/cdkf.md: keep-out regions,
            ``eta >= c``), each a callable returning a scalar or a ``(q,)`` tensor, imposed on the
            mean auxiliary state at the same RK4 nodes as ``aux_lower`` (SLSQP: autograd Jacobians;
            ``adam_al``: the augmented Lagrangian).
        constraint_stride: impose ``aux_lower`` at every ``constraint_stride``-th RK4 node (default
            1: every node, as planned). A stride of ``n_steps // K`` (the control-interval
            ends) is exact when the constrained states are monotone within an interval, e.g. an
            energy that only decreases, and makes the SLSQP constraint Jacobian several times cheaper.
    """

    def __init__(
        self,
        sde,
        sensors,
        T: float,
        K: int = 20,
        *,
        aux: AuxiliaryModel,
        n_controls: int = 1,
        u_bounds: tuple[float, float] = (-1.0, 1.0),
        aux_lower: Tensor | None = None,
        w_u: float = 0.0,
        constraints=(),
        constraint_stride: int = 1,
        **kwargs,
    ) -> None:
        super().__init__(sde, sensors, T, K, **kwargs)
        constraints = [constraints] if callable(constraints) else list(constraints)
        for h in constraints:
            if not callable(h):
                raise ValueError(f"constraints must be callables h(xi, u, t) >= 0, got {h!r}")
        self.constraints = constraints
        constraint_stride = as_int("constraint_stride", constraint_stride, 1)
        if self.n_steps % constraint_stride:
            raise ValueError(
                f"constraint_stride must be a positive divisor of n_steps={self.n_steps}, "
                f"got {constraint_stride!r}"
            )
        self.constraint_stride = constraint_stride
        if len(aux.g) != self.S:
            raise ValueError(f"aux has {len(aux.g)} jump terms for {self.S} sensors")
        if not u_bounds[0] < u_bounds[1]:
            raise ValueError(f"u_bounds must be (low, high) with low < high, got {u_bounds}")
        w_u = as_real("w_u", w_u, low=0)
        self.aux, self.m_c, self.u_bounds, self.w_u = aux, n_controls, u_bounds, w_u
        m = aux.xi0.numel()
        if aux_lower is not None:
            aux_lower = torch.as_tensor(aux_lower).to(torch.float64)
            if bool(torch.isnan(aux_lower).any()):
                raise ValueError(
                    f"aux_lower must not contain NaN (use -inf for no bound), got {aux_lower.tolist()}"
                )
            if aux_lower.shape != (m,):
                names = f" ({', '.join(aux.names)})" if aux.names else ""
                raise ValueError(
                    f"aux_lower must be ({m},), one lower bound per auxiliary state{names} "
                    f"(-inf for none), got shape {tuple(aux_lower.shape)}"
                )
        self.aux_lower = (
            torch.full((m,), -math.inf, dtype=torch.float64) if aux_lower is None else aux_lower
        )
        n_controls = as_int("n_controls", n_controls, 1)
        self.m_c = n_controls
        try:
            drift = aux.f(
                aux.xi0.to(torch.float64), torch.zeros(n_controls, dtype=torch.float64), 0.0
            )
        except Exception as exc:  # noqa: BLE001 - any failure here is a control-size mismatch
            raise ValueError(
                f"the auxiliary drift f(xi, u, t) fails for a control of n_controls = "
                f"{n_controls} values ({type(exc).__name__}: {exc}); give the control dimension "
                "the model expects (a robot_energy_model's position dimension)"
            ) from exc
        if torch.as_tensor(drift).reshape(-1).numel() != m:
            raise ValueError(
                f"the auxiliary drift returns {torch.as_tensor(drift).numel()} values for {m} states"
            )

    def aux_path(self, values: Tensor, controls: Tensor) -> Tensor:
        return mean_aux_bound(self.aux, RateSchedule(values, self.T), controls, self.n_steps)

    def bound_with(self, values: Tensor, controls: Tensor) -> Tensor:
        path = self.aux_path(values, controls)
        h = self.T / self.n_steps

        def xi_at(t: float) -> Tensor:  # linear interpolation on the RK4 grid
            i = min(int(t / h), self.n_steps - 1)
            w = t / h - i
            return (1 - w) * path[i] + w * path[i + 1]

        # the same interpolation at the RK4 stage times (grid points and midpoints), in one go
        mid = 0.5 * (path[:-1] + path[1:])
        xi_at.half_grid = torch.stack([path[:-1], mid], 1).reshape(-1, path.shape[-1])
        xi_at.half_grid = torch.cat([xi_at.half_grid, path[-1:]])
        return self._path(values, xi_at)

    def objective_with(self, values: Tensor, controls: Tensor) -> Tensor:
        path = self.bound_with(values, controls)
        tr = torch.einsum("ij,tji->t", self.W.to(path), path)
        avg = time_average(tr, self.T)
        dt = self.T / self.K
        extra = (
            self.extra_cost(path, values, self.aux_path(values, controls), controls)
            if self.running_cost is not None or self.terminal_cost is not None or self.w_T
            else 0.0
        )
        return (
            avg
            + self.w_lam * (values**2).sum() * dt
            + self.w_u * (controls**2).sum() * dt
            + self.cap_penalty(tr)
            + extra
        )

    def path_constraints(self, values: Tensor, controls: Tensor) -> Tensor:
        """The user's ``h(xi_hat, u, t)`` at the constrained nodes, flattened (feasible when all
        >= 0); empty without ``constraints``."""
        if not self.constraints:
            return values.new_zeros(0)
        xi = self.aux_path(values, controls)
        per = self.n_steps // self.K
        h = self.T / self.n_steps
        out = []
        for j in range(0, self.n_steps + 1, self.constraint_stride):
            k = min(j // per, self.K - 1)
            for fn in self.constraints:
                val = torch.as_tensor(fn(xi[j], controls[:, k], j * h)).to(xi)
                if val.ndim > 1:
                    raise ValueError(
                        "a path constraint h(xi, u, t) must return a scalar or a (q,) tensor, "
                        f"got shape {tuple(val.shape)}"
                    )
                out.append(val.reshape(-1))
        return torch.cat(out)

    def aux_constraints(self, values: Tensor, controls: Tensor) -> Tensor:
        """``xi_hat - aux_lower`` (flattened) at the constrained nodes; feasible when all >= 0."""
        path = self.aux_path(values, controls)[:: self.constraint_stride]
        lower = self.aux_lower.to(path)
        finite = torch.isfinite(lower)
        return (path[:, finite] - lower[finite]).reshape(-1)

    def _all_constraints(self, values: Tensor, controls: Tensor) -> Tensor:
        return torch.cat(
            [self.aux_constraints(values, controls), self.path_constraints(values, controls)]
        )

    def aux_constraints_jacobian(self, values: Tensor, controls: Tensor) -> Tensor:
        """Jacobian of :meth:`aux_constraints` in ``(rates, controls)`` flattened, closed form for
        an ``input_only`` auxiliary model (:func:`~icml25.cdkf.aux.mean_aux_jacobian`)."""
        finite = torch.isfinite(self.aux_lower)
        J = mean_aux_jacobian(self.aux, RateSchedule(values, self.T), controls, self.n_steps)
        J = J[:: self.constraint_stride][:, finite]
        return J.reshape(-1, J.shape[-1])

    def solve(self, *args, **kwargs):
        """Not for this problem: the rates and the control are optimised together by
        :meth:`solve_joint`."""
        raise ValueError(
            "ControlledSchedulingProblem optimises rates and controls together: call "
            "solve_joint(); for rates alone along a fixed control, use a SchedulingProblem whose "
            "sensors follow that control's path"
        )

    def solve_joint(
        self,
        method: str = "slsqp",
        *,
        maxiter: int = 200,
        ftol: float = 1e-8,
        u0: Tensor | None = None,
        x0: Tensor | None = None,
        progress: bool | None = None,
        **opts,
    ) -> Solution:
        """Optimise rates and controls jointly with the budget and the mean auxiliary constraints:
        ``method="slsqp"`` (autograd constraint Jacobians) or ``"adam_al"`` (``opts`` go to
        :func:`~icml25.cdkf.solvers.adam_al`). ``x0 (S, K)`` and ``u0 (m_c, K)`` are the starting
        rates and controls (default: the budget split equally, and zero control)."""
        if method not in ("slsqp", "adam_al"):
            raise ValueError(f"method must be 'slsqp' or 'adam_al', got {method!r}")
        nl, nu = self.S * self.K, self.m_c * self.K
        has_aux = bool(torch.isfinite(self.aux_lower).any())
        has_h = bool(self.constraints)
        budget_w = torch.cat(
            [
                (self.costs[:, None] * (self.T / self.K)).expand(self.S, self.K).reshape(-1),
                torch.zeros(nu, dtype=torch.float64),
            ]
        )

        def split(z: Tensor) -> tuple[Tensor, Tensor]:
            return z[:nl].reshape(self.S, self.K), z[nl:].reshape(self.m_c, self.K)

        u_start = torch.zeros(self.m_c, self.K, dtype=torch.float64) if u0 is None else u0
        r_start = self.initial_rates() if x0 is None else x0
        for name, val, shape in (
            ("x0", r_start, (self.S, self.K)),
            ("u0", u_start, (self.m_c, self.K)),
        ):
            if tuple(torch.as_tensor(val).shape) != shape:
                raise ValueError(
                    f"{name} must have shape {shape}, got {tuple(torch.as_tensor(val).shape)}"
                )
        r_start, u_start = torch.as_tensor(r_start).cpu(), torch.as_tensor(u_start).cpu()
        z0 = torch.cat(
            [r_start.reshape(-1).to(torch.float64), u_start.reshape(-1).to(torch.float64)]
        )
        if method == "adam_al":
            from icml25.cdkf.solvers import adam_al

            feasible = self._budget_scaler(self.K)  # the budget exactly; AL for the aux states

            lo = torch.cat([torch.zeros(nl), torch.full((nu,), float(self.u_bounds[0]))]).double()
            hi = torch.cat(
                [torch.full((nl,), self.lam_max), torch.full((nu,), float(self.u_bounds[1]))]
            ).double()
            z, info = adam_al(
                lambda z: self.objective_with(*split(feasible(z))),
                (lambda z: self._all_constraints(*split(feasible(z))))
                if has_aux or has_h
                else None,
                lo,
                hi,
                z0,
                progress=progress,
                **opts,
            )
            z = feasible(z)
        else:
            z, info = self._slsqp_joint(split, z0, budget_w, has_aux, maxiter, ftol, progress)
        if has_h:
            values_, controls_ = split(z)
            with torch.no_grad():
                hv = self.path_constraints(values_.clamp(0.0, self.lam_max), controls_)
            info = {**info, "min_path_constraint": float(hv.min())}
        values, controls = split(z)
        values = values.clamp(0.0, self.lam_max)
        controls = controls.clamp(*self.u_bounds)
        with torch.no_grad():
            obj = float(self.objective_with(values, controls))
            aux = self.aux_path(values, controls)
            path = self.bound_with(values, controls)
        info = {
            **info,
            "method": method,
            "expected_cost": float(self.expected_cost(values)),
            "controls": controls,
            "aux_path": aux,
        }
        self._cap_status(info, path)
        return Solution(RateSchedule(values, self.T), obj, path, info)

    def _slsqp_joint(self, split, z0, budget_w, has_aux, maxiter, ftol, progress):
        from scipy.optimize import minimize

        nl, nu = self.S * self.K, self.m_c * self.K

        def fun(z):
            v = torch.tensor(z, dtype=torch.float64, requires_grad=True)
            obj = self.objective_with(*split(v))
            (g,) = torch.autograd.grad(obj, v)
            return obj.item(), g.numpy()

        def aux_cons(v: Tensor) -> Tensor:
            return self.aux_constraints(*split(v))

        def aux_jac(z) -> np.ndarray:
            v = torch.tensor(z, dtype=torch.float64)
            if self.aux.input_only:  # closed form (energy, robot position)
                return self.aux_constraints_jacobian(*split(v)).numpy()
            return torch.autograd.functional.jacobian(aux_cons, v, vectorize=True).numpy()

        cons = []
        if has_aux:
            cons.append(
                {
                    "type": "ineq",
                    "fun": lambda z: (
                        aux_cons(torch.tensor(z, dtype=torch.float64)).detach().numpy()
                    ),
                    "jac": aux_jac,
                }
            )
        if self.constraints:

            def h_cons(v: Tensor) -> Tensor:
                return self.path_constraints(*split(v))

            cons.append(
                {
                    "type": "ineq",
                    "fun": lambda z: h_cons(torch.tensor(z, dtype=torch.float64)).detach().numpy(),
                    "jac": lambda z: torch.autograd.functional.jacobian(
                        h_cons, torch.tensor(z, dtype=torch.float64), vectorize=True
                    ).numpy(),
                }
            )
        if self.budget is not None:
            grad = budget_w.numpy()
            cons.append(
                {
                    "type": "ineq",
                    "fun": lambda z: self.budget - float(grad @ z),
                    "jac": lambda z: -grad,
                }
            )
        bounds = [(0.0, self.lam_max)] * nl + [self.u_bounds] * nu
        from icml25.progress import counter

        with counter(
            f"SLSQP over {nl + nu} variables",
            maxiter,
            disable=None if progress is None else not progress,
        ) as step:
            res = minimize(
                fun,
                z0.numpy(),
                jac=True,
                method="SLSQP",
                bounds=bounds,
                constraints=cons,
                callback=lambda z: step(),
                options={"maxiter": maxiter, "ftol": ftol},
            )
        z = torch.tensor(np.clip(res.x, [b[0] for b in bounds], [b[1] for b in bounds]))
        return z.to(torch.float64), {
            "iterations": int(res.nit),
            "status": res.message,
            "success": bool(res.success),
        }
