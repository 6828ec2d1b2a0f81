"""Long-term safety values (the paper's auxiliary "frozen" MDP, Prop. 3.1) and their estimation
from confounded offline data by front-door causal RL (§3.3; docs/certificates.md, "Estimators").

With ``k`` steps to go: ``V(x, 0) = 1_C(x)``, ``Q(x, k, u) = 1_C(x) E_on[V(X', k-1) | x, do(u)]``,
``V(x, k) = 1_C(x) sum_u pi(u|x,k) Q(x, k, u)``; then ``V(x, H - t) = P(safe on t..H | X_t = x)``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.certificates.cmdp import OfflineDataset, as_safe_mask, check_distribution

__all__ = [
    "FrontDoorFQE",
    "NaiveFQE",
    "NeuralFrontDoorFQE",
    "SafetyQ",
    "exact_safety_q",
    "risk_policy",
]

D = torch.float64


def risk_policy(pi_risk, n_states: int, n_actions: int, horizon: int) -> Tensor:
    """The risk-evaluation policy as ``(H+1, X, U)`` (indexed by steps to go ``k``): None is
    uniform (the paper's choice), ``(U,)``, ``(X, U)`` or ``(H+1, X, U)``."""
    if pi_risk is None:
        return torch.full((horizon + 1, n_states, n_actions), 1.0 / n_actions, dtype=D)
    src = torch.as_tensor(pi_risk)
    p = src.to(D)
    ok = {1: (n_actions,), 2: (n_states, n_actions), 3: (horizon + 1, n_states, n_actions)}
    if p.ndim in ok and tuple(p.shape) == ok[p.ndim]:
        p = p.expand(horizon + 1, n_states, n_actions)
    if p.shape != (horizon + 1, n_states, n_actions):
        raise ValueError(
            f"pi_risk must be (U,), (X, U) or (H+1, X, U) = {(horizon + 1, n_states, n_actions)}, "
            f"got {tuple(p.shape)}"
        )
    return check_distribution("pi_risk", p.clone(), dtype=src.dtype)


def _horizon(horizon) -> int:
    return as_int("horizon", horizon, 1)


def _backward(kernel: Tensor, safe: Tensor, horizon: int, pi: Tensor) -> tuple[Tensor, Tensor]:
    """Backward induction; ``kernel`` may hold NaN rows (unidentified actions), which give NaN Q
    and are left out of V (pi renormalised over the identified actions)."""
    X, U, _ = kernel.shape
    c = safe.to(kernel.dtype)
    Q = torch.empty(horizon + 1, X, U, dtype=kernel.dtype, device=kernel.device)
    V = torch.empty(horizon + 1, X, dtype=kernel.dtype, device=kernel.device)
    V[0] = c
    Q[0] = c[:, None].expand(X, U)
    known = ~torch.isnan(kernel).any(-1)  # (X, U)
    k0 = torch.nan_to_num(kernel, nan=0.0)
    for k in range(1, horizon + 1):
        q = c[:, None] * (k0 @ V[k - 1])
        Q[k] = torch.where(known, q.clamp(0.0, 1.0), torch.full_like(q, float("nan")))
        w = pi[k].to(kernel) * known
        tot = w.sum(-1)
        v = (w * torch.nan_to_num(Q[k], nan=0.0)).sum(-1) / tot.clamp(min=1e-300)
        V[k] = c * torch.where(tot > 0, v, torch.zeros_like(v))
    return Q, V


def exact_safety_q(kernel, safe, horizon: int, pi_risk=None) -> tuple[Tensor, Tensor]:
    """``Q (H+1, X, U)`` and ``V (H+1, X)`` of the auxiliary MDP for a known interventional
    ``kernel (X, U, X')`` (Prop. 3.1 + Lemma 3.3); ``pi_risk`` as in :func:`risk_policy`."""
    kernel = check_distribution("kernel", kernel)
    if kernel.ndim != 3 or kernel.shape[0] != kernel.shape[2]:
        raise ValueError(f"kernel must be (X, U, X), got {tuple(kernel.shape)}")
    safe = as_safe_mask("safe", safe, kernel.shape[0])
    H = _horizon(horizon)
    return _backward(kernel, safe.to(kernel.device), H, risk_policy(pi_risk, *kernel.shape[:2], H))


@dataclass
class SafetyQ:
    """A learned (or exact) safety value: ``Q (H+1, X, U)``, ``V (H+1, X)`` indexed by steps to
    go ``k``; NaN marks actions whose effect is not identified from the data."""

    Q: Tensor
    V: Tensor
    safe: Tensor
    fit_info: dict = field(default_factory=dict)

    @property
    def horizon(self) -> int:
        return self.Q.shape[0] - 1

    def _index(self, x, k) -> tuple[int, int]:
        x, k = int(torch.as_tensor(x)), int(torch.as_tensor(k))
        if not 0 <= x < self.Q.shape[1]:
            raise ValueError(f"state must be in [0, {self.Q.shape[1]}), got {x}")
        if not 0 <= k <= self.horizon:
            raise ValueError(f"k (steps to go) must be in [0, {self.horizon}], got {k}")
        return x, k

    def q(self, x, k) -> Tensor:
        """``Q(x, k, .)``, ``(U,)``."""
        x, k = self._index(x, k)
        return self.Q[k, x]

    def v(self, x, k) -> float:
        x, k = self._index(x, k)
        return float(self.V[k, x])


class _TabularFQE:
    """Shared counting for the tabular estimators."""

    def __init__(
        self,
        horizon: int,
        safe,
        pi_risk=None,
        *,
        n_actions: int | None = None,
        n_mediators: int | None = None,
        backoff: bool = True,
        smoothing: float = 0.0,
    ):
        self.horizon = _horizon(horizon)
        self.safe = as_safe_mask("safe", safe)
        n_actions = None if n_actions is None else as_int("n_actions", n_actions, 1)
        n_mediators = None if n_mediators is None else as_int("n_mediators", n_mediators, 1)
        self.pi_risk, self.n_actions, self.n_mediators = pi_risk, n_actions, n_mediators
        self.backoff, self.smoothing = bool(backoff), as_real("smoothing", smoothing, low=0.0)

    def _sizes(self, ds: OfflineDataset) -> tuple[int, int]:
        X = self.safe.numel()
        for name in ("x", "x_next"):
            col = getattr(ds, name)
            if int(col.max()) >= X:
                raise ValueError(
                    f"dataset {name} has state {int(col.max())}, but safe has {X} states"
                )
        U = self.n_actions if self.n_actions is not None else int(ds.u.max()) + 1
        if int(ds.u.max()) >= U:
            raise ValueError(f"dataset has action {int(ds.u.max())} >= n_actions={U}")
        return X, U

    def _finish(self, kernel: Tensor, info: dict) -> SafetyQ:
        X, U = kernel.shape[:2]
        pi = risk_policy(self.pi_risk, X, U, self.horizon)
        unidentified = torch.isnan(kernel).any(-1) & self.safe[:, None]
        info["unidentified_actions"] = int(unidentified.sum())
        if info["unidentified_actions"]:
            warnings.warn(
                f"{info['unidentified_actions']} (safe state, action) pairs never taken in the "
                "data: their effect is not identified (Q = NaN, excluded from the certificate)",
                UserWarning,
                stacklevel=3,
            )
        Q, V = _backward(kernel, self.safe, self.horizon, pi)
        info["kernel"] = kernel
        return SafetyQ(Q, V, self.safe, info)


class FrontDoorFQE(_TabularFQE):
    """Front-door fitted-Q evaluation (tabular), the paper's causal RL: ``Q(x,k,u) = 1_C(x)
    sum_m P(m|x,u) sum_u' p_b(u'|x) E_off[V(X', k-1) | x, m, u']``, solved exactly by backward
    induction over ``k`` (Eq. 44 as fitted-Q evaluation on Algorithm 1's dataset; with tabular
    features the least-squares fit is the cell mean, so this equals regressing on
    :func:`~icml25.certificates.data.build_auxiliary_dataset`). Sparse cells back off: an empty
    ``(x, m, u')`` uses ``P(x'|x, m)``, an empty ``(x, m)`` uses ``P(x'|x)``; an unseen safe ``x``
    gets ``Q = 0`` (pessimistic); counts in ``fit_info``. ``smoothing`` adds that pseudo-count to
    every ``(x, m, u', x')`` cell (default 0)."""

    def fit(self, ds: OfflineDataset) -> SafetyQ:
        if ds.m is None:
            raise ValueError(
                "FrontDoorFQE needs the mediator column m (the front-door adjustment runs through "
                "it); without one only NaiveFQE applies, and it is biased under confounding"
            )
        X, U = self._sizes(ds)
        M = self.n_mediators if self.n_mediators is not None else int(ds.m.max()) + 1
        if int(ds.m.max()) >= M:
            raise ValueError(f"dataset has mediator {int(ds.m.max())} >= n_mediators={M}")
        n_xu = torch.zeros(X, U, dtype=D).index_put_(
            (ds.x, ds.u), torch.ones(len(ds), dtype=D), accumulate=True
        )
        n_xum = torch.zeros(X, U, M, dtype=D).index_put_(
            (ds.x, ds.u, ds.m), torch.ones(len(ds), dtype=D), accumulate=True
        )
        n_xmuy = (
            torch.zeros(X, M, U, X, dtype=D).index_put_(
                (ds.x, ds.m, ds.u, ds.x_next), torch.ones(len(ds), dtype=D), accumulate=True
            )
            + self.smoothing
        )
        n_x = n_xu.sum(1)
        p_b = n_xu / n_x[:, None].clamp(min=1)
        p_m = n_xum / n_xu[:, :, None].clamp(min=1)
        cell = n_xmuy.sum(-1)  # (X, M, U')
        p_off = n_xmuy / cell[..., None].clamp(min=1e-300)
        info = {"n_transitions": len(ds), "backoff_xmu": 0, "backoff_xm": 0, "unseen_states": 0}
        if self.backoff:
            pooled_xm = n_xmuy.sum(2)  # (X, M, X')
            n_xm = pooled_xm.sum(-1)
            p_xm = pooled_xm / n_xm[..., None].clamp(min=1e-300)
            pooled_x = pooled_xm.sum(1)  # (X, X')
            p_x = pooled_x / pooled_x.sum(-1, keepdim=True).clamp(min=1e-300)
            # only cells the formula uses: observed x, and m with P(m|x,u) > 0 for some u, u' with p_b > 0
            used = (n_x[:, None, None] > 0) & (p_m.amax(1)[:, :, None] > 0) & (p_b[:, None, :] > 0)
            empty = (cell == 0) & used
            xm_empty = empty & (n_xm == 0)[..., None]
            info["backoff_xmu"] = int((empty & ~xm_empty).sum())
            info["backoff_xm"] = int(xm_empty.sum())
            fill = torch.where((n_xm > 0)[..., None], p_xm, p_x[:, None, :])  # (X, M, X')
            p_off = torch.where((cell == 0)[..., None], fill[:, :, None, :], p_off)
        kernel = torch.einsum("xum,xv,xmvy->xuy", p_m, p_b, p_off)
        unseen = n_x == 0
        info["unseen_states"] = int((unseen & self.safe).sum())
        # unseen x: pessimistic Q = 0 (a kernel into an unsafe, absorbing nowhere: zero rows)
        kernel = torch.where(unseen[:, None, None], torch.zeros_like(kernel), kernel)
        never = (n_xu == 0) & ~unseen[:, None]  # positivity fails for (x, u)
        kernel = torch.where(never[..., None], torch.full_like(kernel, float("nan")), kernel)
        return self._finish(kernel, info)


class NaiveFQE(_TabularFQE):
    """Ordinary fitted-Q evaluation on the observational kernel ``P_off(x'|x, u)``: ignores the
    latent confounding (consistent only when the behaviour policy does not read ``W``)."""

    def fit(self, ds: OfflineDataset) -> SafetyQ:
        X, U = self._sizes(ds)
        n = (
            torch.zeros(X, U, X, dtype=D).index_put_(
                (ds.x, ds.u, ds.x_next), torch.ones(len(ds), dtype=D), accumulate=True
            )
            + self.smoothing
        )
        n_xu = n.sum(-1)
        kernel = n / n_xu[..., None].clamp(min=1e-300)
        unseen = n_xu.sum(-1) == 0
        info = {"n_transitions": len(ds), "unseen_states": int((unseen & self.safe).sum())}
        kernel = torch.where(unseen[:, None, None], torch.zeros_like(kernel), kernel)
        never = (n_xu == 0) & ~unseen[:, None]
        kernel = torch.where(never[..., None], torch.full_like(kernel, float("nan")), kernel)
        return self._finish(kernel, info)


class NeuralFrontDoorFQE(torch.nn.Module):
    """Front-door fitted-Q evaluation with networks, for states given by features (continuous
    ``X``; discrete mediators and actions). Defaults are ours (unverified; the paper's
    experiment is tabular): MLPs with hidden sizes (64, 64) and ReLU; Adam, lr 1e-3, batch 512,
    2,000 steps per regression.

    - ``p_b(u|x)`` and ``P(m|x, u)``: softmax classifiers (cross-entropy) on ``phi(x)`` and
      ``(phi(x), onehot(u))``.
    - ``Q_M(x, k, m, u')``: backward induction over ``k = 1..H``, one sigmoid MLP per ``k`` on
      ``(phi(x), onehot(m), onehot(u'))`` regressed (MSE) on ``V(x', k-1)``, where ``V`` comes
      from the previous ``k``'s network through the front-door recovery.

    ``features``: ``(X, d)`` per-state features (tabular states, e.g. one-hot) or a callable
    ``x (LongTensor) -> (n, d)``. :meth:`safety_q` tabulates the result for a finite state set.
    """

    def __init__(
        self,
        features,
        n_actions: int,
        n_mediators: int,
        horizon: int,
        safe,
        pi_risk=None,
        hidden=(64, 64),
        steps_per_k: int = 2000,
        lr: float = 1e-3,
        batch_size: int = 512,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.H = _horizon(horizon)
        self.U, self.M = as_int("n_actions", n_actions, 1), as_int("n_mediators", n_mediators, 1)
        self.safe = as_safe_mask("safe", safe)
        self._phi = features
        d = self.phi(torch.zeros(1, dtype=torch.long)).shape[-1]
        self.steps = as_int("steps_per_k", steps_per_k, 1)
        self.batch = as_int("batch_size", batch_size, 1)
        self.lr = as_real("lr", lr, low=0.0, low_open=True)
        gen = torch.Generator().manual_seed(as_int("seed", seed))
        init_seed = int(torch.randint(2**31 - 1, (1,), generator=gen))
        # the networks' initialisation draws from torch's global RNG: fork it, so that the
        # caller's RNG state is left as it was (same weights as seeding the global RNG would give)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            self._build(d, hidden)
        self.pi_risk = pi_risk
        self.fit_info: dict = {}

    def _build(self, d: int, hidden) -> None:

        def mlp(n_in: int, n_out: int) -> torch.nn.Sequential:
            layers, width = [], n_in
            for h in hidden:
                layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
                width = h
            return torch.nn.Sequential(*layers, torch.nn.Linear(width, n_out))

        # float32 networks (the probabilities they feed are float64)
        self.behavior_net = mlp(d, self.U)
        self.mediator_net = mlp(d + self.U, self.M)
        self.q_nets = torch.nn.ModuleList(mlp(d + self.M + self.U, 1) for _ in range(self.H))

    def phi(self, x: Tensor) -> Tensor:
        if callable(self._phi):
            return torch.as_tensor(self._phi(x), dtype=D)
        return torch.as_tensor(self._phi, dtype=D)[x]

    def _onehot(self, i: Tensor, n: int) -> Tensor:
        return torch.nn.functional.one_hot(i, n).to(D)

    def _train(self, net, inputs: Tensor, target: Tensor, loss: str) -> float:
        inputs = inputs.float()
        target = target if loss == "ce" else target.float()
        opt = torch.optim.Adam(net.parameters(), lr=self.lr)
        g = torch.Generator().manual_seed(len(self.fit_info))
        n = inputs.shape[0]
        last = float("nan")
        for _ in range(self.steps):
            idx = torch.randint(n, (min(self.batch, n),), generator=g)
            out = net(inputs[idx])
            if loss == "ce":
                value = torch.nn.functional.cross_entropy(out, target[idx])
            else:
                value = torch.nn.functional.mse_loss(torch.sigmoid(out[:, 0]), target[idx])
            opt.zero_grad()
            value.backward()
            opt.step()
            last = float(value.detach())
        return last

    def _q(self, phi_x: Tensor, k: int) -> Tensor:
        """``Q(x, k, u)`` for feature rows ``(n, d)``, ``(n, U)``, before the ``1_C(x)`` factor."""
        n = phi_x.shape[0]
        with torch.no_grad():
            phi_x = phi_x.float()
            p_b = torch.softmax(self.behavior_net(phi_x), -1).double()  # (n, U')
            eye_u, eye_m = torch.eye(self.U), torch.eye(self.M)
            xu = torch.cat([phi_x[:, None, :].expand(n, self.U, -1), eye_u.expand(n, -1, -1)], -1)
            p_m = torch.softmax(self.mediator_net(xu), -1).double()  # (n, U, M)
            rows = torch.cat(
                [
                    phi_x[:, None, None, :].expand(n, self.M, self.U, -1),
                    eye_m[None, :, None, :].expand(n, -1, self.U, -1),
                    eye_u[None, None, :, :].expand(n, self.M, -1, -1),
                ],
                -1,
            )
            q_m = torch.sigmoid(self.q_nets[k - 1](rows)[..., 0]).double()  # (n, M, U')
            return torch.einsum("num,nv,nmv->nu", p_m, p_b, q_m)

    def _v(self, x: Tensor, k: int, pi: Tensor) -> Tensor:
        c = self.safe[x].to(D)
        if k == 0:
            return c
        return c * (pi[k][x] * self._q(self.phi(x), k)).sum(-1)

    def fit(self, ds: OfflineDataset) -> NeuralFrontDoorFQE:
        if ds.m is None:
            raise ValueError("NeuralFrontDoorFQE needs the mediator column m")
        X = self.safe.numel()
        pi = risk_policy(self.pi_risk, X, self.U, self.H)
        keep = self.safe[ds.x]  # unsafe x has Q = 0: its rows carry no information
        x, u, m, xn = ds.x[keep], ds.u[keep], ds.m[keep], ds.x_next[keep]
        phi_x = self.phi(x)
        self.fit_info["loss_behavior"] = self._train(self.behavior_net, phi_x, u, "ce")
        self.fit_info["loss_mediator"] = self._train(
            self.mediator_net, torch.cat([phi_x, self._onehot(u, self.U)], -1), m, "ce"
        )
        rows = torch.cat([phi_x, self._onehot(m, self.M), self._onehot(u, self.U)], -1)
        for k in range(1, self.H + 1):
            target = self._v(xn, k - 1, pi)
            self.fit_info[f"loss_q{k}"] = self._train(self.q_nets[k - 1], rows, target, "mse")
        self.fit_info["clamped"] = 0  # sigmoid outputs stay in [0, 1]
        return self

    def safety_q(self) -> SafetyQ:
        """The fitted values tabulated on the states ``0..X-1`` (``features`` must cover them)."""
        X = self.safe.numel()
        pi = risk_policy(self.pi_risk, X, self.U, self.H)
        c = self.safe.to(D)
        phi = self.phi(torch.arange(X))
        Q = torch.empty(self.H + 1, X, self.U, dtype=D)
        V = torch.empty(self.H + 1, X, dtype=D)
        Q[0], V[0] = c[:, None].expand(X, self.U), c
        for k in range(1, self.H + 1):
            Q[k] = c[:, None] * self._q(phi, k)
            V[k] = c * (pi[k] * Q[k]).sum(-1)
        return SafetyQ(Q, V, self.safe, dict(self.fit_info))
