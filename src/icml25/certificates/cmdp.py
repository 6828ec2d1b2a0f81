"""Tabular confounded MDPs (Jing & Nakahira, ICML 2025, §2; docs/certificates.md, "Model").

A latent ``W_t ~ P_W(.|X_t)`` drives both the offline behaviour policy ``pi_b(u|x, w)`` and the
transition ``P(x'|x, m, w)``; the action acts on the next state only through the observed mediator
``M_t ~ P_M(.|x, u)`` (front-door, Assumption 3.5). Offline (observational) and online
(interventional) transition statistics therefore differ whenever ``pi_b`` reads ``W``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from icml25._validate import as_int

__all__ = ["OfflineDataset", "RolloutResult", "TabularConfoundedMDP", "check_distribution"]

D = torch.float64


def as_safe_mask(name: str, safe, n_states: int | None = None) -> Tensor:
    """``safe`` as a 1-D ``BoolTensor``: a boolean mask, or integers that are all 0 or 1. A float
    mask is refused (``0.3`` would otherwise read as True), and so is any other integer."""
    t = torch.as_tensor(safe)
    if t.dtype != torch.bool:
        if t.is_floating_point() or t.is_complex() or not bool(((t == 0) | (t == 1)).all()):
            bad = t.reshape(-1)[~((t == 0) | (t == 1)).reshape(-1)] if t.numel() else t
            example = bad[0].item() if bad.numel() else None
            raise ValueError(
                f"{name} must be a boolean mask (bool, or integers 0/1), got dtype {t.dtype}"
                + (f" with value {example!r}" if example is not None else "")
            )
        t = t.bool()
    if t.ndim != 1:
        raise ValueError(
            f"{name} must be a 1-D mask (one entry per state), got shape {tuple(t.shape)}"
        )
    if n_states is not None and t.numel() != n_states:
        raise ValueError(f"{name} must be a (X={n_states},) mask, got shape {tuple(t.shape)}")
    return t


def distribution_tolerance(dtype: torch.dtype, n_terms: int = 1) -> float:
    """How far from 1 a sum of ``n_terms`` probabilities stored in ``dtype`` may be: 1e-9 for
    float64 and integers, else ``max(1e-5, n_terms * eps(dtype))`` (float32 ``ones(5) / 5`` sums
    to 1 + 1.5e-8; bfloat16's to 1 + 1e-3)."""
    if dtype == torch.float64 or not dtype.is_floating_point:
        return 1e-9
    return max(1e-5, max(int(n_terms), 1) * torch.finfo(dtype).eps)


def check_distribution(
    name: str, p: Tensor, dims: int = 1, tol: float | None = None, dtype: torch.dtype | None = None
) -> Tensor:
    """``p`` as float64 with its last ``dims`` axes a probability distribution (sums within
    ``tol`` of 1, by default :func:`distribution_tolerance` of the input's dtype; ``dtype``: the
    dtype the values came in with when ``p`` was cast already; renormalised), or ValueError."""
    p = torch.as_tensor(p)
    src = dtype if dtype is not None else p.dtype
    if p.ndim < dims:
        raise ValueError(f"{name} must have at least {dims} axis(es), got shape {tuple(p.shape)}")
    if tol is None:
        n_terms = 1
        for s in p.shape[p.ndim - dims :]:
            n_terms *= int(s)
        tol = distribution_tolerance(src, n_terms)
    p = p.to(D)
    if not bool(torch.isfinite(p).all()):
        raise ValueError(f"{name} must be finite")
    if bool((p < 0).any()):
        raise ValueError(f"{name} has negative probabilities (min {float(p.min()):.3g})")
    total = p.sum(dim=tuple(range(-dims, 0)))
    bad = (total - 1).abs() > tol
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} must sum to 1 over its last {dims} axis(es) (tolerance {tol:g}); at {idx} it "
            f"sums to {float(total[idx]):.12g}"
        )
    return p / total.reshape(*total.shape, *([1] * dims))


