"""Online preference-based RL: the PEBBLE loop (docs/distinguishability.md) with PCQ or DQ feedback, a compact SAC
agent for classic control, and a gymnasium wrapper that swaps the reward for the learned one.

Loop (B-Pref ``train_PEBBLE.py`` structure): random actions for ``num_seed_steps``; optional
unsupervised exploration with a k-NN state-entropy reward for ``num_unsup_steps``; then the first
feedback round (uniform selection), reward training, relabelling of the whole replay buffer,
critic reset and ``reset_update`` SAC steps; afterwards a feedback round every ``num_interact``
env steps while the budget lasts, and one SAC update per env step on the learned reward.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25.distinguishability.learner import RewardLearner
from icml25.distinguishability.reward_model import RewardEnsemble
from icml25.distinguishability.segments import SegmentBuffer
from icml25.distinguishability.selection import select_dq, select_pcq
from icml25.progress import track

__all__ = [
    "SAC",
    "DistQConfig",
    "LearnedRewardWrapper",
    "PEBBLEConfig",
    "PreferenceRL",
    "SACConfig",
]


@dataclass
class PEBBLEConfig:
    """The PEBBLE loop's settings for :class:`PreferenceRL`: seed and unsupervised steps, the
    feedback schedule and budget, and the reward model's size and training (B-Pref defaults)."""

    num_seed_steps: int = 1000  # B-Pref
    num_unsup_steps: int = 9000  # B-Pref (0 allowed)
    topk: int = 5  # B-Pref state-entropy k
    segment: int = 50  # B-Pref segment length
    reward_batch: int = 20  # queries per feedback round
    large_batch: int = 10  # candidates = large_batch * reward_batch
    max_feedback: int = 100  # query budget
    num_interact: int = 5000  # env steps between feedback rounds
    reward_update: int = 200  # max reward epochs per round (B-Pref)
    reset_update: int = 100  # SAC steps after the first reward training (B-Pref)
    ensemble_size: int = 3  # B-Pref
    reward_lr: float = 3e-4  # B-Pref
    reward_batch_size: int = 128  # B-Pref
    reward_hidden: int = 256  # B-Pref gen_net
    reward_layers: int = 3  # B-Pref gen_net
    eval_frequency: int = 10000
    num_eval_episodes: int = 10
    max_episodes: int = 100  # segment buffer FIFO (B-Pref max_size)


@dataclass
class DistQConfig:
    """DistQ's settings for :class:`PreferenceRL`: the selection rule (``keep_frac`` most
    informative kept, or the easiness weight ``lambda_e``), the loss's ``lambda_pref`` and
    ``likelihood``, and the informativeness measure."""

    keep_frac: float = 0.5  # docs/distinguishability.md (unverified)
    rule: Literal["filter", "weighted"] = "filter"  # docs/distinguishability.md (unverified)
    lambda_e: float = 1.0  # docs/distinguishability.md (unverified)
    lambda_pref: float = 1.0  # docs/distinguishability.md (unverified)
    likelihood: Literal["abs", "difference"] = "abs"  # docs/distinguishability.md
    # docs/distinguishability.md
    informativeness: Literal["disagreement", "entropy"] = "disagreement"


@dataclass
class SACConfig:
    """Ours, tuned only for classic control (docs/distinguishability.md, not from the paper)."""

    hidden: int = 256
    lr: float = 3e-4
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    init_alpha: float = 0.1
    buffer_size: int = 1_000_000


class Agent(Protocol):
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray: ...

    def update(self, batch: dict[str, Tensor]) -> dict: ...

    def reset_critic(self) -> None: ...


def _mlp(inp: int, out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inp, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, out),
    )


