"""Exact and Monte-Carlo closed-loop safety of a controller (docs/certificates.md)."""

from __future__ import annotations

import torch
from torch import Tensor

from icml25._validate import as_int
from icml25.certificates.cmdp import TabularConfoundedMDP, _nominal

__all__ = ["exact_closed_loop_safety", "monte_carlo_safety", "progress"]

D = torch.float64


def _table(mdp: TabularConfoundedMDP, table: Tensor) -> Tensor:
    from icml25.certificates.cmdp import check_distribution

    src = torch.as_tensor(table)
    table = src.to(D)
    if table.ndim != 3 or table.shape[1:] != (mdp.n_states, mdp.n_actions):
        raise ValueError(
            f"the controller table must be (H, X={mdp.n_states}, U={mdp.n_actions}), got "
            f"{tuple(table.shape)}"
        )
    return check_distribution("the controller table (action probabilities)", table, dtype=src.dtype)


def _x0(mdp: TabularConfoundedMDP, x0) -> int:
    x0 = as_int("x0", x0)
    if not 0 <= x0 < mdp.n_states:
        raise ValueError(f"x0 must be a state in [0, {mdp.n_states}), got {x0}")
    return x0


def exact_closed_loop_safety(mdp: TabularConfoundedMDP, table, x0) -> tuple[float, Tensor]:
    """``P(X_0..X_H all safe)`` and the curve ``P(safe through t)``, ``(H+1,)``, by forward
    recursion of the online dynamics with failure absorbing; ``table (H, X, U)`` holds the
    controller's action probabilities for ``t = 0..H-1``."""
    table = _table(mdp, table)
    x0 = _x0(mdp, x0)
    K = mdp.interventional_kernel()
    c = mdp.safe.to(D)
    alive = torch.zeros(mdp.n_states, dtype=D)
    alive[x0] = 1.0
    alive = alive * c
    curve = [alive.sum()]
    for t in range(table.shape[0]):
        alive = torch.einsum("x,xu,xuy->y", alive, table[t], K) * c
        curve.append(alive.sum())
    curve = torch.stack(curve)
    return float(curve[-1]), curve


def progress(mdp: TabularConfoundedMDP, table, x0, value) -> float:
    """``E[sum_{t<H} value(X_t)]`` over all trajectories (also after a violation, where the
    controllers return the nominal action), e.g. the distance travelled with ``value = v``."""
    table = _table(mdp, table)
    x0 = _x0(mdp, x0)
    K = mdp.interventional_kernel()
    value = torch.as_tensor(value, dtype=D)
    if value.shape != (mdp.n_states,):
        raise ValueError(
            f"value must be one number per state ({mdp.n_states},), got {tuple(value.shape)}"
        )
    d = torch.zeros(mdp.n_states, dtype=D)
    d[x0] = 1.0
    total = 0.0
    for t in range(table.shape[0]):
        total += float(d @ value)
        d = torch.einsum("x,xu,xuy->y", d, table[t], K)
    return total


def monte_carlo_safety(
    mdp: TabularConfoundedMDP,
    controller,
    n_sims: int = 100,
    n_traj: int = 100,
    x0=0,
    generator=None,
    nominal=None,
    horizon: int | None = None,
) -> dict:
    """The paper's evaluation: ``n_sims`` simulations of ``n_traj`` online trajectories; per
    simulation the fraction safe through every ``t``. Returns ``mean``, ``ci95`` (t-interval over
    the simulations), ``curve_mean`` and ``curve_ci`` ``(H+1, 2)``, and ``per_sim``."""
    from icml25.report.stats import mean_t_interval

    def t_interval(values):
        iv = mean_t_interval(values)
        return iv.low, iv.high

    if nominal is None:
        raise ValueError("monte_carlo_safety needs the nominal policy (X, U) or (U,)")
    nominal = _nominal(nominal, mdp.n_states, mdp.n_actions)
    n_sims, n_traj = as_int("n_sims", n_sims, 2), as_int("n_traj", n_traj, 1)
    if hasattr(controller, "table"):
        n_table = controller.table(nominal).shape[0]
        steps = n_table if horizon is None else as_int("horizon", horizon, 1)
        if steps > n_table:
            raise ValueError(f"horizon {steps} exceeds the controller's table ({n_table} steps)")
        H = steps
    elif horizon is None:
        raise ValueError("a controller without .table needs horizon= (the number of steps)")
    else:
        H = as_int("horizon", horizon, 1)
    roll = mdp.rollout(controller, n_sims * n_traj, x0, H, nominal, generator)
    frac = roll.safe_through.to(D).reshape(n_sims, n_traj, H + 1).mean(1)  # (n_sims, H+1)
    per_sim = frac[:, -1]
    lo, hi = t_interval(per_sim.tolist())
    curve_ci = torch.tensor([t_interval(frac[:, t].tolist()) for t in range(H + 1)], dtype=D)
    return {
        "mean": float(per_sim.mean()),
        "ci95": (lo, hi),
        "curve_mean": frac.mean(0),
        "curve_ci": curve_ci,
        "per_sim": per_sim,
    }
