"""Offline stand-ins for tests and quick reproductions: tiny tokenizers and causal LMs, an
architecture matrix of tiny random-init models of real Hugging Face families
(:mod:`icml25.toy.archs`), and the scikit-learn digits data that several reproductions train on.

Nothing here replaces a real model. It exists so tests and small reproductions run the same code
paths users run on real models (:class:`icml25.llm.HFChat` and friends), offline, in seconds.

Importing this package is cheap; torch / transformers / tokenizers load on first use.
"""

from __future__ import annotations

from icml25.toy.archs import (
    ARCHITECTURES,
    CHAT_TEMPLATES,
    ArchSpec,
    default_matrix,
    full_matrix,
    save_tiny,
    tiny_model,
    tiny_tokenizer,
)
from icml25.toy.digits import digits, digits_split
from icml25.toy.models import tiny_causal_lm
from icml25.toy.tokenizer import CHAT_TEMPLATE, SPECIAL_TOKENS, build_tokenizer
from icml25.toy.training import encode_examples, train_causal_lm

__all__ = [
    "ARCHITECTURES",
    "CHAT_TEMPLATE",
    "CHAT_TEMPLATES",
    "ArchSpec",
    "SPECIAL_TOKENS",
    "build_tokenizer",
    "default_matrix",
    "digits",
    "digits_split",
    "encode_examples",
    "full_matrix",
    "save_tiny",
    "tiny_causal_lm",
    "tiny_chat_model",
    "tiny_model",
    "tiny_tokenizer",
    "train_causal_lm",
]


def tiny_chat_model(
    pairs,
    *,
    vocab_size: int = 512,
    tokenizer_kind: str = "bpe",
    steps: int = 300,
    seed: int = 0,
    progress: bool | None = None,
    **model_kwargs,
):
    """Tokenizer + tiny Llama trained on ``(prompt, response)`` pairs, wrapped as an ``HFChat``.

    Returns ``(chat, losses)``; ``chat.model`` / ``chat.tokenizer`` are the trained pieces.
    """
    from icml25.llm.hf import HFChat

    texts = []
    for prompt, response in pairs:
        turns = [prompt] if isinstance(prompt, str) else [m["content"] for m in prompt]
        texts += [*turns, response]
    tok = build_tokenizer(texts, vocab_size, kind=tokenizer_kind)
    model = tiny_causal_lm(tok, seed=seed, **model_kwargs)
    losses = train_causal_lm(model, tok, pairs, steps=steps, seed=seed, progress=progress)
    return HFChat(model, tok, name=f"toy:tiny-llama-seed{seed}"), losses
