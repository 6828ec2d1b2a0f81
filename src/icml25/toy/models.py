"""Tiny Llama-architecture causal LMs built from a config with random init: no download."""

from __future__ import annotations

from typing import Any

__all__ = ["tiny_causal_lm"]


def tiny_causal_lm(
    tokenizer: Any,
    *,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    d_ff: int | None = None,
    max_positions: int = 512,
    tie_embeddings: bool = True,
    seed: int = 0,
    dtype: Any = None,
):
    """A ``transformers.LlamaForCausalLM`` sized for CPU tests (defaults: about 0.1 M parameters).

    Args:
        tokenizer: fixes the vocabulary size and the pad / BOS / EOS ids.
        d_model, n_layers, n_heads, n_kv_heads, d_ff: width, depth, attention heads, key/value
            heads (default ``n_heads``), MLP width (default ``2 * d_model``).
        max_positions: longest sequence the model is meant for.
        tie_embeddings: share input embedding and output head (fewer parameters).
        seed: seeds the random initialisation (the global torch RNG is left untouched).
        dtype: parameter dtype (default float32).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    for label, value in (("d_model", d_model), ("n_layers", n_layers), ("n_heads", n_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    n_kv_heads = n_kv_heads or n_heads
    if n_heads % n_kv_heads:
        raise ValueError(f"n_heads={n_heads} must be divisible by n_kv_heads={n_kv_heads}")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=d_model,
        intermediate_size=d_ff or 2 * d_model,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    devices = []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    if dtype is not None:
        model = model.to(dtype)
    return model.eval()
