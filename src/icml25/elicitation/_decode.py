"""Batched incremental decoding for any Hugging Face causal LM, with an optional restricted
vocabulary (the same masked log-softmax :meth:`Investigator.logprob` scores with), used by
:class:`~icml25.elicitation.investigator.Investigator` and
:class:`~icml25.elicitation.backends.HFTargetModel`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def restrict(logits: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """Logits with every id outside ``allowed`` set to -inf (``allowed=None``: unchanged)."""
    if allowed is None:
        return logits
    masked = torch.full_like(logits, float("-inf"))
    masked[..., allowed] = logits[..., allowed]
    return masked


@torch.no_grad()
def decode(
    model: Any,
    contexts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    pad_id: int,
    eos_ids: Sequence[int] = (),
    greedy: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    allowed: torch.Tensor | None = None,
    exact_length: int | None = None,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """New token ids for every context (left-padded batch, KV cache). Stops a row at an EOS id
    (not returned) unless ``exact_length`` (then exactly that many tokens, EOS never drawn)."""
    device = next(model.parameters()).device
    n = len(contexts)
    width = max(len(c) for c in contexts)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for r, c in enumerate(contexts):
        ids[r, width - len(c) :] = torch.tensor(list(c), dtype=torch.long)
        mask[r, width - len(c) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    steps = exact_length if exact_length is not None else max_new_tokens
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long, device=device) if eos_ids else None
    allowed_d = allowed.to(device) if allowed is not None else None
    if exact_length is not None and eos is not None and allowed_d is None:
        allowed_d = torch.tensor(
            [i for i in range(_vocab(model)) if i not in set(eos_ids)], device=device
        )
    out = torch.full((n, steps), pad_id, dtype=torch.long, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    lengths = torch.full((n,), steps, dtype=torch.long, device=device)
    was_training = model.training
    model.eval()
    try:
        from icml25.llm.sampling import HFDecoder

        dec = HFDecoder(model)
        last, state = dec.prefill(ids, mask)
        for t in range(steps):
            logits = restrict(last, allowed_d)
            if not bool(torch.isfinite(logits).any(-1).all()) or bool(torch.isnan(logits).any()):
                raise FloatingPointError(
                    "the model's next-token logits are not finite (NaN or inf weights?)"
                )
            if greedy:
                tok = logits.argmax(-1)
            else:
                probs = torch.softmax(logits / max(float(temperature), 1e-6), -1)
                if top_p < 1.0:
                    sp, si = probs.sort(-1, descending=True)
                    keep = sp.cumsum(-1) - sp < top_p
                    probs = torch.zeros_like(probs).scatter(-1, si, sp * keep)
                tok = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(device)
            if eos is not None and exact_length is None:
                hit = torch.isin(tok, eos) & ~done
                lengths[hit] = t
                done |= hit
            out[:, t] = tok
            if bool(done.all()) or t == steps - 1:
                break
            last, state = dec.step(tok[:, None], state)
    finally:
        model.train(was_training)
    return [out[r, : int(lengths[r])].tolist() for r in range(n)]


def _vocab(model: Any) -> int:
    return int(model.get_output_embeddings().weight.shape[0])
