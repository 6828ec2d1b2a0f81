"""SimplexDPOTrainer under ``torchrun`` (gloo DDP on the CPU, or one process): a float64
simplex-bottleneck LM trains 4 steps on 10 preference pairs and every rank writes
``OUT/rank<r>.json``: the loss of each step on this rank, the pairs it saw, the trained weights
and (rank 0) the weights reloaded from the checkpoint the main process wrote.

    python -m torch.distributed.run --nproc_per_node 2 _ddp_worker.py OUT 3   # 2 x 3 pairs
    python -m torch.distributed.run --nproc_per_node 1 _ddp_worker.py OUT 6   # 1 x 6 pairs
    python _ddp_worker.py OUT 3 2                                             # 1 x 2 x 3 pairs

(the last: one process, two accumulated micro-batches of 3 pairs per step).

``even_batches=False``: 10 pairs in batches of 3 leave a last batch of 1, so in each epoch's
second step rank 0 holds 3 pairs and rank 1 one; a per-rank mean would give that one pair half
the step instead of a quarter.
"""

from __future__ import annotations

import copy
import json
import os
import sys

import torch

WORDS = [
    "the",
    "sky",
    "is",
    "blue",
    "red",
    "green",
    "two",
    "plus",
    "four",
    "five",
    "paris",
    "rome",
    "yes",
    "no",
    "city",
]


def pairs() -> list[dict[str, str]]:
    """10 pairs of prompts and completions of 1 to 6 words (seeded)."""
    g = torch.Generator().manual_seed(0)

    def pick(k: int) -> str:
        return " ".join(WORDS[int(j)] for j in torch.randint(0, len(WORDS), (k,), generator=g))

    rows = []
    for i in range(10):
        n = [int(x) for x in torch.randint(1, 5, (3,), generator=g)]
        rows.append(
            {
                "prompt": pick(n[0] + 1),
                "chosen": " " + pick(n[1]),
                "rejected": " " + pick(n[2] + i % 3),
            }
        )
    return rows


def main(out: str, per_device_batch: int, accumulation: int = 1) -> None:
    torch.set_num_threads(1)
    import safetensors.torch
    from datasets import Dataset

    from icml25.proxy_feedback.llm import SimplexBottleneckLM
    from icml25.proxy_feedback.trainer import SimplexDPOConfig, SimplexDPOTrainer
    from icml25.toy import build_tokenizer, tiny_causal_lm

    tok = build_tokenizer([" ".join(WORDS)] * 2, kind="word")

    def fresh(seed: int) -> SimplexBottleneckLM:
        body = tiny_causal_lm(tok, d_model=16, n_layers=1, n_heads=2, max_positions=32, seed=seed)
        return SimplexBottleneckLM(body, bottleneck_dim=4, seed=seed).double()

    model = fresh(0)
    ref = copy.deepcopy(model)
    with torch.no_grad():  # a policy away from its reference: the first loss is not log 2
        g = torch.Generator().manual_seed(1)
        model.adapter.M.add_(0.3 * torch.randn(model.adapter.M.shape, generator=g).double())
    args = SimplexDPOConfig(
        os.path.join(out, "run"),
        per_device_train_batch_size=per_device_batch,
        max_steps=4,
        gradient_accumulation_steps=accumulation,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="steps",
        save_steps=4,
        disable_tqdm=True,
        use_cpu=True,
        ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None,
        accelerator_config={"even_batches": False},
    )

    class Recording(SimplexDPOTrainer):
        step_losses: list[float] = []
        step_pairs: list[int] = []

        def training_step(self, model, inputs, num_items_in_batch=None):
            self.step_pairs.append(self.loss_denominator(inputs))
            loss = super().training_step(model, inputs, num_items_in_batch)
            self.step_losses.append(float(loss))
            return loss

    tr = Recording(
        model,
        ref,
        args=args,
        train_dataset=Dataset.from_list(pairs()),
        processing_class=tok,
        trainable="all",
    )
    init = {k: v.clone() for k, v in model.state_dict().items()}
    tr.train()
    rank = tr.accelerator.process_index
    record = {
        "world": tr.accelerator.num_processes,
        "step_losses": tr.step_losses,
        "step_pairs": tr.step_pairs,
        "logged": [x["loss"] for x in tr.state.log_history if "loss" in x],
        "margins": [x["rewards/margins"] for x in tr.state.log_history if "loss" in x],
        "moved": max(float((v - init[k]).abs().max()) for k, v in model.state_dict().items()),
        "weights": {k: v.flatten().tolist() for k, v in model.state_dict().items()},
    }
    tr.accelerator.wait_for_everyone()
    if rank == 0:
        again = fresh(5)
        safetensors.torch.load_model(
            again, os.path.join(out, "run", "checkpoint-4", "model.safetensors")
        )
        record["reloaded"] = {k: v.flatten().tolist() for k, v in again.state_dict().items()}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
