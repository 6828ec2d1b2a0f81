"""Batched incremental sampling for causal LMs: KV cache, all samples of all requests in one batch.

Two decoders share one sampling loop:

- :class:`HFDecoder` runs any Hugging Face causal LM through its own ``forward`` and cache;
- :class:`FastLlamaDecoder` runs a ``LlamaForCausalLM`` (default RoPE, SiLU MLP, no biases)
  directly from its weights with a preallocated KV cache, which on CPU removes most of the
  per-token Python overhead of ``forward`` for small models. ``tests/llm`` checks that its logits
  equal Hugging Face's.

Each row draws from its own ``torch.Generator``, so a request's samples depend on its seed only,
not on which other requests share its batch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from icml25._validate import as_int, as_prob, as_real

__all__ = ["FastLlamaDecoder", "HFDecoder", "fast_llama_supported", "make_decoder", "sample"]


def _left_pad(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device):
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if p:
            ids[i, width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
            mask[i, width - len(p) :] = 1
    return ids.to(device), mask.to(device)


class HFDecoder:
    """Prefill + one-token steps through a Hugging Face model's own ``forward`` and cache."""

    def __init__(self, model: Any) -> None:
        self.model = model
        params = inspect.signature(model.forward).parameters
        # transformers 5 renamed ``past_key_values`` to ``cache``.
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, Any]:
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        return out.logits[:, -1, :].float(), (_cache_of(out), mask, pos[:, -1:])

    def step(self, next_ids: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
        cache, mask, last_pos = state
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
        pos = last_pos + 1
        out = self.model(
            input_ids=next_ids,
            attention_mask=mask,
            position_ids=pos,
            use_cache=True,
            **{self._cache_arg: cache},
        )
        return out.logits[:, -1, :].float(), (_cache_of(out), mask, pos)


def _cache_of(out: Any) -> Any:
    cache = out.get("cache") if hasattr(out, "get") else None
    return cache if cache is not None else out.past_key_values


def fast_llama_supported(model: Any) -> bool:
    """True when :class:`FastLlamaDecoder` computes exactly what ``model.forward`` computes: a
    ``LlamaForCausalLM`` (the exact class, not a look-alike) with SiLU MLP, no biases and default
    RoPE. Other families fall back to :class:`HFDecoder` even where they look close: Qwen2 has
    q/k/v biases, Mistral a sliding window, Gemma-2 scaled embeddings, logit soft-capping and
    extra norms, and Llama-3.1's ``llama3`` RoPE scaling differs from the default."""
    if type(model).__name__ != "LlamaForCausalLM":
        return False
    cfg = model.config
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    rope_type = (
        rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "?"
    )
    rotary = getattr(model.model, "rotary_emb", None)
    return (
        getattr(cfg, "hidden_act", None) == "silu"
        and not getattr(cfg, "attention_bias", False)
        and not getattr(cfg, "mlp_bias", False)
        and getattr(cfg, "pretraining_tp", 1) in (None, 1)
        and rope_type == "default"
        and rotary is not None
        and hasattr(rotary, "inv_freq")
        and float(getattr(rotary, "attention_scaling", 1.0)) == 1.0
    )


class FastLlamaDecoder:
    """A lean inference path for ``LlamaForCausalLM`` reading the model's own weights.

    The weights are referenced, not copied, so training the model in place is seen at once.
    """

    def __init__(self, model: Any) -> None:
        if not fast_llama_supported(model):
            raise ValueError(
                f"{type(model).__name__} with this config is not supported by FastLlamaDecoder"
            )
        cfg = model.config
        self.model = model
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads
        self.eps = cfg.rms_norm_eps
        self.layers = model.model.layers

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(x.dtype)

    def _rope(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = self.model.model.rotary_emb.inv_freq.float()
        freqs = pos.float()[..., None] * inv_freq  # (B, T, D/2)
        emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # (B, 1, T, D)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, state: dict) -> torch.Tensor:
        b, t = ids.shape
        start = state["length"]
        x = self.model.model.embed_tokens(ids)
        cos, sin = self._rope(pos, x.dtype)
        keys_ok = state["mask"][:, None, None, : start + t]  # (B, 1, 1, S)
        causal = torch.ones(t, start + t, dtype=torch.bool, device=ids.device).tril(start)
        # Every query also sees itself: a left-pad query would otherwise see no key at all and
        # turn into NaN, which would then leak through the cache. Pad outputs are never used.
        cols = torch.arange(start + t, device=ids.device)
        itself = cols[None, :] == (torch.arange(t, device=ids.device)[:, None] + start)
        attn_mask = (keys_ok & causal) | itself
        for i, layer in enumerate(self.layers):
            att = layer.self_attn
            h = self._norm(x, layer.input_layernorm.weight)
            q = att.q_proj(h).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
            k = att.k_proj(h).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
            v = att.v_proj(h).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            kc, vc = state["k"][i], state["v"][i]
            kc[:, :, start : start + t] = k
            vc[:, :, start : start + t] = v
            keys, values = kc[:, :, : start + t], vc[:, :, : start + t]
            if self.n_kv != self.n_heads:
                rep = self.n_heads // self.n_kv
                keys = keys.repeat_interleave(rep, dim=1)
                values = values.repeat_interleave(rep, dim=1)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=attn_mask)
            x = x + att.o_proj(o.transpose(1, 2).reshape(b, t, -1))
            h = self._norm(x, layer.post_attention_layernorm.weight)
            mlp = layer.mlp
            x = x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
        x = self._norm(x[:, -1:], self.model.model.norm.weight)
        state["length"] = start + t
        return self.model.lm_head(x)[:, -1].float()

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor, max_new_tokens: int = 256):
        b, t = ids.shape
        w = self.model.model.embed_tokens.weight
        shape = (b, self.n_kv, t + max_new_tokens, self.head_dim)
        state = {
            "k": [w.new_zeros(shape) for _ in self.layers],
            "v": [w.new_zeros(shape) for _ in self.layers],
            "mask": torch.cat([mask.bool(), mask.new_ones((b, max_new_tokens)).bool()], dim=1),
            "length": 0,
        }
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = self._forward(ids, pos, state)
        state["pos"] = pos[:, -1:]
        return logits, state

    def step(self, next_ids: torch.Tensor, state: dict):
        pos = state["pos"] + 1
        state["pos"] = pos
        return self._forward(next_ids, pos, state), state


