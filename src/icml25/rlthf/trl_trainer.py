"""RLTHF's weighted reward-model training on TRL's ``RewardTrainer`` (extra ``train``), so
``accelerate launch`` (DDP, FSDP, DeepSpeed) trains the paper's LLM reward model unchanged.

A ``weight`` column (human annotation amplification, arXiv:2502.13417 §3.4) rides through TRL's
tokenisation and collation into :func:`~icml25.rlthf.reward_model.weighted_bt_loss`; with unit
weights the loss is TRL's own. A row without weights trains exactly as ``RewardTrainer``.
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from trl import RewardConfig, RewardTrainer
from trl.trainer.reward_trainer import DataCollatorForPreference

from icml25.rlthf.reward_model import weighted_bt_loss

__all__ = ["WeightedPreferenceCollator", "WeightedRewardTrainer", "train_weighted_reward_model"]


@dataclass
class WeightedPreferenceCollator(DataCollatorForPreference):
    """TRL's preference collator plus a ``weight`` tensor (one per pair) when rows carry one."""

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        weights = None
        if examples and "weight" in examples[0]:
            weights = torch.tensor([float(e["weight"]) for e in examples], dtype=torch.float)
            examples = [{k: v for k, v in e.items() if k != "weight"} for e in examples]
        batch = super().torch_call(examples)
        if weights is not None:
            batch["weight"] = weights
        return batch


class WeightedRewardTrainer(RewardTrainer):
    """``trl.RewardTrainer`` whose loss is the weighted Bradley-Terry loss of RLTHF.

    Datasets are TRL's preference rows (``to_trl(..., weights=w)`` of
    :class:`~icml25.rlthf.data.PreferencePairs`) with an optional ``weight`` column; ``margin``
    keeps TRL's meaning. Everything else (PEFT, accelerate, logging) is ``RewardTrainer``'s.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("data_collator") is None:
            proc = kwargs.get("processing_class")
            args_ = kwargs.get("args")
            if proc is None:
                raise ValueError("WeightedRewardTrainer needs processing_class (the tokenizer)")
            kwargs["data_collator"] = WeightedPreferenceCollator(
                pad_token_id=proc.pad_token_id,
                pad_to_multiple_of=getattr(args_, "pad_to_multiple_of", None),
            )
        super().__init__(*args, **kwargs)

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if "weight" not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, "weight"]

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        weights = inputs.pop("weight", None)
        if weights is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        inputs["use_cache"] = False
        margin = inputs.pop("margin", None)
        outputs = model(**inputs)
        r_c, r_r = torch.chunk(outputs.logits.squeeze(-1), chunks=2)
        loss = weighted_bt_loss(r_c, r_r, weights.to(r_c.device, r_c.dtype), margin)
        if self.args.center_rewards_coefficient is not None:
            loss = loss + self.args.center_rewards_coefficient * torch.mean((r_c + r_r) ** 2)
        mode = "train" if self.model.training else "eval"
        with torch.no_grad():
            acc = self.accelerator.gather_for_metrics((r_c > r_r).float().mean()).mean().item()
            self._metrics[mode]["accuracy"].append(acc)
        return (loss, outputs) if return_outputs else loss


def train_weighted_reward_model(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    *,
    lr: float = 1e-5,
    epochs: int = 1,
    batch_size: int = 8,
    grad_accum: int = 4,
    max_length: int | None = 512,
    seed: int = 0,
    output_dir: Any = None,
    **config: Any,
) -> Any:
    """Fine-tune ``model`` on weighted TRL rows with :class:`WeightedRewardTrainer`; returns the
    trained model. TRL drops rows longer than ``max_length``; here nothing is dropped (TRL's cap
    is lifted) and the rows that exceed it are counted in a warning instead, so human-labelled
    pairs never leave the training set silently."""
    import datasets

    if not rows:
        raise ValueError("no training rows")
    if max_length is not None:
        long = sum(
            1
            for r in rows
            for key in ("chosen", "rejected")
            if _n_tokens(tokenizer, r.get("prompt"), r[key]) > max_length
        )
        if long:
            warnings.warn(
                f"{long} of {2 * len(rows)} rendered responses exceed max_length={max_length} "
                "tokens; they are kept whole (TRL would drop the pair)",
                stacklevel=2,
            )
    use_cuda = torch.cuda.is_available() and next(model.parameters()).device.type == "cuda"
    args = RewardConfig(
        output_dir=output_dir or tempfile.mkdtemp(prefix="icml25-rm-"),
        learning_rate=lr,
        num_train_epochs=epochs,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        max_length=None,
        seed=seed,
        bf16=use_cuda and torch.cuda.is_bf16_supported(),
        gradient_checkpointing=False,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        use_cpu=not use_cuda,
        **config,
    )
    trainer = WeightedRewardTrainer(
        model=model, args=args, train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
    )  # fmt: skip
    trainer.train()
    return trainer.model


def _n_tokens(tokenizer: Any, prompt: Any, response: Any) -> int:
    if isinstance(response, list):
        msgs = (prompt or []) + response
        return len(tokenizer.apply_chat_template(msgs, tokenize=True)) if getattr(
            tokenizer, "chat_template", None) else sum(len(tokenizer(m["content"])["input_ids"])
                                                      for m in msgs)  # fmt: skip
    return len(tokenizer((prompt or "") + response)["input_ids"])
