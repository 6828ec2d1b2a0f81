"""The safety certificate (Lemma 3.3) and its controller-agnostic filter (Algorithm 2,
problem (55)); docs/certificates.md, "Certificate".

``S(x, u, t) = Q(x, k, u) - sum_u' pi(u'|x, k) Q(x, k, u')`` with ``k = H - t``: an action is
certified when its long-term safety value is at least the risk policy's average. Theorem 3.2:
choosing certified actions keeps ``E[V(Y_t)]`` non-decreasing, so the whole-horizon safety
probability stays at least ``V(x0, H)``; Theorem 3.4: ``argmax_u Q`` is always certified.
Extension (ours, default off): ``S_alpha = S + alpha (V - (1 - eps))``, which still keeps the
probability above ``1 - eps`` while allowing more of the nominal policy.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.certificates.qfunctions import SafetyQ, risk_policy

__all__ = ["SafetyCertificate", "candidate_filter"]

D = torch.float64
TOL = 1e-12  # margins this close to 0 count as certified (rounding)


def _select(feasible: Tensor, Q: Tensor, dist: Tensor) -> Tensor:
    """Index of the feasible action closest to the nominal (``dist`` per action), ties to the
    larger Q, then the lower index; batched over leading dimensions. Rows with no feasible action
    return -1."""
    inf = torch.tensor(math.inf, dtype=dist.dtype, device=dist.device)
    d = torch.where(feasible, dist, inf)
    best = d.min(-1, keepdim=True).values
    cand = feasible & (d == best)
    q = torch.where(cand, torch.nan_to_num(Q, nan=-math.inf), -inf)
    idx = q.argmax(-1)  # the first maximum: the lower index among equal Q
    return torch.where(cand.any(-1), idx, torch.full_like(idx, -1))


class SafetyCertificate:
    """Certificate from a :class:`~icml25.certificates.qfunctions.SafetyQ`.

    Args:
        q: the interventional safety value (``FrontDoorFQE(...).fit(data)`` or exact).
        pi_risk: the risk-evaluation policy the Q was computed for (None: uniform, the paper's).
        eps: tolerance, the objective is ``P(safe on 0..H) >= 1 - eps`` (paper: 0.2).
        alpha: the tolerance-tight extension's weight in ``[0, 1]`` (0: the paper's certificate).
        action_values: the actions' values for the distance to the nominal (default
            ``0..U-1``; e.g. ``(-3, -2, -1, 0, 1)``).
    """

    def __init__(
        self, q: SafetyQ, pi_risk=None, eps: float = 0.2, alpha: float = 0.0, action_values=None
    ) -> None:
        if not isinstance(q, SafetyQ):
            raise ValueError(
                f"q must be a SafetyQ (from FrontDoorFQE.fit or exact), got {type(q).__name__}"
            )
        eps = as_real("eps", eps, low=0.0, high=1.0, low_open=True, high_open=True)
        alpha = as_real("alpha", alpha, low=0.0, high=1.0)
        self.q, self.eps, self.alpha = q, float(eps), float(alpha)
        self.H = q.horizon
        X, U = q.Q.shape[1:]
        self.pi = risk_policy(pi_risk, X, U, self.H).to(q.Q.device)
        if pi_risk is not None:  # the margin reads q.V: it must be this policy's average of Q
            known = ~torch.isnan(q.Q[1:])
            w = self.pi[1:] * known
            avg = (w * torch.nan_to_num(q.Q[1:])).sum(-1) / w.sum(-1).clamp(min=1e-300)
            avg = q.safe.to(avg) * avg
            gap = float((avg - q.V[1:]).abs().max())
            if gap > 1e-9:
                raise ValueError(
                    f"pi_risk is not the policy this Q was evaluated for (its average of Q differs "
                    f"from q.V by up to {gap:.3g}); fit the Q with this pi_risk, or leave it out"
                )
        vals = (
            torch.arange(U, dtype=D)
            if action_values is None
            else torch.as_tensor(action_values, dtype=D)
        )
        if vals.shape != (U,):
            raise ValueError(
                f"action_values must have one value per action ({U}), got {tuple(vals.shape)}"
            )
        if not bool(torch.isfinite(vals).all()):
            raise ValueError(f"action_values must be finite, got {vals.tolist()}")
        self.action_values = vals.to(q.Q.device)
        self._margins = self._all_margins()

    def _all_margins(self) -> Tensor:
        """``S_alpha`` for every ``(k, x, u)``, ``(H+1, X, U)``; NaN where Q is unidentified."""
        Q, V = self.q.Q, self.q.V
        return Q - V[..., None] + self.alpha * (V[..., None] - (1.0 - self.eps))

    def _k(self, t) -> int:
        t = as_int("t", t)
        if t < 0 or t >= self.H:
            raise IndexError(f"t must be in [0, H) = [0, {self.H}), got {t}")
        return self.H - t

    def margin(self, x, u, t) -> float:
        """``S(x, u, t)`` (``S_alpha`` with ``alpha > 0``)."""
        k = self._k(t)
        x, u = as_int("x", x), as_int("u", u)
        if not 0 <= u < self.q.Q.shape[2]:
            raise ValueError(f"action must be in [0, {self.q.Q.shape[2]}), got {u}")
        return float(self._margins[k, self.q._index(x, k)[0], u])

    def feasible(self, x, t) -> Tensor:
        """Certified actions at ``(x, t)``, ``BoolTensor (U,)``."""
        k = self._k(t)
        m = self._margins[k, self.q._index(x, k)[0]]
        return ~torch.isnan(m) & (m >= -TOL)

    def filter(self, x, t, u_nominal, distance: str = "abs") -> tuple[int, dict]:
        """The certified action closest to ``u_nominal`` (``distance="abs"`` or ``"sq"``; ties:
        larger Q, then lower index). Unsafe ``x``: the nominal, ``info["unsafe_state"]``. No
        certified action (only with ``alpha > 0``): ``argmax Q``, ``info["fallback"]``; no
        identified action at all: the nominal, ``info["unidentified"]``."""
        if distance not in ("abs", "sq"):
            raise ValueError(f"distance must be 'abs' or 'sq', got {distance!r}")
        k = self._k(t)
        x = self.q._index(as_int("x", x), k)[0]
        un = as_int("u_nominal", u_nominal)
        U = self.q.Q.shape[2]
        if not 0 <= un < U:
            raise ValueError(f"u_nominal must be an action in [0, {U}), got {un}")
        info = {
            "unsafe_state": False,
            "fallback": False,
            "unidentified": False,
            "uninformative": False,
        }
        if not bool(self.q.safe[x]):
            info["unsafe_state"] = True
            return un, info
        feas = self.feasible(x, t)
        Q = self.q.Q[k, x]
        # all actions valued 0 at a safe state (unseen in the data: pessimistic Q = 0): every
        # action is certified, so the certificate cannot tell them apart
        info["uninformative"] = bool((torch.nan_to_num(Q, nan=0.0) == 0).all())
        d = (self.action_values - self.action_values[un]).abs()
        d = d if distance == "abs" else d * d
        u = int(_select(feas, Q, d))
        if u < 0:
            known = ~torch.isnan(Q)
            if not bool(known.any()):
                info["unidentified"] = True
                return un, info
            info["fallback"] = True
            u = int(torch.where(known, Q, torch.full_like(Q, -math.inf)).argmax())
        info["margin"] = float(self._margins[k, x, u])
        return u, info

    def filter_batch(self, x, t, u_nominal, distance: str = "abs") -> tuple[Tensor, dict]:
        """:meth:`filter` for many environments at once: ``x``, ``u_nominal`` ``(B,)`` and ``t``
        an int or ``(B,)``; returns ``u (B,)`` and boolean ``(B,)`` tensors ``unsafe_state``,
        ``fallback`` and ``unidentified``. Inputs may live on any device; the tables' device
        is used for the computation and the result returns to ``x``'s device."""
        if distance not in ("abs", "sq"):
            raise ValueError(f"distance must be 'abs' or 'sq', got {distance!r}")
        x_in = torch.as_tensor(x)
        dev = self.q.Q.device
        cols = {"x": x_in, "u_nominal": torch.as_tensor(u_nominal), "t": torch.as_tensor(t)}
        for name, c in cols.items():
            if c.is_floating_point() and not bool((c == c.round()).all()):
                raise ValueError(f"{name} must hold integers, got non-integers")
            if c.ndim > 1:
                raise ValueError(f"{name} must be 1-D, got shape {tuple(c.shape)}")
        x = x_in.to(dev).long().reshape(-1)
        un = cols["u_nominal"].to(dev).long().reshape(-1)
        t = cols["t"].to(dev).long().reshape(-1)
        if t.numel() not in (1, x.numel()):
            raise ValueError(f"t must be one time or one per state ({x.numel()}), got {t.numel()}")
        t = t.expand(x.shape[0])
        X, U = self.q.Q.shape[1:]
        if un.shape != x.shape:
            raise ValueError(
                f"u_nominal must have one action per state, got {tuple(un.shape)} for {tuple(x.shape)}"
            )
        if x.numel() and (int(x.min()) < 0 or int(x.max()) >= X):
            raise ValueError(
                f"states must be in [0, {X}), got range [{int(x.min())}, {int(x.max())}]"
            )
        if un.numel() and (int(un.min()) < 0 or int(un.max()) >= U):
            raise ValueError(
                f"u_nominal must be actions in [0, {U}), got range [{int(un.min())}, {int(un.max())}]"
            )
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.H):
            raise IndexError(
                f"t must be in [0, H) = [0, {self.H}), got range [{int(t.min())}, {int(t.max())}]"
            )
        k = self.H - t
        M, Q = self._margins[k, x], self.q.Q[k, x]  # (B, U)
        feas = ~torch.isnan(M) & (M >= -TOL)
        d = (self.action_values[None, :] - self.action_values[un][:, None]).abs()
        d = d if distance == "abs" else d * d
        u = _select(feas, Q, d)
        known = ~torch.isnan(Q)
        best = torch.where(known, Q, torch.full_like(Q, -math.inf)).argmax(-1)
        fallback = (u < 0) & known.any(-1)
        unidentified = ~known.any(-1)
        u = torch.where(u < 0, torch.where(unidentified, un, best), u)
        unsafe = ~self.q.safe.to(dev)[x]
        u = torch.where(unsafe, un, u)
        info = {
            "unsafe_state": unsafe,
            "fallback": fallback & ~unsafe,
            "unidentified": unidentified & ~unsafe,
        }
        return u.to(x_in.device), {k_: v.to(x_in.device) for k_, v in info.items()}

    def guarantee(self, x0) -> float:
        """``V(x0, H)``, the probability the certificate guarantees (Thm 3.2) at ``alpha = 0``;
        warns when it is not above ``1 - eps`` (the theorem's premise fails). With ``alpha > 0``
        the guarantee is only ``1 - eps``, and only while ``S_alpha`` stays feasible (no
        fallback; it holds when ``V(x0, H) > 1 - eps`` and the Q is exact)."""
        v = self.q.v(x0, self.H)
        if not v > 1.0 - self.eps:
            warnings.warn(
                f"V(x0, H) = {v:.4f} <= 1 - eps = {1 - self.eps:.4f}: Theorem 3.2's premise fails, "
                "the certificate does not guarantee the tolerance",
                UserWarning,
                stacklevel=2,
            )
        return v

    def table(self, nominal) -> Tensor:
        """Closed-loop action probabilities ``(H, X, U)`` for ``t = 0..H-1`` under the nominal
        policy ``nominal (X, U)`` or ``(U,)``: every nominal action is mapped by :meth:`filter`
        (vectorised; unsafe states keep the nominal)."""
        from icml25.certificates.cmdp import _nominal

        X, U = self.q.Q.shape[1:]
        nominal = _nominal(nominal, X, U).to(self.q.Q.device)
        ks = torch.arange(self.H, 0, -1, device=self.q.Q.device)  # t = 0..H-1 -> k = H..1
        M = self._margins[ks]  # (H, X, U)
        Q = self.q.Q[ks]
        feas = ~torch.isnan(M) & (M >= -TOL)
        known = ~torch.isnan(Q)
        fallback = torch.where(known, Q, torch.full_like(Q, -math.inf)).argmax(-1)  # (H, X)
        out = torch.zeros(self.H, X, U, dtype=D, device=Q.device)
        for un in range(U):
            d = (self.action_values - self.action_values[un]).abs()
            u = _select(feas, Q, d.expand_as(Q))
            u = torch.where(u < 0, torch.where(known.any(-1), fallback, torch.full_like(u, un)), u)
            u = torch.where(self.q.safe[None, :].expand(self.H, X), u, torch.full_like(u, un))
            out.scatter_add_(-1, u[..., None], nominal[None, :, un : un + 1].expand(self.H, X, 1))
        return out

    def as_controller(self, distance: str = "abs"):
        """A controller ``(x, t, u_nominal, generator) -> (u, info)`` with ``.table``."""
        return _CertificateController(self, distance)


