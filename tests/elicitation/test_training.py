"""Reverse SFT, DPO rounds, Frank-Wolfe end to end (tiny), TRL's DPOTrainer path."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from icml25.elicitation import (
    HFTargetModel,
    Investigator,
    InvestigatorMixture,
    build_reverse_pairs,
    dpo_round,
    frank_wolfe,
    reverse_sft,
)


def test_reverse_pairs_and_sft_learn_the_prompt_given_the_behaviour(world, tok, tiny, inv):
    target = HFTargetModel(copy.deepcopy(tiny), tok, use_chat_template=True, add_eos=True)
    xs = world.natural_prompts(40, random.Random(0))
    pairs = build_reverse_pairs(target, xs, max_new_tokens=4, seed=0)
    assert 20 <= len(pairs) <= 40 and all(
        x in xs and b.strip() for b, x in pairs
    )  # (response, prompt); empty dropped
    given = build_reverse_pairs(None, xs[:2], y_source="given", responses=["a", " "])
    assert given == [("a", xs[0])]  # empty behaviours dropped
    fixed = [(world.behaviors[0], "w1 w2 w3 w4 w5 w6 w7 w8")] * 8
    with torch.no_grad():
        before = inv.logprob([fixed[0][0]], [fixed[0][1]]).item()
    reverse_sft(inv, fixed, steps=30, lr=3e-3, batch_size=8, warmup=2, progress=False)
    with torch.no_grad():
        after = inv.logprob([fixed[0][0]], [fixed[0][1]]).item()
    assert after > before + 5 and inv.sft_losses[-1] < inv.sft_losses[0]
    with pytest.raises(ValueError, match="y_source"):
        build_reverse_pairs(target, xs, y_source="web")
    with pytest.raises(ValueError, match="pairs is empty"):
        reverse_sft(inv, [])


def test_dpo_round_moves_towards_the_higher_reward(world, inv):
    ref = inv.copy()
    target_word = "w5"

    def reward(prompts, behaviors):  # more w5 = better
        return torch.tensor([float(p.split().count(target_word)) for p in prompts])

    def mean_count(q):
        return (
            sum(
                x.split().count(target_word)
                for xs in q.sample(world.behaviors, 32, seed=99)
                for x in xs
            )
            / 128
        )

    start = mean_count(inv)
    opt = torch.optim.AdamW(inv.model.parameters(), lr=3e-3)
    for k in range(6):
        st = dpo_round(
            inv,
            ref,
            reward,
            world.behaviors,
            optimizer=opt,
            n_candidates=8,
            pairs_per_behavior=2,
            min_gap=0.5,
            steps=2,
            seed=k,
        )
    assert st["n_pairs"] > 0 and st["loss"] is not None
    assert mean_count(inv) > start + 0.2
    flat = dpo_round(inv, ref, lambda p, b: torch.zeros(len(p)), world.behaviors, n_candidates=4)
    assert (
        flat["n_pairs"] == 0 and flat["no_pair"] == 4 and flat["loss"] is None
    )  # no step, no crash


def test_frank_wolfe_end_to_end_tiny(world, tok, tiny, inv):
    target = HFTargetModel(copy.deepcopy(tiny), tok, use_chat_template=True, add_eos=True)
    seen = []
    mix = frank_wolfe(
        world.behaviors[:2],
        target,
        inv,
        lam=0.1,
        n_iters=2,
        rounds_per_iter=2,
        n_candidates=4,
        pairs_per_behavior=1,
        min_gap=0.0,
        lr=1e-3,
        callbacks=[lambda t, k, st: seen.append((t, k))],
    )
    assert (
        isinstance(mix, InvestigatorMixture)
        and len(mix.members) == 2
        and mix.weights == pytest.approx([0.5, 0.5])
    )
    assert seen == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert mix.history[1][0]["spread"]["penalty_std"] > 0  # the second iterate is penalised
    s = mix.sample(world.behaviors[:2], 3, seed=0)
    assert all(len(x.split()) == 8 for xs in s for x in xs)
    assert torch.isfinite(mix.logprob(world.behaviors[:2], [s[0][0], s[1][0]])).all()
    with pytest.raises(ValueError, match="lam"):
        frank_wolfe(world.behaviors, target, inv, lam=-0.1)
    with pytest.raises(ValueError, match="n_iters"):
        frank_wolfe(world.behaviors, target, inv, lam=0.1, n_iters=0)
    with pytest.raises(ValueError, match="n_candidates"):
        frank_wolfe(world.behaviors, target, inv, lam=0.1, n_candidates=1)
    with pytest.raises(TypeError, match="lam"):
        frank_wolfe(world.behaviors, target, inv)  # lam is keyword-only with no default


def test_trl_dpo_trainer_runs_a_round(world, tok, tiny, tmp_path):
    trl = pytest.importorskip("trl")
    import datasets

    from icml25.elicitation import PreferencePair, dpo_trainer

    datasets.disable_progress_bars()
    policy = Investigator(tiny, tok)
    ref = policy.copy()
    pairs = [PreferencePair(world.behaviors[j], "w1 w2 w3", "w4 w5 w6", 1.0, 0.0) for j in range(4)]
    args = trl.DPOConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        report_to=[],
        bf16=False,
        gradient_checkpointing=False,
        save_strategy="no",
        use_cpu=True,
        logging_steps=1,
        beta=0.1,
    )
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    out = dpo_trainer(policy, ref, pairs, args).train()
    assert out.global_step == 2
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    restricted = Investigator(tiny, tok, allowed_token_ids=world.content_ids(tok), exact_length=3)
    with pytest.raises(ValueError, match="whole vocabulary"):
        dpo_trainer(restricted, ref, pairs, args)


def test_frank_wolfe_resumes_from_its_checkpoints(world, tok, tiny, inv, tmp_path):
    target = HFTargetModel(copy.deepcopy(tiny), tok, use_chat_template=True, add_eos=True)
    kw = dict(
        lam=0.1,
        rounds_per_iter=1,
        n_candidates=4,
        min_gap=0.0,
        lr=1e-3,
        checkpoint_dir=tmp_path / "fw",
    )
    first = frank_wolfe(world.behaviors[:2], target, inv, n_iters=1, **kw)
    seen = []
    both = frank_wolfe(
        world.behaviors[:2],
        target,
        inv,
        n_iters=2,
        callbacks=[lambda t, k, st: seen.append(t)],
        **kw,
    )
    assert seen == [2]  # iteration 1 was loaded, not retrained
    assert len(both.members) == 2 and len(both.history) == 2
    xs = first.sample(world.behaviors[:1], 2, seed=0)[0]
    with torch.no_grad():
        assert torch.allclose(
            both.members[0].logprob(world.behaviors[:1] * 2, xs),
            first.members[0].logprob(world.behaviors[:1] * 2, xs),
            atol=1e-5,
        )
    with pytest.raises(ValueError, match="other settings"):
        frank_wolfe(world.behaviors[:2], target, inv, n_iters=2, **{**kw, "lam": 0.5})


def test_user_mistakes_get_clear_errors(world, tok, tiny, inv):
    import numpy as np

    with pytest.raises(TypeError, match="bare model"):
        build_reverse_pairs(tiny, ["w1 w2"])
    with pytest.raises(ValueError, match="y_source='given'"):
        build_reverse_pairs(
            HFTargetModel(tiny, tok, use_chat_template=True), ["w1"], responses=["x"]
        )
    with pytest.raises(ValueError, match="epochs"):
        reverse_sft(inv, [("p0", "w1 w2 w3 w4 w5 w6 w7 w8")], epochs=0)
    with pytest.warns(UserWarning, match="never leaves the warm-up"):
        reverse_sft(inv, [("p0", "w1 w2 w3 w4 w5 w6 w7 w8")], steps=3, progress=False)
    target = HFTargetModel(copy.deepcopy(tiny), tok, use_chat_template=True)
    mix = frank_wolfe(
        world.behaviors[:1],
        target,
        inv,
        lam=np.float32(0.1),
        n_iters=np.int64(1),
        rounds_per_iter=1,
        n_candidates=np.int64(4),
        seed=np.int64(3),
        min_gap=0.0,
    )
    assert len(mix.members) == 1
    with pytest.raises(TypeError, match="must return a tensor"):
        dpo_round(inv, inv.copy(), lambda p, b: [0.0] * len(p), world.behaviors[:1], n_candidates=2)


def test_unrestricted_investigator_never_draws_special_tokens(tok, tiny):
    inv = Investigator(tiny, tok, max_prompt_tokens=6)
    specials = set(tok.all_special_ids) - {tok.eos_token_id}
    assert not specials & set(inv.allowed.tolist())
    drawn = inv.sample(["p0 p1"], 50, seed=0, top_p=1.0)[0]
    with torch.no_grad():
        lp = inv.logprob(["p0 p1"] * 50, drawn)
    assert (
        torch.isfinite(lp).all() and (lp > -1e3).all()
    )  # every drawn text, even "", scores as drawn


def test_float16_training_fails_loudly(world, tok, tiny):
    inv = Investigator(
        copy.deepcopy(tiny).half(), tok, allowed_token_ids=world.content_ids(tok), exact_length=8
    )
    ref = inv.copy()

    def reward(prompts, behaviors):
        return torch.arange(len(prompts), dtype=torch.float32)

    try:
        for k in range(3):
            dpo_round(inv, ref, reward, world.behaviors[:2], n_candidates=4, lr=1e3, seed=k)
    except FloatingPointError as exc:
        assert "float16" in str(exc)
    else:  # no overflow at all: every weight must still be finite
        assert all(torch.isfinite(p).all() for p in inv.model.parameters())
