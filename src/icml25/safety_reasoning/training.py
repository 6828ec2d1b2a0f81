"""Supervised fine-tuning for RT and SRG (arXiv:2502.04040, §4.3): token-level cross-entropy on the
target tokens only, ``L = -sum_t log pi(s_t | x, s_<t)`` with ``s = T ⊕ y`` (SRG) or ``s = y`` (RT).

:func:`sft` is a plain, single-process torch loop over any Hugging Face causal LM (full
fine-tuning, or LoRA through PEFT when ``lora`` is a ``peft.LoraConfig``); it refuses to run under
several processes. :func:`sft_trainer` builds TRL's ``SFTTrainer`` on the same rows
(prompt/completion format, loss on the completion only) and is the entry point for several GPUs
(``torchrun``/``accelerate launch``, data-parallel): its loss is the sum over the completion tokens
of all processes and accumulated micro-batches divided by their global count
(``average_tokens_across_devices``), so two processes train as one on the same global batch
(docs/safety_reasoning.md, Several GPUs). Both follow TRL's conventions: the targets are tokenised as
``SFTTrainer`` tokenises them (the chat template's own end of turn,
:func:`~icml25.safety_reasoning.data.to_chat_sft`), and a bf16/fp16 checkpoint trains with float32
master weights (:class:`icml25.llm.MixedPrecision`), so that no update at ``lr=1e-5`` rounds away.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from icml25._validate import as_int, as_real
from icml25.llm.distributed import check_global_batches, refuse_several_processes
from icml25.safety_reasoning.data import to_chat_sft

__all__ = ["masked_lm_loss", "sft", "sft_config", "sft_trainer", "to_trl_rows"]

#: Defaults of :func:`sft` and :func:`sft_config` (the paper reports none; common full-SFT settings
#: for 8B models, docs/safety_reasoning.md, Decisions).
SFT_DEFAULTS = {
    "lr": 1e-5,  # AdamW learning rate
    "epochs": 3.0,
    "batch_size": 8,
    "max_length": 2048,  # tokens per row (prompt + target), cut at the end
    "warmup_ratio": 0.05,  # linear warm-up share of the steps, then cosine decay to 0
    "weight_decay": 0.0,
    "max_grad_norm": 1.0,
    "seed": 0,
}


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
    return F.cross_entropy(
        shift_logits.reshape(-1, shift_logits.shape[-1]),
        shift_labels.reshape(-1),
        ignore_index=-100,
    )


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
    mixed_precision: bool = True,
    seed: int = 0,
    progress: bool | None = None,
) -> Any:
    """Fine-tune ``model`` on ``(query, target)`` pairs with the loss on target tokens only (§4.3).

    Single-process: under ``torchrun`` (``torch.distributed`` initialised with more than one
    process) it raises ``RuntimeError`` rather than train a copy per process on all the data; use
    :func:`sft_trainer` for several GPUs.

    Args:
        pairs: ``(query, target)`` pairs from
            :func:`~icml25.safety_reasoning.data.build_rt_dataset` or
            :func:`~icml25.safety_reasoning.data.build_srg_dataset`, or the
            :class:`~icml25.safety_reasoning.data.SRGExample` list of a synthesis report. Rows are
            tokenised as TRL's ``SFTTrainer`` tokenises them
            (:func:`~icml25.safety_reasoning.data.to_chat_sft`).
        lr, epochs, batch_size: AdamW settings; ``steps`` overrides ``epochs``. Defaults are
            common full-SFT settings for 8B models (the paper's are not reported; our choice,
            docs/safety_reasoning.md).
        max_length: tokens per row; also capped at the model's context
            (:func:`icml25.llm.context_length`). Longer rows are cut at the end, with a warning.
        warmup_ratio: linear warm-up share of the steps, then cosine decay to 0.
        lora: a ``peft.LoraConfig`` to train adapters only (the base weights stay unchanged).
        system: an optional system message in every prompt (not the guidelines: SRG's student
            sees the bare query).
        mixed_precision: for a bf16/fp16 checkpoint (every Llama-3.1 loads in bf16), train
            float32 master weights with the forward under autocast in the checkpoint's dtype
            (:class:`icml25.llm.MixedPrecision`, what ``accelerate``'s mixed precision does).
            ``False`` runs AdamW on the low-precision weights, where most updates at ``lr=1e-5``
            round away (a warning says so). No effect on a float32 model.

    Returns:
        The trained model (the PEFT model when ``lora`` is given), in eval mode, on the device
        it came on. The trained parameters of a bf16/fp16 checkpoint are left in float32 (the
        master weights; ``model.to(torch.bfloat16)`` gives the checkpoint's size back), frozen
        ones keep their dtype. ``model.sft_losses`` holds the loss of every step. Batches follow
        the model's device; padding is on the right. Dropout stays as the model configures it
        (TRL's ``SFTTrainer`` trains in train mode too).
    """
    from icml25.llm import context_length
    from icml25.progress import track

    lr, batch_size, max_length, steps, epochs, warmup_ratio = _check_sft_args(
        model, tokenizer, lr, batch_size, max_length, steps, epochs, warmup_ratio
    )
    ctx = context_length(model)
    rows = to_chat_sft(
        pairs, tokenizer, max_length=min(max_length, ctx or max_length), system=system
    )
    model, mp, params = _trainable(model, lora, mixed_precision, lr)
    n_steps = steps or max(1, math.ceil(epochs * len(rows) / batch_size))
    opt, sched = _adamw_cosine(params, lr, weight_decay, int(warmup_ratio * n_steps), n_steps)
    loop = _Loop.start(model, mp, params, rows, tokenizer, opt, sched, batch_size, seed)
    model.train()
    disable = None if progress is None else not progress
    for _ in track(range(n_steps), "SFT", total=n_steps, disable=disable):
        loop.step()
    model.eval()
    model.sft_losses = loop.losses
    return model


def _check_sft_args(
    model: Any,
    tokenizer: Any,
    lr: Any,
    batch_size: Any,
    max_length: Any,
    steps: Any,
    epochs: Any,
    warmup_ratio: Any,
) -> tuple[float, int, int, int | None, Any, float]:
    """:func:`sft`'s checks before training: a single process, then the arguments, in this order;
    returns ``(lr, batch_size, max_length, steps, epochs, warmup_ratio)`` (``epochs`` is checked
    only when ``steps`` does not override it)."""
    import torch

    refuse_several_processes(
        "sft",
        "icml25.safety_reasoning.sft_trainer (TRL's SFTTrainer, data-parallel under torchrun / accelerate launch)",
    )
    lr = as_real("lr", lr, low=0.0, low_open=True)
    batch_size = as_int("batch_size", batch_size, 1)
    max_length = as_int("max_length", max_length, 2)
    if steps is not None:
        steps = as_int("steps", steps, 1)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"model must be a loaded torch model (e.g. icml25.llm.load_model(path)), "
            f"got {type(model).__name__}: {model!r:.60}"
        )
    if tokenizer is None:
        raise ValueError("tokenizer is None: pass the model's tokenizer (with its chat template)")
    if steps is None:
        epochs = as_real("epochs", epochs, low=0.0, low_open=True)
    warmup_ratio = as_real("warmup_ratio", warmup_ratio, low=0.0, high=1.0, high_open=True)
    return lr, batch_size, max_length, steps, epochs, warmup_ratio


def _trainable(model: Any, lora: Any, mixed_precision: bool, lr: float) -> tuple[Any, Any, list]:
    """The model to train (wrapped by PEFT when ``lora`` is given), its
    :class:`icml25.llm.MixedPrecision` and its trainable parameters. Warns, at the caller of
    :func:`sft`, when AdamW would update bf16/fp16 parameters in place."""
    import torch

    from icml25.llm import MixedPrecision

    if lora is not None:
        from peft import get_peft_model

        model = get_peft_model(model, lora)
    # fp32 master weights before the optimizer is built: it must hold the float32 parameters
    mp = MixedPrecision.prepare(model, enabled=bool(mixed_precision))
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameter (requires_grad is False everywhere)")
    low = [p for p in params if p.dtype in (torch.bfloat16, torch.float16)]
    if low:
        import warnings

        warnings.warn(
            f"mixed_precision=False: AdamW updates {len(low)} {low[0].dtype} parameters in place; "
            f"at lr={lr} most updates round away. Use mixed_precision=True (float32 master weights)",
            stacklevel=3,  # the user's call of sft
        )
    return model, mp, params


def _adamw_cosine(
    params: list[Any], lr: float, weight_decay: float, warmup: int, n_steps: int
) -> tuple[Any, Any]:
    """AdamW and its schedule: a linear warm-up over ``warmup`` steps, then cosine decay to 0 at
    ``n_steps``."""
    import torch

    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, n_steps - warmup)))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_at)


@dataclass
class _Loop:
    """:func:`sft`'s training loop: the model and its trainable parameters, AdamW and its
    schedule, the tokenised rows, the order they are drawn in (a fresh seeded permutation each
    pass) and the loss of every step so far."""

    model: Any
    mp: Any  # icml25.llm.MixedPrecision
    params: list[Any]
    rows: list[dict[str, list[int]]]
    batch_size: int
    opt: Any  # torch.optim.AdamW
    sched: Any  # linear warm-up, then cosine decay to 0
    gen: Any  # torch.Generator of the row order
    pad: int
    device: Any
    order: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    @classmethod
    def start(cls, model, mp, params, rows, tokenizer, opt, sched, batch_size, seed) -> _Loop:
        import torch

        device = next(model.parameters()).device  # the embedding's, also under a device_map
        pad = next(
            (t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0
        )  # padded positions have attention 0 and label -100: any id will do
        gen = torch.Generator().manual_seed(seed)
        return cls(model, mp, params, rows, batch_size, opt, sched, gen, pad, device)

    def batch(self) -> tuple[list[int], Any, Any, Any]:
        """The next batch: its row indices, and ids, labels and attention mask padded on the
        right, on the model's device."""
        import torch

        if len(self.order) < self.batch_size:  # epochs: a fresh permutation each pass
            self.order += torch.randperm(len(self.rows), generator=self.gen).tolist()
        idx, self.order = self.order[: self.batch_size], self.order[self.batch_size :]
        batch = [self.rows[i] for i in idx]
        width = max(len(r["input_ids"]) for r in batch)
        ids = torch.full((len(batch), width), self.pad, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        attn = torch.zeros((len(batch), width), dtype=torch.long)
        for r, row in enumerate(batch):
            n = len(row["input_ids"])
            ids[r, :n] = torch.tensor(row["input_ids"])
            labels[r, :n] = torch.tensor(row["labels"])
            attn[r, :n] = 1
        return idx, ids.to(self.device), labels.to(self.device), attn.to(self.device)

    def step(self) -> None:
        """One AdamW step on the next batch: the loss on the target tokens (§4.3), the gradient
        clipped at ``SFT_DEFAULTS["max_grad_norm"]``, the schedule advanced."""
        import torch

        from icml25.llm import check_finite_loss

        idx, ids, labels, attn = self.batch()
        with self.mp.autocast():
            logits = self.model(input_ids=ids, attention_mask=attn).logits
        loss = masked_lm_loss(logits, labels)  # float32
        check_finite_loss(loss, f"sft step {len(self.losses)} (rows {idx[:4]})")
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, SFT_DEFAULTS["max_grad_norm"])
        self.opt.step()
        self.sched.step()
        self.losses.append(float(loss.detach()))


def to_trl_rows(pairs: Sequence[Any], system: str | None = None) -> list[dict[str, Any]]:
    """TRL's conversational prompt/completion rows (``SFTTrainer`` puts the loss on the completion
    only for this format). ``pairs``: ``(query, target)`` string pairs or
    :class:`~icml25.safety_reasoning.data.SRGExample` objects (target in ``<think>`` tags)."""
    from icml25.safety_reasoning.data import SRGExample

    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise TypeError(
            f"pairs must be a list of (query, target) pairs or SRGExample, got {type(pairs).__name__}"
        )
    if not pairs:
        raise ValueError("pairs is empty")
    out = []
    for i, item in enumerate(pairs):
        if isinstance(item, SRGExample):
            item = (item.query.text, item.target())
        if not (
            isinstance(item, (tuple, list))
            and len(item) == 2
            and all(isinstance(s, str) for s in item)
        ):
            raise TypeError(
                f"pairs[{i}] must be a (query, target) pair of strings, got {item!r:.80}"
            )
        prompt = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": item[0]}
        ]
        out.append({"prompt": prompt, "completion": [{"role": "assistant", "content": item[1]}]})
    return out


def _bf16_supported() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def sft_config(output_dir: str | None = None, **overrides: Any) -> Any:
    """The ``trl.SFTConfig`` :func:`sft_trainer` uses when ``args=None``: :func:`sft`'s defaults
    (:data:`SFT_DEFAULTS`: lr 1e-5, 3 epochs, batch 8 per device, 5 % linear warm-up then cosine
    to 0, weight decay 0, gradient clip 1.0, ``max_length=2048``, seed 0), no reporting, no
    checkpoints saved during training (``save_strategy="no"``; call ``trainer.save_model(path)``),
    ``bf16`` only where a GPU supports it (so it runs on a CPU machine), and the output folder in
    a fresh temp dir unless ``output_dir`` is given (nothing is written to the working directory).
    ``average_tokens_across_devices=True`` (``transformers``' default, set explicitly): under
    several processes the loss divides the local sum over completion tokens by the token count of
    the whole step (all processes and accumulated micro-batches, ``num_items_in_batch``), so the
    step is that of one process on the global batch; with ``False`` each process divides by its
    own count and ranks with few tokens weigh as much as ranks with many.
    ``overrides`` replace any field (``max_steps=100``, ``eval_strategy="steps"``...)."""
    import tempfile

    from trl import SFTConfig

    d = SFT_DEFAULTS
    kw: dict[str, Any] = {
        "output_dir": output_dir or tempfile.mkdtemp(prefix="icml25-srg-sft-"),
        "learning_rate": d["lr"],
        "num_train_epochs": d["epochs"],
        "per_device_train_batch_size": d["batch_size"],
        "per_device_eval_batch_size": d["batch_size"],
        "warmup_steps": d["warmup_ratio"],  # a float in [0, 1) is a ratio of the total steps
        "lr_scheduler_type": "cosine",
        "weight_decay": d["weight_decay"],
        "max_grad_norm": d["max_grad_norm"],
        "max_length": d["max_length"],
        "seed": d["seed"],
        "average_tokens_across_devices": True,  # the global-batch token mean under DDP
        "report_to": "none",
        "save_strategy": "no",
        "bf16": _bf16_supported(),
        "fp16": False,
    }
    kw.update(overrides)
    return SFTConfig(**kw)


def sft_trainer(
    model: Any,
    tokenizer: Any,
    pairs: Sequence[Any],
    args: Any = None,
    system: str | None = None,
    *,
    eval_dataset: Any = None,
    mixed_precision: bool = True,
    **kwargs: Any,
) -> Any:
    """TRL's ``SFTTrainer`` on the same rows as :func:`sft` (needs ``icml25[train]``); call
    ``.train()`` on it and ``.evaluate()``. The entry point for several GPUs: run the script
    under ``torchrun --nproc_per_node N`` (or ``accelerate launch --num_processes N``); each
    process takes its share of every global batch and, with :func:`sft_config`, the loss is the
    mean over the completion tokens of the whole global batch (two gloo processes train to the
    weights of one process on the same batch: tests/safety_reasoning/test_distributed.py). Call
    ``trainer.save_model(path)`` on every process; the main process writes the checkpoint.

    Args:
        model: a loaded causal LM (``icml25.llm.load_model(path)``) or a PEFT model.
        pairs / eval_dataset: ``(query, target)`` pairs or ``SRGExample`` objects, turned into
            conversational prompt/completion rows (:func:`to_trl_rows`); TRL tokenises them into
            the ids and labels :func:`~icml25.safety_reasoning.data.to_chat_sft` builds.
            ``eval_dataset`` may also be a ready ``datasets.Dataset`` (or a dict of them).
        args: a ``trl.SFTConfig``; ``None`` gives :func:`sft_config` (our :func:`sft` defaults:
            lr 1e-5, 3 epochs, batch 8, 5 % warm-up then cosine, clip 1.0, ``max_length=2048``; a
            temp output folder, no reporting, no checkpoints, ``bf16`` only on a GPU that supports
            it; with ``eval_dataset``, evaluation at the end of every epoch).
        system: a system message in every prompt.
        mixed_precision: upcast a bf16/fp16 model's trainable parameters to float32 (master
            weights, as :func:`sft` does); with ``bf16=True`` the ``Trainer`` runs the forward
            under autocast. Without it, the ``Trainer``'s AdamW updates the bf16 weights in place.
            Skipped when a ``peft_config`` is passed (TRL then wraps the model and PEFT keeps its
            adapters in float32).
        **kwargs: more ``SFTTrainer`` arguments (``peft_config``, ``callbacks``...).
    """
    try:
        import datasets
        from trl import SFTTrainer
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("sft_trainer needs TRL: pip install 'icml25[train]'") from exc
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; set the model's own template first")
    if args is None:
        args = sft_config(**({"eval_strategy": "epoch"} if eval_dataset is not None else {}))
    data = datasets.Dataset.from_list(to_trl_rows(pairs, system))
    if eval_dataset is not None and not isinstance(eval_dataset, (datasets.Dataset, dict)):
        eval_dataset = datasets.Dataset.from_list(to_trl_rows(eval_dataset, system))
    if mixed_precision and "peft_config" not in kwargs and not isinstance(model, str):
        from icml25.llm import MixedPrecision

        MixedPrecision.prepare(model)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=data,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        **kwargs,
    )
    check_global_batches(trainer)
    return trainer
