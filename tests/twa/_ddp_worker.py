"""TWAHFTrainer under torchrun (gloo DDP over the CPU), run by tests/twa/test_ddp.py with one and
with two processes on the same global batch.

``python -m torch.distributed.run --nproc_per_node N _ddp_worker.py OUT STEPS RUNS ARCHS``
trains, for each arch in ARCHS (comma-separated: ``causal``, a tiny Llama; ``seq2seq``, a tiny
T5) and each run ``B:GA`` in RUNS (per-device batch B, gradient accumulation GA), the same
float64 initialisation for STEPS steps on the rows of :func:`rows` in order (sequential sampling:
step s takes rows 4s..4s+3; with two processes rank 0 gets the first two, rank 1 the last two).
Every rank writes its trained parameters (``OUT/params-<arch>-<B>x<GA>-rank<r>.pt``) and rank 0
saves the model with ``trainer.save_model`` (``OUT/model-<arch>-<B>x<GA>``) and reloads it.
``OUT/rank<r>.json`` holds per run the logged losses, this rank's loss denominators per
micro-batch, the reload's largest deviation and, under several processes, the errors of
``train_twa``.
"""

from __future__ import annotations

import json
import os
import sys

import torch

WORDS = ["s1", "s2", "s3", "=", "t1", "-n0", "t2", "-a1", "t3", "-v0", "-n1"]


def _row(source: str, words: list[str], errors: dict[int, str]):
    """An annotated translation whose words ``errors`` (index -> severity) are error spans."""
    from icml25.twa import AnnotatedTranslation, ErrorSpan

    spans, at = [], 0
    for i, w in enumerate(words):
        if i in errors:
            spans.append(ErrorSpan(at, at + len(w), errors[i]))
        at += len(w) + 1
    return AnnotatedTranslation(source, " ".join(words), spans)


def rows(steps: int) -> list:
    """Per block of 4: two one-word targets without errors (2 scored tokens each: the word and
    EOS), then two long targets whose first error comes late and that hold 2-3 error spans (8-9
    scored tokens). The first two go to rank 0, the last two to rank 1: very different token
    counts per rank, so a per-rank token mean would differ from the global one."""
    long = ["t1", "-n0", "t2", "-a1", "t3", "-v0", "t1", "-n1", "t2", "-a1"]
    out = []
    for s in range(steps):
        out += [
            _row("s1 s2", [WORDS[4 + s]], {}),
            _row("s2 s3", [WORDS[6 + s]], {}),
            _row("s1 s3", long, {6: "Major", 8: "Minor", 9: "Minor"}),
            _row("s3 s1", long[s:], {6 - s: "Minor", 8 - s: "Major"}),
        ]
    return out


def build(arch: str):
    from icml25.toy import build_tokenizer, tiny_causal_lm, tiny_model, tiny_tokenizer

    if arch == "causal":
        tok = build_tokenizer([" ".join(WORDS)] * 3, kind="word")
        return tok, tiny_causal_lm(
            tok, d_model=32, n_layers=1, max_positions=64, seed=0, dtype=torch.float64
        )
    from transformers import T5ForConditionalGeneration

    config = tiny_model("t5").config
    config.dropout_rate = 0.0  # the ranks' dropout masks would differ
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = T5ForConditionalGeneration(config)
    return tiny_tokenizer("t5"), model.to(torch.float64)


def guard_error(tok, model) -> str:
    from icml25.twa import TWAConfig, train_twa

    try:
        train_twa(model, tok, rows(1), TWAConfig(batch_size=2, max_steps=1), progress=False)
    except RuntimeError as e:
        return str(e)
    return "no error"


def main(out: str, steps: int, runs: list[str], archs: list[str]) -> None:
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from icml25.twa import TWAHFTrainer

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    result: dict = {"world": world, "out": out}

    class Recording(TWAHFTrainer):
        """Keeps this rank's loss denominator of every micro-batch."""

        def loss_denominator(self, batch):
            n = super().loss_denominator(batch)
            self.denominators.append(n)
            return n

    for arch in archs:
        tok, base = build(arch)
        if world > 1 and "guard_env" not in result:  # WORLD_SIZE set, no process group yet
            result["guard_env"] = guard_error(tok, base)
        for run in runs:
            batch, ga = (int(x) for x in run.split(":"))
            name = f"{arch}-{batch}x{ga}"
            model = build(arch)[1]
            args = TWAHFTrainer.default_args(
                os.path.join(out, f"run-{name}"),
                per_device_train_batch_size=batch,
                gradient_accumulation_steps=ga,
                max_steps=steps,
                learning_rate=1e-3,
                logging_steps=1,
                use_cpu=True,
                bf16=False,
                disable_tqdm=True,
                train_sampling_strategy="sequential",
                ddp_backend="gloo",
            )
            tr = Recording(model=model, args=args, train_dataset=rows(steps), processing_class=tok)
            tr.denominators = []
            tr.train()
            params = {n: p.detach().clone() for n, p in model.named_parameters()}
            torch.save(params, os.path.join(out, f"params-{name}-rank{rank}.pt"))
            saved = os.path.join(out, f"model-{name}")
            tr.save_model(saved)  # every rank calls it; rank 0 writes
            rec = {
                "losses": [x["loss"] for x in tr.state.log_history if "loss" in x],
                "denominators": tr.denominators,
                "moved": max(
                    float((p - q).abs().max())
                    for p, q in zip(model.parameters(), base.parameters())
                ),
            }
            if rank == 0:
                auto = AutoModelForCausalLM if arch == "causal" else AutoModelForSeq2SeqLM
                again = auto.from_pretrained(saved, dtype=torch.float64).state_dict()
                rec["reload_max_diff"] = max(
                    float((again[n] - p).abs().max()) for n, p in params.items()
                )
            result[name] = rec
    if world > 1:  # the Trainer has set up the gloo process group
        result["guard_group"] = guard_error(tok, base)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4].split(","))
