"""The ``transformers.Trainer`` path of the DPO stages on a simplex-bottleneck LM
(arXiv:2412.16475, Sec. 5; the two-stage estimator of Sec. 4 with DPO as its preference loss).

``trl.DPOTrainer`` cannot wrap a :class:`~icml25.proxy_feedback.llm.SimplexBottleneckLM`: it
asks the model for fused log-probabilities (``fused_lm_head=True``) that only a ``transformers``
causal LM computes. :class:`SimplexDPOTrainer` is a ``Trainer`` whose loss is exactly
:func:`~icml25.proxy_feedback.llm.dpo_stage`'s (sigmoid DPO, Rafailov et al. 2023, Eq. 7, with
TRL's conventions), so the stages get the ecosystem's loop: gradient accumulation, ``accelerate``
devices and processes, evaluation, logging and checkpoints.

It is the data-parallel entry point of the paper's LLM path (``torchrun --nproc_per_node 8
train.py`` or ``accelerate launch --num_processes 8 train.py``): the DPO loss of an optimiser
step is the mean over *all* its pairs, summed over the accumulated micro-batches and the
processes (:class:`icml25.llm.distributed.GlobalBatchNormalisation`), so ranks holding different
numbers of pairs (a last partial batch) weigh each pair the same as one process on the whole
batch would; the logged rewards are sums over the processes divided by their pair count.

    trainer = SimplexDPOTrainer(model, ref_model=None, train_dataset=expert_pairs,
                                eval_dataset=heldout_pairs, processing_class=tokenizer)
    trainer.train(); trainer.evaluate()["eval_loss"]

``args=None`` gives :class:`SimplexDPOConfig`'s defaults: those of ``dpo_stage`` (our choices,
docs/proxy_feedback.md "Decisions"), a fresh temporary ``output_dir`` and float32 on CPU.
"""

from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import transformers
from torch import Tensor, nn

from icml25._validate import as_real
from icml25.llm.distributed import GlobalBatchNormalisation, all_reduce_sum
from icml25.llm.training import MixedPrecision, dropout_disabled
from icml25.preference import dpo_loss, dpo_losses
from icml25.proxy_feedback.llm import (
    SimplexBottleneckLM,
    _trainable_parameters,
    encode_pairs,
    pair_logprobs,
)

__all__ = ["PreferenceCollator", "SimplexDPOConfig", "SimplexDPOTrainer"]


@dataclass
class SimplexDPOConfig(transformers.TrainingArguments):
    """``TrainingArguments`` with ``dpo_stage``'s defaults and DPO's three settings.

    DPO settings (names as in ``trl.DPOConfig``, which :class:`SimplexDPOTrainer` also accepts):
    ``beta`` (0.1, DPO's and TRL's default), ``max_length`` (256 tokens per prompt + completion,
    ``dpo_stage``'s), ``disable_dropout`` (True, TRL's). Changed ``Trainer`` defaults, all to
    ``dpo_stage``'s: ``learning_rate=1e-2`` (the adapter stage; use 1e-3 with
    ``trainable="all"`` as our stage 1 does), ``per_device_train_batch_size=16``, ``max_steps=100``,
    constant learning rate, no gradient clipping (``max_grad_norm=0``), ``seed=0``; AdamW without
    weight decay is ``dpo_stage``'s Adam. ``output_dir=None`` is a new temporary folder (nothing is
    written to the working directory); ``save_strategy="no"``, ``report_to="none"``,
    ``logging_steps=10`` and ``remove_unused_columns=False`` (the collator reads the text
    columns). ``bf16`` stays off: a bf16 checkpoint trains with float32 master weights anyway.
    """

    beta: float = 0.1  # DPO's and TRL's default
    max_length: int = 256  # dpo_stage's default
    disable_dropout: bool = True  # TRL's DPOConfig default
    learning_rate: float = 1e-2  # dpo_stage's default (the adapter stage)
    per_device_train_batch_size: int = 16  # dpo_stage's batch_size
    per_device_eval_batch_size: int = 16
    max_steps: int = 100  # dpo_stage's steps
    lr_scheduler_type: str = "constant"  # dpo_stage keeps the learning rate fixed
    max_grad_norm: float = 0.0  # dpo_stage does not clip
    seed: int = 0
    logging_steps: float = 10
    save_strategy: str = "no"
    report_to: Any = "none"
    remove_unused_columns: bool = False  # the collator tokenises prompt/chosen/rejected

    def __post_init__(self) -> None:
        if self.output_dir is None:
            self.output_dir = tempfile.mkdtemp(prefix="simplex_dpo_")
        self.beta = as_real("beta", self.beta, low=0, low_open=True)
        super().__post_init__()


