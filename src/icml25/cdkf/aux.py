"""Auxiliary dynamics (energy, robot position, dose) and their mean bound (docs/cdkf.md, paper
Proposition 6.2): ``dxi = f(xi, u, t) dt + sum_s g_s(xi, u, t) dN_s``, replaced for planning by the
deterministic ``dxi_hat/dt = f(xi_hat, u, t) + sum_s lambda_s(t) g_s(xi_hat, u, t)``, which equals the
mean exactly when ``f`` and ``g_s`` are affine in the perturbed part (energy with constant costs,
linear dose) and bounds it under the concavity conditions of docs/cdkf.md. Constraints such as
``energy >= 0`` therefore hold for the mean, not pathwise."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.cdkf.schedule import RateSchedule

__all__ = [
    "AuxiliaryModel",
    "distance_noise",
    "energy_model",
    "mean_aux_bound",
    "mean_aux_jacobian",
    "robot_energy_model",
]

Field = Callable[[Tensor, Tensor, float], Tensor]


@dataclass
class AuxiliaryModel:
    """``f(xi, u, t) -> (m,)`` drift, ``g[s](xi, u, t) -> (m,)`` jump per measurement of sensor s.

    ``input_only=True`` declares that ``f`` and every ``g_s`` depend on the control only (not on
    ``xi`` or ``t``), as for energy and a robot's position: the mean path is then piecewise linear,
    computed exactly without RK4, and its Jacobian comes in closed form from the per-interval
    derivatives (:func:`mean_aux_jacobian`). The declaration is checked at ``xi0`` on first use.
    """

    f: Field
    g: list[Field]
    xi0: Tensor
    names: tuple[str, ...] = ()
    input_only: bool = False


def energy_model(costs: list[float], move_cost: float, eta0: float) -> AuxiliaryModel:
    """Remaining energy ``eta``: ``d eta = -move_cost ||u||^2 dt - sum_s c_s dN_s``."""

    def f(xi, u, t):
        return -move_cost * (u * u).sum().reshape(1)

    g = [
        (lambda xi, u, t, c=c: torch.full((1,), -float(c), dtype=xi.dtype, device=xi.device))
        for c in costs
    ]
    return AuxiliaryModel(
        f, g, torch.tensor([float(eta0)], dtype=torch.float64), ("energy",), input_only=True
    )


def robot_energy_model(
    costs: list[float], move_cost: float, eta0: float, p0: float | list[float]
) -> AuxiliaryModel:
    """A robot with position ``p`` (1-D for a float ``p0``, d-D for a list; ``dp/dt = u``,
    unperturbed by measurements) carrying the energy ``eta`` (``d eta = -move_cost ||u||^2 dt -
    sum_s c_s dN_s``). ``xi = (p, eta)``; the control has the position's dimension."""
    p = torch.atleast_1d(torch.as_tensor(p0, dtype=torch.float64)).reshape(-1)
    d = p.numel()

    def f(xi, u, t):
        u = u.reshape(d)
        return torch.cat([u, -move_cost * (u * u).sum().reshape(1)])

    def jump(c: float):
        vec = torch.zeros(d + 1, dtype=torch.float64)
        vec[-1] = -float(c)
        return lambda xi, u, t: vec.to(xi)

    names = ("position",) if d == 1 else tuple(f"position_{i}" for i in range(d))
    return AuxiliaryModel(
        f,
        [jump(c) for c in costs],
        torch.cat([p, torch.tensor([float(eta0)])]),
        (*names, "energy"),
        input_only=True,
    )


def distance_noise(R0: float | Tensor, r: float, target, index=0):
    """``R(xi) = R0 * exp(r ||p - target||^2)`` with ``p = xi[index]`` (an int or a slice): a
    sensor whose noise grows with its platform's distance to the target (docs/cdkf.md; ``R0`` is the
    noise at zero distance). Returns a ``(xi, t) -> (d, d)`` callable for :class:`Sensor`."""
    R0 = torch.as_tensor(R0, dtype=torch.float64)
    R0 = R0.reshape(1, 1) if R0.ndim == 0 else R0
    if R0.ndim != 2 or R0.shape[0] != R0.shape[1] or bool((torch.linalg.eigvalsh(R0) <= 0).any()):
        raise ValueError(f"R0 must be a positive scalar or an SPD matrix, got {R0.tolist()}")
    r = as_real("r", r, low=0)
    target = torch.as_tensor(target, dtype=torch.float64)

    def R(xi, t):
        if xi is None:
            raise ValueError("distance_noise needs the auxiliary state xi (pass xi_path)")
        p = torch.atleast_1d(xi[index])
        return R0.to(xi) * torch.exp(r * ((p - target.to(xi)) ** 2).sum())

    return R


