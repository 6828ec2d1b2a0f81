"""The masked SFT loss, the plain loop (full and LoRA) and TRL's SFTTrainer on the same rows."""

from __future__ import annotations

import copy

import pytest
import torch

from icml25.safety_reasoning import sft, sft_trainer
from icml25.safety_reasoning.data import to_chat_sft
from icml25.safety_reasoning.training import masked_lm_loss, to_trl_rows


def test_masked_loss_matches_manual():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g)
    labels = torch.tensor([[-100, -100, 3, 4, -100], [-100, 1, 2, -100, -100]])
    terms = []
    for b in range(2):
        for t in range(1, 5):
            if labels[b, t] != -100:
                terms.append(-torch.log_softmax(logits[b, t - 1], -1)[labels[b, t]])
    assert torch.allclose(masked_lm_loss(logits, labels), torch.stack(terms).mean())
    with pytest.raises(ValueError, match="every label is -100"):
        masked_lm_loss(logits, torch.full((2, 5), -100))
    with pytest.raises(ValueError, match=r"\(B, L, V\)"):
        masked_lm_loss(logits[0], labels)


def _pairs(world, n=64):
    import random

    rng = random.Random(0)
    cores = world.safety_queries(n, rng)
    return [(c.text(), world.rt_target(c)) for c in cores]


def test_sft_learns_the_targets(toy_lm, world):
    model, tok = toy_lm
    m = copy.deepcopy(model)
    pairs = _pairs(world)
    trained = sft(m, tok, pairs, lr=3e-3, steps=40, batch_size=16, max_length=48, progress=False)
    losses = trained.sft_losses
    assert len(losses) == 40 and sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5
    assert not trained.training


def test_sft_lora_trains_adapters_only(toy_lm, world):
    peft = pytest.importorskip("peft")
    model, tok = toy_lm
    m = copy.deepcopy(model)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    cfg = peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
    )
    pm = sft(
        m,
        tok,
        _pairs(world, 16),
        lr=1e-2,
        steps=3,
        batch_size=8,
        max_length=48,
        lora=cfg,
        progress=False,
    )
    base = pm.get_base_model().state_dict()
    for k, v in before.items():
        key = k.replace("q_proj.weight", "q_proj.base_layer.weight").replace(
            "v_proj.weight", "v_proj.base_layer.weight"
        )
        assert torch.equal(base[key], v), k
    assert any("lora_B" in n and p.abs().sum() > 0 for n, p in pm.named_parameters())


def test_sft_bad_input(toy_lm):
    model, tok = toy_lm
    with pytest.raises(ValueError, match="lr"):
        sft(model, tok, [("a", "b")], lr=0)
    with pytest.raises(ValueError, match="batch_size"):
        sft(model, tok, [("a", "b")], batch_size=0)
    with pytest.raises(ValueError, match="steps"):
        sft(model, tok, [("a", "b")], steps=-1)


def test_trl_sft_trainer_same_rows_and_a_few_steps(toy_lm, world, tmp_path):
    trl = pytest.importorskip("trl")
    import datasets

    datasets.disable_progress_bars()
    model, tok = toy_lm
    m = copy.deepcopy(model)
    pairs = _pairs(world, 32)
    args = trl.SFTConfig(
        output_dir=str(tmp_path),
        max_steps=4,
        per_device_train_batch_size=8,
        learning_rate=3e-3,
        report_to=[],
        bf16=False,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
        max_length=48,
    )
    trainer = sft_trainer(m, tok, pairs, args)
    # TRL tokenises the prompt/completion rows exactly as to_chat_sft does, labels masked alike
    ours = to_chat_sft(pairs, tok)
    for i in (0, 1):
        batch = trainer.data_collator([trainer.train_dataset[i]])
        assert batch["input_ids"][0].tolist() == ours[i]["input_ids"]
        assert batch["labels"][0].tolist() == ours[i]["labels"]
    out = trainer.train()
    assert out.global_step == 4
    assert to_trl_rows([("q", "t")])[0] == {
        "prompt": [{"role": "user", "content": "q"}],
        "completion": [{"role": "assistant", "content": "t"}],
    }


def test_loss_and_sft_input_errors(toy_lm):
    model, tok = toy_lm
    with pytest.raises(ValueError, match="outside the vocabulary"):
        masked_lm_loss(torch.zeros(1, 3, 5), torch.tensor([[-100, 7, 1]]))
    with pytest.raises(TypeError, match="loaded torch model"):
        sft("path/to/model", tok, [("a", "b")])
    with pytest.raises(ValueError, match="tokenizer is None"):
        sft(model, None, [("a", "b")])
    import numpy as np

    m = copy.deepcopy(model)
    sft(
        m,
        tok,
        [("hv1 dt2 f3", "sorry cannot")],
        steps=np.int64(1),
        batch_size=np.int64(1),
        progress=False,
    )
