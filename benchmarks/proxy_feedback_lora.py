"""Stage 2 of paper 10's LLM parameterisation (arXiv:2412.16475, Sec. 5) beside the adapter
people would reach for: PEFT LoRA. One process, the same stage-1 model and expert pairs.

On the synthetic diagnosis text task (docs/proxy_feedback.md, "LLM path"), a tiny Llama is SFT'd
on proxy-labelled texts, wrapped with a 12-vertex simplex bottleneck, warmed up and trained by DPO
on proxy pairs (stage 1). Stage 2 then learns from n expert pairs with
  * the simplex adapter (log-linear, (D+1)^2 + D + 1 = 156 parameters), or
  * PEFT LoRA r = 4 on q_proj/v_proj of the last block (the common choice), or
  * PEFT LoRA r = 1 on q_proj of the last block (the closest LoRA gets to the adapter's count),
each from a small learning-rate sweep (the best by TV is kept for both, an oracle choice).
Reported: next-token TV to the expert's policy (mean ± sd over seeds), trainable parameters, and
the time of one single-step dpo_stage call on 32 pairs (tokenising included) against its
floor, one forward pass of the policy on the same pairs.

Run: ``python benchmarks/proxy_feedback_lora.py [--seeds 3] [--n 35 100] [--steps 200]``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _timing import median_time  # noqa: E402

from icml25.proxy_feedback.diagnosis import prepare_llm_path  # noqa: E402
from icml25.proxy_feedback.llm import dpo_stage, encode_pairs, pair_logprobs  # noqa: E402

LRS = {"simplex adapter": (1e-2, 5e-2), "LoRA r=4 q,v": (1e-3, 1e-2), "LoRA r=1 q": (1e-3, 1e-2)}


def _lora(model, r: int, targets: list[str]):
    from peft import LoraConfig, inject_adapter_in_model

    last = model.model.config.num_hidden_layers - 1
    cfg = LoraConfig(
        r=r,
        lora_alpha=2 * r,
        lora_dropout=0.0,
        target_modules=[f"layers.{last}.self_attn.{t}" for t in targets],
    )
    inject_adapter_in_model(cfg, model.model)
    return [p for n, p in model.named_parameters() if "lora_" in n]


def _variant(name: str, stage1):
    m = copy.deepcopy(stage1)
    if name == "simplex adapter":
        return m, "adapter", m.adapter_parameters()
    r, targets = (4, ["q_proj", "v_proj"]) if name.startswith("LoRA r=4") else (1, ["q_proj"])
    params = _lora(m, r, targets)
    return m, params, params


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--n", type=int, nargs="+", default=[35, 100])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tv: dict[tuple[str, int], list[float]] = {}
    count: dict[str, int] = {}
    timing: dict[str, tuple[float, float]] = {}
    stage1_tv = []
    for seed in range(args.seeds):
        prep = prepare_llm_path(seed, max(args.n))
        task, tok, stage1 = prep["task"], prep["tokenizer"], prep["stage1"]
        stage1_tv.append(prep["tv"]["stage1"]["tv"])
        for name in LRS:
            for n in args.n:
                pairs = prep["expert_pairs"][:n]
                best = None
                for lr in LRS[name]:
                    m, trainable, params = _variant(name, stage1)
                    count[name] = sum(p.numel() for p in params)
                    dpo_stage(
                        m,
                        None,
                        pairs,
                        tokenizer=tok,
                        trainable=trainable,
                        lr=lr,
                        steps=args.steps,
                        batch_size=min(n, 32),
                        seed=seed,
                    )
                    v = task.tv(m, tok, 500, seed)["tv"]
                    best = v if best is None else min(best, v)
                tv.setdefault((name, n), []).append(best)
            if seed == 0:  # time one DPO step and its floor on a 32-pair batch
                m, trainable, params = _variant(name, stage1)
                batch = prep["expert_pairs"][:32]
                enc = encode_pairs(tok, batch)

                def step(m=m, trainable=trainable, batch=batch, tok=tok):
                    dpo_stage(
                        m,
                        None,
                        batch,
                        tokenizer=tok,
                        trainable=trainable,
                        lr=1e-3,
                        steps=1,
                        batch_size=32,
                    )

                def floor(m=m, enc=enc):
                    with torch.no_grad():
                        pair_logprobs(m, enc)

                timing[name] = (median_time(step, 20), median_time(floor, 20))
    print(
        f"stage-1 model: next-token TV to the expert {statistics.mean(stage1_tv):.3f} "
        f"(mean over {args.seeds} seeds)\n"
    )
    head = "| stage 2 | trainable params | " + " | ".join(f"TV @ n={n}" for n in args.n)
    print(head + " | DPO step (ms) | floor: forward (ms) | step / floor |")
    print("|---|---|" + "---|" * len(args.n) + "---|---|---|")
    for name in LRS:
        cells = []
        for n in args.n:
            v = tv[(name, n)]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            cells.append(f"{statistics.mean(v):.3f} ± {sd:.3f}")
        st, fl = timing[name]
        print(
            f"| {name} | {count[name]} | "
            + " | ".join(cells)
            + f" | {st * 1e3:.1f} | {fl * 1e3:.1f} | {st / fl:.1f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
