"""Segments of behaviour and scripted classic-control behaviour policies (docs/distinguishability.md).

A segment is ``H`` consecutive ``(s, a)`` steps with the hidden true reward kept for the simulated
teacher and for evaluation. :class:`SegmentBuffer` is FIFO over episodes (B-Pref keeps the last 100).

Segment ids are stable: the ``i``-th segment ever added has id ``i``, whatever was evicted since.
Queries refer to ids; :meth:`SegmentBuffer.positions` maps them to rows of ``obs``/``act`` and
raises when a segment has been evicted, so an answer can never silently meet another segment.
Until the first eviction ids and rows coincide.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

__all__ = ["SegmentBuffer", "collect_segments", "pendulum_policy"]


def _check_finite(x: Tensor, name: str) -> None:
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name} has a non-finite value at index {idx}")


class SegmentBuffer:
    """Segments ``obs (N, H, d_s)``, ``act (N, H, d_a)``, ``true_rew (N, H)`` (optional), FIFO over
    the last ``max_episodes`` episodes (B-Pref ``max_size = 100``)."""

    def __init__(
        self,
        obs: Tensor | None = None,
        act: Tensor | None = None,
        true_rew: Tensor | None = None,
        *,
        max_episodes: int = 100,  # B-Pref reward model max_size
    ) -> None:
        if max_episodes < 1:
            raise ValueError(f"max_episodes must be >= 1, got {max_episodes}")
        self.max_episodes = max_episodes
        self.n_evicted = 0  # segments dropped so far: the id of the oldest segment held
        self._episodes: list[tuple[Tensor, Tensor, Tensor | None]] = []
        self._cache: tuple[Tensor, Tensor, Tensor | None] | None = None
        if obs is not None:
            if act is None:
                raise ValueError("act is required with obs")
            self._add_segments(torch.as_tensor(obs), torch.as_tensor(act), true_rew)

    def _add_segments(self, obs: Tensor, act: Tensor, rew) -> None:
        if obs.ndim != 3 or act.ndim != 3 or obs.shape[:2] != act.shape[:2]:
            raise ValueError(
                f"obs must be (N, H, d_s) and act (N, H, d_a) with equal N, H; got "
                f"{tuple(obs.shape)} and {tuple(act.shape)}"
            )
        if obs.shape[1] < 1:
            raise ValueError(f"segment length H must be >= 1, got {obs.shape[1]}")
        if self._episodes and obs.shape[1] != self.H:
            raise ValueError(
                f"segments of unequal length: buffer has H={self.H}, got {obs.shape[1]}"
            )
        if self._episodes:
            o0, a0, r0 = self._episodes[0]
            if obs.shape[2:] != o0.shape[2:] or act.shape[2:] != a0.shape[2:]:
                raise ValueError(
                    f"observations/actions of another size: the buffer holds d_s = "
                    f"{tuple(o0.shape[2:])}, d_a = {tuple(a0.shape[2:])}, got "
                    f"{tuple(obs.shape[2:])}, {tuple(act.shape[2:])}"
                )
            if (rew is None) != (r0 is None):
                raise ValueError(
                    "every episode of a buffer must come with true rewards, or none: the buffer "
                    + ("has them and this one has none" if rew is None else "has none")
                )
        rew = None if rew is None else torch.as_tensor(rew)
        if rew is not None and rew.shape != obs.shape[:2]:
            raise ValueError(
                f"true_rew must be (N, H) = {tuple(obs.shape[:2])}, got {tuple(rew.shape)}"
            )
        for t, name in ((obs, "obs"), (act, "act")) + (
            ((rew, "true_rew"),) if rew is not None else ()
        ):
            _check_finite(t, name)
        self._episodes.append((obs, act, rew))
        while len(self._episodes) > self.max_episodes:
            self.n_evicted += int(self._episodes.pop(0)[0].shape[0])
        self._cache = None

    @property
    def first_id(self) -> int:
        """The id of the oldest segment held (ids of held segments: ``first_id + row``)."""
        return self.n_evicted

    def ids(self) -> Tensor:
        """The ids of the held segments, in row order."""
        return torch.arange(self.n_evicted, self.n_evicted + len(self))

    def positions(self, ids) -> Tensor:
        """Rows of ``obs``/``act`` of the segments with these ids (any shape, int64 on the CPU);
        ``ValueError`` naming the id when a segment was evicted or never added."""
        t = torch.as_tensor(ids, dtype=torch.long).cpu()
        pos = t - self.n_evicted
        n = len(self)
        if t.numel():
            old = pos < 0
            if bool(old.any()):
                bad = int(t[old].reshape(-1)[0])
                raise ValueError(
                    f"segment id {bad} was evicted from the SegmentBuffer (FIFO over the last "
                    f"{self.max_episodes} episodes; the oldest id held is {self.n_evicted}): its "
                    "answer would meet another segment. Pass the buffer to "
                    "RewardLearner.add(queries, answers, buf), which copies answered segments, or "
                    "raise max_episodes"
                )
            new = pos >= n
            if bool(new.any()):
                bad = int(t[new].reshape(-1)[0])
                raise ValueError(
                    f"segment id {bad} is not in the buffer (ids {self.n_evicted}.."
                    f"{self.n_evicted + n - 1})"
                )
        return pos

    def add_episode(
        self, obs, act, rew=None, segment_len: int = 50, stride: int | None = None
    ) -> int:
        """Cut one episode (``obs (T, d_s)``, ``act (T, d_a)``, ``rew (T,)``) into segments of
        ``segment_len`` every ``stride`` steps (default: non-overlapping). Returns the count."""
        obs, act = torch.as_tensor(obs), torch.as_tensor(act)
        if act.ndim == 1:
            act = act[:, None]
        if segment_len < 1:
            raise ValueError(f"segment_len must be >= 1, got {segment_len}")
        stride = segment_len if stride is None else stride
        if stride < 1:
            raise ValueError(f"stride must be >= 1, got {stride}")
        T = obs.shape[0]
        if act.shape[0] != T or (rew is not None and len(torch.as_tensor(rew)) != T):
            raise ValueError(
                f"obs, act (and rew) must have one row per step: got {T}, {act.shape[0]}"
                + ("" if rew is None else f", {len(torch.as_tensor(rew))}")
            )
        starts = list(range(0, T - segment_len + 1, stride))
        if not starts:
            raise ValueError(f"episode of {T} steps is shorter than segment_len={segment_len}")
        o = torch.stack([obs[s : s + segment_len] for s in starts])
        a = torch.stack([act[s : s + segment_len] for s in starts])
        r = (
            None
            if rew is None
            else torch.stack([torch.as_tensor(rew)[s : s + segment_len] for s in starts])
        )
        self._add_segments(o, a, r)
        return len(starts)

    def add_trajectory(
        self, traj, segment_len: int = 50, stride: int | None = None, action_encoder=None
    ) -> int:
        """Add an ``imitation`` ``TrajectoryWithRew`` (or any object with ``obs (T + 1, ...)``,
        ``acts (T, ...)`` and ``rews (T,)``; ``obs`` may also have ``T`` rows): the observation
        each action was taken in, flattened. ``action_encoder(acts) -> (T, d_a)``, e.g. one-hot
        for discrete actions (default: flattened as floats). Returns the number of segments."""
        for name in ("obs", "acts"):
            if not hasattr(traj, name):
                raise TypeError(
                    f"a trajectory needs .obs, .acts and .rews; {traj!r:.60} has no .{name}"
                )
        if isinstance(traj.obs, dict) or isinstance(getattr(traj.obs, "obs", None), dict):
            raise TypeError(
                "dict observations are not supported: flatten them first (e.g. gymnasium's "
                "FlattenObservation, or imitation's DictObs.flatten())"
            )
        acts = np.asarray(traj.acts)
        obs = np.asarray(traj.obs)
        T = len(acts)
        if len(obs) not in (T, T + 1):
            raise ValueError(
                f"obs must have T or T + 1 = {T + 1} rows for {T} actions, got {len(obs)}"
            )
        rews = getattr(traj, "rews", None)
        o = torch.as_tensor(obs[:T].reshape(T, -1), dtype=torch.float32)
        if action_encoder is not None:
            a = torch.as_tensor(np.asarray(action_encoder(acts)), dtype=torch.float32).reshape(
                T, -1
            )
        else:
            a = torch.as_tensor(acts.reshape(T, -1), dtype=torch.float32)
        r = None if rews is None else torch.as_tensor(np.asarray(rews), dtype=torch.float32)
        return self.add_episode(o, a, r, segment_len, stride)

    def _cat(self) -> tuple[Tensor, Tensor, Tensor | None]:
        if self._cache is None:
            if not self._episodes:
                raise ValueError("the segment buffer is empty")
            obs = torch.cat([e[0] for e in self._episodes])
            act = torch.cat([e[1] for e in self._episodes])
            rews = [e[2] for e in self._episodes]
            rew = None if any(r is None for r in rews) else torch.cat(rews)
            self._cache = (obs, act, rew)
        return self._cache

    @property
    def obs(self) -> Tensor:
        return self._cat()[0]

    @property
    def act(self) -> Tensor:
        return self._cat()[1]

    @property
    def true_rew(self) -> Tensor | None:
        return self._cat()[2]

    @property
    def H(self) -> int:
        return int(self._episodes[0][0].shape[1]) if self._episodes else 0

    def __len__(self) -> int:
        return sum(int(e[0].shape[0]) for e in self._episodes)

    def returns(self, gamma: float = 1.0) -> Tensor:
        """True segment returns ``sum_t gamma^(H - t) r_t`` (t = 1..H; the teacher's myopic weights)."""
        rew = self.true_rew
        if rew is None:
            raise ValueError("this buffer has no true rewards")
        H = rew.shape[1]
        w = torch.tensor([gamma ** (H - t) for t in range(1, H + 1)], dtype=rew.dtype)
        return rew @ w

    def subset(self, idx: Tensor) -> SegmentBuffer:
        """A new buffer of the segments with these ids (ids restart at 0 there)."""
        idx = self.positions(idx)
        obs, act, rew = self._cat()
        return SegmentBuffer(obs[idx], act[idx], None if rew is None else rew[idx], max_episodes=1)


def _theta(obs: np.ndarray) -> tuple[float, float]:
    return math.atan2(float(obs[1]), float(obs[0])), float(obs[2])


def pendulum_policy(
    kind: int, noise: float
) -> Callable[[np.ndarray, np.random.Generator], np.ndarray]:
    """Scripted Pendulum-v1 behaviours (docs/distinguishability.md): 0 uniform, 1 energy pumping then PD,
    2 PD only, 3 bang-bang then PD; then Gaussian action noise ``noise``; clipped to [-2, 2]."""
    if kind not in (0, 1, 2, 3):
        raise ValueError(f"kind must be 0, 1, 2 or 3, got {kind}")

    def policy(obs, rng):
        th, thd = _theta(obs)
        if kind == 0:
            a = rng.uniform(-2.0, 2.0)
        elif kind == 1:
            a = 2.0 * np.sign(thd * math.cos(th)) if abs(th) > 0.8 else -10.0 * th - thd
        elif kind == 2:
            a = -10.0 * th - thd
        else:
            a = 2.0 * np.sign(thd) if abs(th) > 1.0 else -8.0 * th - 1.5 * thd
        a = float(np.clip(a, -2.0, 2.0))
        if noise > 0:
            a = a + noise * rng.standard_normal()
        return np.array([np.clip(a, -2.0, 2.0)], dtype=np.float32)

    return policy


def collect_segments(
    env_id: str = "Pendulum-v1",
    n_episodes: int = 120,
    segment_len: int = 25,
    stride: int | None = None,
    policies: str = "mixture",
    seed: int = 0,
    max_episode_steps: int | None = None,
) -> SegmentBuffer:
    """Roll out scripted behaviours in a gymnasium environment and cut the episodes into segments.

    ``policies="mixture"`` (Pendulum-v1 only): episode ``e`` uses behaviour ``e mod 4`` with action
    noise drawn per episode from {0, 0.5, 1}; ``"uniform"``: uniformly random actions (any Box env).
    Reset seeds come from the run's RNG. float32 tensors, like the environment's observations."""
    import gymnasium as gym

    if n_episodes < 1:
        raise ValueError(f"n_episodes must be >= 1, got {n_episodes}")
    if policies not in ("mixture", "uniform"):
        raise ValueError(f"policies must be 'mixture' or 'uniform', got {policies!r}")
    if policies == "mixture" and env_id != "Pendulum-v1":
        raise ValueError(f"policies='mixture' is defined for Pendulum-v1 only, not {env_id!r}")
    rng = np.random.default_rng(seed)
    kw = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
    env = gym.make(env_id, **kw)
    if not hasattr(env.action_space, "low"):
        env.close()
        raise ValueError(
            f"collect_segments draws uniform actions from a Box action space; {env_id!r} has "
            f"{env.action_space!r}. Roll out your own policy and add the episodes with "
            "SegmentBuffer.add_episode (one-hot encode discrete actions)"
        )
    buf = SegmentBuffer(max_episodes=n_episodes)
    for e in range(n_episodes):
        if policies == "mixture":
            pol = pendulum_policy(e % 4, float(rng.choice([0.0, 0.5, 1.0])))
        else:
            space = env.action_space

            def pol(obs, r, space=space):
                return r.uniform(space.low, space.high).astype(np.float32)

        obs, _ = env.reset(seed=int(rng.integers(2**31 - 1)))
        O, A, R = [], [], []
        done = False
        while not done:
            a = pol(obs, rng)
            nxt, r, term, trunc, _ = env.step(a)
            O.append(np.asarray(obs, dtype=np.float32))
            A.append(np.asarray(a, dtype=np.float32).reshape(-1))
            R.append(float(r))
            obs, done = nxt, term or trunc
        buf.add_episode(
            torch.from_numpy(np.stack(O)),
            torch.from_numpy(np.stack(A)),
            torch.tensor(R, dtype=torch.float32),
            segment_len,
            stride,
        )
    env.close()
    return buf
