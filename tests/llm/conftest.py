"""Fixtures for the LLM layer: a deterministic echo backend and one tiny trained chat model."""

from __future__ import annotations

import random

import pytest

WORDS = ["red", "green", "blue", "cat", "dog", "sun", "moon", "tree"]


def echo_reply(messages, *, seed=None, sample_index=0, **_params):
    """``echo <last user text> sample <k>`` with k = seed + sample_index: what a seeded server does."""
    k = (seed or 0) + sample_index
    return f"echo {messages[-1]['content']} sample {k}"


@pytest.fixture
def echo():
    from icml25.llm import CallableChat

    return CallableChat(echo_reply, name="echo")


def reverse_pairs(n: int = 300, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        xs = [rng.choice(WORDS) for _ in range(rng.randint(1, 4))]
        pairs.append(("reverse " + " ".join(xs), " ".join(reversed(xs))))
    return pairs


@pytest.fixture(scope="session")
def tiny_chat():
    """A tiny Llama trained (about 3 s) to reverse word lists, behind HFChat."""
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from icml25.toy import tiny_chat_model

    chat, losses = tiny_chat_model(reverse_pairs(), steps=200, progress=False)
    assert losses[-1] < 0.2 * losses[0]
    return chat
