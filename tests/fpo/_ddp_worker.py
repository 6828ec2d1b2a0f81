"""FPOTrainer under torchrun (gloo DDP over the CPU), run by tests/fpo/test_trl.py with one and
with two processes on the same global batch.

``python -m torch.distributed.run --nproc_per_node N _ddp_worker.py OUT BATCH STEPS SOURCES``
trains a tiny Llama with FPO against a perturbed reference model for STEPS steps of BATCH pairs
per process, once per source in SOURCES (comma-separated: ``list``, the records as a Python list,
held in memory; ``disk``, a ``datasets`` folder written by rank 0). Per source every rank writes
its trained parameters (``OUT/params-<source>-rank<r>.pt``) and rank 0 saves the model with
``trainer.save_model`` (``OUT/model-<source>``) and reloads it. ``OUT/rank<r>.json`` holds per
source the logged losses, the reference values each training step looked up (per pair content
key: TRL's reference log-probs and the sums of the cached reference SAE codes), the reload's
largest deviation, and, under several processes, the errors of ``train_preference``.
"""

from __future__ import annotations

import copy
import json
import os
import random
import sys

import torch


def records(n: int = 24) -> list[dict]:
    """Pairs of very different lengths (prompts of 1 to 8 symbols, rejected answers cut short or
    padded): each pair's reference values differ, so a rank reading another rank's cached rows
    would change the loss."""
    from icml25.fpo.synthetic import SYMBOLS, ReversalTask

    rng = random.Random(0)
    out = []
    for p in ReversalTask(1, 8).prompts(n, 3):
        good = ReversalTask.ideal(p)
        bad = " ".join(
            good.split()[: rng.randint(0, 2)] + rng.choices(SYMBOLS, k=rng.randint(1, 6))
        )
        out.append(
            {
                "prompt": [{"role": "user", "content": p}],
                "chosen": [{"role": "assistant", "content": good}],
                "rejected": [{"role": "assistant", "content": bad}],
            }
        )
    return out


def guard_errors(model, tok) -> str:
    """The error of the single-process loop ``train_preference`` under this launch."""
    from icml25.fpo import PreferenceConfig, train_preference

    try:
        train_preference(copy.deepcopy(model), tok, records(4), PreferenceConfig(method="simpo"))
    except RuntimeError as e:
        return str(e)
    return "no error"


def main(out: str, batch: int, steps: int, sources: list[str]) -> None:
    torch.set_num_threads(1)
    from datasets import Dataset, load_from_disk
    from transformers import AutoModelForCausalLM
    from trl import DPOConfig

    from icml25.fpo import FPOTrainer, SparseAutoencoder
    from icml25.fpo.synthetic import ReversalTask
    from icml25.fpo.trl_trainer import KEY
    from icml25.toy import build_tokenizer, tiny_causal_lm

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    tok = build_tokenizer([" ".join(ReversalTask.vocabulary())] * 2, kind="word")
    base = tiny_causal_lm(tok, d_model=32, n_layers=2, max_positions=48, seed=0)
    ref = copy.deepcopy(base)  # a reference other than the initial policy: A_ref and codes differ
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    g = torch.Generator().manual_seed(0)
    sae = SparseAutoencoder(32, 96, "topk", k_sae=6)
    with torch.no_grad():
        sae.W_enc.copy_(torch.randn(32, 96, generator=g))
    result: dict = {"world": world, "out": out}
    if world > 1:  # before the Trainer: WORLD_SIZE is set but no process group yet
        result["guard_env"] = guard_errors(base, tok)

    class Recording(FPOTrainer):
        """Keeps, per training step, the reference values each pair of this rank looked up."""

        seen: list[dict] = []

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if model.training:
                keys = inputs[KEY].cpu()
                codes = self.fpo_cache.batch(keys)
                self.seen.append(
                    {
                        str(int(k)): [
                            float(inputs["ref_chosen_logps"][i]),
                            float(inputs["ref_rejected_logps"][i]),
                            float(codes["ref_codes_w"][i].sum()),
                            float(codes["ref_codes_l"][i].sum()),
                        ]
                        for i, k in enumerate(keys)
                    }
                )
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    for source in sources:
        if source == "disk":
            path = os.path.join(out, "data")
            if rank == 0:
                Dataset.from_list(records()).save_to_disk(path)
            if world > 1:
                torch.distributed.barrier()
            data = load_from_disk(path)
        else:
            data = records()
        model = copy.deepcopy(base)
        args = DPOConfig(
            os.path.join(out, f"run-{source}"),
            precompute_ref_log_probs=True,
            bf16=False,
            use_cpu=True,
            per_device_train_batch_size=batch,
            max_steps=steps,
            report_to=[],
            logging_steps=1,
            learning_rate=1e-3,
            save_strategy="no",
            disable_tqdm=True,
            ddp_backend="gloo",
            seed=0,
        )
        tr = Recording(
            model,
            ref_model=copy.deepcopy(ref),
            args=args,
            train_dataset=data,
            processing_class=tok,
            sae=sae,
            layer=1,
            k=8,
        )
        tr.seen = []
        tr.train()
        params = {n: p.detach().clone() for n, p in model.named_parameters()}
        torch.save(params, os.path.join(out, f"params-{source}-rank{rank}.pt"))
        saved = os.path.join(out, f"model-{source}")
        tr.save_model(saved)  # every rank calls it; rank 0 writes
        rec = {
            "losses": [x["loss"] for x in tr.state.log_history if "loss" in x],
            "seen": tr.seen,
            "moved": max(
                float((p - q).abs().max()) for p, q in zip(model.parameters(), base.parameters())
            ),
        }
        if rank == 0:
            again = AutoModelForCausalLM.from_pretrained(saved)
            rec["reload_max_diff"] = max(
                float((again.state_dict()[n] - p).abs().max()) for n, p in params.items()
            )
        result[source] = rec
    if world > 1:  # now the Trainer has set up the gloo process group
        result["guard_group"] = guard_errors(base, tok)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(","))
