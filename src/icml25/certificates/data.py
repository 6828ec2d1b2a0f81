"""Offline data and the auxiliary dataset of Algorithm 1 (docs/certificates.md, "Data")."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from icml25._validate import as_int
from icml25.certificates.cmdp import OfflineDataset, as_safe_mask

__all__ = ["AuxDataset", "OfflineDataset", "build_auxiliary_dataset", "fit_aux_regression"]


@dataclass
class AuxDataset:
    """Algorithm 1's rows ``(y = (x, k), u, m, y' = (x_hat', k - 1))``, ``|D~| = H |D|``;
    ``x_hat' = x'`` when ``x`` is safe, else ``x`` (the frozen MDP keeps a failed state)."""

    x: Tensor
    k: Tensor
    u: Tensor
    m: Tensor | None
    x_next: Tensor  # x_hat'

    def __len__(self) -> int:
        return self.x.numel()


def build_auxiliary_dataset(ds: OfflineDataset, safe_fn, horizon: int) -> AuxDataset:
    """Every transition at every ``k = 1..H`` (time-homogeneous dynamics, as the paper's
    reconstruction assumes), frozen at unsafe states. ``safe_fn``: a ``(X,)`` bool mask or a
    callable ``x (LongTensor) -> BoolTensor``."""
    horizon = as_int("horizon", horizon, 1)
    safe = safe_fn(ds.x) if callable(safe_fn) else as_safe_mask("safe_fn", safe_fn)[ds.x]
    x_hat = torch.where(safe.bool(), ds.x_next, ds.x)
    k = torch.arange(1, horizon + 1).repeat_interleave(len(ds))
    rep = lambda c: None if c is None else c.repeat(horizon)  # noqa: E731
    return AuxDataset(rep(ds.x), k, rep(ds.u), rep(ds.m), rep(x_hat))


def fit_aux_regression(
    aux: AuxDataset, safe, n_actions: int, n_mediators: int, horizon: int, pi_risk=None
) -> tuple[Tensor, Tensor]:
    """Eq. 44 solved literally on Algorithm 1's dataset with tabular features: for ``k = 1..H``
    the least-squares fit of the target ``V(x_hat', k-1)`` on cells ``(x, m, u')`` is the cell
    mean ``Q_M``, then the front-door recovery gives ``Q`` and ``V``. No backoff (a reference for
    :class:`~icml25.certificates.qfunctions.FrontDoorFQE`, which it equals where every cell has
    data). Returns ``Q (H+1, X, U)``, ``V (H+1, X)``."""
    from icml25.certificates.qfunctions import risk_policy

    safe = as_safe_mask("safe", safe)
    n_actions, n_mediators = (
        as_int("n_actions", n_actions, 1),
        as_int("n_mediators", n_mediators, 1),
    )
    horizon = as_int("horizon", horizon, 1)
    X, U, M, D = safe.numel(), n_actions, n_mediators, torch.float64
    pi = risk_policy(pi_risk, X, U, horizon)
    c = safe.to(D)
    one = torch.ones(len(aux), dtype=D)
    sel1 = aux.k == 1
    n_xu = torch.zeros(X, U, dtype=D).index_put_(
        (aux.x[sel1], aux.u[sel1]), one[sel1], accumulate=True
    )
    n_xum = torch.zeros(X, U, M, dtype=D).index_put_(
        (aux.x[sel1], aux.u[sel1], aux.m[sel1]), one[sel1], accumulate=True
    )
    p_b = n_xu / n_xu.sum(1, keepdim=True).clamp(min=1)
    p_m = n_xum / n_xu[..., None].clamp(min=1)
    Q = torch.zeros(horizon + 1, X, U, dtype=D)
    V = torch.zeros(horizon + 1, X, dtype=D)
    V[0], Q[0] = c, c[:, None].expand(X, U)
    for k in range(1, horizon + 1):
        s = aux.k == k
        target = V[k - 1][aux.x_next[s]]
        num = torch.zeros(X, M, U, dtype=D).index_put_(
            (aux.x[s], aux.m[s], aux.u[s]), target, accumulate=True
        )
        den = torch.zeros(X, M, U, dtype=D).index_put_(
            (aux.x[s], aux.m[s], aux.u[s]), one[s], accumulate=True
        )
        q_m = num / den.clamp(min=1)  # cell means: the least-squares solution
        Q[k] = c[:, None] * torch.einsum("xum,xv,xmv->xu", p_m, p_b, q_m)
        V[k] = c * (pi[k] * Q[k]).sum(-1)
    return Q, V
