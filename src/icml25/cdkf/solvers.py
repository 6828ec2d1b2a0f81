"""First-order solvers for the scheduling OCP (docs/cdkf.md, including the linear-budget special case).

``adam_al``: rates (and controls) through sigmoids onto their boxes, inequality constraints
``h(z) >= 0`` by an augmented Lagrangian with multipliers ``nu <- max(0, nu - rho h)``; our
defaults (docs/cdkf.md) ``rho0 = 10`` (doubled while the violation exceeds 1e-4), 10 outer x 200 inner Adam steps,
``lr = 0.05``. ``pgd``: projected gradient with Armijo backtracking onto the box-and-budget set,
the projection by bisection on the budget multiplier (``project_budget``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.progress import is_quiet

__all__ = ["adam_al", "pgd", "project_budget"]


def project_budget(
    lam: Tensor, costs: Tensor, budget: float, lam_max: float, dt: float = 1.0
) -> Tensor:
    """Euclidean projection of ``lam (S, K)`` onto ``{0 <= lam <= lam_max, dt sum_s c_s sum_k lam_sk <= B}``.

    KKT: the projection is ``clamp(lam - mu * w, 0, lam_max)`` with ``w = c_s dt`` and the smallest
    ``mu >= 0`` that meets the budget; the spent budget is monotone in ``mu``, so bisection finds it."""
    budget = as_real("budget", budget, low=0)
    lam_max = as_real("lam_max", lam_max, low=0, low_open=True)
    dt = as_real("dt", dt, low=0, low_open=True)
    w = (costs.to(lam.dtype)[:, None] * dt).expand_as(lam)
    x = lam.clamp(0.0, lam_max)
    if float((w * x).sum()) <= budget:
        return x
    lo, hi = 0.0, float((lam.clamp(min=0) / w.clamp(min=1e-300)).max()) + 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        spent = float((w * (lam - mid * w).clamp(0.0, lam_max)).sum())
        lo, hi = (mid, hi) if spent > budget else (lo, mid)
        if hi - lo <= 1e-15 * max(1.0, hi):
            break
    return (lam - hi * w).clamp(0.0, lam_max)


def _say(show: bool, msg: str) -> None:
    if show:
        print(msg, file=sys.stderr, flush=True)


def adam_al(
    objective: Callable[[Tensor], Tensor],
    constraints: Callable[[Tensor], Tensor] | None,
    low: Tensor,
    high: Tensor,
    z0: Tensor,
    *,
    outer: int = 10,
    inner: int = 200,
    lr: float = 0.05,
    rho0: float = 10.0,
    tol: float = 1e-4,
    decay: str = "cosine",
    progress: bool | None = None,
) -> tuple[Tensor, dict]:
    """Minimise ``objective(z)`` over the box ``[low, high]`` subject to ``constraints(z) >= 0``.

    ``z = low + (high - low) sigmoid(theta)``; the start ``z0`` is pulled 1e-6 inside the box.
    One Adam optimiser runs through all ``outer x inner`` steps. ``decay="cosine"`` (default)
    anneals its step size from ``lr`` to ``lr / 20`` over the whole run (constant-``lr`` Adam keeps
    oscillating around the constrained optimum); ``decay="none"`` keeps ``lr`` constant."""
    if decay not in ("cosine", "none"):
        raise ValueError(f"decay must be 'cosine' or 'none', got {decay!r}")
    outer = as_int("outer", outer, 1)
    inner = as_int("inner", inner, 1)
    lr = as_real("lr", lr, low=0, low_open=True)
    show = (not is_quiet()) if progress is None else progress
    span = high - low
    frac = ((z0 - low) / span).clamp(1e-6, 1 - 1e-6)
    theta = torch.logit(frac).detach().requires_grad_(True)

    def z_of(th: Tensor) -> Tensor:
        return low + span * torch.sigmoid(th)

    nu, rho, history = None, float(rho0), []
    opt = torch.optim.Adam([theta], lr=lr)  # one optimiser: its moments carry across outer steps
    total = outer * inner
    for it in range(outer):
        for j in range(inner):
            if decay == "cosine":
                done = (it * inner + j) / max(total - 1, 1)
                opt.param_groups[0]["lr"] = lr * (
                    0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * done))
                )
            opt.zero_grad()
            z = z_of(theta)
            loss = objective(z)
            if constraints is not None:
                h = constraints(z)
                if nu is None:
                    nu = torch.zeros_like(h)
                # Rockafellar's augmented Lagrangian term for h >= 0
                shifted = h - nu / rho
                loss = (
                    loss
                    + torch.where(
                        shifted <= 0, -nu * h + 0.5 * rho * h * h, -0.5 * nu * nu / rho
                    ).sum()
                )
            loss.backward()
            opt.step()
        with torch.no_grad():
            z = z_of(theta)
            obj = float(objective(z))
            viol = 0.0
            if constraints is not None:
                h = constraints(z)
                nu = (nu - rho * h).clamp(min=0.0)
                viol = float((-h).clamp(min=0).max()) if h.numel() else 0.0
        history.append((obj, viol))
        _say(show, f"adam_al outer {it + 1}/{outer}: objective {obj:.6g}, violation {viol:.2e}")
        if viol > tol:
            rho *= 2.0
    z = z_of(theta).detach()
    return z, {
        "iterations": outer * inner,
        "history": history,
        "violation": history[-1][1],
        "success": history[-1][1] <= tol,
        "status": "converged" if history[-1][1] <= tol else f"violation {history[-1][1]:.2e}",
    }


def pgd(
    objective: Callable[[Tensor], Tensor],
    project: Callable[[Tensor], Tensor],
    z0: Tensor,
    *,
    maxiter: int = 300,
    step: float = 1.0,
    ftol: float = 1e-10,
    progress: bool | None = None,
) -> tuple[Tensor, dict]:
    """Projected gradient descent with Armijo backtracking along the projection arc."""
    maxiter = as_int("maxiter", maxiter, 1)
    show = (not is_quiet()) if progress is None else progress
    z = project(z0.detach())

    def value_grad(x: Tensor) -> tuple[float, Tensor]:
        x = x.detach().requires_grad_(True)
        f = objective(x)
        (g,) = torch.autograd.grad(f, x)
        return float(f.detach()), g

    f, g = value_grad(z)
    status, it = "maxiter", 0
    for it in range(1, maxiter + 1):
        t = step
        while True:
            cand = project(z - t * g)
            with torch.no_grad():
                fc = float(objective(cand))
            if fc <= f + 1e-4 * float((g * (cand - z)).sum()) or t < 1e-12:
                break
            t *= 0.5
        if t < 1e-12:
            status = "line search failed (stationary to working precision)"
            break
        improvement = f - fc
        z = cand
        f, g = value_grad(z)
        step = min(4.0 * t, 1e6)
        if it % 25 == 0:
            _say(show, f"pgd iteration {it}: objective {f:.6g}")
        if improvement <= ftol * max(1.0, abs(f)):
            status = "converged"
            break
    return z.detach(), {"iterations": it, "status": status, "success": status == "converged"}
