"""build_dpo_pairs' rows go to TRL's DPOTrainer as they are (the anchor of the DPO baseline)."""

from __future__ import annotations

import copy
import math

import pytest

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from icml25.toy import build_tokenizer, tiny_causal_lm  # noqa: E402
from icml25.twa import AnnotatedTranslation, ErrorSpan, build_dpo_pairs  # noqa: E402


def test_trl_dpo_trainer_takes_our_pairs(tmp_path):
    import torch

    torch.set_num_threads(1)
    data = []
    for src in ("s1 s2", "s2 s3"):
        data += [
            AnnotatedTranslation(src, "t1 -n0 t2 -a1"),
            AnnotatedTranslation(src, "t1 -n1 t2 -a1", [ErrorSpan(3, 6, "Minor")]),
            AnnotatedTranslation(src, "t3 -n0 t2 -a1", [ErrorSpan(0, 2, "Major")]),
        ]
    pairs = build_dpo_pairs(data, rng=0)
    tok = build_tokenizer(["s1 s2 s3 = t1 t2 t3 -n0 -n1 -a1"] * 3, kind="word")
    model = tiny_causal_lm(tok, d_model=32, n_layers=1, n_heads=2, seed=0)
    ds = datasets.Dataset.from_list(
        [{k: p[k] for k in ("prompt", "chosen", "rejected")} for p in pairs]
    )
    args = trl.DPOConfig(
        output_dir=str(tmp_path),
        bf16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        report_to=[],
        max_steps=2,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        beta=0.1,
        max_length=32,
    )
    trainer = trl.DPOTrainer(
        model, ref_model=copy.deepcopy(model), args=args, train_dataset=ds, processing_class=tok
    )
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-3)  # our dpo_loss's start too
