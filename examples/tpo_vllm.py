"""TPO against a real model (not run in CI): an OpenAI-compatible server (vLLM, llama.cpp,
OpenAI) as the policy and a Hugging Face sequence-classification reward model, D2-N5, JSONL out.

    vllm serve allenai/Llama-3.1-Tulu-3-8B-SFT --port 8000 &
    python examples/tpo_vllm.py --base-url http://localhost:8000/v1 \
        --model allenai/Llama-3.1-Tulu-3-8B-SFT \
        --reward-model sfairXC/FsfairX-LLaMA3-RM-v0.1 --data queries.json --out tpo.jsonl

``queries.json`` is a JSON list of strings (or of objects with a ``"query"`` / ``"prompt"``
field). With a GPU and hub access this is the official pipeline (Llama-3.1-70B-SFT policy,
FsfairX or Tulu-3-8B-RM reward model); the same run is ``icml25 tpo ...`` from the shell.
A killed run resumes: finished queries are skipped on the next start; failed queries are error
rows in the JSONL, retried with ``--retry-errors``. ``--official-prompts PATH`` uses the prompts of
a local checkout of yafuly/TPO (``PromptSet.from_official``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from icml25.llm import HFRewardModel, ItemError, OpenAIChat
from icml25.tpo import PromptSet, TPOConfig, tpo_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--reward-model", required=True, help="HF name or local path")
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--out", default=Path("tpo.jsonl"), type=Path)
    ap.add_argument("--width", type=int, default=5)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--retry-errors", action="store_true")
    ap.add_argument("--official-prompts", type=Path, default=None, help="a yafuly/TPO checkout")
    args = ap.parse_args()

    items = json.loads(args.data.read_text())
    queries = [q if isinstance(q, str) else q.get("query", q.get("prompt")) for q in items]
    policy = OpenAIChat(args.base_url, args.model)
    reward = HFRewardModel(args.reward_model, device="cuda", batch_size=1)  # official: one pair
    results = tpo_batch(
        queries,
        policy,
        reward,
        TPOConfig(width=args.width, depth=args.depth),
        PromptSet.from_official(args.official_prompts) if args.official_prompts else None,
        num_threads=args.threads,
        out_path=args.out,
        retry_errors=args.retry_errors,
        errors="return",
    )
    rewards = [r.best_reward for r in results if not isinstance(r, ItemError)]
    failed = len(results) - len(rewards)
    print(
        f"{len(results)} queries, {failed} failed, mean best reward "
        f"{sum(rewards) / max(1, len(rewards)):.4f}"
    )


if __name__ == "__main__":
    main()
