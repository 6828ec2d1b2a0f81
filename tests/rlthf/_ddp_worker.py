"""WeightedRewardTrainer under torchrun (``python -m torch.distributed.run --nproc_per_node N``):
every rank trains the same tiny Llama reward model on the same rows, read in order, and writes
``OUT/rank<r>.json``; rank 0 also saves the trained model to ``OUT/model``.

``argv``: OUT, the per-device batch size, the gradient accumulation steps. Rows are read in order
(no shuffle), so with accelerate's batch sharding rank ``r`` of ``W`` takes micro-batches ``r,
r + W, ...``: one process with batch ``W x b`` sees the same pairs per step as ``W`` with ``b``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

#: per-pair weights: the heavy pairs sit in the first half of every block of 8, so with two
#: processes and batch 2 (or one with batch 4) rank 0's micro-batches carry most of the weight
WEIGHTS = [9.0, 9.0, 0.5, 0.5, 1.0, 3.0, 0.25, 2.0] * 2


def setup():
    import transformers

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
    rows = w.train.to_trl(np.arange(len(WEIGHTS)), conversational=True, weights=np.array(WEIGHTS))
    return model, tok, rows


def main(out: str, batch: int, accum: int) -> None:
    torch.set_num_threads(1)
    import datasets
    from torch.utils.data import SequentialSampler
    from trl import RewardConfig

    from icml25.rlthf import WeightedRewardTrainer

    class InOrder(WeightedRewardTrainer):
        def _get_train_sampler(self, *args, **kwargs):
            return SequentialSampler(self.train_dataset)

    model, tok, rows = setup()
    args = RewardConfig(
        os.path.join(out, "run"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accum,
        max_steps=2,
        learning_rate=5e-3,
        bf16=False,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        disable_tqdm=True,
        max_length=None,
        logging_steps=1,
        ddp_backend="gloo",
        dataloader_drop_last=False,
        **{"activation_checkpointing": False},
    )
    tr = InOrder(
        model=model, args=args, train_dataset=datasets.Dataset.from_list(rows), processing_class=tok
    )
    tr.train()
    rank = tr.accelerator.process_index
    tr.save_model(os.path.join(out, "model"))  # writes on the main process only
    losses = [x["loss"] for x in tr.state.log_history if "loss" in x]
    params = {k: v.detach().double().flatten().tolist()[:64] for k, v in model.state_dict().items()}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"world": tr.accelerator.num_processes, "losses": losses, "params": params}, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
