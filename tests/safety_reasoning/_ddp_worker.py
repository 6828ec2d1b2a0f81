"""``sft_trainer`` under torchrun (gloo DDP on CPU): each rank trains two optimiser steps on a
fixed, unshuffled set of rows and writes its losses, its completion-token counts per micro-batch
and a weight checksum to ``OUT/rank<r>.json``; every rank calls ``trainer.save_model`` (rank 0
writes ``OUT/ckpt``), then tries the plain loop ``sft`` and records its error (if any).

Usage: ``torchrun --nproc_per_node W _ddp_worker.py OUT PER_DEVICE_BATCH``. With accelerate's
sharding of a sequential sampler, world 2 x batch 2 and world 1 x batch 4 (two accumulated
micro-batches each) train on the same 8 rows per step; the rows alternate in blocks of two between
long and short completions, so rank 0 holds about ten times the completion tokens of rank 1.
"""

from __future__ import annotations

import json
import os
import sys

import torch


def pairs(world):
    import random

    vocab = [w for w in world.vocabulary() if w.startswith(("hv", "bv", "nt", "dt"))]
    cores = world.safety_queries(16, random.Random(0))
    out = []
    for i, c in enumerate(cores):
        long_block = (i // 2) % 2 == 0  # rows 0-1, 4-5, ... long: rank 0's micro-batches
        target = " ".join(vocab[i : i + 24]) if long_block else "ok"
        out.append((c.text(), target))
    return out


def main(out: str, batch: int) -> None:
    torch.set_num_threads(1)
    import datasets

    from icml25.safety_reasoning import sft_config, sft_trainer
    from icml25.toy.jailbreak_lang import JailbreakWorld

    datasets.disable_progress_bars()
    world = JailbreakWorld(0, "V2")
    tok = world.build_tokenizer()
    model = world.build_model(tok, seed=0, d_model=32, n_layers=2).double()
    args = sft_config(
        os.path.join(out, "run"),
        max_steps=2,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=2,
        learning_rate=0.5,
        max_length=48,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="sgd",
        max_grad_norm=0.0,
        train_sampling_strategy="sequential",
        use_cpu=True,
        ddp_backend="gloo",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = sft_trainer(model, tok, pairs(world), args)
    counts = [int((b["labels"][:, 1:] != -100).sum()) for b in trainer.get_train_dataloader()]
    init = float(sum(p.detach().sum() for p in model.parameters()))
    trainer.train()
    trainer.save_model(os.path.join(out, "ckpt"))
    rank = trainer.accelerator.process_index
    record = {
        "world": trainer.accelerator.num_processes,
        "losses": [x["loss"] for x in trainer.state.log_history if "loss" in x],
        "counts": counts[:4],  # this rank's micro-batches of the two steps
        "checksum": float(sum(p.detach().sum() for p in model.parameters())),
        "init": init,
        "average_tokens_across_devices": bool(trainer.args.average_tokens_across_devices),
    }
    # the plain loop refuses to run once per process
    from icml25.safety_reasoning import sft

    try:
        sft(model, tok, pairs(world)[:2], steps=1, progress=False)
        record["sft_error"] = None
    except RuntimeError as exc:
        record["sft_error"] = str(exc)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
