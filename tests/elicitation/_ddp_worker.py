"""The investigator's TRL entry points under torchrun (gloo DDP on CPU): each rank trains two
optimiser steps (two accumulated micro-batches each), calls ``trainer.save_model`` (rank 0 writes
``OUT/ckpt``), tries the plain loops (which must refuse several processes) and writes its losses,
its per-micro-batch counts and a weight checksum to ``OUT/rank<r>.json``.

Usage: ``torchrun --nproc_per_node W _ddp_worker.py OUT MODE PER_DEVICE_BATCH`` with MODE
``dpo`` (:func:`dpo_trainer`, TRL's default random sampler: accelerate shards one seeded
permutation) or ``reverse`` (:func:`reverse_sft_trainer`, a sequential sampler over rows whose
prompts alternate in blocks of two between long and short, so rank 0 holds several times the
completion tokens of rank 1). World 2 x batch 2 and world 1 x batch 4 cover the same 8 rows per
step. SGD without clipping: a weight error is the learning rate times a gradient error.
"""

from __future__ import annotations

import json
import os
import sys

import torch


def words(i: int, n: int) -> str:
    return " ".join(f"w{(i + 3 * k) % 32}" for k in range(n))


def reverse_pairs(world) -> list[tuple[str, str]]:
    # rows 0-1, 4-5, ... (rank 0's micro-batches) long prompts, the others one word
    return [(world.behaviors[i % 4], words(i, 18 if (i // 2) % 2 == 0 else 1)) for i in range(16)]


def preference_pairs(world) -> list:
    from icml25.elicitation import PreferencePair

    return [
        PreferencePair(
            world.behaviors[i % 4], words(i, 2 + i % 5), words(i + 1, 6 - i % 4), 1.0, 0.0
        )
        for i in range(16)
    ]


def main(out: str, mode: str, batch: int) -> None:
    torch.set_num_threads(1)
    import datasets

    from icml25.elicitation import (
        Investigator,
        PlantedTriggerWorld,
        default_dpo_config,
        default_reverse_sft_config,
        dpo_round,
        dpo_trainer,
        reverse_sft,
        reverse_sft_trainer,
        train_dpo,
    )
    from icml25.toy.models import tiny_causal_lm

    datasets.disable_progress_bars()
    world = PlantedTriggerWorld(0)
    tok = world.build_tokenizer()
    model = tiny_causal_lm(
        tok, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_positions=48, seed=0
    ).double()
    inv = Investigator(model, tok)
    common = dict(
        max_steps=2,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=2,
        optim="sgd",
        max_grad_norm=0.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
        ddp_backend="gloo",
        use_cpu=True,
        logging_steps=1,
        disable_tqdm=True,
    )
    if mode == "dpo":
        args = default_dpo_config(output_dir=os.path.join(out, "run"), learning_rate=2.0, **common)
        trainer = dpo_trainer(inv, inv.copy(), preference_pairs(world), args)
        counts = [int(b["input_ids"].shape[0]) for b in trainer.get_train_dataloader()]
    elif mode == "reverse":
        args = default_reverse_sft_config(
            output_dir=os.path.join(out, "run"),
            learning_rate=0.5,
            train_sampling_strategy="sequential",
            **common,
        )
        trainer = reverse_sft_trainer(inv, reverse_pairs(world), args)
        counts = [int((b["labels"][:, 1:] != -100).sum()) for b in trainer.get_train_dataloader()]
    else:
        raise ValueError(f"MODE must be 'dpo' or 'reverse', got {mode!r}")
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
    if record["world"] > 1:  # the plain loops refuse to run once per process
        errors = {}
        calls = {
            "reverse_sft": lambda: reverse_sft(inv, reverse_pairs(world), steps=1, warmup=0),
            "dpo_round": lambda: dpo_round(inv, inv.copy(), None, world.behaviors),
            "train_dpo": lambda: train_dpo(inv, inv.copy(), None, world.behaviors, 1),
        }
        for name, call in calls.items():
            try:
                call()
                errors[name] = None
            except RuntimeError as exc:
                errors[name] = str(exc)
        record["errors"] = errors
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
