"""FPOTrainer under `accelerate launch --num_processes 2 --cpu` (gloo DDP): each rank trains two
steps and writes its parameter checksum and losses to OUT/rank<r>.json."""

from __future__ import annotations

import json
import os
import sys

import torch


def write_data(out: str) -> None:
    from datasets import Dataset

    from icml25.fpo.synthetic import ReversalTask

    task = ReversalTask()
    rows = []
    for p in task.prompts(32, 3):
        good = task.ideal(p)
        rows.append({"prompt": [{"role": "user", "content": p}],
                     "chosen": [{"role": "assistant", "content": good}],
                     "rejected": [{"role": "assistant", "content": good + " a"}]})  # fmt: skip
    Dataset.from_list(rows).save_to_disk(os.path.join(out, "data"))


def main(out: str) -> None:
    torch.set_num_threads(1)
    from datasets import load_from_disk
    from trl import DPOConfig

    from icml25.fpo import FPOTrainer, SparseAutoencoder
    from icml25.fpo.synthetic import ReversalTask
    from icml25.toy import build_tokenizer, tiny_causal_lm

    task = ReversalTask()
    tok = build_tokenizer([" ".join(task.vocabulary())] * 2, kind="word")
    model = tiny_causal_lm(tok, d_model=32, n_layers=2, max_positions=32, seed=0)
    # a datasets folder (TRL's reference-log-prob cache files then live beside it, shared by
    # the ranks; an in-memory Dataset gets a temporary cache folder per process)
    data = load_from_disk(os.path.join(out, "data"))
    g = torch.Generator().manual_seed(0)
    sae = SparseAutoencoder(32, 96, "topk", k_sae=6)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(32, 96, generator=g))
    args = DPOConfig(os.path.join(out, "run"), precompute_ref_log_probs=True, bf16=False,
                     use_cpu=True, per_device_train_batch_size=4, max_steps=2, report_to=[],
                     logging_steps=1, learning_rate=1e-3, save_strategy="no", disable_tqdm=True,
                     ddp_backend="gloo")  # fmt: skip
    tr = FPOTrainer(model, args=args, train_dataset=data, processing_class=tok,
                    sae=sae, layer=1, k=8)  # fmt: skip
    init = float(sum(p.double().sum() for p in model.parameters()))
    tr.train()
    rank = tr.accelerator.process_index
    losses = [x["loss"] for x in tr.state.log_history if "loss" in x]
    checksum = float(sum(p.double().sum() for p in model.parameters()))
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"world": tr.accelerator.num_processes, "checksum": checksum, "init": init,
                   "losses": losses}, f)  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write-data"]:
        write_data(sys.argv[2])
    else:
        main(sys.argv[1])
