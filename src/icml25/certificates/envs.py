"""ConfoundedDriving: the paper's simplified driving scenario (§7), reconstructed with constants
chosen so that confounding matters (docs/certificates.md, "Environment").

State ``x = (p mod 10, v)``, ``v in 0..6`` (70 states, index ``p * 7 + v``); actions
``(-3, -2, -1, 0, 1)``; the mediator (the actuator command) equals the action with probability
0.8, else is uniform over the five commands; the latent road state ``W in {0, 1, 2, 3}`` (``W >= 2``:
wet and downhill) weakens braking; the offline driver brakes harder when ``W >= 2``. Safe iff
``v <= 3`` on segments 6-9 and ``v <= 5`` elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from icml25.certificates.cmdp import TabularConfoundedMDP

__all__ = [
    "ConfoundedDrivingConfig",
    "StateCodec",
    "make_confounded_driving",
    "safety_barrier",
    "velocities",
]

D = torch.float64


@dataclass
class ConfoundedDrivingConfig:
    """Defaults: our reconstruction of the paper's driving scenario (its constants are not published;
    docs/certificates.md)."""

    n_segments: int = 10
    v_max: int = 6
    actions: tuple[int, ...] = (-3, -2, -1, 0, 1)
    limit_slow: int = 3  # speed limit on segments 6-9
    limit_fast: int = 5
    slow_segments: tuple[int, ...] = (6, 7, 8, 9)
    p_latent: tuple[float, ...] = (0.3, 0.4, 0.15, 0.15)
    # velocity change dv[w][m] for the commands m = (-3, -2, -1, 0, 1)
    dv: tuple[tuple[int, ...], ...] = (
        (-3, -2, -1, 0, 1),
        (-2, -2, -1, 0, 1),
        (-1, 0, 1, 1, 2),
        (0, 1, 1, 1, 2),
    )
    mediator_fidelity: float = 0.8  # M = U w.p. 0.8, else uniform over the commands
    behavior_wet: tuple[float, ...] = (0.6, 0.3, 0.06, 0.02, 0.02)  # W >= 2
    behavior_dry: tuple[float, ...] = (0.02, 0.03, 0.15, 0.4, 0.4)
    kappa: float = 1.0  # confounding strength: 0 = the W-marginal policy, 1 = the driver's
    horizon: int = 10
    eps: float = 0.2
    x0: tuple[int, int] = (0, 0)
    nominal: tuple[float, ...] = field(default=(0.0, 0.0, 0.0, 0.3, 0.7))  # aggressive

    def __post_init__(self) -> None:
        if not 0.0 <= self.kappa <= 1.0:
            raise ValueError(f"kappa must be in [0, 1], got {self.kappa}")
        if not 0.0 <= self.mediator_fidelity <= 1.0:
            raise ValueError(f"mediator_fidelity must be in [0, 1], got {self.mediator_fidelity}")
        if len(self.dv) != len(self.p_latent) or any(len(r) != len(self.actions) for r in self.dv):
            raise ValueError("dv must have one row per latent value and one entry per action")
        for name in ("p_latent", "behavior_wet", "behavior_dry", "nominal"):
            vals = getattr(self, name)
            if min(vals) < 0 or abs(sum(vals) - 1) > 1e-9:
                raise ValueError(f"{name} must be a probability vector (>= 0, sum 1), got {vals}")
        if not 0.0 < self.eps < 1.0:
            raise ValueError(f"eps must be in (0, 1), got {self.eps}")
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {self.horizon}")


@dataclass(frozen=True)
class StateCodec:
    """``(p mod n_segments, v) <-> index = p * (v_max + 1) + v``."""

    n_segments: int
    v_max: int

    def encode(self, p: int, v: int) -> int:
        if not (0 <= v <= self.v_max):
            raise ValueError(f"v must be in [0, {self.v_max}], got {v}")
        return (p % self.n_segments) * (self.v_max + 1) + v

    def decode(self, index: int) -> tuple[int, int]:
        if not 0 <= index < self.n_segments * (self.v_max + 1):
            raise ValueError(f"state index out of range: {index}")
        return divmod(int(index), self.v_max + 1)


def make_confounded_driving(
    cfg: ConfoundedDrivingConfig | None = None,
) -> tuple[TabularConfoundedMDP, StateCodec]:
    """The tabular model and its state codec."""
    cfg = ConfoundedDrivingConfig() if cfg is None else cfg
    codec = StateCodec(cfg.n_segments, cfg.v_max)
    nv = cfg.v_max + 1
    X, U, W = cfg.n_segments * nv, len(cfg.actions), len(cfg.p_latent)
    M = U
    p_w = torch.tensor(cfg.p_latent, dtype=D).expand(X, W).clone()
    f = cfg.mediator_fidelity
    p_m = (f * torch.eye(U, dtype=D) + (1 - f) / M).expand(X, U, M).clone()
    trans = torch.zeros(X, M, W, X, dtype=D)
    safe = torch.zeros(X, dtype=torch.bool)
    for x in range(X):
        p, v = codec.decode(x)
        limit = cfg.limit_slow if p in cfg.slow_segments else cfg.limit_fast
        safe[x] = v <= limit
        for w in range(W):
            for m in range(M):
                v2 = min(max(v + cfg.dv[w][m], 0), cfg.v_max)
                trans[x, m, w, codec.encode(p + v, v2)] = 1.0
    wet = torch.tensor(cfg.behavior_wet, dtype=D)
    dry = torch.tensor(cfg.behavior_dry, dtype=D)
    per_w = torch.stack([wet if w >= 2 else dry for w in range(W)])  # (W, U)
    marginal = torch.tensor(cfg.p_latent, dtype=D) @ per_w  # the W-marginal policy
    behavior = (cfg.kappa * per_w + (1 - cfg.kappa) * marginal).expand(X, W, U).clone()
    return TabularConfoundedMDP(p_w, p_m, trans, safe, behavior), codec


def safety_barrier(cfg: ConfoundedDrivingConfig | None = None) -> torch.Tensor:
    """DTCBF's barrier ``h(x) = vlim(p) - v`` (safe iff h >= 0), ``(X,)``."""
    cfg = ConfoundedDrivingConfig() if cfg is None else cfg
    codec = StateCodec(cfg.n_segments, cfg.v_max)
    out = []
    for x in range(cfg.n_segments * (cfg.v_max + 1)):
        p, v = codec.decode(x)
        out.append((cfg.limit_slow if p in cfg.slow_segments else cfg.limit_fast) - v)
    return torch.tensor(out, dtype=D)


def velocities(cfg: ConfoundedDrivingConfig | None = None) -> torch.Tensor:
    """``v`` of every state, ``(X,)`` (the progress per step)."""
    cfg = ConfoundedDrivingConfig() if cfg is None else cfg
    nv = cfg.v_max + 1
    return torch.arange(cfg.n_segments * nv, dtype=D) % nv
