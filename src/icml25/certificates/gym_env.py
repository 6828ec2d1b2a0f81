"""ConfoundedDriving as a ``gymnasium.Env`` (needs the ``rl`` extra), so that safety filters from
other suites (safe-control-gym's CBF/MPC filters) can be wrapped around it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from icml25.certificates.envs import ConfoundedDrivingConfig, make_confounded_driving

__all__ = ["ConfoundedDrivingEnv"]


class ConfoundedDrivingEnv(gym.Env):
    """Observation ``(p mod 10, v)`` (``MultiDiscrete([10, v_max + 1])``, int64), action
    ``Discrete(5)`` indexing ``(-3, -2, -1, 0, 1)``. Reward ``v`` (the distance driven this
    step); ``terminated`` when the next state breaks the speed limit; ``truncated`` at the
    horizon. ``info["mediator"]`` (the actuator command actually applied) is always present;
    ``info["latent"]`` (the road state) only with ``expose_latent=True`` (debugging, oracles)."""

    metadata = {"render_modes": []}

    def __init__(self, cfg: ConfoundedDrivingConfig | None = None, expose_latent: bool = False):
        super().__init__()
        self.cfg = ConfoundedDrivingConfig() if cfg is None else cfg
        self.mdp, self.codec = make_confounded_driving(self.cfg)
        self.expose_latent = bool(expose_latent)
        self.observation_space = spaces.MultiDiscrete([self.cfg.n_segments, self.cfg.v_max + 1])
        self.action_space = spaces.Discrete(len(self.cfg.actions))
        self._x, self._t = 0, 0

    def _obs(self) -> np.ndarray:
        return np.array(self.codec.decode(self._x), dtype=np.int64)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        p, v = (options or {}).get("x0", self.cfg.x0)
        self._x, self._t = self.codec.encode(int(p), int(v)), 0
        return self._obs(), {}

    def _draw(self, probs: torch.Tensor) -> int:
        return int(self.np_random.choice(len(probs), p=probs.numpy() / float(probs.sum())))

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"action must be in Discrete({self.action_space.n}), got {action!r}")
        x, u = self._x, int(action)
        w = self._draw(self.mdp.p_w[x])
        m = self._draw(self.mdp.p_m[x, u])
        self._x = self._draw(self.mdp.trans[x, m, w])
        self._t += 1
        reward = float(self.codec.decode(x)[1])
        terminated = not bool(self.mdp.safe[self._x])
        truncated = self._t >= self.cfg.horizon
        info = {"mediator": m}
        if self.expose_latent:
            info["latent"] = w
        return self._obs(), reward, terminated, truncated, info
