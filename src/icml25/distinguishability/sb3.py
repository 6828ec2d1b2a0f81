"""Stable-Baselines3 adapter: preference feedback (PCQ or DQ) inside ``model.learn``.

Two pieces, used together::

    env = PreferenceRewardWrapper(gym.make("Pendulum-v1"), ensemble)     # reward := r_hat(s, a)
    model = SAC("MlpPolicy", env)
    cb = PreferenceFeedbackCallback(RewardLearner(ensemble), ScriptedTeacher(), query_type="dq")
    model.learn(20_000, callback=cb)

:class:`PreferenceRewardWrapper` replaces the environment's reward by the reward ensemble's mean
on the observation the action was taken in (the true reward goes to ``info["true_reward"]``) and
reports every step to the callback. :class:`PreferenceFeedbackCallback` keeps the segment buffer,
runs the feedback rounds of the PEBBLE schedule (the first at ``first_feedback`` steps with uniform
selection, then one every ``num_interact`` steps while the budget lasts), trains the reward model,
and relabels an off-policy algorithm's replay buffer (SAC, TD3, DQN) after each round. Discrete
actions are one-hot encoded for the reward model. Any SB3 algorithm works; vectorised
environments each keep their own running episode. What is not done here: PEBBLE's critic reset
after the first round and its unsupervised exploration phase (SB3 algorithms own their critics);
:class:`~icml25.distinguishability.rl.PreferenceRL` has both.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from icml25._validate import as_int
from icml25.distinguishability.learner import RewardLearner
from icml25.distinguishability.reward_model import RewardEnsemble
from icml25.distinguishability.segments import SegmentBuffer
from icml25.distinguishability.selection import select_dq, select_pcq

try:
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
except ImportError as exc:  # pragma: no cover
    raise ImportError(
        "icml25.distinguishability.sb3 needs gymnasium and stable-baselines3: "
        "pip install 'icml25[rl]'"
    ) from exc

__all__ = [
    "PreferenceFeedbackCallback",
    "PreferenceRewardWrapper",
    "action_dim",
    "encode_actions",
    "reward_model_for",
]


def action_dim(space) -> int:
    """The reward model's action width: ``n`` for ``Discrete(n)`` (one-hot), the flat size of a
    ``Box``."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    raise ValueError(f"action spaces supported: Box and Discrete, got {space!r}")


def encode_actions(space, actions) -> np.ndarray:
    """Actions ``(T, ...)`` as reward-model inputs ``(T, action_dim)``: one-hot for Discrete."""
    a = np.asarray(actions)
    if isinstance(space, gym.spaces.Discrete):
        idx = a.reshape(-1).astype(np.int64) - int(space.start)
        out = np.zeros((len(idx), int(space.n)), np.float32)
        out[np.arange(len(idx)), idx] = 1.0
        return out
    return a.reshape(len(a), -1).astype(np.float32)


def reward_model_for(env, **kw) -> RewardEnsemble:
    """A :class:`RewardEnsemble` sized for ``env``'s observation and action spaces (B-Pref's
    defaults: 3 members, 3 x 256); keywords go to the ensemble."""
    obs_dim = int(np.prod(env.observation_space.shape))
    return RewardEnsemble(obs_dim, action_dim(env.action_space), **kw)


class PreferenceRewardWrapper(gym.Wrapper):
    """Reward := ``ensemble.reward(obs, action)`` (member mean, the observation the action was
    taken in); ``info["true_reward"]`` keeps the environment's reward and ``info["pref_step"]``
    the ``(obs, encoded action, true reward)`` the callback cuts segments from."""

    def __init__(self, env, ensemble: RewardEnsemble) -> None:
        super().__init__(env)
        obs_dim = int(np.prod(env.observation_space.shape))
        if (ensemble.obs_dim, ensemble.act_dim) != (obs_dim, action_dim(env.action_space)):
            raise ValueError(
                f"the ensemble takes obs {ensemble.obs_dim} and actions {ensemble.act_dim}; the "
                f"env needs {obs_dim} and {action_dim(env.action_space)} (reward_model_for(env))"
            )
        self.ensemble = ensemble
        self._obs = None

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._obs = np.asarray(obs, np.float32).reshape(-1)
        return obs, info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        a = encode_actions(self.env.action_space, np.asarray(action)[None])[0]
        with torch.no_grad():
            r_hat = float(
                self.ensemble.reward(
                    torch.from_numpy(self._obs)[None], torch.from_numpy(a)[None]
                ).reshape(-1)[0]
            )
        info = {**info, "true_reward": float(r), "pref_step": (self._obs, a, float(r))}
        self._obs = np.asarray(obs, np.float32).reshape(-1)
        return obs, r_hat, term, trunc, info


