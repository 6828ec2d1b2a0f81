"""How the investigator and the target call a Hugging Face causal LM: batched incremental
decoding with an optional restricted vocabulary (the same masked log-softmax
:meth:`Investigator.logprob` scores with); :func:`end_of_turn_ids`, where a chat model's reply
ends; :func:`icml25.llm.training.position_ids` from an attention mask; :func:`train_mode` for the training loops; used
by :class:`~icml25.elicitation.investigator.Investigator` and
:class:`~icml25.elicitation.backends.HFTargetModel`.

Decoding runs with dropout off (each submodule's training flag restored afterwards) and calls the
model by keyword with ``position_ids`` counted from the attention mask, so a left-padded row
generates what it generates alone (``icml25.llm.sampling.HFDecoder``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

from icml25.llm.training import end_of_turn_id


def low_precision(model: Any) -> torch.dtype | None:
    """The checkpoint's bf16/fp16 dtype (bf16 wins a mix), ``None`` for a full-precision model."""
    dtypes = {p.dtype for p in model.parameters()}
    for d in (torch.bfloat16, torch.float16):
        if d in dtypes:
            return d
    return None


@contextlib.contextmanager
def train_mode(model: torch.nn.Module, *, disable_dropout: bool) -> Any:
    """Train mode for a training loop: dropout as the model configures it, or off with
    ``disable_dropout`` (TRL's ``DPOConfig.disable_dropout``); every submodule's own flag is
    restored afterwards."""
    from icml25.llm.training import dropout_disabled

    saved = [(m, m.training) for m in model.modules()]
    model.train()
    try:
        with dropout_disabled(model, enabled=disable_dropout):
            yield
    finally:
        for m, flag in saved:
            m.training = flag


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
    from icml25.llm.sampling import HFDecoder
    from icml25.llm.training import dropout_disabled

    with dropout_disabled(model):
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
    return [out[r, : int(lengths[r])].tolist() for r in range(n)]


def _vocab(model: Any) -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """The ids that end a reply: the chat template's end of turn
    (:func:`icml25.llm.training.end_of_turn_id`) followed by ``eos_token_id`` when that differs;
    only the eos id for a tokenizer without a chat template. Generation stops at any of them; the
    first is the one a reply is scored with."""
    eot, eos = end_of_turn_id(tokenizer), tokenizer.eos_token_id
    out = [eot] if eot is not None else []
    if eos is not None and eos not in out:
        out.append(int(eos))
    return out