def make_decoder(model: Any, fast: bool | None = None) -> Any:
    """:class:`FastLlamaDecoder` where supported (or ``fast=True``), else :class:`HFDecoder`."""
    if fast is None:
        fast = fast_llama_supported(model)
    return FastLlamaDecoder(model) if fast else HFDecoder(model)


@torch.inference_mode()
def sample(
    decoder: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int | Sequence[int],
    temperature: float,
    top_p: float,
    eos_ids: Sequence[int],
    pad_id: int,
    generators: Sequence[torch.Generator | None],
    device: torch.device,
    stop_fn: Callable[[int, list[int]], bool] | None = None,
    logprobs: int | None = None,
) -> list[list[int]] | tuple[list[list[int]], list[list[tuple[float, list[tuple[int, float]]]]]]:
    """Sample continuations of token-id ``prompts`` (one row each) and return the new ids.

    ``temperature == 0`` is greedy. Generation of a row ends at an EOS id (not included), when
    ``stop_fn(row, ids_so_far)`` says so, or after ``max_new_tokens`` (one int for every row, or
    one per row: a row's room left in the model's context).

    Every model call passes its tensors by keyword (``input_ids=``, ``attention_mask=``,
    ``position_ids=``) with positions counted from the attention mask, so a left-padded row sees
    the positions it would see alone (GPT-2's ``forward`` takes ``past_key_values`` second, a
    positional call would feed it the mask).

    With ``logprobs=k`` (``k >= 0``) the return value is ``(ids, lps)``: per row and generated
    token ``(logprob, [(id, logprob)] * k)`` under the model's own distribution (the log-softmax
    of the raw logits, before temperature and top-p, as vLLM reports them).
    """
    ids, mask = _left_pad(prompts, pad_id, device)
    b = ids.shape[0]
    temperature = as_real("temperature", temperature, low=0.0)
    top_p = as_prob("top_p", top_p, low_open=True)
    if logprobs is not None:
        logprobs = as_int("logprobs", logprobs, 0)
    per_row = isinstance(max_new_tokens, Sequence) and not isinstance(max_new_tokens, str)
    if per_row or getattr(max_new_tokens, "ndim", 0) >= 1:  # a list, an array or a tensor
        limits = [as_int(f"max_new_tokens[{i}]", n, 1) for i, n in enumerate(max_new_tokens)]
        if len(limits) != b:
            raise ValueError(f"max_new_tokens has {len(limits)} entries for {b} prompts")
    else:
        limits = [as_int("max_new_tokens", max_new_tokens, 1)] * b
    longest = max(limits)
    if isinstance(decoder, FastLlamaDecoder):
        logits, state = decoder.prefill(ids, mask, longest)
    else:
        logits, state = decoder.prefill(ids, mask)
    if not bool(torch.isfinite(logits).all()):  # one check on the prompt: NaN weights show here
        raise FloatingPointError(
            "the model's logits for the prompt are NaN or inf (NaN weights, or an fp16 overflow: "
            "load in bf16 or fp32); nothing was generated"
        )
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    out: list[list[int]] = [[] for _ in range(b)]
    lps: list[list[tuple[float, list[tuple[int, float]]]]] = [[] for _ in range(b)]
    for step in range(longest):
        nxt = _pick(logits, temperature, top_p, generators)
        finished_now = torch.isin(nxt, eos) if eos.numel() else torch.zeros_like(done)
        if logprobs is not None:
            logp = torch.log_softmax(logits.float(), dim=-1)
            chosen = logp.gather(-1, nxt[:, None]).squeeze(-1).tolist()
            top_v, top_i = logp.topk(min(logprobs, logp.shape[-1]), dim=-1)
            top_v, top_i = top_v.tolist(), top_i.tolist()
        for r in (~done & ~finished_now).nonzero().flatten().tolist():
            out[r].append(int(nxt[r]))
            if logprobs is not None:
                lps[r].append((chosen[r], list(zip(top_i[r], top_v[r]))))
            if len(out[r]) >= limits[r] or (stop_fn is not None and stop_fn(r, out[r])):
                finished_now[r] = True
        done |= finished_now
        if bool(done.all()) or step == longest - 1:
            break
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        logits, state = decoder.step(nxt[:, None], state)
    return out if logprobs is None else (out, lps)


def _pick(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    generators: Sequence[torch.Generator | None],
) -> torch.Tensor:
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / temperature, dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    cum = sorted_p.cumsum(dim=-1)
    if top_p < 1.0:
        # keep the smallest prefix whose mass reaches top_p (the first token always stays)
        keep = (cum - sorted_p) < top_p
        sorted_p = sorted_p * keep
        cum = sorted_p.cumsum(dim=-1)
    # One CPU draw per row from the row's own generator: samples never depend on the batch.
    u = torch.stack([torch.rand((), generator=g) for g in generators]).to(logits.device)
    u = u * cum[:, -1]
    idx = torch.searchsorted(cum, u[:, None]).clamp(max=cum.shape[-1] - 1)
    return order.gather(-1, idx).squeeze(-1)
