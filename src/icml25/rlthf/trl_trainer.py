"""RLTHF's weighted reward-model training on TRL's ``RewardTrainer`` (extra ``train``), so
``accelerate launch`` (DDP, FSDP, DeepSpeed) trains the paper's LLM reward model unchanged.

A ``weight`` column (human annotation amplification, arXiv:2502.13417 §3.4) rides through TRL's
tokenisation and collation into :func:`~icml25.rlthf.losses.weighted_bt_loss`; with unit
weights (or no ``weight`` column) the loss is TRL's own. A training step's loss is the weighted
mean over its whole global batch: the weighted terms of every accumulated micro-batch on every
process, divided by the weights summed over all of them
(:class:`icml25.llm.distributed.GlobalBatchNormalisation`). Dividing each micro-batch by its own
weights instead would make the step a mean of per-rank ratios, in which a rank holding only
amplified human pairs counts as much as one holding only AI-labelled pairs.

Settings when no ``args`` are given (:func:`reward_config`, also the defaults of
:func:`train_weighted_reward_model`): the paper does not report its reward-model
hyper-parameters, so these are ours (docs/rlthf.md, "Decisions"): AdamW ``learning_rate=1e-5``,
``num_train_epochs=1``, ``per_device_train_batch_size=8``, ``gradient_accumulation_steps=4``,
``max_length=None`` (TRL's cap would drop long pairs, human-labelled ones included), TRL's
``disable_dropout=True``; the output folder is a fresh temporary directory (nothing is written in
the working directory), checkpoints and reports are off, and bf16 mixed precision is on only on a
GPU that supports it (CPU runs train in float32).
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from trl import RewardConfig, RewardTrainer
from trl.trainer.reward_trainer import DataCollatorForPreference

from icml25._validate import as_real
from icml25.llm.distributed import GlobalBatchNormalisation
from icml25.llm.training import MixedPrecision
from icml25.rlthf.losses import weighted_bt_loss

__all__ = [
    "REWARD_DEFAULTS",
    "WeightedPreferenceCollator",
    "WeightedRewardTrainer",
    "build_weighted_reward_trainer",
    "reward_config",
    "train_weighted_reward_model",
]

#: ``RewardConfig`` fields when ``args`` is not given (ours: the paper reports none; docs/rlthf.md).
REWARD_DEFAULTS: dict[str, Any] = {
    "learning_rate": 1e-5,  # common reward-model fine-tuning rate
    "num_train_epochs": 1,  # one pass, as TRL's reward-model examples
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 4,  # 32 pairs per update
    "max_length": None,  # keep long pairs (TRL would drop them, human-labelled ones included)
    # small models on a CPU: recomputation only costs time (TRL's default is True);
    # transformers >= 5.20 renamed the field
    (
        "activation_checkpointing"
        if "activation_checkpointing" in RewardConfig.__dataclass_fields__
        else "gradient_checkpointing"
    ): False,
    "report_to": [],
    "save_strategy": "no",  # the trained model is returned, not checkpointed
}


def reward_config(
    output_dir: Any = None, *, use_cpu: bool | None = None, **overrides: Any
) -> RewardConfig:
    """A ``trl.RewardConfig`` with :data:`REWARD_DEFAULTS` (any field overridable).

    ``output_dir``: default a fresh ``tempfile.mkdtemp`` folder (never the working directory).
    ``use_cpu``: default ``True`` when torch sees no CUDA device. bf16 mixed precision is on
    only on a CUDA device that supports it (TRL's own default, ``bf16=True``, fails on a CPU
    machine). Returns the config."""
    if use_cpu is None:
        use_cpu = not torch.cuda.is_available()
    gpu_bf16 = not use_cpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    fields = {**REWARD_DEFAULTS, "bf16": gpu_bf16, "use_cpu": use_cpu, **overrides}
    if fields.get("fp16"):
        fields["bf16"] = overrides.get("bf16", False)
    out = output_dir if output_dir is not None else tempfile.mkdtemp(prefix="icml25-rm-")
    return RewardConfig(output_dir=str(out), **fields)


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


def _check_weights(name: str, ds: Any) -> None:
    """Every ``weight`` of a dataset finite and >= 0, checked before training: a NaN weight
    otherwise surfaces mid-``train()`` without its row."""

    cols = getattr(ds, "column_names", None) or []
    if "weight" not in cols:
        return
    for i, w in enumerate(ds["weight"]):
        as_real(f"{name} row {i}: weight", w, low=0)


class WeightedRewardTrainer(GlobalBatchNormalisation, RewardTrainer):
    """``trl.RewardTrainer`` whose loss is the weighted Bradley-Terry loss of RLTHF (§3.4).

    Datasets are TRL's preference rows (``to_trl(..., weights=w)`` of
    :class:`~icml25.rlthf.data.PreferencePairs`) with an optional ``weight`` column, for
    ``train_dataset`` and ``eval_dataset`` alike (``evaluate()`` reports the weighted loss);
    ``margin`` keeps TRL's meaning. ``args=None`` gives :func:`reward_config`'s settings
    (lr 1e-5, 1 epoch, batch 8 x 4 accumulation, no length cap, a temporary output folder,
    float32 on a CPU machine) instead of TRL's. Everything else (PEFT, accelerate, logging) is
    ``RewardTrainer``'s.

    Data-parallel: under ``torchrun``/``accelerate launch`` (DDP; DeepSpeed and FSDP through
    ``RewardConfig``) a training step is the weighted Bradley-Terry loss over the global batch
    (all processes and accumulated micro-batches), so two processes with batch ``b`` train the
    same weights as one process with batch ``2b`` (tests/rlthf/test_distributed.py).
    ``center_rewards_coefficient``'s term stays TRL's per-micro-batch mean of pairs.
    Evaluation reports the mean of the batches' weighted losses, as TRL does.
    """

    def __init__(
        self,
        model: Any,
        args: RewardConfig | None = None,
        data_collator: Any = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        **kwargs: Any,
    ) -> None:
        # float32 master weights for a bf16/fp16 checkpoint (the Trainer's AdamW would update
        # the low-precision weights in place); with bf16=True the Trainer autocasts the forward
        if isinstance(model, torch.nn.Module) and kwargs.get("peft_config") is None:
            MixedPrecision.prepare(model)
        if args is None:
            args = reward_config()
        for name, ds in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            _check_weights(name, ds)
        if data_collator is None:
            if processing_class is None:
                raise ValueError("WeightedRewardTrainer needs processing_class (the tokenizer)")
            data_collator = WeightedPreferenceCollator(
                pad_token_id=_pad_id(processing_class, args),
                pad_to_multiple_of=args.pad_to_multiple_of,
            )
        super().__init__(
            model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            **kwargs,
        )

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if "weight" not in self._signature_columns:
            self._signature_columns = [*self._signature_columns, "weight"]

    #: a step whose pairs all weigh 0 has loss 0 (every weighted term is an exact 0), as a
    #: weight-0 pair contributes nothing in any other step
    empty_step_is_zero = True

    def loss_denominator(self, batch: dict[str, Any]) -> Any:
        """The weight of one collated micro-batch (its number of pairs without weights)."""
        if "weight" in batch:
            return batch["weight"].sum()
        return torch.tensor(float(batch["input_ids"].shape[0] // 2))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        weights = inputs.pop("weight", None)
        mode = "train" if self.model.training else "eval"
        margin = inputs.pop("margin", None)
        outputs = model(
            input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], use_cache=False
        )
        r_c, r_r = torch.chunk(outputs.logits.squeeze(-1), chunks=2)
        if weights is not None:
            weights = weights.to(r_c.device, r_c.dtype)
        if num_items_in_batch is None:  # evaluation: this batch's weighted mean
            loss = weighted_bt_loss(r_c, r_r, weights, margin)
        else:  # training: this batch's share of the global weighted mean
            loss = self.global_mean(
                weighted_bt_loss(r_c, r_r, weights, margin, reduction="sum"), num_items_in_batch
            )
        if self.args.center_rewards_coefficient is not None:
            center = self.args.center_rewards_coefficient * torch.mean((r_c + r_r) ** 2)
            if num_items_in_batch is not None:  # TRL's scaling of a per-batch mean
                center = center / self.current_gradient_accumulation_steps
            loss = loss + center
        # the metrics RewardTrainer.compute_loss logs, so both paths report the same keys
        if mode == "train":
            n_tok = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
            self._total_train_tokens += n_tok // self._tp_size
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        with torch.no_grad():
            all_rewards = self.accelerator.gather(outputs.logits)
            self._metrics[mode]["min_reward"].append(all_rewards.min().item())
            self._metrics[mode]["mean_reward"].append(all_rewards.mean().item())
            self._metrics[mode]["max_reward"].append(all_rewards.max().item())
            acc = self.accelerator.gather_for_metrics((r_c > r_r).float().mean()).mean().item()
            self._metrics[mode]["accuracy"].append(acc)
            gap = self.accelerator.gather_for_metrics((r_c - r_r).mean()).mean().item()
            self._metrics[mode]["margin"].append(gap)
        return (loss, outputs) if return_outputs else loss


def _pad_id(tokenizer: Any, args: Any) -> int:
    """The pad id RewardTrainer will use (``args.pad_token``, the tokenizer's pad token, else its
    eos token), resolved before ``RewardTrainer.__init__`` sets it on the tokenizer."""
    token = getattr(args, "pad_token", None) or tokenizer.pad_token or tokenizer.eos_token
    if token is None:
        raise ValueError("the tokenizer has neither a pad token nor an eos token to pad with")
    return tokenizer.convert_tokens_to_ids(token)


def _n_tokens(tokenizer: Any, prompt: Any, response: Any) -> int:
    """Length of one rendered response as ``RewardTrainer`` tokenises it: chat rows (lists of
    messages) through the chat template, prompt and response together; text rows as
    ``prompt + response`` with the eos token appended."""
    if isinstance(response, list):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "conversational rows need a tokenizer with a chat template (TRL renders them with "
                "apply_chat_template); set tokenizer.chat_template"
            )
        # transformers 5 returns a BatchEncoding here even without return_dict: its len() would
        # be the number of keys, not of tokens
        out = tokenizer.apply_chat_template(
            list(prompt or []) + list(response), tokenize=True, return_dict=True
        )
        return len(out["input_ids"])
    eos = tokenizer.eos_token or ""
    text = response if response.endswith(eos) else response + eos
    return len(tokenizer(text=(prompt or "") + text)["input_ids"])


def _check_lengths(model: Any, tokenizer: Any, rows: list[dict], max_length: int | None) -> int:
    """How many rendered responses exceed ``max_length`` (warned about by the caller);
    ``ValueError`` naming the first row longer than the model's context (the model cannot read
    it: positions past the context are an index error or meaningless)."""
    from icml25.llm import context_length

    limit = context_length(model)
    n_long = 0
    for i, row in enumerate(rows):
        for key in ("chosen", "rejected"):
            n = _n_tokens(tokenizer, row.get("prompt"), row[key])
            if limit is not None and n > limit:
                raise ValueError(
                    f"row {i}: prompt + {key} has {n} tokens, more than the model's context of "
                    f"{limit} positions; shorten or drop the row"
                )
            n_long += max_length is not None and n > max_length
    return n_long


def build_weighted_reward_trainer(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    *,
    eval_rows: list[dict[str, Any]] | None = None,
    lr: float = 1e-5,
    epochs: int = 1,
    batch_size: int = 8,
    grad_accum: int = 4,
    max_length: int | None = 512,
    seed: int = 0,
    output_dir: Any = None,
    **config: Any,
) -> WeightedRewardTrainer:
    """A :class:`WeightedRewardTrainer` on ``rows`` (and ``eval_rows``, for ``evaluate()``),
    ready to ``train()``.

    TRL drops rows longer than ``max_length``; here nothing is dropped (TRL's cap is lifted) and
    the responses that exceed it are counted in a warning instead, so human-labelled pairs
    never leave the training set silently; a row longer than the model's context is a
    ``ValueError``. A bf16/fp16 ``model`` trains with float32 master weights (trainable
    parameters upcast in place, :class:`icml25.llm.MixedPrecision`) and the forward under
    autocast in the checkpoint's dtype (``bf16=True``/``fp16=True`` of the Trainer). The model
    trains where it is: on the GPU when it is on one, else on the CPU. ``**config``: more
    ``RewardConfig`` fields."""
    import datasets

    if not rows:
        raise ValueError("no training rows")
    long = _check_lengths(model, tokenizer, rows, max_length)
    if eval_rows:
        long += _check_lengths(model, tokenizer, eval_rows, max_length)
    if long:
        total = 2 * (len(rows) + len(eval_rows or []))
        warnings.warn(
            f"{long} of {total} rendered responses exceed max_length={max_length} tokens; they "
            "are kept whole (TRL would drop the pair)",
            stacklevel=3,
        )
    device_type = next(model.parameters()).device.type
    use_cuda = torch.cuda.is_available() and device_type == "cuda"
    mp = MixedPrecision.prepare(model)
    precision = {}
    if mp.compute_dtype == torch.bfloat16:
        precision = {"bf16": True}
    elif mp.compute_dtype == torch.float16:  # CPU autocast has no fp16 training: float32 there
        precision = {"bf16": False, "fp16": use_cuda}
    args = reward_config(
        output_dir,
        use_cpu=not use_cuda,
        learning_rate=lr,
        num_train_epochs=epochs,
        per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        seed=seed,
        logging_strategy="no",
        disable_tqdm=True,
        **{**precision, **config},
    )
    return WeightedRewardTrainer(
        model=model,
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        eval_dataset=datasets.Dataset.from_list(eval_rows) if eval_rows else None,
        processing_class=tokenizer,
    )


def train_weighted_reward_model(
    model: Any, tokenizer: Any, rows: list[dict[str, Any]], **kwargs: Any
) -> Any:
    """Fine-tune ``model`` on weighted TRL rows with :class:`WeightedRewardTrainer` and return the
    trained model. ``kwargs`` are :func:`build_weighted_reward_trainer`'s keyword arguments
    (documented there); use the builder directly to keep the trainer (``trainer.evaluate()`` on
    ``eval_rows``)."""
    trainer = build_weighted_reward_trainer(model, tokenizer, rows, **kwargs)
    trainer.train()
    return trainer.model
