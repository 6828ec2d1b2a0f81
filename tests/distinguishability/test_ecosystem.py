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
    model = sb3.SAC(
        "MlpPolicy",
        env,
        learning_starts=100,
        batch_size=32,
        seed=0,
        policy_kwargs=dict(net_arch=[16, 16]),
    )
    before = [p.detach().clone() for p in ens.parameters()]
    cb = PreferenceFeedbackCallback(
        RewardLearner(ens, max_epochs=5),
        ScriptedTeacher(rng=0),
        segment=25,
        reward_batch=5,
        first_feedback=200,
        num_interact=200,
        max_feedback=12,
    )
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
        RewardLearner(ens, max_epochs=3),
        ScriptedTeacher(rng=0),
        query_type="pcq",
        segment=10,
        reward_batch=4,
        first_feedback=100,
        num_interact=100,
        max_feedback=12,
    )
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
    traj = T(
        obs=rng.normal(size=(21, 3)),
        acts=rng.integers(0, 2, size=20),
        infos=None,
        terminal=True,
        rews=rng.normal(size=20),
    )
    from icml25.distinguishability.sb3 import encode_actions

    buf = SegmentBuffer()
    n = buf.add_trajectory(
        traj, segment_len=5, action_encoder=lambda a: encode_actions(gym.spaces.Discrete(2), a)
    )
    assert n == 4 and buf.obs.shape == (4, 5, 3) and buf.act.shape == (4, 5, 2)
    assert np.allclose(buf.obs[1].numpy(), traj.obs[5:10])  # obs each action was taken in
    assert np.allclose(buf.true_rew.reshape(-1).numpy(), traj.rews)
    with pytest.raises(ValueError, match="T or T \\+ 1"):
        buf.add_trajectory(
            T(obs=traj.obs[:10], acts=traj.acts, infos=None, terminal=True, rews=traj.rews), 5
        )


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


# -- the second new-user review ------------------------------------------------------------------


def test_callback_refuses_a_learner_whose_ensemble_is_not_the_wrappers():
    from icml25.distinguishability.sb3 import (
        PreferenceFeedbackCallback,
        PreferenceRewardWrapper,
        reward_model_for,
    )

    base = gym.make("Pendulum-v1")
    env = PreferenceRewardWrapper(base, reward_model_for(base, hidden=8, n_layers=1))
    other = RewardLearner(reward_model_for(base, hidden=8, n_layers=1))
    model = sb3.SAC(
        "MlpPolicy", env, learning_starts=10, batch_size=16, policy_kwargs=dict(net_arch=[8])
    )
    with pytest.raises(ValueError, match="ensemble is not the learner's"):
        model.learn(20, callback=PreferenceFeedbackCallback(other, ScriptedTeacher()))
    with pytest.raises(ValueError, match="selection for query_type='dq' must be one of"):
        PreferenceFeedbackCallback(other, ScriptedTeacher(), selection="pebble")


def test_a_round_at_the_last_step_leaves_no_stale_replay_reward():
    from icml25.distinguishability.sb3 import (
        PreferenceFeedbackCallback,
        PreferenceRewardWrapper,
        reward_model_for,
    )

    torch.manual_seed(0)
    base = gym.make("Pendulum-v1")
    ens = reward_model_for(base, hidden=8, n_layers=1)
    model = sb3.SAC(
        "MlpPolicy",
        PreferenceRewardWrapper(base, ens),
        learning_starts=50,
        batch_size=16,
        seed=0,
        policy_kwargs=dict(net_arch=[8]),
    )
    cb = PreferenceFeedbackCallback(
        RewardLearner(ens, max_epochs=3),
        ScriptedTeacher(rng=0),
        segment=20,
        reward_batch=4,
        first_feedback=100,
        num_interact=100,
        max_feedback=8,
    )
    model.learn(200, callback=cb)
    assert [h["step"] for h in cb.history] == [100, 200]  # the last round at the last step
    rb = model.replay_buffer
    acts = model.policy.unscale_action(rb.actions[: rb.pos, 0]).astype(np.float32)
    with torch.no_grad():
        want = ens.reward(torch.from_numpy(rb.observations[: rb.pos, 0]), torch.from_numpy(acts))
    assert np.allclose(rb.rewards[: rb.pos, 0], want.numpy(), atol=1e-5)


def test_save_load_resumes_mini_batch_training_with_its_generator(tmp_path):
    g = torch.Generator().manual_seed(0)
    obs, act = torch.randn(30, 5, 2, generator=g), torch.randn(30, 5, 1, generator=g)
    buf = SegmentBuffer(obs, act, obs[..., 0])
    torch.manual_seed(0)
    L = RewardLearner(
        RewardEnsemble(2, 1, hidden=8, n_layers=1),
        max_epochs=2,
        batch_size=4,
        generator=torch.Generator().manual_seed(5),
    )
    q = select_pcq(L.ensemble, buf, 12, "uniform", rng=1)
    L.add(q, ScriptedTeacher(rng=0).answer_pcq(buf, q), buf)
    L.train()
    L.save(tmp_path / "l.pt")
    R = RewardLearner.load(tmp_path / "l.pt")
    assert L.train() == R.train()
    for p, r in zip(L.ensemble.parameters(), R.ensemble.parameters()):
        assert torch.equal(p, r)


def test_review_bad_inputs_of_the_buffer_and_selection():
    buf = SegmentBuffer()
    buf.add_episode(torch.randn(20, 3), torch.randn(20, 1), torch.randn(20), 5)
    with pytest.raises(ValueError, match="another size"):
        buf.add_episode(torch.randn(20, 4), torch.randn(20, 1), torch.randn(20), 5)
    with pytest.raises(ValueError, match="true rewards, or none"):
        buf.add_episode(torch.randn(20, 3), torch.randn(20, 1), None, 5)
    with pytest.raises(ValueError, match="one row per step: got 20, 19"):
        buf.add_episode(torch.randn(20, 3), torch.randn(19, 1), None, 5)
    ens = RewardEnsemble(3, 1, hidden=4, n_layers=1)
    assert select_dq(ens, buf, 0) == [] and select_pcq(ens, buf, 0) == []
    with pytest.raises(ValueError, match="NaN or inf"):
        select_dq(ens, buf, 1, returns=torch.full((3, 4), float("nan")))
    with pytest.warns(UserWarning, match="1-member ensemble"):
        select_dq(RewardEnsemble(3, 1, n_members=1, hidden=4, n_layers=1), buf, 1, rng=0)
    from icml25.distinguishability import CallbackTeacher, DistinguishabilityQuery, PairwiseQuery

    t = CallbackTeacher(dq_fn=lambda p1, p2: (torch.tensor(1), torch.tensor(0.0)))
    ans = t.answer_dq(buf, [DistinguishabilityQuery(PairwiseQuery(0, 1), PairwiseQuery(2, 3))])
    assert (ans[0].d, ans[0].y) == (1.0, 0.0)  # 0-d tensors are numbers
    traj = TrajectoryWithRew(
        obs={"a": np.zeros((6, 2))}, acts=np.zeros(5), infos=None, terminal=True, rews=np.zeros(5)
    )
    with pytest.raises(TypeError, match="dict observations"):
        SegmentBuffer().add_trajectory(traj, 5)