class SAC:
    """Soft actor-critic (tanh-squashed Gaussian policy, twin critics, learnable temperature with
    target entropy ``-d_a``), for Box action spaces; actions are rescaled to the space's bounds."""

    def __init__(
        self, obs_dim: int, action_low, action_high, cfg: SACConfig | None = None, seed: int = 0
    ):
        self.cfg = cfg = cfg or SACConfig()
        torch.manual_seed(seed)
        self.low = torch.as_tensor(np.asarray(action_low, dtype=np.float32))
        self.high = torch.as_tensor(np.asarray(action_high, dtype=np.float32))
        self.act_dim = int(self.low.numel())
        self.obs_dim = obs_dim
        self.actor = _mlp(obs_dim, 2 * self.act_dim, cfg.hidden)
        self._make_critics()
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), requires_grad=True)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.lr)
        self.target_entropy = -float(self.act_dim)
        self.generator = torch.Generator().manual_seed(seed)

    def _make_critics(self) -> None:
        d = self.obs_dim + self.act_dim
        self.q1, self.q2 = _mlp(d, 1, self.cfg.hidden), _mlp(d, 1, self.cfg.hidden)
        self.q1_t, self.q2_t = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        self.critic_opt = torch.optim.Adam(
            list(self.q1.parameters()) + list(self.q2.parameters()), lr=self.cfg.lr
        )

    def reset_critic(self) -> None:
        self._make_critics()

    def _policy(self, obs: Tensor, deterministic: bool = False):
        mu, log_std = self.actor(obs).chunk(2, -1)
        log_std = log_std.clamp(-5.0, 2.0)
        if deterministic:
            u = mu
        else:
            u = mu + log_std.exp() * torch.randn(mu.shape, generator=self.generator)
        a = torch.tanh(u)
        logp = (-0.5 * ((u - mu) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(
            -1
        ) - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return a, logp

    def _scale(self, a: Tensor) -> Tensor:
        return self.low + (a + 1) * 0.5 * (self.high - self.low)

    def _unscale(self, a: Tensor) -> Tensor:
        return 2 * (a - self.low) / (self.high - self.low) - 1

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        a, _ = self._policy(torch.as_tensor(obs, dtype=torch.float32)[None], deterministic)
        return self._scale(a[0]).numpy()

    def update(self, batch: dict[str, Tensor]) -> dict:
        cfg = self.cfg
        obs, act, rew = batch["obs"], self._unscale(batch["act"]), batch["reward"]
        nxt, done = batch["next_obs"], batch["done"]
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            a2, logp2 = self._policy(nxt)
            x2 = torch.cat([nxt, a2], -1)
            q_t = torch.minimum(self.q1_t(x2), self.q2_t(x2)).squeeze(-1) - alpha * logp2
            target = rew + cfg.gamma * (1 - done) * q_t
        x = torch.cat([obs, act], -1)
        q_loss = F.mse_loss(self.q1(x).squeeze(-1), target) + F.mse_loss(
            self.q2(x).squeeze(-1), target
        )
        self.critic_opt.zero_grad()
        q_loss.backward()
        self.critic_opt.step()
        a, logp = self._policy(obs)
        xa = torch.cat([obs, a], -1)
        pi_loss = (alpha * logp - torch.minimum(self.q1(xa), self.q2(xa)).squeeze(-1)).mean()
        self.actor_opt.zero_grad()
        pi_loss.backward()
        self.actor_opt.step()
        a_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad()
        a_loss.backward()
        self.alpha_opt.step()
        with torch.no_grad():
            for net, tgt in ((self.q1, self.q1_t), (self.q2, self.q2_t)):
                for p, pt in zip(net.parameters(), tgt.parameters()):
                    pt.mul_(1 - cfg.tau).add_(cfg.tau * p)
        return {
            "q_loss": float(q_loss.detach()),
            "pi_loss": float(pi_loss.detach()),
            "alpha": float(alpha),
        }


class ReplayBuffer:
    def __init__(self, obs_dim: int, act_dim: int, capacity: int) -> None:
        self.obs = np.zeros((capacity, obs_dim), np.float32)
        self.act = np.zeros((capacity, act_dim), np.float32)
        self.next_obs = np.zeros((capacity, obs_dim), np.float32)
        self.reward = np.zeros(capacity, np.float32)
        self.true_reward = np.zeros(capacity, np.float32)
        self.done = np.zeros(capacity, np.float32)
        self.capacity, self.n, self.ptr = capacity, 0, 0

    def add(self, o, a, r, r_true, o2, done) -> None:
        i = self.ptr
        self.obs[i], self.act[i], self.reward[i] = o, a, r
        self.true_reward[i], self.next_obs[i], self.done[i] = r_true, o2, done
        self.ptr = (self.ptr + 1) % self.capacity
        self.n = min(self.n + 1, self.capacity)

    def sample(self, size: int, rng: np.random.Generator) -> dict[str, Tensor]:
        idx = rng.integers(0, self.n, size=size)
        return {
            "obs": torch.from_numpy(self.obs[idx]),
            "act": torch.from_numpy(self.act[idx]),
            "reward": torch.from_numpy(self.reward[idx]),
            "next_obs": torch.from_numpy(self.next_obs[idx]),
            "done": torch.from_numpy(self.done[idx]),
        }

    @torch.no_grad()
    def relabel(self, reward_fn: Callable[[Tensor, Tensor], Tensor], chunk: int = 10_000) -> None:
        for s in range(0, self.n, chunk):
            e = min(s + chunk, self.n)
            r = reward_fn(torch.from_numpy(self.obs[s:e]), torch.from_numpy(self.act[s:e]))
            self.reward[s:e] = r.float().numpy()


def state_entropy_reward(next_obs: Tensor, k: int = 5) -> Tensor:
    """PEBBLE's intrinsic reward ``log(1 + ||s - s^(k)||)`` (k-th neighbour within the batch)."""
    dist = torch.cdist(next_obs, next_obs)
    kth = dist.topk(min(k + 1, dist.shape[1]), largest=False).values[:, -1]
    return torch.log1p(kth)


try:  # gymnasium is the `rl` extra
    import gymnasium as _gymnasium
except ImportError:  # pragma: no cover
    _gymnasium = None

if _gymnasium is not None:

    class LearnedRewardWrapper(_gymnasium.Wrapper, _gymnasium.utils.RecordConstructorArgs):
        """Replaces the environment's reward with ``reward_fn(obs, action)`` (the learned reward,
        evaluated on the observation the action was taken in); the true reward goes to
        ``info["true_reward"]``."""

        def __init__(self, env, reward_fn: Callable[[Tensor, Tensor], Tensor]):
            _gymnasium.utils.RecordConstructorArgs.__init__(self, reward_fn=reward_fn)
            _gymnasium.Wrapper.__init__(self, env)
            self.reward_fn = reward_fn
            self._obs = None

        def reset(self, **kwargs):
            obs, info = self.env.reset(**kwargs)
            self._obs = obs
            return obs, info

        def step(self, action):
            obs, r, term, trunc, info = self.env.step(action)
            with torch.no_grad():
                r_hat = self.reward_fn(
                    torch.as_tensor(np.asarray(self._obs, dtype=np.float32))[None],
                    torch.as_tensor(np.asarray(action, dtype=np.float32)).reshape(1, -1),
                )
            self._obs = obs
            return obs, float(r_hat.reshape(-1)[0]), term, trunc, {**info, "true_reward": float(r)}

else:  # pragma: no cover

    class LearnedRewardWrapper:  # type: ignore[no-redef]
        def __init__(self, *args, **kwargs):
            raise ImportError("LearnedRewardWrapper needs gymnasium: pip install 'icml25[rl]'")


@dataclass
class History:
    step: list[int] = field(default_factory=list)
    true_return: list[float] = field(default_factory=list)
    feedback: list[int] = field(default_factory=list)
    labeled: list[int] = field(default_factory=list)
    teacher_error_rate: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, list]:
        return {k: list(v) for k, v in self.__dict__.items()}


def _check_box(env) -> None:
    space = getattr(env, "action_space", None)
    if not (hasattr(space, "low") and hasattr(space, "high") and getattr(space, "shape", None)):
        raise ValueError(
            f"PreferenceRL's SAC needs a continuous Box action space, got {space!r}; for discrete "
            "actions pass your own agent (agent=..., act/update/reset_critic) and encode actions "
            "as vectors (e.g. one-hot) for the reward model, or use the Stable-Baselines3 "
            "adapter (icml25.distinguishability.sb3) with a discrete algorithm such as DQN"
        )


class PreferenceRL:
    """PEBBLE with pairwise (``query_type="pcq"``) or distinguishability (``"dq"``) feedback.

    ``selection``: a PCQ scheme of :func:`select_pcq` or a DQ scheme of :func:`select_dq`
    (``distq`` by default); ``teacher``: any :class:`~icml25.distinguishability.teachers.Teacher`
    (a scripted one or a human); ``agent``: the built-in :class:`SAC` unless given
    (``act/update/reset_critic``); ``true_reward=True`` trains on the environment's reward instead
    (the ceiling; no feedback is asked)."""

    def __init__(
        self,
        env,
        query_type: str = "dq",
        selection: str | None = None,
        teacher=None,
        cfg: PEBBLEConfig | None = None,
        distq: DistQConfig | None = None,
        agent: Agent | None = None,
        sac: SACConfig | None = None,
        seed: int = 0,
        eval_env=None,
        true_reward: bool = False,
    ) -> None:
        if query_type not in ("pcq", "dq"):
            raise ValueError(f"query_type must be 'pcq' or 'dq', got {query_type!r}")
        self.cfg, self.distq = cfg or PEBBLEConfig(), distq or DistQConfig()
        c = self.cfg
        if c.max_feedback < 0:
            raise ValueError(f"max_feedback must be >= 0, got {c.max_feedback}")
        if c.segment < 1:
            raise ValueError(f"segment must be >= 1, got {c.segment}")
        if teacher is None and not true_reward:
            raise ValueError("a teacher is needed unless true_reward=True")
        _check_box(env)
        self.env, self.eval_env = env, eval_env if eval_env is not None else copy.deepcopy(env)
        self.query_type = query_type
        self.selection = selection or ("distq" if query_type == "dq" else "disagreement")
        self.teacher, self.true_reward, self.seed = teacher, true_reward, seed
        obs_dim = int(np.prod(env.observation_space.shape))
        act_dim = int(np.prod(env.action_space.shape))
        self.agent = agent or SAC(obs_dim, env.action_space.low, env.action_space.high, sac, seed)
        torch.manual_seed(seed)
        self.ensemble = RewardEnsemble(
            obs_dim, act_dim, c.ensemble_size, c.reward_hidden, c.reward_layers
        )
        self.learner = RewardLearner(
            self.ensemble,
            lr=c.reward_lr,
            batch_size=c.reward_batch_size,
            max_epochs=c.reward_update,
            likelihood=self.distq.likelihood,
            lambda_pref=self.distq.lambda_pref,
            generator=torch.Generator().manual_seed(seed),
        )
        cap = (sac or SACConfig()).buffer_size
        self.replay = ReplayBuffer(obs_dim, act_dim, cap)
        self._member = np.zeros((cap, c.ensemble_size), np.float32)  # per-member r_hat per row
        self._member_ok = np.zeros(cap, bool)
        self._seg_abs: list[np.ndarray] = []  # per segment id: its steps' transition counts
        self._n_added = 0
        self._ep_abs: list[int] = []
        self.segments = SegmentBuffer(max_episodes=c.max_episodes)
        self.rng = np.random.default_rng(seed)
        self.total_feedback = 0
        self.labeled_feedback = 0
        self.history = History()
        self._episode_returns: list[float] = []
        self._episode_len = 0

    def reward_fn(self, obs: Tensor, act: Tensor) -> Tensor:
        return self.ensemble.reward(obs, act)

    def _feedback_round(self, first: bool) -> int:
        """One round: select, ask, train, relabel. Returns the number of answers stored (0 when
        the budget is spent or fewer than 4 segments exist yet)."""
        c = self.cfg
        n = min(c.reward_batch, c.max_feedback - self.total_feedback)
        if n <= 0 or len(self.segments) < 4:
            return 0
        if self._episode_returns and hasattr(self.teacher, "set_thresholds"):
            recent = float(np.mean(self._episode_returns[-10:]))
            self.teacher.set_thresholds(recent * c.segment / max(self._episode_len, 1))
        # the ensemble has not changed since the last relabel: reuse its per-member rewards
        returns = None if first else self.segment_returns()
        if self.query_type == "pcq":
            queries: list = select_pcq(
                self.ensemble,
                self.segments,
                n,
                "uniform" if first else self.selection,
                c.large_batch,
                self.rng,
                returns=returns,
            )
            answers = self.teacher.answer_pcq(self.segments, queries)
        else:
            d = self.distq
            queries = select_dq(
                self.ensemble,
                self.segments,
                n,
                "uniform" if first else self.selection,
                c.large_batch,
                d.keep_frac,
                d.rule,
                d.lambda_e,
                self.rng,
                d.informativeness,
                returns=returns,
            )
            answers = self.teacher.answer_dq(self.segments, queries)
        # queries refer to the segment buffer's ids: the learner copies the answered segments
        self.total_feedback += n
        stored = self.learner.add(queries, answers, self.segments)
        self.labeled_feedback += stored
        if stored:
            self.learner.train()
            self._relabel()
        return stored

    @torch.no_grad()
    def _relabel(self, chunk: int = 10_000) -> None:
        """Relabel the whole replay buffer with the member mean, keeping each member's reward
        per transition (the next round's selection sums them instead of a forward pass)."""
        rb = self.replay
        for s in range(0, rb.n, chunk):
            e = min(s + chunk, rb.n)
            m = self.ensemble(torch.from_numpy(rb.obs[s:e]), torch.from_numpy(rb.act[s:e]))
            m = m.float().cpu().numpy()  # (K, e - s)
            rb.reward[s:e] = m.mean(0)
            self._member[s:e] = m.T
            self._member_ok[s:e] = True

    def segment_returns(self) -> torch.Tensor | None:
        """Per-member returns ``(K, len(segments))`` of the held segments from the rewards kept
        at the last relabel and by online labelling (the current ensemble's), or None when a
        segment's transitions are gone from the replay buffer or were never scored."""
        n, first = len(self.segments), self.segments.first_id
        if n == 0 or len(self._seg_abs) < first + n:
            return None
        cap = self.replay.capacity
        rows = np.stack(self._seg_abs[first : first + n])  # (N, H) absolute counts
        if (self._n_added - rows.min()) > cap:
            return None  # overwritten by newer transitions
        rows = rows % cap
        if not self._member_ok[rows].all():
            return None
        ret = self._member[rows].astype(np.float64).sum(1)  # (N, K)
        p = next(self.ensemble.parameters())
        return torch.from_numpy(ret.T.copy()).to(device=p.device, dtype=p.dtype)

    def _cut(self, ep_obs, ep_act, ep_rew, done: int) -> int:
        """Cut the full, non-overlapping segments of the running episode from step ``done`` on
        into the segment buffer; returns the new count of steps cut."""
        H = self.cfg.segment
        n = (len(ep_obs) - done) // H
        if n < 1:
            return done
        end = done + n * H
        self._seg_abs.extend(np.asarray(self._ep_abs[done:end], np.int64).reshape(n, H))
        self.segments.add_episode(
            torch.from_numpy(np.stack(ep_obs[done:end])),
            torch.from_numpy(np.stack(ep_act[done:end])),
            torch.tensor(ep_rew[done:end], dtype=torch.float32),
            H,
        )
        return end

    def evaluate(self) -> float:
        rets = []
        for e in range(self.cfg.num_eval_episodes):
            obs, _ = self.eval_env.reset(seed=10_000 * (self.seed + 1) + e)
            done, total = False, 0.0
            while not done:
                obs, r, term, trunc, _ = self.eval_env.step(self.agent.act(obs, deterministic=True))
                total += float(r)
                done = term or trunc
            rets.append(total)
        return float(np.mean(rets))

    def run(self, total_steps: int, progress: bool | None = None) -> dict[str, list]:
        c = self.cfg
        if total_steps < 1:
            raise ValueError(f"total_steps must be >= 1, got {total_steps}")
        sac_batch = getattr(getattr(self.agent, "cfg", None), "batch_size", 256)
        start = c.num_seed_steps + c.num_unsup_steps
        obs, _ = self.env.reset(seed=self.seed)
        ep_obs, ep_act, ep_rew, ep_ret, ep_len, ep_cut = [], [], [], 0.0, 0, 0
        ep_abs: list[int] = []  # absolute transition counts of the running episode's steps
        self._ep_abs = ep_abs
        first_pending = False
        for step in track(
            range(total_steps),
            "PEBBLE",
            total=total_steps,
            disable=None if progress is None else not progress,
        ):
            if step < c.num_seed_steps:
                a = self.rng.uniform(self.env.action_space.low, self.env.action_space.high).astype(
                    np.float32
                )
            else:
                a = self.agent.act(obs)
            nxt, r_true, term, trunc, _ = self.env.step(a)
            row = self.replay.ptr
            if self.true_reward:
                r = float(r_true)
            elif step >= start:
                with torch.no_grad():
                    m = self.ensemble(
                        torch.as_tensor(np.asarray(obs, np.float32))[None],
                        torch.as_tensor(np.asarray(a, np.float32)).reshape(1, -1),
                    ).reshape(-1)  # per member: kept for the next round's selection
                r = float(m.mean())
                self._member[row], self._member_ok[row] = m.float().cpu().numpy(), True
            else:
                r = 0.0
            if not self.true_reward and step < start:
                self._member_ok[row] = False
            self.replay.add(obs, a, r, r_true, nxt, float(term))
            ep_abs.append(self._n_added)
            self._n_added += 1
            ep_obs.append(np.asarray(obs, np.float32))
            ep_act.append(np.asarray(a, np.float32).reshape(-1))
            ep_rew.append(float(r_true))
            ep_ret += float(r_true)
            ep_len += 1
            obs = nxt
            if term or trunc:
                ep_cut = self._cut(ep_obs, ep_act, ep_rew, ep_cut)
                self._episode_returns.append(ep_ret)
                self._episode_len = ep_len
                obs, _ = self.env.reset()
                ep_obs, ep_act, ep_rew, ep_ret, ep_len, ep_cut = [], [], [], 0.0, 0, 0
                ep_abs = self._ep_abs = []
            # feedback schedule
            if not self.true_reward and step + 1 >= start:
                since = step + 1 - start
                due_first = since == 0 or (first_pending and since % c.segment == 0)
                if due_first:
                    # segments of the running episode count (B-Pref samples from it too)
                    ep_cut = self._cut(ep_obs, ep_act, ep_rew, ep_cut)
                    if len(self.segments) < 4:
                        if not first_pending:
                            warnings.warn(
                                f"the first feedback round is due at step {step + 1} but only "
                                f"{len(self.segments)} segment(s) of length {c.segment} exist; it "
                                "is deferred until 4 do (the critics are reset then)",
                                UserWarning,
                                stacklevel=2,
                            )
                        first_pending = True
                    else:
                        first_pending = False
                        self._feedback_round(first=True)
                        self.agent.reset_critic()
                        for _ in range(c.reset_update):
                            self.agent.update(self.replay.sample(sac_batch, self.rng))
                elif (
                    not first_pending
                    and since % c.num_interact == 0
                    and self.total_feedback < c.max_feedback
                ):
                    ep_cut = self._cut(ep_obs, ep_act, ep_rew, ep_cut)
                    self._feedback_round(first=self.labeled_feedback == 0)
            # agent updates
            if step + 1 >= c.num_seed_steps and self.replay.n >= sac_batch:
                batch = self.replay.sample(sac_batch, self.rng)
                if step + 1 < start:  # unsupervised exploration (PEBBLE)
                    batch["reward"] = state_entropy_reward(batch["next_obs"], c.topk)
                self.agent.update(batch)
            if (step + 1) % c.eval_frequency == 0:
                self.history.step.append(step + 1)
                self.history.true_return.append(self.evaluate())
                self.history.feedback.append(self.total_feedback)
                self.history.labeled.append(self.labeled_feedback)
                err = getattr(self.teacher, "error_rate", float("nan"))
                self.history.teacher_error_rate.append(float(err))
        return self.history.as_dict()
