"""Query selection, reward learning and the RL loop of paper 02."""

from __future__ import annotations

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
from icml25.distinguishability.experiment import CurveConfig, learning_curve, split
from icml25.distinguishability.segments import collect_segments
from icml25.distinguishability.selection import dq_scores

D = torch.float64


@pytest.fixture(scope="module")
def pendulum():
    pytest.importorskip("gymnasium")
    return collect_segments(n_episodes=40, segment_len=25, seed=0)


def toy_buffer(n=60, H=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, H, 2, generator=g)
    act = torch.randn(n, H, 1, generator=g)
    return SegmentBuffer(obs, act, obs[..., 0] - 0.5 * obs[..., 1] ** 2)


def test_select_pcq_disagreement_is_the_argsort_of_member_std():
    buf = toy_buffer()
    torch.manual_seed(0)
    ens = RewardEnsemble(2, 1, hidden=8, n_layers=1)
    qs = select_pcq(ens, buf, 5, "disagreement", large_batch=10, rng=np.random.default_rng(4))
    cand = np.random.default_rng(4).integers(0, len(buf), size=(50, 2))
    with torch.no_grad():
        ret = ens.segment_returns(buf.obs, buf.act)
    p = torch.sigmoid(ret[:, cand[:, 0]] - ret[:, cand[:, 1]])
    std = p.std(0, unbiased=False)
    top = torch.sort(-std.double(), stable=True).indices[:5].tolist()
    assert [(q.i0, q.i1) for q in qs] == [tuple(int(v) for v in cand[i]) for i in top]
    for method in ("uniform", "entropy", "kcenter", "kcenter_disagree", "kcenter_entropy"):
        got = select_pcq(ens, buf, 4, method, rng=1)
        assert len(got) == 4 and all(0 <= q.i0 < len(buf) and 0 <= q.i1 < len(buf) for q in got)
        assert len({(q.i0, q.i1) for q in got}) == 4 or method == "uniform"


def test_select_dq_distq_filters_by_information_then_sorts_by_easiness():
    buf = toy_buffer()
    torch.manual_seed(1)
    ens = RewardEnsemble(2, 1, hidden=8, n_layers=1)
    n, M = 6, 10
    qs = select_dq(ens, buf, n, "distq", large_batch=M, keep_frac=0.5, rng=np.random.default_rng(3))
    cand = np.random.default_rng(3).integers(0, len(buf), size=(n * M, 4))
    with torch.no_grad():
        ret = ens.segment_returns(buf.obs, buf.act)[:, torch.from_numpy(cand)]
    info, ease = dq_scores(ret)
    top_info = set(torch.sort(-info.double(), stable=True).indices[:30].tolist())
    rows = {tuple(int(v) for v in cand[i]): i for i in range(len(cand))}
    picked = [rows[q.segments] for q in qs]
    assert len(picked) == n and len(set(picked)) == n  # valid and not duplicated
    assert set(picked) <= top_info
    e = ease[picked]
    assert bool((e[:-1] >= e[1:]).all())  # easiest first
    # the n easiest of the informative half
    kept = sorted(top_info)
    best = sorted(kept, key=lambda i: (-float(ease[i]), i))[:n]
    assert picked == best
    u1 = select_dq(ens, buf, 5, "uniform", rng=7)
    assert u1 == select_dq(ens, buf, 5, "uniform", rng=7)
    for method in ("informative", "easy"):
        assert len(select_dq(ens, buf, 5, method, rng=2)) == 5
    assert len(select_dq(ens, buf, 5, "distq", rule="weighted", rng=2)) == 5
    with pytest.warns(UserWarning, match="keeps"):
        select_dq(ens, buf, 5, "distq", large_batch=1, keep_frac=0.5, rng=2)
    with pytest.raises(ValueError, match="keep_frac"):
        select_dq(ens, buf, 5, keep_frac=0.0)
    with pytest.raises(ValueError, match="at least 4"):
        select_dq(ens, toy_buffer(n=3), 1)
    with pytest.raises(ValueError, match="large_batch"):
        select_pcq(ens, buf, 2, large_batch=0)


def test_learner_early_stop_and_continuation():
    buf = toy_buffer(n=40)
    torch.manual_seed(0)
    ens = RewardEnsemble(2, 1, hidden=16, n_layers=2)
    learner = RewardLearner(ens, lr=1e-2, batch_size=16, max_epochs=300, stop_acc=0.97)
    assert learner.train(buf)["epochs"] == 0  # empty buffer: nothing happens
    teacher = ScriptedTeacher.preset("oracle", rng=0)
    qs = select_pcq(ens, buf, 40, "uniform", rng=0)
    learner.add(qs, teacher.answer_pcq(buf, qs))
    out = learner.train(buf)
    assert out["acc"] > 0.97 and out["epochs"] < 300
    before = [p.detach().clone() for p in ens.parameters()]
    again = learner.train(buf)  # continues from the trained weights: stops at once
    assert again["epochs"] < out["epochs"]
    assert any(not torch.equal(a, b) for a, b in zip(before, ens.parameters()))


def test_sixty_oracle_answers_recover_the_pendulum_reward(pendulum):
    pool, held = split(pendulum, 0.7, 0)
    cfg = CurveConfig(budgets=(60,))
    for method in ("dq+distq", "pcq+disagreement"):
        r = learning_curve(pool, held, ScriptedTeacher.preset("oracle", rng=0), method, cfg, 0)
        assert r["curve"][60]["pearson"] > 0.9, (method, r["curve"])


def test_learned_reward_wrapper_passes_check_env():
    gym = pytest.importorskip("gymnasium")
    from gymnasium.utils.env_checker import check_env

    from icml25.distinguishability.rl import LearnedRewardWrapper

    ens = RewardEnsemble(3, 1, hidden=8, n_layers=1)
    env = LearnedRewardWrapper(gym.make("Pendulum-v1").unwrapped, ens.reward)
    check_env(env, skip_render_check=True)
    env.reset(seed=0)
    _, r, _, _, info = env.step(np.zeros(1, np.float32))
    assert isinstance(r, float) and "true_reward" in info


@pytest.mark.slow
def test_preference_rl_smoke_relabels_and_respects_the_budget():
    gym = pytest.importorskip("gymnasium")
    from icml25.distinguishability.rl import PEBBLEConfig, PreferenceRL, SACConfig

    cfg = PEBBLEConfig(
        num_seed_steps=400,
        num_unsup_steps=200,
        segment=25,
        reward_batch=10,
        num_interact=600,
        max_feedback=15,
        eval_frequency=1000,
        num_eval_episodes=1,
        reward_hidden=16,
        reward_layers=2,
    )
    rl = PreferenceRL(
        gym.make("Pendulum-v1"),
        "dq",
        teacher=ScriptedTeacher.preset("oracle", rng=0),
        cfg=cfg,
        sac=SACConfig(hidden=32, batch_size=64),
        seed=0,
    )
    hist = rl.run(2000, progress=False)
    assert rl.total_feedback <= cfg.max_feedback and rl.total_feedback == 15  # two rounds
    idx = np.random.default_rng(0).integers(0, rl.replay.n, size=100)
    with torch.no_grad():
        want = rl.reward_fn(
            torch.from_numpy(rl.replay.obs[idx]), torch.from_numpy(rl.replay.act[idx])
        )
    # transitions before the last relabel carry r_hat exactly; later ones were labelled online
    assert np.allclose(rl.replay.reward[idx], want.numpy(), atol=1e-6)
    assert hist["step"] == [1000, 2000] and len(hist["true_return"]) == 2