class _CertificateController:
    def __init__(self, cert: SafetyCertificate, distance: str) -> None:
        self.cert, self.distance = cert, distance

    def __call__(self, x, t, u_nominal, generator=None):
        return self.cert.filter(x, t, u_nominal, self.distance)

    def table(self, nominal) -> Tensor:
        return self.cert.table(nominal)


def candidate_filter(
    q_fn, margin_fn, u_nominal: Tensor, low, high, n_candidates: int = 256, generator=None
) -> tuple[Tensor, dict]:
    """Continuous actions (not in the paper): score ``u_nominal`` plus random and grid candidates
    in the box ``[low, high]`` and return the certified one (``margin_fn(u) >= 0``) closest to
    ``u_nominal`` (Euclidean); if none is, the best-Q candidate with ``info["fallback"]`` (its
    margin is negative: it is not certified). ``q_fn`` and ``margin_fn`` take a batch of actions
    ``(n, d)`` and return ``(n,)``; a NaN margin is never certified.

    ``u_nominal`` must be finite (NaN or inf: ValueError); one outside the box is scored at its
    projection onto the box, and distances are measured to the nominal itself, on a rescaled
    form that keeps them apart for a nominal far outside the box (``1e300``: every squared
    distance would round to the same float64). Any float dtype is accepted; the search runs in
    float64.
    """
    u_nominal = torch.as_tensor(u_nominal)
    if u_nominal.is_complex() or u_nominal.dtype == torch.bool:
        raise ValueError(f"u_nominal must be a real action vector, got dtype {u_nominal.dtype}")
    u_nominal = u_nominal.to(D).reshape(-1)
    if u_nominal.numel() == 0:
        raise ValueError("u_nominal must hold at least one action dimension, got an empty tensor")
    if not bool(torch.isfinite(u_nominal).all()):
        raise ValueError(f"u_nominal must be finite, got {u_nominal.tolist()}")
    try:
        low = torch.as_tensor(low, dtype=D).expand_as(u_nominal)
        high = torch.as_tensor(high, dtype=D).expand_as(u_nominal)
    except RuntimeError:
        raise ValueError(
            f"low and high must be scalars or have one value per action dimension "
            f"({u_nominal.numel()}), got {low!r} and {high!r}"
        ) from None
    if not bool((torch.isfinite(low) & torch.isfinite(high)).all()):
        raise ValueError(f"the action box must be finite, got {low.tolist()} and {high.tolist()}")
    if not bool((low < high).all()):
        raise ValueError(f"the action box needs low < high, got {low.tolist()} and {high.tolist()}")
    n_candidates = as_int("n_candidates", n_candidates, 2)
    d = u_nominal.numel()
    per = max(2, round((n_candidates // 2) ** (1.0 / d)))
    axes = [torch.linspace(float(a), float(b), per, dtype=D) for a, b in zip(low, high)]
    grid = torch.cartesian_prod(*axes).reshape(-1, d)
    rand = low + (high - low) * torch.rand(
        n_candidates - grid.shape[0] if n_candidates > grid.shape[0] else 1,
        d,
        generator=generator,
        dtype=D,
    )
    cand = torch.cat([u_nominal.clamp(low, high)[None], grid, rand])
    m = torch.as_tensor(margin_fn(cand), dtype=D).reshape(-1)
    q = torch.as_tensor(q_fn(cand), dtype=D).reshape(-1)
    for name, v in (("margin_fn", m), ("q_fn", q)):
        if v.numel() != cand.shape[0]:
            raise ValueError(
                f"{name} must return one value per candidate ({cand.shape[0]}), got {v.numel()}"
            )
    ok = m >= -TOL
    if bool(ok.any()):
        # ||c - u||^2 = ||c - p||^2 + 2 (c - p).(p - u) + ||p - u||^2 with p = u's projection onto
        # the box: the last term is the same for every candidate, so it is dropped and the rest
        # divided by s = max(1, max |p - u|). Identical to ||c - u||^2 for a nominal inside the
        # box; for a far one (1e300) the distances no longer all round to the same float.
        p = u_nominal.clamp(low, high)
        s = max(1.0, float((p - u_nominal).abs().max()))
        dist = ((cand - p) ** 2).sum(-1) / s + 2 * ((cand - p) * ((p - u_nominal) / s)).sum(-1)
        i = int(_select(ok, q, dist))
        if i < 0 or not bool(ok[i]):  # cannot happen with a finite nominal; never mislabel
            raise RuntimeError("candidate_filter found certified candidates but selected none")
        return cand[i], {"fallback": False, "margin": float(m[i]), "n_feasible": int(ok.sum())}
    i = int(torch.nan_to_num(q, nan=-math.inf).argmax())
    return cand[i], {"fallback": True, "margin": float(m[i]), "n_feasible": 0}