class PreferenceFeedbackCallback(BaseCallback):
    """Runs preference feedback rounds inside ``model.learn`` (see the module docstring).

    Args:
        learner: the :class:`RewardLearner` (its ensemble must be the wrapper's).
        teacher: a scripted teacher or a :class:`CallbackTeacher` (a human).
        query_type: ``"dq"`` (distinguishability queries, DistQ selection) or ``"pcq"``.
        selection: a scheme of :func:`select_dq` / :func:`select_pcq` (default: ``distq`` /
            ``disagreement``); the first round is uniform (PEBBLE).
        segment, reward_batch, large_batch, max_feedback, num_interact, max_episodes: PEBBLE's
            settings (B-Pref defaults 50, 20, 10, 100, 5000, 100).
        first_feedback: environment steps before the first round (B-Pref: seed + unsupervised
            steps, 10 000).
        keep_frac, rule, lambda_e: DistQ's settings (docs/distinguishability.md).
        relabel: recompute the rewards of an off-policy replay buffer after each round.
        seed: the selection's random generator.
    """

    def __init__(
        self,
        learner: RewardLearner,
        teacher,
        *,
        query_type: str = "dq",
        selection: str | None = None,
        segment: int = 50,
        reward_batch: int = 20,
        large_batch: int = 10,
        max_feedback: int = 100,
        first_feedback: int = 10_000,
        num_interact: int = 5000,
        max_episodes: int = 100,
        keep_frac: float = 0.5,
        rule: str = "filter",
        lambda_e: float = 1.0,
        relabel: bool = True,
        seed: int = 0,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        if query_type not in ("pcq", "dq"):
            raise ValueError(f"query_type must be 'pcq' or 'dq', got {query_type!r}")
        if not isinstance(learner, RewardLearner):
            raise TypeError(f"learner must be a RewardLearner, got {type(learner).__name__}")
        for name, v in (
            ("segment", segment),
            ("reward_batch", reward_batch),
            ("large_batch", large_batch),
            ("num_interact", num_interact),
        ):
            as_int(name, v, 1)
        max_feedback = as_int("max_feedback", max_feedback, 0)
        from icml25.distinguishability.selection import DQ_METHODS, PCQ_METHODS

        methods = DQ_METHODS if query_type == "dq" else PCQ_METHODS
        if selection is not None and selection not in methods:
            raise ValueError(
                f"selection for query_type={query_type!r} must be one of {methods}, got {selection!r}"
            )
        self.learner, self.teacher, self.query_type = learner, teacher, query_type
        self.selection = selection or ("distq" if query_type == "dq" else "disagreement")
        self.segment, self.reward_batch, self.large_batch = segment, reward_batch, large_batch
        self.max_feedback, self.first_feedback = max_feedback, int(first_feedback)
        self.num_interact, self.relabel = num_interact, relabel
        self.keep_frac, self.rule, self.lambda_e = keep_frac, rule, lambda_e
        self.segments = SegmentBuffer(max_episodes=max_episodes)
        self.rng = np.random.default_rng(seed)
        self.total_feedback = self.labeled_feedback = self.rounds = 0
        self.history: list[dict[str, Any]] = []
        self._episodes: list[list] = []
        self._cut: list[int] = []
        self._first_done = False
        self._last_round = 0
        self._warned = False
        self._stale: int | None = None

    # -- segments ----------------------------------------------------------------------------
    def _cut_episode(self, i: int) -> None:
        ep, done, H = self._episodes[i], self._cut[i], self.segment
        n = (len(ep) - done) // H
        if n < 1:
            return
        end = done + n * H
        obs = torch.from_numpy(np.stack([s[0] for s in ep[done:end]]))
        act = torch.from_numpy(np.stack([s[1] for s in ep[done:end]]))
        rew = torch.tensor([s[2] for s in ep[done:end]], dtype=torch.float32)
        self.segments.add_episode(obs, act, rew, H)
        self._cut[i] = end

    def _cut_running(self) -> None:
        for i in range(len(self._episodes)):
            self._cut_episode(i)

    # -- rounds ------------------------------------------------------------------------------
    def _round(self, first: bool) -> None:
        n = min(self.reward_batch, self.max_feedback - self.total_feedback)
        if n <= 0:
            return
        ens = self.learner.ensemble
        method = "uniform" if first else self.selection
        if self.query_type == "pcq":
            queries = select_pcq(ens, self.segments, n, method, self.large_batch, self.rng)
            answers = self.teacher.answer_pcq(self.segments, queries)
        else:
            queries = select_dq(
                ens,
                self.segments,
                n,
                method,
                self.large_batch,
                self.keep_frac,
                self.rule,
                self.lambda_e,
                self.rng,
            )
            answers = self.teacher.answer_dq(self.segments, queries)
        self.total_feedback += n
        stored = self.learner.add(queries, answers, self.segments)
        self.labeled_feedback += stored
        out = self.learner.train() if stored else {}
        if stored and self.relabel:
            self._relabel()
        self.rounds += 1
        self.history.append({"step": self.num_timesteps, "asked": n, "answered": stored, **out})
        if self.verbose:
            print(
                f"feedback round {self.rounds} at step {self.num_timesteps}: {stored}/{n} answers"
            )

    def _relabel(self) -> None:
        """Recompute every reward of an off-policy replay buffer with the new reward model. SB3
        stores a step's transition after the callback ran, so the row of the step that triggered
        the round is relabelled at the next step (``_stale``)."""
        rb = getattr(self.model, "replay_buffer", None)
        if rb is None or not hasattr(rb, "rewards"):
            return  # on-policy: later rollouts are labelled by the wrapper with the new reward
        self._relabel_rows(0, rb.buffer_size if rb.full else rb.pos)
        self._stale = rb.pos

    @torch.no_grad()
    def _relabel_rows(self, start: int, end: int, chunk: int = 10_000) -> None:
        rb = self.model.replay_buffer
        if end <= start:
            return
        obs = rb.observations[start:end]
        acts = rb.actions[start:end]
        size, n_envs = obs.shape[0], obs.shape[1]
        obs = obs.reshape(size * n_envs, -1).astype(np.float32)
        space = self.model.action_space
        if isinstance(space, gym.spaces.Discrete):
            acts = encode_actions(space, acts.reshape(-1))
        else:  # SB3 stores Box actions rescaled to [-1, 1] for squashed policies: unscale them
            acts = acts.reshape(size * n_envs, -1).astype(np.float32)
            if getattr(self.model.policy, "squash_output", False):
                acts = self.model.policy.unscale_action(acts).astype(np.float32)
        out = np.empty(size * n_envs, np.float32)
        ens = self.learner.ensemble
        for s in range(0, len(out), chunk):
            e = min(s + chunk, len(out))
            r = ens.reward(torch.from_numpy(obs[s:e]), torch.from_numpy(acts[s:e]))
            out[s:e] = r.cpu().numpy()
        rb.rewards[start:end] = out.reshape(size, n_envs)

    # -- the SB3 hooks -----------------------------------------------------------------------
    def _on_training_start(self) -> None:
        try:
            found = self.training_env.get_attr("ensemble")
        except AttributeError:
            found = None
        if found is None:
            raise RuntimeError(
                "the environment is not wrapped in PreferenceRewardWrapper (no 'ensemble' "
                "attribute): wrap each env before vectorising it"
            )
        if any(e is not self.learner.ensemble for e in found):
            raise ValueError(
                "the PreferenceRewardWrapper's ensemble is not the learner's: the agent would be "
                "trained on a reward model that never learns. Pass the same RewardEnsemble to "
                "both, and use in-process environments (DummyVecEnv, make_vec_env's default): a "
                "SubprocVecEnv holds copies that never see the trained weights"
            )

    def _on_training_end(self) -> None:
        if self._stale is not None:  # the row stored after a round at the last step
            stale, self._stale = self._stale, None
            if self.model.replay_buffer.pos != stale or self.model.replay_buffer.full:
                self._relabel_rows(stale, stale + 1)

    def _on_step(self) -> bool:
        if self._stale is not None:  # the row stored after the last round's step
            stale, self._stale = self._stale, None
            if self.model.replay_buffer.pos != stale:  # one row (all envs) was written there
                self._relabel_rows(stale, stale + 1)
        infos, dones = self.locals["infos"], self.locals["dones"]
        if not self._episodes:
            self._episodes = [[] for _ in infos]
            self._cut = [0] * len(infos)
        for i, info in enumerate(infos):
            step = info.get("pref_step")
            if step is None:
                raise RuntimeError(
                    "the environment is not wrapped in PreferenceRewardWrapper (no "
                    "info['pref_step']): wrap each env before vectorising it"
                )
            self._episodes[i].append(step)
            if dones[i]:
                self._cut_episode(i)
                self._episodes[i], self._cut[i] = [], 0
        t = self.num_timesteps
        if not self._first_done:
            if t >= self.first_feedback:
                self._cut_running()
                if len(self.segments) >= 4:
                    self._first_done, self._last_round = True, t
                    self._round(first=True)
                elif not self._warned:
                    warnings.warn(
                        f"the first feedback round is due at step {t} but only "
                        f"{len(self.segments)} segment(s) of length {self.segment} exist; it is "
                        "deferred until 4 do",
                        UserWarning,
                        stacklevel=2,
                    )
                    self._warned = True
        elif t - self._last_round >= self.num_interact and self.total_feedback < self.max_feedback:
            self._last_round = t
            self._cut_running()
            self._round(first=self.labeled_feedback == 0)
        return True
