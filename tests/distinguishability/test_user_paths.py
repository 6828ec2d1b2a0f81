"""Distinguishability queries as real users meet them: FIFO eviction under stored answers, long
episodes, devices, discrete spaces, callback labelers, half answers, the "equal" rules, and
imitation's noise and tie conventions."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from icml25.distinguishability import (
    CallbackTeacher,
    DistinguishabilityQuery,
    DQAnswer,
    PairwiseQuery,
    RewardEnsemble,
    RewardLearner,
    ScriptedTeacher,
    SegmentBuffer,
    select_dq,
    select_pcq,
)
from icml25.distinguishability.reward_model import pcq_loss


def episode(seed, T=20, H=5):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, 2, generator=g)
    act = torch.randn(T, 1, generator=g)
    return obs, act, obs[:, 0] - 0.5 * act[:, 0] ** 2


def filled(n_episodes, max_episodes, H=5):
    buf = SegmentBuffer(max_episodes=max_episodes)
    eps = [episode(s) for s in range(n_episodes)]
    for o, a, r in eps:
        buf.add_episode(o, a, r, segment_len=H)
    return buf, eps


def test_segment_ids_are_stable_and_evicted_ones_raise():
    buf, eps = filled(3, 3)
    assert buf.first_id == 0 and torch.equal(buf.ids(), torch.arange(12))
    seg7 = buf.obs[7].clone()
    o, a, r = episode(9)
    buf.add_episode(o, a, r, segment_len=5)  # evicts episode 0 (ids 0-3)
    assert buf.first_id == 4
    assert torch.equal(buf.obs[int(buf.positions([7])[0])], seg7)  # id 7 still means segment 7
    with pytest.raises(ValueError, match="segment id 2 was evicted"):
        buf.positions([2])
    with pytest.raises(ValueError, match="segment id 99 is not in the buffer"):
        buf.positions([99])
    # selection hands out ids of held segments only
    torch.manual_seed(0)
    ens = RewardEnsemble(2, 1, hidden=8, n_layers=1)
    for q in select_pcq(ens, buf, 20, "disagreement", 3, 0):
        assert 4 <= q.i0 < 16 and 4 <= q.i1 < 16
    for q in select_dq(ens, buf, 20, "distq", 3, rng=0):
        assert all(4 <= i < 16 for i in q.segments)


def test_answers_never_meet_another_segment_after_an_eviction():
    """The defect: labels stored as buffer rows matched their segments at chance after one
    eviction. Now the teacher reads ids, the learner copies answered segments (add with buf) or
    refuses evicted ids (train(buf))."""
    buf, _ = filled(2, 2)
    teacher = ScriptedTeacher(rng=0)
    torch.manual_seed(0)
    ens = RewardEnsemble(2, 1, hidden=8, n_layers=1)
    qs = select_pcq(ens, buf, 8, "uniform", rng=1)
    ans = teacher.answer_pcq(buf, qs)
    G = buf.returns()
    want = [1.0 if G[q.i0] >= G[q.i1] else 0.0 for q in qs]
    assert [a.y for a in ans] == want
    copied = RewardLearner(ens, batch_size=None, max_epochs=3)
    copied.add(qs, ans, buf)
    looked_up = RewardLearner(RewardEnsemble(2, 1, hidden=8, n_layers=1), max_epochs=3)
    looked_up.add(qs, ans)
    held = {q.i0: buf.obs[q.i0].clone() for q in qs}
    for s in (5, 6):  # two new episodes evict both old ones
        buf.add_episode(*episode(s), segment_len=5)
    assert buf.first_id == 8
    copied.train()  # the copies are intact
    t = copied.answers.tensors()
    for k, q in enumerate(qs):
        assert torch.equal(copied.segments.obs[int(t["pcq_idx"][k, 0])], held[q.i0])
    with pytest.raises(ValueError, match="was evicted"):
        looked_up.train(buf)
    with pytest.raises(ValueError, match="call train\\(\\) without a buffer"):
        copied.train(buf)
    with pytest.raises(ValueError, match="with and without a segment buffer"):
        copied.add(qs[:1], ans[:1])
    # the teacher refuses evicted ids too
    with pytest.raises(ValueError, match="was evicted"):
        teacher.answer_pcq(buf, qs)


def small_rl(env, cfg_kw, teacher=None):
    from icml25.distinguishability.rl import PEBBLEConfig, PreferenceRL, SACConfig

    kw = dict(
        reward_batch=4,
        num_interact=10_000,
        max_feedback=8,
        eval_frequency=10**9,
        reward_hidden=8,
        reward_layers=1,
        reward_update=5,
    )
    cfg = PEBBLEConfig(**{**kw, **cfg_kw})
    return PreferenceRL(
        env,
        "dq",
        teacher=teacher or ScriptedTeacher(rng=0),
        cfg=cfg,
        sac=SACConfig(hidden=16, batch_size=16, buffer_size=5000),
        seed=0,
    )


def test_the_first_round_reads_segments_of_the_running_episode():
    gym = pytest.importorskip("gymnasium")
    env = gym.make("Pendulum-v1", max_episode_steps=500)  # no episode ends before step 500
    rl = small_rl(env, dict(num_seed_steps=100, num_unsup_steps=100, segment=50))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deferral: 4 segments of the running episode exist
        rl.run(201, progress=False)
    assert rl.total_feedback == 4 and rl.labeled_feedback == 4
    assert len(rl.segments) == 4  # cut from the running episode at step 200


def test_the_first_round_is_deferred_until_four_segments_exist():
    gym = pytest.importorskip("gymnasium")
    env = gym.make("Pendulum-v1", max_episode_steps=1000)
    rl = small_rl(env, dict(num_seed_steps=20, num_unsup_steps=0, segment=50))
    resets = []
    reset = rl.agent.reset_critic
    rl.agent.reset_critic = lambda: (resets.append(len(rl.segments)), reset())
    with pytest.warns(UserWarning, match="deferred until 4"):
        rl.run(160, progress=False)
    assert rl.total_feedback == 0 and resets == []  # no critic reset on an untrained reward
    rl2 = small_rl(
        gym.make("Pendulum-v1", max_episode_steps=1000),
        dict(num_seed_steps=20, num_unsup_steps=0, segment=50),
    )
    resets2 = []
    reset2 = rl2.agent.reset_critic
    rl2.agent.reset_critic = lambda: (resets2.append(len(rl2.segments)), reset2())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rl2.run(230, progress=False)
    assert rl2.total_feedback == 4 and resets2 == [4]  # at step 220: 4 segments, then the reset


def test_discrete_action_spaces_are_refused_clearly():
    gym = pytest.importorskip("gymnasium")
    from icml25.distinguishability.rl import PreferenceRL
    from icml25.distinguishability.segments import collect_segments

    with pytest.raises(ValueError, match="continuous Box action space.*Discrete"):
        PreferenceRL(gym.make("CartPole-v1"), "dq", teacher=ScriptedTeacher())
    with pytest.raises(ValueError, match="Box action space"):
        collect_segments("CartPole-v1", n_episodes=1, policies="uniform")


def test_callback_teacher_refuses_answers_that_are_not_answers():
    buf, _ = filled(1, 5)
    q = [PairwiseQuery(0, 1)]
    for bad in (True, 2, "1", None.__class__):
        t = CallbackTeacher(pcq_fn=lambda a, b, v=bad: v)
        with pytest.raises(ValueError, match="labeler's y must be one of"):
            t.answer_pcq(buf, q)
    assert CallbackTeacher(pcq_fn=lambda a, b: np.float64(0.5)).answer_pcq(buf, q)[0].y == 0.5
    dq = [DistinguishabilityQuery(PairwiseQuery(0, 1), PairwiseQuery(2, 3))]
    with pytest.raises(ValueError, match="labeler's d must be one of"):
        CallbackTeacher(dq_fn=lambda p1, p2: (3, 1)).answer_dq(buf, dq)
    with pytest.raises(ValueError, match=r"return \(d, y\) or None"):
        CallbackTeacher(dq_fn=lambda p1, p2: 1).answer_dq(buf, dq)


def test_a_half_answer_is_never_rounded_up_to_a_win():
    """One DQ answer with a hard strength answer the model gets wrong and a tied preference:
    the accuracy is 0 (0 of 0.5), where int(0.5) = 0 made it 'no answers' and 1.0."""
    buf = SegmentBuffer(torch.zeros(4, 1, 1), torch.zeros(4, 1, 1))
    torch.manual_seed(0)
    ens = RewardEnsemble(1, 1, n_members=1, hidden=4, n_layers=0)
    with torch.no_grad():
        ens.weights[0].zero_()
        ens.biases[0].zero_()
    L = RewardLearner(ens, batch_size=None, max_epochs=1, stop_acc=0.97)
    L.add(
        [DistinguishabilityQuery(PairwiseQuery(0, 1), PairwiseQuery(2, 3))], [DQAnswer(1.0, 1, 0.5)]
    )
    out = L.train(buf)
    assert out["acc"] == 0.0  # all strengths equal: "pair 1 easier" is not predicted


def test_the_equal_rules_both_use_undiscounted_returns():
    # pair 1: undiscounted strength 0 (equal), discounted strength large; pair 2 likewise
    r = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 2.0]])
    buf = SegmentBuffer(torch.zeros(4, 2, 1), torch.zeros(4, 2, 1), r)
    t = ScriptedTeacher(gamma=0.5, eps_equal=0.5, rng=0)
    t.set_thresholds(1.0)  # thres_equal = 0.5
    pcq = t.answer_pcq(buf, [PairwiseQuery(0, 1)])[0]
    assert pcq.y == 0.5  # |G0 - G1| = 0 < 0.5: equal, as in B-Pref
    dq = t.answer_dq(buf, [DistinguishabilityQuery(PairwiseQuery(0, 1), PairwiseQuery(2, 3))])[0]
    assert dq.d == 0.5  # both undiscounted strengths 0: equally easy (was decided discounted)


def test_imitation_conventions_noise_prob_and_half_ties():
    g = torch.Generator().manual_seed(0)
    r0, r1 = torch.randn(2, 5, generator=g, dtype=torch.float64).unbind(0)
    y = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0], dtype=torch.float64)
    for noise in (0.0, 0.1):
        p = (1 - noise) * torch.sigmoid(r0 - r1) + noise / 2
        want = -(y * p.log() + (1 - y) * (1 - p).log()).mean()
        got = pcq_loss(r0[None], r1[None], y, noise_prob=noise)
        assert float(got) == pytest.approx(float(want), rel=1e-12)
    with pytest.raises(ValueError, match="noise_prob"):
        pcq_loss(r0[None], r1[None], y, noise_prob=1.0)
    RewardLearner(RewardEnsemble(2, 1, hidden=4, n_layers=0), noise_prob=0.1)
    buf = SegmentBuffer(torch.zeros(2, 2, 1), torch.zeros(2, 2, 1), torch.ones(2, 2))
    assert ScriptedTeacher(ties="half").answer_pcq(buf, [PairwiseQuery(0, 1)])[0].y == 0.5
    assert ScriptedTeacher().answer_pcq(buf, [PairwiseQuery(0, 1)])[0].y == 1.0  # B-Pref
    with pytest.raises(ValueError, match="ties"):
        ScriptedTeacher(ties="random")


def _learner_on(device, dtype):
    buf, _ = filled(2, 5)
    torch.manual_seed(0)
    ens = RewardEnsemble(2, 1, hidden=8, n_layers=1).to(device=device, dtype=dtype)
    L = RewardLearner(ens, max_epochs=2, batch_size=4)
    qs = select_dq(ens, buf, 6, "distq", 3, rng=0)
    L.add(qs, ScriptedTeacher(rng=0).answer_dq(buf, qs), buf)
    pq = select_pcq(ens, buf, 6, "disagreement", 3, 0)
    L.add(pq, ScriptedTeacher(rng=0).answer_pcq(buf, pq), buf)
    out = L.train()
    assert math.isfinite(out["loss"]) and 0 <= out["acc"] <= 1
    assert next(ens.parameters()).device.type == torch.device(device).type


def test_learner_follows_the_ensembles_dtype_on_cpu():
    _learner_on("cpu", torch.float64)


@pytest.mark.gpu
def test_learner_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    _learner_on("cuda", torch.float32)


def test_the_loop_reuses_the_relabelled_member_rewards_for_selection():
    """The next round's selection sums the per-member rewards kept at the relabel (and by online
    labelling) instead of a forward pass over the candidates: the same returns, the same picks."""
    gym = pytest.importorskip("gymnasium")
    rl = small_rl(
        gym.make("Pendulum-v1"),
        dict(num_seed_steps=100, num_unsup_steps=0, segment=25, num_interact=150),
    )
    rl.run(420, progress=False)
    assert rl.total_feedback == 8  # rounds at 100 and 250; 400 is over budget
    cached = rl.segment_returns()
    with torch.no_grad():
        direct = rl.ensemble.segment_returns(rl.segments.obs, rl.segments.act)
    assert cached is not None and cached.shape == direct.shape
    torch.testing.assert_close(cached, direct, rtol=1e-5, atol=1e-5)
    a = select_dq(rl.ensemble, rl.segments, 4, "distq", 5, rng=3)
    b = select_dq(rl.ensemble, rl.segments, 4, "distq", 5, rng=3, returns=cached)
    assert a == b
