"""A fast CPU training loop for the tiny causal LMs of :mod:`icml25.toy.models`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["encode_examples", "train_causal_lm"]

Example = "str | tuple[str | list[dict], str]"


def encode_examples(
    tokenizer: Any, data: Sequence[Any], max_length: int
) -> list[tuple[list[int], list[int]]]:
    """Token ids and loss masks: every token for plain texts, response tokens only for pairs.

    A plain text becomes ``BOS text EOS``; a ``(prompt, response)`` pair becomes the chat rendering
    of the prompt (a user message, or a list of messages) with the generation prompt, then
    ``response EOS``: exactly what :class:`~icml25.llm.hf.HFChat` will show the model.
    """
    if isinstance(data, (str, bytes)) or not isinstance(data, Sequence) or not data:
        raise ValueError("data must be a non-empty list of texts or (prompt, response) pairs")
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    out = []
    for i, item in enumerate(data):
        if isinstance(item, str):
            ids = (
                ([bos] if bos is not None else [])
                + tokenizer(item, add_special_tokens=False)["input_ids"]
                + [eos]
            )
            mask = [0] + [1] * (len(ids) - 1)
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], str):
            prompt, response = item
            messages = (
                [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            )
            if getattr(tokenizer, "chat_template", None):
                text = tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=False
                )
            else:
                from icml25.llm.hf import render_plain

                text = render_plain(messages)
            p_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            r_ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [eos]
            ids, mask = p_ids + r_ids, [0] * len(p_ids) + [1] * len(r_ids)
        else:
            raise ValueError(
                f"data[{i}] must be a text or a (prompt, response) pair, got {item!r:.80}"
            )
        out.append((ids[:max_length], mask[:max_length]))
    return out


def train_causal_lm(
    model: Any,
    tokenizer: Any,
    data: Sequence[Any],
    *,
    steps: int = 300,
    batch_size: int = 32,
    lr: float = 3e-3,
    weight_decay: float = 0.0,
    warmup: int = 20,
    max_length: int = 256,
    seed: int = 0,
    progress: bool | None = None,
    callback: Any = None,
) -> list[float]:
    """Train ``model`` in place on ``data`` with AdamW and a warmup-then-cosine schedule.

    Args:
        data: plain texts (loss on every token) or ``(prompt, response)`` pairs (loss on the
            response and its EOS only); see :func:`encode_examples`.
        steps, batch_size, lr, weight_decay, warmup: the optimisation budget.
        max_length: examples are cut to this many tokens.
        seed: seeds the batch order (the model's init is seeded where it is built).
        progress: show a progress bar (default: unless ``ICML25_QUIET`` is set).
        callback: ``callback(step, model)`` after every optimiser step (``step`` counts from 1),
            e.g. to keep checkpoints of one run; the model is in train mode during the call.

    Returns:
        The training loss of every step. The model is left in eval mode.
    """
    import torch

    from icml25.progress import track

    for label, value in (("steps", steps), ("batch_size", batch_size), ("max_length", max_length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    examples = encode_examples(tokenizer, data, max_length)
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    losses: list[float] = []
    model.train()
    disable = None if progress is None else not progress
    for _ in track(range(steps), "training tiny LM", total=steps, disable=disable):
        idx = torch.randint(len(examples), (batch_size,), generator=gen).tolist()
        batch = [examples[i] for i in idx]
        width = max(len(ids) for ids, _ in batch)
        ids = torch.full((batch_size, width), pad, dtype=torch.long)
        attn = torch.zeros((batch_size, width), dtype=torch.long)
        weight = torch.zeros((batch_size, width))
        for r, (x, m) in enumerate(batch):
            ids[r, : len(x)] = torch.tensor(x)
            attn[r, : len(x)] = 1
            weight[r, : len(m)] = torch.tensor(m, dtype=torch.float)
        ids, attn, weight = ids.to(device), attn.to(device), weight.to(device)
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
        )
        w = weight[:, 1:].reshape(-1)
        loss = (nll * w).sum() / w.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if callback is not None:
            callback(len(losses), model)
    model.eval()
    return losses
