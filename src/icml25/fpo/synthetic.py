"""The offline task of our reproduction (docs/fpo.md, "Reproduction"): reverse a string of symbols.

Prompts are 3-6 symbols from ``a`` to ``l``; the ideal response is the reversed prompt. The
programmatic reward ``r(x, y) = (1/n) Σ_{i < min(n, m)} 1[y_i = x_{n-1-i}] - 0.5 |m - n| / n``
(``n = |x|``, ``m = |y|``) stands in for the paper's GPT-4 judge. The SFT data is the reversal
with noise (a symbol replaced w.p. 0.25, one appended w.p. 0.15, the last deleted w.p. 0.10), so
the SFT model is imperfect and preference pairs sampled from it carry signal.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

__all__ = ["SYMBOLS", "ReversalTask", "reward", "sample_preference_pairs"]

SYMBOLS = tuple("abcdefghijkl")


def reward(prompt: str, response: str) -> float:
    """``r(x, y)`` of the module doc; tokens are whitespace-separated symbols."""
    x, y = prompt.split(), response.split()
    n, m = len(x), len(y)
    if n == 0:
        raise ValueError("the prompt has no symbol")
    hits = sum(1 for i in range(min(n, m)) if y[i] == x[n - 1 - i])
    return hits / n - 0.5 * abs(m - n) / n


class ReversalTask:
    """Prompts, ideal answers, noisy SFT data and rewards of the reversal task."""

    def __init__(self, min_len: int = 3, max_len: int = 6) -> None:
        if not 1 <= min_len <= max_len:
            raise ValueError(f"need 1 <= min_len <= max_len, got {min_len}, {max_len}")
        self.min_len, self.max_len = min_len, max_len

    @staticmethod
    def vocabulary() -> list[str]:
        return list(SYMBOLS)

    def prompts(self, n: int, seed: int) -> list[str]:
        rng = random.Random(seed)
        return [
            " ".join(rng.choice(SYMBOLS) for _ in range(rng.randint(self.min_len, self.max_len)))
            for _ in range(n)
        ]

    @staticmethod
    def ideal(prompt: str) -> str:
        return " ".join(reversed(prompt.split()))

    def sft_pairs(
        self,
        n: int,
        seed: int,
        *,
        p_replace: float = 0.25,
        p_append: float = 0.15,
        p_delete: float = 0.10,
    ) -> list[tuple[str, str]]:
        """``(prompt, noisy reversal)`` pairs for supervised fine-tuning."""
        rng = random.Random(seed + 7919)
        out = []
        for x in self.prompts(n, seed):
            y = x.split()[::-1]
            y = [rng.choice(SYMBOLS) if rng.random() < p_replace else s for s in y]
            if rng.random() < p_append:
                y.append(rng.choice(SYMBOLS))
            if rng.random() < p_delete and len(y) > 1:
                y.pop()
            out.append((x, " ".join(y)))
        return out

    reward = staticmethod(reward)


def sample_preference_pairs(
    chat: Any,
    prompts: Sequence[str],
    *,
    seed: int,
    temperature: float = 1.0,
    max_tokens: int = 10,
    reward_fn: Any = reward,
) -> list[dict[str, Any]]:
    """Two samples per prompt from ``chat`` (an :mod:`icml25.llm` backend); ties dropped; the
    higher-reward sample is ``chosen``. Records are in TRL's conversational format."""
    outs = chat.chat_many(
        [[{"role": "user", "content": p}] for p in prompts],
        n=2,
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
    )
    recs = []
    for p, (a, b) in zip(prompts, outs):
        a, b = a.strip(), b.strip()
        if not a or not b:
            continue
        ra, rb = reward_fn(p, a), reward_fn(p, b)
        if ra == rb:
            continue
        w, lo = (a, b) if ra > rb else (b, a)
        recs.append(
            {
                "prompt": [{"role": "user", "content": p}],
                "chosen": [{"role": "assistant", "content": w}],
                "rejected": [{"role": "assistant", "content": lo}],
                "reward_chosen": max(ra, rb),
                "reward_rejected": min(ra, rb),
            }
        )
    return recs