def mean_aux_bound(
    aux: AuxiliaryModel, rates: RateSchedule, controls: Tensor | None, n_steps: int
) -> Tensor:
    """``xi_hat`` on ``n_steps + 1`` grid points by RK4 (``controls``: ``(m_c, K)`` piecewise
    constant on the rates' grid, or None for no control); differentiable in rates and controls."""
    if len(aux.g) != rates.S:
        raise ValueError(f"the model has {len(aux.g)} jump terms, the rates {rates.S} sensors")
    if as_int("n_steps", n_steps, rates.K) % rates.K:
        raise ValueError(f"n_steps must be a positive multiple of K={rates.K}, got {n_steps}")
    h = rates.T / n_steps
    per = n_steps // rates.K
    zero = rates.values.new_zeros(1)
    if aux.input_only:  # RK4 of a right-hand side constant on each step is exact: cumulative sums
        r = _interval_rates(aux, rates.values, controls, rates.K)  # (K, m)
        steps = (h * r).repeat_interleave(per, 0)
        xi0 = aux.xi0.to(rates.values)
        return torch.cat([xi0[None], xi0 + torch.cumsum(steps, 0)])

    def rhs(xi, t, k):
        u = zero if controls is None else controls[:, k]
        out = aux.f(xi, u, t)
        for s, gs in enumerate(aux.g):
            out = out + rates.values[s, k] * gs(xi, u, t)
        return out

    xi = aux.xi0.to(rates.values)
    path = [xi]
    for i in range(n_steps):
        k, t = i // per, i * h
        k1 = rhs(xi, t, k)
        k2 = rhs(xi + 0.5 * h * k1, t + 0.5 * h, k)
        k3 = rhs(xi + 0.5 * h * k2, t + 0.5 * h, k)
        k4 = rhs(xi + h * k3, t + h, k)
        xi = xi + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        path.append(xi)
    return torch.stack(path)


def _interval_rates(aux: AuxiliaryModel, values: Tensor, controls: Tensor | None, K: int) -> Tensor:
    """``f(u_k) + sum_s lambda_sk g_s(u_k)`` per control interval, ``(K, m)``, for an
    ``input_only`` model (checked: perturbing ``xi`` and ``t`` must not change it)."""
    xi0 = aux.xi0.to(values)
    zero = values.new_zeros(1)

    def rhs(xi, t, k):
        u = zero if controls is None else controls[:, k]
        out = aux.f(xi, u, t)
        for s, gs in enumerate(aux.g):
            out = out + values[s, k] * gs(xi, u, t)
        return out

    if not getattr(aux, "_input_only_checked", False):
        with torch.no_grad():
            a, b = rhs(xi0, 0.0, 0), rhs(xi0 + 0.37, 1.3, 0)
        if not torch.allclose(a, b, rtol=1e-12, atol=1e-12):
            raise ValueError(
                "AuxiliaryModel(input_only=True) but its drift or jumps change with xi or t "
                f"({a.tolist()} at xi0, t = 0 vs {b.tolist()} at xi0 + 0.37, t = 1.3); "
                "set input_only=False"
            )
        aux._input_only_checked = True
    return torch.stack([rhs(xi0, 0.0, k) for k in range(K)])


def mean_aux_jacobian(
    aux: AuxiliaryModel, rates: RateSchedule, controls: Tensor | None, n_steps: int
) -> Tensor:
    """Jacobian of :func:`mean_aux_bound` for an ``input_only`` model, ``(n_steps + 1, m, S K +
    m_c K)`` (columns: the rates row-major, then the controls row-major), in closed form: node
    ``j`` is ``xi0 + h sum_k n_k(j) r_k`` with ``n_k(j)`` the steps of interval ``k`` before it, so
    its derivative is ``h sum_k n_k(j) dr_k``, and ``dr_k`` (each interval's own rates and
    control only) comes from one small autograd Jacobian."""
    if not aux.input_only:
        raise ValueError("mean_aux_jacobian needs an AuxiliaryModel with input_only=True")
    K, S = rates.K, rates.S
    per, h = n_steps // K, rates.T / n_steps
    values = rates.values.detach()
    u = None if controls is None else controls.detach()

    def r_of(v, c):
        return _interval_rates(aux, v, c, K)

    # r_k depends on interval k's own rates and control only, so the Jacobian of sum_k r_k holds
    # every block: m backward passes instead of K m
    if u is None:
        jv = torch.autograd.functional.jacobian(
            lambda v: r_of(v, None).sum(0), values, vectorize=True
        )  # (m, S, K)
        ju = values.new_zeros(jv.shape[0], 0, K)
    else:
        jv, ju = torch.autograd.functional.jacobian(
            lambda v, c: r_of(v, c).sum(0), (values, u), vectorize=True
        )  # (m, S, K), (m, m_c, K)
    jv, ju = jv.permute(2, 0, 1), ju.permute(2, 0, 1)  # (K, m, S), (K, m, m_c)
    m = jv.shape[1]
    nodes = torch.arange(n_steps + 1, dtype=values.dtype, device=values.device)
    starts = torch.arange(K, dtype=values.dtype, device=values.device) * per
    counts = (nodes[:, None] - starts[None]).clamp(0, per)  # (nodes, K): n_k(j)
    out = values.new_zeros(n_steps + 1, m, S, K)
    out += h * torch.einsum("jk,kms->jmsk", counts, jv)
    cols = [out.reshape(n_steps + 1, m, S * K)]
    if u is not None:
        mc = u.shape[0]
        cols.append((h * torch.einsum("jk,kmc->jmck", counts, ju)).reshape(n_steps + 1, m, mc * K))
    return torch.cat(cols, -1)
