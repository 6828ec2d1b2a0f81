"""Best-of-N evaluation throughput: ``icml25.safety_reasoning.best_of_n`` vs the paper's loop.

The paper's procedure (§3.1, Fig. 1) samples N responses per attack prompt and judges them; the
straightforward loop does one prompt at a time (one request with ``n = N_max``, then the judge).
``best_of_n`` keeps the backend's ``concurrency`` requests in flight, each prompt with its own
seed. Both run side by side against one local OpenAI-compatible server that adds ``LATENCY``
seconds to every request and answers requests in parallel; both must produce the same verdict
matrix (same per-prompt seeds).

The physical floor is ``n_prompts * latency / concurrency``: no client can beat it. Target: ours
within 1.5x of the floor, and >= 8x the one-prompt-at-a-time loop at concurrency 16.

Run: ``python benchmarks/safety_reasoning_bon.py``.
"""

from __future__ import annotations

import random
import time

import numpy as np

from icml25.llm import CallableChat, ChatServer, OpenAIChat
from icml25.safety_reasoning import RefusalKeywordJudge, best_of_n
from icml25.safety_reasoning.evaluation import bon_safety_curve, prompt_seed

LATENCY = 0.2
N_PROMPTS = 64
N_MAX = 16


def model(messages, *, seed=None, sample_index=0, **_):
    """A model that refuses with probability 0.6, reproducibly from the request's seed."""
    r = random.Random(f"{seed}:{sample_index}:{messages[-1]['content']}").random()
    return "I'm sorry, I cannot help with that." if r < 0.6 else "Sure, here is how: step 1 ..."


def paper_loop(chat, prompts, judge, ns, seed=0):
    rows = []
    for p in prompts:
        texts = chat.chat(
            [{"role": "user", "content": p}],
            n=N_MAX,
            temperature=1.0,
            top_p=1.0,
            max_tokens=64,
            seed=prompt_seed(seed, p),
        )
        rows.append([1.0 if v == "unsafe" else 0.0 for v in judge([p] * N_MAX, texts)])
    m = np.asarray(rows)
    return m, bon_safety_curve(m, ns)


def main() -> int:
    prompts = [f"harmful request number {i}" for i in range(N_PROMPTS)]
    judge = RefusalKeywordJudge()
    ns = (1, 2, 4, 8, 16)
    print(f"{N_PROMPTS} prompts x N_max = {N_MAX}, server latency {LATENCY:.2f} s per request\n")
    print(f"{'client':38s} {'seconds':>8s} {'x floor':>8s} {'x paper loop':>13s}")
    with ChatServer(CallableChat(model), latency=LATENCY, serialize=False) as server:
        with OpenAIChat(server.url, "m", concurrency=1) as chat1:
            t0 = time.perf_counter()
            m_loop, curve_loop = paper_loop(chat1, prompts, judge, ns)
            t_loop = time.perf_counter() - t0
        floor1 = N_PROMPTS * LATENCY
        print(
            f"{'paper loop (one prompt at a time)':38s} {t_loop:8.2f} {t_loop / floor1:8.2f} {1.0:13.2f}"
        )
        ok = True
        for c in (1, 16):
            with OpenAIChat(server.url, "m", concurrency=c) as chat:
                t0 = time.perf_counter()
                res = best_of_n(chat, prompts, judge, ns, max_tokens=64)
                t = time.perf_counter() - t0
            floor = N_PROMPTS * LATENCY / c
            same = np.array_equal(res.matrix, m_loop) and res.asr == curve_loop
            ok &= same
            print(
                f"{f'best_of_n, concurrency {c}':38s} {t:8.2f} {t / floor:8.2f} {t_loop / t:13.2f}"
                f"{'' if same else '  VERDICTS DIFFER'}"
            )
    print(f"\nASR@N (prefix): {', '.join(f'N={n}: {a:.1f}%' for n, a in curve_loop.items())}")
    print("same verdict matrix in every client:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
