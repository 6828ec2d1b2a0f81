"""The real-scale path: WeightedRewardTrainer (trl.RewardTrainer) and TrainableHFRewardModel on a
tiny random-init Llama sequence classifier."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny():
    from icml25.rlthf import make_textworld
    from icml25.toy import build_tokenizer

    w = make_textworld(48, 16, seed=0)
    texts = w.train.prompts + w.train.responses_a + w.train.responses_b
    tok = build_tokenizer(texts, 400)
    cfg = transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        num_labels=1,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForSequenceClassification(cfg)
    return w, tok, model


def _trainer(cls, model, tok, rows, tmp_path):
    args = trl.RewardConfig(
        str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=2,
        learning_rate=1e-3,
        bf16=False,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        max_length=None,
        gradient_checkpointing=False,
        logging_steps=1,
    )
    return cls(
        model=model, args=args, train_dataset=datasets.Dataset.from_list(rows), processing_class=tok
    )


def test_unit_weights_equal_reward_trainer_loss(tiny, tmp_path):
    from icml25.rlthf import WeightedRewardTrainer

    w, tok, model = tiny
    rows = w.train.to_trl(np.arange(8), conversational=True)
    weighted = w.train.to_trl(np.arange(8), conversational=True, weights=np.ones(8))
    ours = _trainer(WeightedRewardTrainer, copy.deepcopy(model), tok, weighted, tmp_path / "a")
    ref = _trainer(trl.RewardTrainer, copy.deepcopy(model), tok, rows, tmp_path / "b")
    b_ours = next(iter(ours.get_train_dataloader()))
    b_ref = next(iter(ref.get_train_dataloader()))
    assert "weight" in b_ours and torch.equal(b_ours["input_ids"], b_ref["input_ids"])
    with torch.no_grad():
        l_ours = ours.compute_loss(ours.model, dict(b_ours))
        l_ref = ref.compute_loss(ref.model, dict(b_ref))
    torch.testing.assert_close(l_ours, l_ref)
    # non-unit weights change it, as the weighted formula says
    b2 = dict(b_ours)
    b2["weight"] = torch.tensor([5.0, 1.0, 1.0, 1.0])
    with torch.no_grad():
        assert not torch.isclose(ours.compute_loss(ours.model, b2), l_ref)


def test_weighted_reward_trainer_trains(tiny, tmp_path):
    from icml25.rlthf import WeightedRewardTrainer

    w, tok, model = tiny
    m = copy.deepcopy(model)
    rows = w.train.to_trl(
        np.arange(16), conversational=True, weights=np.r_[np.full(4, 5.0), np.ones(12)]
    )
    tr = _trainer(WeightedRewardTrainer, m, tok, rows, tmp_path)
    tr.train()
    logs = [x for x in tr.state.log_history if "loss" in x]
    assert len(logs) == 2 and all(np.isfinite(x["loss"]) for x in logs)
    assert any(not torch.equal(a, b) for a, b in zip(m.parameters(), model.parameters()))


@pytest.mark.parametrize("trainer", ["loop", "trl"])
def test_trainable_hf_reward_model_in_the_loop(tiny, trainer, tmp_path):
    from icml25.rlthf import HumanOracle, RLTHFConfig, TrainableHFRewardModel, run_rlthf

    w, tok, model = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rm = TrainableHFRewardModel(
        model,
        tok,
        lr=1e-3,
        batch_size=8,
        grad_accum=1,
        trainer=trainer,
        max_length=128,
        device="cpu",
        output_dir=tmp_path,
    )
    res = run_rlthf(
        w.train,
        w.ai_labels,
        None,
        HumanOracle(w.train.human_labels),
        rm,
        RLTHFConfig(iterations=1, budget_per_iter=0.1),
        w.test,
        progress=False,
    )
    assert len(res.human_indices) == 5
    assert all(0 <= r["test_accuracy"] <= 1 for r in res.history)
    m = rm.margins(w.test)
    assert m.shape == (16,) and np.isfinite(m).all()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # untouched
    with pytest.raises(ValueError, match="num_labels=1"):
        TrainableHFRewardModel(
            transformers.LlamaForSequenceClassification(
                transformers.LlamaConfig(
                    vocab_size=10,
                    hidden_size=8,
                    intermediate_size=8,
                    num_hidden_layers=1,
                    num_attention_heads=1,
                    num_labels=2,
                )
            ),
            tok,
        )


def test_plain_loop_normalises_over_the_accumulated_step(tiny):
    """batch 2 x 2 accumulation trains what batch 4 x 1 trains: each step's loss is the weighted
    mean over its 4 pairs (a mean of the two micro-batches' own ratios would differ)."""
    from icml25.rlthf import TrainableHFRewardModel

    w, tok, model = tiny
    weights = np.array([9.0, 0.5, 1.0, 3.0, 0.25, 2.0, 4.0, 1.0])
    fits = {}
    for batch, accum in ((2, 2), (4, 1)):
        rm = TrainableHFRewardModel(
            model, tok, lr=1e-3, batch_size=batch, grad_accum=accum, max_length=128, device="cpu"
        )
        rm.fit(w.train, np.arange(8), w.train.human_labels[:8], weights, seed=0)
        fits[batch] = rm
    assert len(fits[2].losses) == len(fits[4].losses) == 2
    assert fits[2].losses == pytest.approx(fits[4].losses, abs=1e-6)
    for (k, a), b in zip(fits[2].model.state_dict().items(), fits[4].model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=2e-6, msg=k)
    # a step whose 4 pairs all weigh 0 has loss 0 (nothing to learn), the other step does not
    rm = TrainableHFRewardModel(model, tok, batch_size=2, grad_accum=2, device="cpu")
    rm.fit(w.train, np.arange(8), w.train.human_labels[:8], np.r_[np.zeros(7), 1.0], seed=0)
    assert sorted(rm.losses)[0] == 0.0 and sorted(rm.losses)[1] > 0.1
