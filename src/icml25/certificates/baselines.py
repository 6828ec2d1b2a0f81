"""Baselines of the paper's experiment: the nominal controller and the discrete-time control
barrier function filter (DTCBF; Cosner, Culbertson, Taylor & Ames, RSS 2023, arXiv:2302.07469)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from icml25._validate import as_int, as_prob
from icml25.certificates.certificate import TOL, _select
from icml25.certificates.cmdp import OfflineDataset, _nominal, check_distribution

__all__ = ["DTCBFFilter", "NominalController", "offline_kernel"]

D = torch.float64


def offline_kernel(ds: OfflineDataset, n_states: int, n_actions: int) -> Tensor:
    """The observational statistics ``P_off(x'|x, u)`` of a dataset, ``(X, U, X')``; cells never
    seen are NaN."""
    n = torch.zeros(n_states, n_actions, n_states, dtype=D).index_put_(
        (ds.x, ds.u, ds.x_next), torch.ones(len(ds), dtype=D), accumulate=True
    )
    tot = n.sum(-1, keepdim=True)
    return torch.where(tot > 0, n / tot.clamp(min=1), torch.full_like(n, float("nan")))


class NominalController:
    """``u_t = U^n``: no filter (``n_states`` for the closed-loop table)."""

    def __init__(self, horizon: int, n_states: int) -> None:
        self.horizon = as_int("horizon", horizon, 1)
        self.n_states = as_int("n_states", n_states, 1)

    def __call__(self, x, t, u_nominal, generator=None):
        return as_int("u_nominal", u_nominal, 0), {}

    def table(self, nominal) -> Tensor:
        nominal = torch.as_tensor(nominal)
        nominal = _nominal(nominal, self.n_states, nominal.shape[-1])
        return nominal.expand(self.horizon, *nominal.shape).clone()


class DTCBFFilter:
    """Myopic stochastic CBF filter: certify ``u`` when ``E[h(X') | x, u] >= alpha_cbf h(x)``,
    with ``h >= 0`` on the safe set, and take the certified action closest to the nominal (ties:
    larger ``E[h]``, then lower index); none certified: ``argmax E[h]``.

    ``kernel_or_dataset``: a kernel ``(X, U, X')`` (``dtcbf_true`` with the interventional one)
    or an :class:`OfflineDataset`, whose observational statistics the paper's DTCBF uses.
    Unseen ``(x, u)`` cells are never certified. A dataset records no action space, so with one
    the number of actions comes from ``n_actions`` or ``len(action_values)``; without either it
    is refused (the largest action seen would miss actions the data never took).
    """

    def __init__(
        self,
        kernel_or_dataset,
        h,
        alpha_cbf: float = 0.5,
        horizon: int = 10,
        action_values=None,
        *,
        n_actions: int | None = None,
    ) -> None:
        h = torch.as_tensor(h, dtype=D).reshape(-1)
        alpha_cbf = as_prob("alpha_cbf", alpha_cbf)
        horizon = as_int("horizon", horizon, 1)
        if h.numel() < 1 or not bool(torch.isfinite(h).all()):
            raise ValueError(f"h must be a finite barrier value per state, got {h.tolist()[:8]}")
        n_actions = None if n_actions is None else as_int("n_actions", n_actions, 1)
        if action_values is not None:
            n_vals = torch.as_tensor(action_values).numel()
            if n_actions is not None and n_vals != n_actions:
                raise ValueError(
                    f"action_values has {n_vals} values but n_actions={n_actions}; give one "
                    "value per action"
                )
            n_actions = n_vals
        if isinstance(kernel_or_dataset, OfflineDataset):
            if n_actions is None:
                raise ValueError(
                    "DTCBFFilter(dataset) needs the number of actions: pass n_actions= (or "
                    "action_values=); a dataset does not record actions it never took"
                )
            U = n_actions
            seen = int(kernel_or_dataset.u.max())
            if seen >= U:
                raise ValueError(f"the dataset has action {seen}, but n_actions={U}")
            kernel = offline_kernel(kernel_or_dataset, h.numel(), U)
        else:
            kernel = torch.as_tensor(kernel_or_dataset)
            if kernel.ndim != 3 or kernel.shape[0] != kernel.shape[2]:
                raise ValueError(f"kernel must be (X, U, X), got {tuple(kernel.shape)}")
            if kernel.shape[0] != h.numel():
                raise ValueError(
                    f"h must have one value per state of the kernel ({kernel.shape[0]}), got {h.numel()}"
                )
            kernel = check_distribution("kernel", kernel)
            if n_actions is not None and kernel.shape[1] != n_actions:
                raise ValueError(
                    f"the kernel has {kernel.shape[1]} actions, but {n_actions} were given "
                    "(n_actions/action_values)"
                )
        self.h, self.alpha, self.horizon = h, alpha_cbf, horizon
        self.expected_h = kernel @ h  # (X, U); NaN for unseen cells
        U = kernel.shape[1]
        vals = (
            torch.arange(U, dtype=D)
            if action_values is None
            else torch.as_tensor(action_values, dtype=D)
        )
        self.action_values = vals

    def feasible(self, x) -> Tensor:
        e = self.expected_h[int(x)]
        return ~torch.isnan(e) & (e >= self.alpha * self.h[int(x)] - TOL)

    def _choose(self, feas: Tensor, eh: Tensor, un: int) -> Tensor:
        d = (self.action_values - self.action_values[un]).abs().expand_as(eh)
        u = _select(feas, eh, d)
        best = torch.nan_to_num(eh, nan=-math.inf).argmax(-1)
        return torch.where(u < 0, best, u)

    def __call__(self, x, t, u_nominal, generator=None):
        X, U = self.expected_h.shape
        x, un = as_int("x", x), as_int("u_nominal", u_nominal)
        if not 0 <= x < X or not 0 <= un < U:
            raise ValueError(f"x must be in [0, {X}) and u_nominal in [0, {U}), got {x} and {un}")
        feas = self.feasible(x)
        u = int(self._choose(feas, self.expected_h[x], un))
        return u, {"fallback": not bool(feas.any())}

    def table(self, nominal) -> Tensor:
        X, U = self.expected_h.shape
        nominal = _nominal(nominal, X, U)
        feas = ~torch.isnan(self.expected_h) & (
            self.expected_h >= self.alpha * self.h[:, None] - TOL
        )
        out = torch.zeros(X, U, dtype=D)
        for un in range(U):
            u = self._choose(feas, self.expected_h, un)
            out.scatter_add_(-1, u[:, None], nominal[:, un : un + 1])
        return out.expand(self.horizon, X, U).clone()
