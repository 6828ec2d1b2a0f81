"""Throughput of the shared LLM layer, side by side in one process.

1. ``OpenAIChat.chat_many`` (concurrency 16) vs a sequential loop, 64 requests, against a local
   OpenAI-compatible server that adds 200 ms of latency per request. Target: >= 8x.
2. A short chat call (n=4, <= 12 new tokens) to a tiny trained Llama through ``HFChat``: the fast
   Llama decoder vs the generic Hugging Face forward path. Target: ~10 ms per call on 2 cores.

Run: ``python benchmarks/llm_throughput.py`` (or ``icml25 bench llm_throughput``).
"""

from __future__ import annotations

import random
import time

import torch

from icml25.llm import CallableChat, ChatServer, HFChat, OpenAIChat
from icml25.toy import tiny_chat_model

LATENCY = 0.2
REQUESTS = 64


def http_part() -> float:
    backend = CallableChat(lambda messages, **kw: "ok " + messages[-1]["content"])
    requests = [[{"role": "user", "content": f"q{i}"}] for i in range(REQUESTS)]
    with ChatServer(backend, latency=LATENCY, serialize=False) as server:
        with OpenAIChat(server.url, "bench", concurrency=16) as chat:
            t0 = time.perf_counter()
            seq = [chat.chat(r, temperature=0) for r in requests]
            t_seq = time.perf_counter() - t0
            t0 = time.perf_counter()
            par = chat.chat_many(requests, temperature=0)
            t_par = time.perf_counter() - t0
    assert seq == par, "concurrent and sequential answers differ"
    ratio = t_seq / t_par
    print(
        f"| {REQUESTS} requests, {LATENCY * 1000:.0f} ms latency | sequential {t_seq:.2f} s | "
        f"chat_many(concurrency=16) {t_par:.2f} s | speed-up {ratio:.1f}x (target >= 8x) |"
    )
    return ratio


def tiny_part() -> None:
    torch.set_num_threads(2)
    rng = random.Random(0)
    words = ["red", "green", "blue", "cat", "dog", "sun", "moon", "tree"]
    pairs = []
    for _ in range(300):
        xs = [rng.choice(words) for _ in range(rng.randint(1, 4))]
        pairs.append(("reverse " + " ".join(xs), " ".join(reversed(xs))))
    chat, _ = tiny_chat_model(pairs, steps=200, progress=False)
    msg = [{"role": "user", "content": "reverse red cat sun"}]
    times = {}
    for label, fast in (("fast Llama decoder", True), ("generic HF forward", False)):
        c = HFChat(chat.model, chat.tokenizer, fast=fast)
        c.chat(msg, n=4, max_tokens=12)
        reps = 50
        t0 = time.perf_counter()
        for i in range(reps):
            c.chat(msg, n=4, temperature=1.0, max_tokens=12, seed=i)
        times[label] = (time.perf_counter() - t0) / reps * 1000
    fast_ms, hf_ms = times["fast Llama decoder"], times["generic HF forward"]
    print(
        f"| tiny Llama chat call, n=4, <=12 tokens | fast decoder {fast_ms:.1f} ms | "
        f"HF forward {hf_ms:.1f} ms | ratio {hf_ms / fast_ms:.2f}x |"
    )


if __name__ == "__main__":
    ratio = http_part()
    tiny_part()
    raise SystemExit(0 if ratio >= 8 else 1)
