"""Supervised fine-tuning for RT and SRG (arXiv:2502.04040, §4.3): token-level cross-entropy on the
target tokens only, ``L = -sum_t log pi(s_t | x, s_<t)`` with ``s = T ⊕ y`` (SRG) or ``s = y`` (RT).

:func:`sft` is a plain torch loop over any Hugging Face causal LM (full fine-tuning, or LoRA through
PEFT when ``lora`` is a ``peft.LoraConfig``). :func:`sft_trainer` builds TRL's ``SFTTrainer`` on the
same rows (prompt/completion format, loss on the completion only) for ``accelerate launch``
(DDP/FSDP/DeepSpeed) at real scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from icml25.safety_reasoning._checks import check_int
from icml25.safety_reasoning.data import to_chat_sft

__all__ = ["masked_lm_loss", "sft", "sft_trainer", "to_trl_rows"]


def masked_lm_loss(logits: Any, labels: Any) -> Any:
    """Mean next-token cross-entropy over the positions whose label is not ``-100``.

    ``logits``: ``(B, L, V)``; ``labels``: ``(B, L)`` int64 (``-100`` = no loss). The same
    shift and reduction as ``transformers``' causal-LM loss; computed in float32.
    """
    import torch.nn.functional as F

    if logits.ndim != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} must be (B, L, V) and (B, L)"
        )
    shift_logits = logits[:, :-1].float()
    shift_labels = labels[:, 1:].to(logits.device)
    if not (shift_labels != -100).any():
        raise ValueError("every label is -100: no target token to train on")
    vocab = logits.shape[-1]
    bad = (shift_labels != -100) & ((shift_labels < 0) | (shift_labels >= vocab))
    if bad.any():
        raise ValueError(
            f"label {int(shift_labels[bad][0])} is outside the vocabulary [0, {vocab}) of the logits"
        )
    return F.cross_entropy(shift_logits.reshape(-1, shift_logits.shape[-1]),
                           shift_labels.reshape(-1), ignore_index=-100)  # fmt: skip


def sft(
    model: Any,
    tokenizer: Any,
    pairs: Sequence[tuple[str, str]],
    *,
    lr: float = 1e-5,
    epochs: float = 3.0,
    batch_size: int = 8,
    max_length: int = 2048,
    steps: int | None = None,
    warmup_ratio: float = 0.05,
    weight_decay: float = 0.0,
    lora: Any = None,
    system: str | None = None,
    seed: int = 0,
    progress: bool | None = None,
) -> Any:
    """Fine-tune ``model`` on ``(query, target)`` pairs with the loss on target tokens only.

    Args:
        pairs: ``(query, target)`` pairs from
            :func:`~icml25.safety_reasoning.data.build_rt_dataset` or
            :func:`~icml25.safety_reasoning.data.build_srg_dataset`, or the
            :class:`~icml25.safety_reasoning.data.SRGExample` list of a synthesis report.
        lr, epochs, batch_size: AdamW settings; ``steps`` overrides ``epochs``. Defaults are
            common full-SFT settings for 8B models (the paper's are not reported; our choice,
            docs/safety_reasoning.md).
        warmup_ratio: linear warm-up share of the steps, then cosine decay to 0.
        lora: a ``peft.LoraConfig`` to train adapters only (the base weights stay unchanged).
        system: an optional system message in every prompt (not the guidelines: SRG's student
            sees the bare query).

    Returns:
        The trained model (the PEFT model when ``lora`` is given), in eval mode, on the device
        it came on. Batches follow the model's device; padding is on the right.
    """
    import torch

    from icml25.progress import track

    if (
        not isinstance(lr, (int, float))
        or isinstance(lr, bool)
        or not (math.isfinite(lr) and lr > 0)
    ):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    batch_size = check_int("batch_size", batch_size, 1)
    if steps is not None:
        steps = check_int("steps", steps, 1)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"model must be a loaded torch model (e.g. AutoModelForCausalLM.from_pretrained(path)), "
            f"got {type(model).__name__}: {model!r:.60}"
        )
    if tokenizer is None:
        raise ValueError("tokenizer is None: pass the model's tokenizer (with its chat template)")
    if steps is None and not (isinstance(epochs, (int, float)) and epochs > 0):
        raise ValueError(f"epochs must be > 0, got {epochs!r}")
    if not 0 <= warmup_ratio < 1:
        raise ValueError(f"warmup_ratio must be in [0, 1), got {warmup_ratio!r}")
    rows = to_chat_sft(pairs, tokenizer, max_length=max_length, system=system)
    if lora is not None:
        from peft import get_peft_model

        model = get_peft_model(model, lora)
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    n_steps = steps or max(1, math.ceil(epochs * len(rows) / batch_size))
    warmup = int(warmup_ratio * n_steps)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, n_steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []
    was_training = model.training
    model.train()
    losses = []
    for _ in track(
        range(n_steps), "SFT", total=n_steps, disable=None if progress is None else not progress
    ):
        if len(order) < batch_size:  # epochs: a fresh permutation each pass
            order += torch.randperm(len(rows), generator=gen).tolist()
        idx, order = order[:batch_size], order[batch_size:]
        batch = [rows[i] for i in idx]
        width = max(len(r["input_ids"]) for r in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attn = torch.zeros((len(batch), width), dtype=torch.long)
        for r, row in enumerate(batch):
            n = len(row["input_ids"])
            ids[r, :n] = torch.tensor(row["input_ids"])
            labels[r, :n] = torch.tensor(row["labels"])
            attn[r, :n] = 1
        ids, labels, attn = ids.to(device), labels.to(device), attn.to(device)
        logits = model(input_ids=ids, attention_mask=attn).logits
        loss = masked_lm_loss(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.train(was_training)
    model.eval()
    model.sft_losses = losses
    return model


def to_trl_rows(
    pairs: Sequence[tuple[str, str]], system: str | None = None
) -> list[dict[str, Any]]:
    """TRL's conversational prompt/completion rows (``SFTTrainer`` puts the loss on the completion
    only for this format)."""
    if not pairs:
        raise ValueError("pairs is empty")
    out = []
    for i, item in enumerate(pairs):
        if not (
            isinstance(item, (tuple, list))
            and len(item) == 2
            and all(isinstance(s, str) for s in item)
        ):
            raise TypeError(
                f"pairs[{i}] must be a (query, target) pair of strings, got {item!r:.80}"
            )
        prompt = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": item[0]}]  # fmt: skip
        out.append({"prompt": prompt, "completion": [{"role": "assistant", "content": item[1]}]})
    return out


def sft_trainer(model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], args: Any = None,
                system: str | None = None, **kwargs: Any) -> Any:  # fmt: skip
    """TRL's ``SFTTrainer`` on the same data as :func:`sft` (needs ``icml25[train]``); call
    ``.train()`` on it, under ``accelerate launch`` for several GPUs. ``args``: a
    ``trl.SFTConfig`` (default: an output folder in a temp dir, no reporting)."""
    try:
        import datasets
        from trl import SFTConfig, SFTTrainer
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("sft_trainer needs TRL: pip install 'icml25[train]'") from exc
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; set the model's own template first")
    if args is None:
        import tempfile

        args = SFTConfig(output_dir=tempfile.mkdtemp(prefix="icml25-srg-sft-"), report_to=[])
    data = datasets.Dataset.from_list(to_trl_rows(pairs, system))
    return SFTTrainer(
        model=model, args=args, train_dataset=data, processing_class=tokenizer, **kwargs
    )
