"""The offline role task and its chat adapter (work in progress: the trained role model's quality
thresholds and the reproduction are not in place yet)."""

from __future__ import annotations

import random

import pytest
import torch

from icml25.llm import CallableReward
from icml25.tpo import PromptSet, TPOConfig, tpo_optimize
from icml25.tpo.tiny import (
    RoleModel,
    ScrambledCritiqueBackend,
    TinyRoleBackend,
    digit_reward,
    make_example,
    make_query,
    target_of,
)


def test_task_target_and_reward():
    q = make_query([1, 2, 3, 4, 5, 9])
    assert target_of(q) == [0, 6, 5, 4, 3, 2]
    assert digit_reward(q, "0 6 5 4 3 2") == 1.0
    assert digit_reward(q, "0 6 5 4 3 7") == pytest.approx(5 / 6)
    assert digit_reward(q, "0 6 5") == pytest.approx(3 / 6 - 0.25 * 3 / 6)
    assert digit_reward(q, "0 6 5 4 3 2 1") == pytest.approx(1 - 0.25 / 6)
    with pytest.raises(ValueError, match="not a task query"):
        target_of("hello")


def test_training_examples_are_well_formed():
    rng = random.Random(0)
    for _ in range(200):
        prompt, target = make_example(rng)
        assert prompt[0] == "<bos>" and prompt[-1] == "<out>"
        assert len(prompt) + len(target) + 1 <= 64


def test_backend_reads_every_real_prompt_and_answers_in_format():
    torch.manual_seed(0)
    backend = TinyRoleBackend(RoleModel(n_layer=1, d=32, heads=2))  # untrained: format only
    reward = CallableReward(digit_reward)
    for mode in ("tpo", "revision"):
        res = tpo_optimize(
            make_query([3, 1, 4, 1, 5, 9]), backend, reward, TPOConfig(width=3, depth=2, mode=mode)
        )
        assert res.n_policy_calls == 7 and len(res.cache) >= 3
    scrambled = ScrambledCritiqueBackend(backend, seed=1)
    P = PromptSet.default()
    msgs = P.loss_messages(make_query([1] * 6), "1 2 3 4 5 6", "6 5 4 3 2 1")
    out = scrambled.chat(msgs, n=2, temperature=0.7, seed=0)
    texts = [getattr(o, "text", o) for o in out]
    assert all(t.startswith("bad") for t in texts)