@dataclass
class OfflineDataset:
    """Transitions ``(x, u, m, x_next, t)`` as LongTensors of equal length (the latent is never
    recorded). ``m`` is the mediator; None for data without one (the naive estimator only)."""

    x: Tensor
    u: Tensor
    m: Tensor | None
    x_next: Tensor
    t: Tensor | None = None

    def __post_init__(self) -> None:
        cols = {"x": self.x, "u": self.u, "x_next": self.x_next}
        if self.m is not None:
            cols["m"] = self.m
        if self.t is not None:
            cols["t"] = self.t
        n = None
        for name, col in cols.items():
            col = torch.as_tensor(col)
            if col.is_floating_point():
                if not bool((col == col.round()).all()):
                    raise ValueError(f"{name} must hold integer indices, got non-integers")
                col = col.long()
            if col.ndim > 1:
                raise ValueError(
                    f"{name} must be a 1-D column of indices, got shape {tuple(col.shape)}"
                )
            col = col.long().reshape(-1)
            if bool((col < 0).any()):
                raise ValueError(f"{name} must hold indices >= 0, got {int(col.min())}")
            if n is not None and col.numel() != n:
                raise ValueError(f"all columns must have the same length; {name} has {col.numel()}")
            n = col.numel()
            setattr(self, name, col)
        if n == 0:
            raise ValueError("the dataset is empty")

    def __len__(self) -> int:
        return self.x.numel()

    @classmethod
    def from_frame(
        cls, frame, x="x", u="u", m="m", x_next="x_next", t: str | None = "t"
    ) -> OfflineDataset:
        """From a pandas DataFrame (or any mapping of columns, e.g. an OPE library's arrays with
        an extra mediator column); ``m=None`` for data without a mediator."""

        import numpy as np

        def col(name):
            if name is None:
                return None
            if name not in frame:
                raise ValueError(
                    f"the frame has no column {name!r} (columns: {list(frame)}); name it with "
                    f"x=/u=/m=/x_next=, or m=None for data without a mediator"
                )
            arr = np.array(frame[name])
            if arr.dtype.kind == "O":  # pandas' nullable or mixed columns: numbers or nothing
                try:
                    arr = arr.astype(np.float64)
                except (TypeError, ValueError):
                    arr = None
            if arr is None or arr.dtype.kind not in "biuf":
                shown_dtype = frame[name].dtype if hasattr(frame[name], "dtype") else "object"
                raise ValueError(
                    f"column {name!r} must hold integer indices, got dtype {shown_dtype}"
                )
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                raise ValueError(f"column {name!r} must hold integer indices, got NaN or inf")
            return torch.as_tensor(arr)

        has_t = t is not None and t in frame
        return cls(
            col(x),
            col(u),
            col(m) if m is not None else None,
            col(x_next),
            col(t) if has_t else None,
        )


@dataclass
class RolloutResult:
    """Monte-Carlo rollouts: states ``(n, H+1)``, actions ``(n, H)``, ``safe_through (n, H+1)``
    (safe at every step up to t)."""

    states: Tensor
    actions: Tensor
    safe_through: Tensor


