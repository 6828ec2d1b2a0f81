"""What users of B-Pref, imitation and Stable-Baselines3 expect: feedback rounds inside
``model.learn``, imitation's trajectories as segments, and a learner that saves and resumes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from icml25.distinguishability import (
    RewardEnsemble,
    RewardLearner,
    ScriptedTeacher,
    SegmentBuffer,
    select_dq,
    select_pcq,
)

gym = pytest.importorskip("gymnasium")
sb3 = pytest.importorskip("stable_baselines3")


def test_sac_learns_with_dq_feedback_rounds_and_a_relabelled_replay_buffer():
    from icml25.distinguishability.sb3 import (
        PreferenceFeedbackCallback,
        PreferenceRewardWrapper,
        reward_model_for,
    )

    torch.manual_seed(0)
    base = gym.make("Pendulum-v1")
    ens = reward_model_for(base, hidden=16, n_layers=2)
    env = PreferenceRewardWrapper(base, ens)
    model = sb3.SAC("MlpPolicy", env, learning_starts=100, batch_size=32, seed=0,
                    policy_kwargs=dict(net_arch=[16, 16]))  # fmt: skip
    before = [p.detach().clone() for p in ens.parameters()]
    cb = PreferenceFeedbackCallback(
        RewardLearner(ens, max_epochs=5), ScriptedTeacher(rng=0), segment=25, reward_batch=5,
        first_feedback=200, num_interact=200, max_feedback=12,
    )  # fmt: skip
    model.learn(700, callback=cb)
    assert [h["step"] for h in cb.history] == [200, 400, 600]
    assert cb.total_feedback == 12 and [h["asked"] for h in cb.history] == [5, 5, 2]
    assert any(not torch.equal(a, b) for a, b in zip(before, ens.parameters()))
    # every stored transition carries the final reward model's value, on the unscaled action
    rb = model.replay_buffer
    acts = model.policy.unscale_action(rb.actions[: rb.pos, 0]).astype(np.float32)
    with torch.no_grad():
        want = ens.reward(torch.from_numpy(rb.observations[: rb.pos, 0]), torch.from_numpy(acts))
    assert np.allclose(rb.rewards[: rb.pos, 0], want.numpy(), atol=1e-5)


def test_ppo_on_a_discrete_env_with_pcq_feedback():
    from stable_baselines3.common.env_checker import check_env

    from icml25.distinguishability.sb3 import (
        PreferenceFeedbackCallback,
        PreferenceRewardWrapper,
        reward_model_for,
    )

    cart = gym.make("CartPole-v1")
    ens = reward_model_for(cart, hidden=8, n_layers=1)
    assert ens.act_dim == 2  # one-hot
    env = PreferenceRewardWrapper(cart, ens)
    check_env(env, warn=False)
    model = sb3.PPO("MlpPolicy", env, n_steps=128, batch_size=32, seed=0)
    cb = PreferenceFeedbackCallback(
        RewardLearner(ens, max_epochs=3), ScriptedTeacher(rng=0), query_type="pcq", segment=10,
        reward_batch=4, first_feedback=100, num_interact=100, max_feedback=12,
    )  # fmt: skip
    model.learn(400, callback=cb)
    assert cb.labeled_feedback == 12 and len(cb.learner.answers.pcq_y) == 12
    with pytest.raises(RuntimeError, match="not wrapped in PreferenceRewardWrapper"):
        sb3.PPO("MlpPolicy", cart, n_steps=64, batch_size=32).learn(
            64, callback=PreferenceFeedbackCallback(RewardLearner(ens), ScriptedTeacher())
        )
    with pytest.raises(ValueError, match="reward_model_for"):
        PreferenceRewardWrapper(cart, RewardEnsemble(4, 1))


@dataclass
class TrajectoryWithRew:
    """imitation's ``TrajectoryWithRew`` fields (obs has one more row than acts)."""

    obs: np.ndarray
    acts: np.ndarray
    infos: None
    terminal: bool
    rews: np.ndarray


def test_imitation_trajectories_become_segments():
    try:
        from imitation.data.types import TrajectoryWithRew as T  # the real one where installed
    except ImportError:
        T = TrajectoryWithRew
    rng = np.random.default_rng(0)
    traj = T(obs=rng.normal(size=(21, 3)), acts=rng.integers(0, 2, size=20), infos=None,
             terminal=True, rews=rng.normal(size=20))  # fmt: skip
    from icml25.distinguishability.sb3 import encode_actions

    buf = SegmentBuffer()
    n = buf.add_trajectory(traj, segment_len=5,
                           action_encoder=lambda a: encode_actions(gym.spaces.Discrete(2), a))  # fmt: skip
    assert n == 4 and buf.obs.shape == (4, 5, 3) and buf.act.shape == (4, 5, 2)
    assert np.allclose(buf.obs[1].numpy(), traj.obs[5:10])  # obs each action was taken in
    assert np.allclose(buf.true_rew.reshape(-1).numpy(), traj.rews)
    with pytest.raises(ValueError, match="T or T \\+ 1"):
        buf.add_trajectory(T(obs=traj.obs[:10], acts=traj.acts, infos=None, terminal=True,
                             rews=traj.rews), 5)  # fmt: skip


def test_learner_saves_and_resumes_exactly(tmp_path):
    g = torch.Generator().manual_seed(0)
    obs, act = torch.randn(40, 5, 2, generator=g), torch.randn(40, 5, 1, generator=g)
    buf = SegmentBuffer(obs, act, obs[..., 0] - act[..., 0] ** 2)
    torch.manual_seed(0)
    ens = RewardEnsemble(2, 1, hidden=8, n_layers=1)
    L = RewardLearner(ens, max_epochs=3, batch_size=None, noise_prob=0.05)
    teacher = ScriptedTeacher(rng=0)
    q1 = select_dq(ens, buf, 6, "uniform", rng=1)
    L.add(q1, teacher.answer_dq(buf, q1), buf)
    q2 = select_pcq(ens, buf, 6, "uniform", rng=2)
    L.add(q2, teacher.answer_pcq(buf, q2), buf)
    L.train()
    L.save(tmp_path / "learner.pt")
    R = RewardLearner.load(tmp_path / "learner.pt")
    assert R.answers.state_dict() == L.answers.state_dict() and R.noise_prob == 0.05
    assert torch.equal(R.segments.obs, L.segments.obs)
    a, b = L.train(), R.train()  # the same next steps: weights, Adam moments, answers
    assert a == b
    for p, q in zip(L.ensemble.parameters(), R.ensemble.parameters()):
        assert torch.equal(p, q)
    torch.save({"x": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a RewardLearner checkpoint"):
        RewardLearner.load(tmp_path / "other.pt")