class PreferenceCollator:
    """Rows with ``prompt``/``chosen``/``rejected`` (strings or chat messages) -> an
    :func:`~icml25.proxy_feedback.llm.encode_pairs` batch (TRL's tokenisation)."""

    def __init__(self, tokenizer: Any, max_length: int = 256) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length

    def __call__(self, rows: Sequence[Any]) -> dict[str, Tensor]:
        return encode_pairs(self.tokenizer, list(rows), self.max_length)


class SimplexDPOTrainer(GlobalBatchNormalisation, transformers.Trainer):
    """A ``transformers.Trainer`` for the DPO stages of a :class:`SimplexBottleneckLM` (or, for
    the baselines, any causal LM with ``trainable="all"``).

    Args:
        model: the policy; the parameters ``trainable`` names get ``requires_grad=True``, every
            other parameter ``False`` (kept after training). On a bf16/fp16 checkpoint the
            trainable ones are upcast to float32 master weights and stay float32, and the forward
            runs under autocast in the checkpoint's dtype (:class:`icml25.llm.MixedPrecision`).
        ref_model: the DPO reference, run without gradients in eval mode; ``None`` is a uniform
            reference (its log-probs cancel), the paper's synthetic setting with ``β = 1``.
        args: :class:`SimplexDPOConfig` (``None``: its defaults), or any ``TrainingArguments``
            with ``beta``/``max_length``/``disable_dropout`` (``trl.DPOConfig``); missing ones take
            :class:`SimplexDPOConfig`'s defaults.
        train_dataset, eval_dataset: preference rows (a ``datasets.Dataset`` or a list of dicts)
            with ``prompt``, ``chosen``, ``rejected``: strings, or lists of chat messages rendered
            by the tokenizer's chat template.
        processing_class: the tokenizer (required).
        trainable: ``"adapter"`` (stage 2, default), ``"all"`` (stage 1: everything but the
            adapter) or a list of the model's parameters, as in ``dpo_stage``.

    The loss of a batch equals ``dpo_stage``'s on the same pairs; in training it is the mean over
    the pairs of the whole optimiser step (all accumulated micro-batches, all processes), so two
    processes equal one on the same global batch. ``evaluate()`` returns ``eval_loss`` and the
    mean ``eval_rewards/{chosen,rejected,margins,accuracies}`` over the pairs of all processes;
    training logs the same without the prefix. ``save_model`` writes a ``SimplexBottleneckLM``'s
    state dict as ``model.safetensors`` (tied weights once; reload with
    ``safetensors.torch.load_model``); under several processes only the main one writes.
    """

    def __init__(
        self,
        model: nn.Module,
        ref_model: nn.Module | None = None,
        args: transformers.TrainingArguments | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        *,
        trainable: str | Sequence[nn.Parameter] = "adapter",
        data_collator: Any = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"model must be an nn.Module (a SimplexBottleneckLM or a causal LM), "
                f"got {type(model).__name__}"
            )
        if ref_model is not None and not isinstance(ref_model, nn.Module):
            raise TypeError(
                f"ref_model must be an nn.Module or None, got {type(ref_model).__name__}"
            )
        if args is None:
            args = SimplexDPOConfig()
        elif not isinstance(args, transformers.TrainingArguments):
            raise TypeError(
                f"args must be a SimplexDPOConfig (TrainingArguments) or None, got "
                f"{type(args).__name__}"
            )
        if processing_class is None:
            raise ValueError("processing_class (the tokenizer) is required: the pairs are text")
        self.beta = float(getattr(args, "beta", SimplexDPOConfig.beta))
        if not self.beta > 0:
            raise ValueError(f"beta must be > 0, got {self.beta!r}")
        self.max_length = getattr(args, "max_length", None) or SimplexDPOConfig.max_length
        self.disable_dropout = bool(getattr(args, "disable_dropout", True))
        params = _trainable_parameters(model, trainable)
        pid = {id(p) for p in params}
        for p in model.parameters():
            p.requires_grad_(id(p) in pid)
        self._mp = MixedPrecision.prepare(model)  # before Trainer builds the optimizer
        if data_collator is None:
            data_collator = PreferenceCollator(processing_class, self.max_length)
        super().__init__(
            model=model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )
        if ref_model is not None and self.place_model_on_device:
            ref_model = ref_model.to(self.args.device)
        self.ref_model = ref_model
        # per mode: sums over pairs of every process since the last log, and the pair count
        self._metrics: dict[str, dict[str, float]] = {
            "train": defaultdict(float),
            "eval": defaultdict(float),
        }

    def loss_denominator(self, batch: dict[str, Tensor]) -> int:
        """The number of preference pairs in one collated micro-batch (the DPO loss is a mean over
        pairs, Rafailov et al. 2023, Eq. 7): half the rows of its ``input_ids`` (the chosen rows,
        then the rejected)."""
        return int(batch["input_ids"].shape[0]) // 2

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, Tensor],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Sigmoid DPO on an :func:`~icml25.proxy_feedback.llm.encode_pairs` batch: the
        policy's summed completion log-probs (dropout off by default) against the reference's.
        With ``num_items_in_batch`` (training: the pair count of the optimiser step over all
        micro-batches and processes) the loss is this batch's *sum* over pairs divided by it (times
        the process count, which the engines' gradient averaging divides out again); without it
        (evaluation, a direct call) the mean over this batch's pairs."""
        mode = "train" if model.training else "eval"
        with dropout_disabled(model, enabled=self.disable_dropout), self._mp.autocast():
            c, r = pair_logprobs(model, inputs)
        if self.ref_model is None:
            ref_c = ref_r = torch.zeros_like(c)
        else:
            with torch.no_grad(), dropout_disabled(self.ref_model):
                ref_c, ref_r = pair_logprobs(self.ref_model, inputs)
        ref_c, ref_r = ref_c.to(c.device), ref_r.to(c.device)
        out = dpo_loss(c, r, ref_c, ref_r, self.beta)
        loss = out.loss
        if num_items_in_batch is not None:
            losses, _ = dpo_losses(c, r, ref_c, ref_r, self.beta)
            loss = self.global_mean(losses.sum(), num_items_in_batch)
        cw, cl = out.chosen_rewards, out.rejected_rewards
        terms = (cw, cl, cw - cl, (cw > cl).double(), torch.ones_like(cw))
        # summed over the processes: every process logs the metrics of all pairs (a padded last
        # evaluation batch of accelerate's even_batches counts its repeated pairs)
        sums = all_reduce_sum(torch.stack([t.double().sum() for t in terms])).tolist()
        m = self._metrics[mode]
        for k, v in zip(("chosen", "rejected", "margins", "accuracies", "n"), sums):
            m[k] += v
        if return_outputs:
            return loss, {"chosen_rewards": cw, "rejected_rewards": cl}
        return loss

    def prediction_step(
        self,
        model: nn.Module,
        inputs: dict[str, Tensor],
        prediction_loss_only: bool,
        ignore_keys: list[str] | None = None,
    ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
        """The DPO loss without gradients; predictions are the ``(N, 2)`` chosen and rejected
        rewards, labels zeros (the chosen is column 0)."""
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            loss, out = self.compute_loss(model, inputs, return_outputs=True)
        loss = loss.detach()
        if prediction_loss_only:
            return loss, None, None
        logits = torch.stack([out["chosen_rewards"], out["rejected_rewards"]], 1)
        return loss, logits, torch.zeros(logits.shape[0], device=logits.device)

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "eval" if any(k.startswith("eval_") for k in logs) else "train"
        m = self._metrics[mode]
        if m["n"] > 0:
            for k in ("chosen", "rejected", "margins", "accuracies"):
                logs[f"{'eval_' if mode == 'eval' else ''}rewards/{k}"] = m[k] / m["n"]
        m.clear()
        super().log(logs, start_time)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        if not isinstance(self.model, SimplexBottleneckLM):
            return super()._save(output_dir, state_dict)
        import safetensors.torch

        output_dir = output_dir if output_dir is not None else self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        # save_model, not save_file: the body's tied embeddings are one tensor stored once
        safetensors.torch.save_model(self.model, os.path.join(output_dir, "model.safetensors"))
        self.processing_class.save_pretrained(output_dir)
        torch.save(self.args, os.path.join(output_dir, transformers.trainer.TRAINING_ARGS_NAME))