class TabularConfoundedMDP:
    """``p_w (X, W)``, ``p_m (X, U, M)``, ``trans (X, M, W, X')``, ``safe (X,)`` bool and
    ``behavior (X, W, U)`` (the offline policy). Every distribution is checked to sum to 1."""

    def __init__(self, p_w, p_m, trans, safe, behavior) -> None:
        self.p_w = check_distribution("p_w", p_w)
        if self.p_w.ndim != 2 or self.p_w.shape[0] < 1:
            raise ValueError(f"p_w must be (X, W) with X >= 1, got shape {tuple(self.p_w.shape)}")
        self.p_m = check_distribution("p_m", p_m)
        self.trans = check_distribution("trans", trans)
        self.behavior = check_distribution("behavior", behavior)
        X, W = self.p_w.shape
        if self.p_m.ndim != 3 or self.p_m.shape[0] != X:
            raise ValueError(
                f"p_w has X={X} states, so p_m must be (X={X}, U, M); got {tuple(self.p_m.shape)}"
            )
        _, U, M = self.p_m.shape
        if self.trans.shape != (X, M, W, X):
            raise ValueError(
                f"trans must be (X, M, W, X') = {(X, M, W, X)}, got {tuple(self.trans.shape)}"
            )
        if self.behavior.shape != (X, W, U):
            raise ValueError(
                f"behavior must be (X, W, U) = {(X, W, U)}, got {tuple(self.behavior.shape)}"
            )
        self.safe = as_safe_mask("safe", safe, X)
        self.n_states, self.n_latents, self.n_actions, self.n_mediators = X, W, U, M

    # -- kernels -------------------------------------------------------------------------------
    def interventional_kernel(self) -> Tensor:
        """``P_on(x'|x, do(u)) = sum_w P_W(w|x) sum_m P_M(m|x,u) P(x'|x,m,w)``, ``(X, U, X')``."""
        return torch.einsum("xw,xum,xmwy->xuy", self.p_w, self.p_m, self.trans)

    def latent_given_action(self) -> Tensor:
        """``P_b(w|x, u) ∝ P_W(w|x) pi_b(u|x, w)``, ``(X, U, W)``; where ``u`` is never taken
        offline, ``P_W(w|x)`` (no information)."""
        joint = self.p_w[:, :, None] * self.behavior  # (X, W, U)
        tot = joint.sum(1, keepdim=True)
        post = torch.where(tot > 0, joint / tot.clamp(min=1e-300), self.p_w[:, :, None])
        return post.permute(0, 2, 1)

    def observational_kernel(self) -> Tensor:
        """``P_off(x'|x, u) = sum_w P_b(w|x,u) sum_m P_M(m|x,u) P(x'|x,m,w)``, ``(X, U, X')``."""
        return torch.einsum("xuw,xum,xmwy->xuy", self.latent_given_action(), self.p_m, self.trans)

    def behavior_marginal(self) -> Tensor:
        """``p_b(u|x) = sum_w P_W(w|x) pi_b(u|x, w)``, ``(X, U)``."""
        return torch.einsum("xw,xwu->xu", self.p_w, self.behavior)

    def frontdoor_kernel_population(self) -> Tensor:
        """The front-door formula with exact probabilities: ``sum_m P(m|x,u) sum_u' p_b(u'|x)
        P_off(x'|x, m, u')``, with ``P_off(x'|x,m,u') = sum_w P_b(w|x,u') P(x'|x,m,w)``. Equals
        the interventional kernel under Assumption 3.5."""
        off_m = torch.einsum(
            "xvw,xmwy->xmvy", self.latent_given_action(), self.trans
        )  # (X,M,U',X')
        inner = torch.einsum("xv,xmvy->xmy", self.behavior_marginal(), off_m)
        return torch.einsum("xum,xmy->xuy", self.p_m, inner)

    # -- sampling ------------------------------------------------------------------------------
    def _init(self, n: int, init, generator) -> Tensor:
        if isinstance(init, str):
            if init != "uniform":
                raise ValueError(f"init must be 'uniform' or a tensor of states, got {init!r}")
            return torch.randint(self.n_states, (n,), generator=generator)
        x0 = torch.as_tensor(init)
        if x0.is_floating_point() and not bool((x0 == x0.round()).all()):
            raise ValueError("init must be 'uniform' or integer start states, got non-integers")
        x0 = x0.long().reshape(-1)
        if x0.numel() == 1:
            x0 = x0.expand(n)
        if x0.numel() != n:
            raise ValueError(
                f"init must hold one start state or n_traj = {n} of them, got {x0.numel()}"
            )
        self._check_states("init", x0)
        return x0.clone()

    def _check_states(self, name: str, x: Tensor) -> None:
        if x.numel() and (int(x.min()) < 0 or int(x.max()) >= self.n_states):
            raise ValueError(f"{name} must be states in [0, {self.n_states}), got {x.tolist()[:8]}")

    @staticmethod
    def _draw(probs: Tensor, generator) -> Tensor:
        u = torch.rand(probs.shape[0], 1, generator=generator, dtype=probs.dtype)
        return (probs.cumsum(-1) < u).sum(-1).clamp(max=probs.shape[-1] - 1)  # inverse CDF

    def sample_offline(
        self, n_traj: int, horizon: int, init="uniform", generator=None
    ) -> OfflineDataset:
        """``n_traj`` behaviour-policy trajectories of ``horizon`` steps (vectorised)."""
        n_traj, horizon = as_int("n_traj", n_traj, 1), as_int("horizon", horizon, 1)
        x = self._init(n_traj, init, generator)
        cols = {k: [] for k in ("x", "u", "m", "x_next", "t")}
        for t in range(horizon):
            w = self._draw(self.p_w[x], generator)
            u = self._draw(self.behavior[x, w], generator)
            m = self._draw(self.p_m[x, u], generator)
            xn = self._draw(self.trans[x, m, w], generator)
            for k, v in zip(cols, (x, u, m, xn, torch.full_like(x, t))):
                cols[k].append(v)
            x = xn
        return OfflineDataset(*(torch.cat(cols[k]) for k in ("x", "u", "m", "x_next", "t")))

    def step_online(self, x: Tensor, u: Tensor, generator=None) -> tuple[Tensor, Tensor, Tensor]:
        """One online step for a batch: ``(x_next, m, w)`` under ``do(u)``."""
        x, u = torch.as_tensor(x).long(), torch.as_tensor(u).long()
        self._check_states("x", x)
        if u.numel() and (int(u.min()) < 0 or int(u.max()) >= self.n_actions):
            raise ValueError(f"u must be actions in [0, {self.n_actions}), got {u.tolist()[:8]}")
        w = self._draw(self.p_w[x], generator)
        m = self._draw(self.p_m[x, u], generator)
        return self._draw(self.trans[x, m, w], generator), m, w

    def rollout(
        self, controller, n: int, x0, horizon: int, nominal, generator=None
    ) -> RolloutResult:
        """``n`` online trajectories under ``controller`` (see docs: ``controller(x, t, u_nominal,
        generator) -> (u, info)``; a controller with ``.table(nominal)`` is sampled from its
        table, vectorised) with the nominal policy ``nominal (X, U)`` or ``(U,)``."""
        nominal = _nominal(nominal, self.n_states, self.n_actions)
        x = self._init(n, x0, generator)
        states, actions = [x], []
        table = controller.table(nominal) if hasattr(controller, "table") else None
        for t in range(horizon):
            if table is not None:
                u = self._draw(table[t, x], generator)
            else:
                un = self._draw(nominal[x], generator)
                u = torch.tensor(
                    [
                        int(controller(int(xi), t, int(ui), generator)[0])
                        for xi, ui in zip(x.tolist(), un.tolist())
                    ]
                )
            x = self.step_online(x, u, generator)[0]
            states.append(x)
            actions.append(u)
        S = torch.stack(states, 1)
        safe_through = torch.cumprod(self.safe[S].to(torch.int64), 1).bool()
        return RolloutResult(S, torch.stack(actions, 1), safe_through)


def _nominal(nominal, X: int, U: int) -> Tensor:
    src = torch.as_tensor(nominal)
    p = src.to(D)
    if p.ndim == 1 and p.shape[0] == U:
        p = p.expand(X, U)
    if p.shape != (X, U):
        raise ValueError(
            f"the nominal policy must be (U={U},) or (X={X}, U={U}), got {tuple(p.shape)}"
        )
    return check_distribution("nominal policy", p, dtype=src.dtype)
