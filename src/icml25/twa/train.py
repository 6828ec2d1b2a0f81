"""Training with TWA: a plain PyTorch loop (:func:`train_twa`, one process) for small models and
tests, and :class:`TWAHFTrainer`, a ``transformers.Trainer`` whose loss is :func:`twa_loss`, for
real scale and several GPUs (data-parallel under ``torchrun`` / ``accelerate launch``, the loss
normalised over the global batch). Both take causal LMs and seq2seq translation models (Marian,
T5, NLLB). The defaults of :class:`TWAConfig` (and of ``TWAHFTrainer(args=None)``) are ours (the
paper's optimiser settings could not be read; docs/twa.md).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from icml25._validate import as_bool, as_int, as_real
from icml25.llm.distributed import refuse_several_processes
from icml25.twa.annotations import AnnotatedTranslation
from icml25.twa.collate import TWACollator, twa_loss_denominator, twa_loss_on_batch

__all__ = ["TWAConfig", "TWAHFTrainer", "TrainHistory", "train_twa"]


@dataclass
class TWAConfig:
    """Optimiser and loss settings (ours, unverified in the paper): AdamW ``lr``, ``batch_size``,
    ``epochs`` (or ``max_steps``), linear warm-up then constant, ``max_grad_norm`` clipping (1.0),
    and the loss options of :func:`twa_loss` / :class:`TWACollator`."""

    lr: float = 1e-5
    batch_size: int = 32
    epochs: int = 1
    max_steps: int | None = None
    warmup_steps: int = 0
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    unlikelihood: Literal["span", "token"] = "span"
    ignore_off_trajectory: bool = True
    # None: the weights as loaded
    severity_weights: Mapping[str, float] | Literal["uniform"] | None = None
    unlocalized: Literal["no_positive", "ignore", "drop_example"] = "no_positive"
    reduction: Literal["token_mean", "sum", "seq_mean"] = "token_mean"
    eps: float = 0.0  # ours: no smoothing (1e-6 before; it zeroed the gradient as p -> 1)
    seed: int = 0

    def __post_init__(self) -> None:
        self.lr = as_real("lr", self.lr, low=0, low_open=True)
        self.batch_size = as_int("batch_size", self.batch_size, 1)
        self.epochs = as_int("epochs", self.epochs, 1)
        if self.max_steps is not None:
            self.max_steps = as_int("max_steps", self.max_steps, 1)
        self.warmup_steps = as_int("warmup_steps", self.warmup_steps, 0)
        self.weight_decay = as_real("weight_decay", self.weight_decay, low=0)
        if self.max_grad_norm is not None:
            self.max_grad_norm = as_real("max_grad_norm", self.max_grad_norm, low=0, low_open=True)
        self.ignore_off_trajectory = as_bool("ignore_off_trajectory", self.ignore_off_trajectory)
        self.seed = as_int("seed", self.seed)
        from icml25.twa.align import UNLOCALIZED_POLICIES
        from icml25.twa.loss import REDUCTIONS

        if self.unlikelihood not in ("span", "token"):
            raise ValueError(f"unlikelihood must be 'span' or 'token', got {self.unlikelihood!r}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {self.reduction!r}")
        if self.unlocalized not in UNLOCALIZED_POLICIES:
            raise ValueError(
                f"unlocalized must be one of {UNLOCALIZED_POLICIES}, got {self.unlocalized!r}"
            )
        self.eps = as_real("eps", self.eps, low=0, high=1, high_open=True)
        sw = self.severity_weights
        if sw is not None:
            if isinstance(sw, str) and sw != "uniform":
                raise ValueError(f"severity_weights must be None, a dict or 'uniform', got {sw!r}")
            if isinstance(sw, Mapping):
                for k, v in sw.items():
                    as_real(f"severity weight {k!r}", v, low=0)


@dataclass
class TrainHistory:
    """Per step: the loss and its parts; per ``eval_fn`` call: its result."""

    steps: list[dict] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)


def _model_type(model, model_type: str | None) -> str:
    """``model_type`` as given, else from the model's config (``is_encoder_decoder``)."""
    if model_type is not None:
        return model_type
    enc_dec = getattr(getattr(model, "config", None), "is_encoder_decoder", False)
    return "seq2seq" if enc_dec else "causal"


def train_twa(
    model,
    tokenizer,
    data: Sequence[AnnotatedTranslation],
    config: TWAConfig | None = None,
    *,
    model_type: str | None = None,
    eval_fn: Callable[[object], dict] | None = None,
    eval_every: int | None = None,
    progress: bool | None = None,
    prompt_fn=None,
) -> TrainHistory:
    """Fine-tune ``model`` (a Hugging Face causal LM or seq2seq model such as Marian, T5 or NLLB,
    or any module taking ``input_ids``/``attention_mask`` and returning logits) on annotated
    translations with TWA. ``model_type``: ``"causal"`` or ``"seq2seq"`` (default: from
    ``model.config.is_encoder_decoder``, else causal). Batches are shuffled with ``config.seed``;
    ``eval_fn(model)`` runs every ``eval_every`` steps and at the end; ``prompt_fn`` as in
    :class:`TWACollator`.

    TRL's conventions: TWA is a per-token SFT-style loss with no reference model, so dropout
    stays on as configured (as TRL's ``SFTTrainer`` trains); a bf16/fp16 checkpoint trains float32
    master weights with the forward under autocast in its own dtype
    (:class:`~icml25.llm.MixedPrecision`), so its trainable parameters are float32 afterwards.
    The model is left in ``eval()`` mode.

    Single process, one device: as one of several processes (``torchrun``, ``accelerate
    launch``) it raises ``RuntimeError``, since each would train the same batches;
    :class:`TWAHFTrainer` is the data-parallel entry point (docs/twa.md, "Several GPUs")."""
    from icml25.llm.training import MixedPrecision
    from icml25.progress import track

    refuse_several_processes(
        "train_twa",
        "icml25.twa.TWAHFTrainer (a transformers Seq2SeqTrainer, data-parallel under accelerate/torchrun)",
    )

    cfg = config or TWAConfig()
    if not isinstance(cfg, TWAConfig):
        raise TypeError(f"config must be a TWAConfig, got {type(cfg).__name__}")
    if not data:
        raise ValueError("data is empty: nothing to train on")
    model_type = _model_type(model, model_type)
    collate = TWACollator(
        tokenizer,
        model_type=model_type,
        ignore_off_trajectory=cfg.ignore_off_trajectory,
        unlocalized=cfg.unlocalized,
        weights=cfg.severity_weights,
        prompt_fn=prompt_fn,
    )
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError("the model has no trainable parameters")
    mp = MixedPrecision.prepare(model)  # float32 master weights; before the optimizer
    loop = _TWALoop(model, data, cfg, collate, model_type, mp)
    model.train()
    for step in track(
        range(loop.total),
        "TWA",
        total=loop.total,
        disable=None if progress is None else not progress,
    ):
        batch = loop.next_batch()
        if batch is None:  # every example of this batch was dropped by the policy
            continue
        loop.warm_up(step)
        out = loop.descend(batch, step)
        loop.log(step, out)
        if eval_fn is not None and eval_every and (step + 1) % eval_every == 0:
            loop.evaluate(eval_fn, step + 1)
    model.eval()
    return loop.finish(eval_fn)


class _TWALoop:
    """The state of one :func:`train_twa` run (AdamW on the trainable parameters, the shuffled
    order of the current epoch, the history), one method per step of the loop."""

    def __init__(self, model, data, cfg: TWAConfig, collate: TWACollator, model_type: str, mp):
        self.model, self.data, self.cfg = model, data, cfg
        self.collate, self.model_type, self.mp = collate, model_type, mp
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        per_epoch = math.ceil(len(data) / cfg.batch_size)
        self.total = cfg.max_steps or per_epoch * cfg.epochs
        self.rng = random.Random(cfg.seed)
        self.hist = TrainHistory()
        self.order: list[int] = []

    def next_batch(self):
        """The next ``batch_size`` examples of the epoch's order (reshuffled with ``config.seed``'s
        generator when it runs out), collated; None when the policy dropped all of them."""
        if not self.order:
            self.order = list(range(len(self.data)))
            self.rng.shuffle(self.order)
        size = self.cfg.batch_size
        idx, self.order = self.order[:size], self.order[size:]
        try:
            return self.collate([self.data[i] for i in idx])
        except ValueError as exc:
            if "dropped" in str(exc):  # every example of this batch was dropped by the policy
                return None
            raise

    def warm_up(self, step: int) -> None:
        """The learning rate of ``step``: linear warm-up over ``warmup_steps``, then constant."""
        cfg = self.cfg
        for g in self.opt.param_groups:
            g["lr"] = (
                cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr
            )

    def descend(self, batch, step: int):
        """One AdamW step on the batch's TWA loss (forward under the model's autocast, the
        gradient clipped to ``max_grad_norm``); a non-finite loss raises before the step."""
        cfg = self.cfg
        with self.mp.autocast():
            out = twa_loss_on_batch(
                self.model,
                batch,
                model_type=self.model_type,
                unlikelihood=cfg.unlikelihood,
                reduction=cfg.reduction,
                eps=cfg.eps,
            )
        if not bool(torch.isfinite(out.loss)):
            raise FloatingPointError(
                f"the TWA loss became {float(out.loss)} at step {step}; lower lr"
            )
        self.opt.zero_grad()
        out.loss.backward()
        if cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        self.opt.step()
        return out

    def log(self, step: int, out) -> None:
        """The step's loss and its parts into the history."""
        self.hist.steps.append(
            {
                "step": step,
                "loss": float(out.loss.detach()),
                "ce_sum": float(out.ce_sum.detach()),
                "ul_sum": float(out.ul_sum.detach()),
                "n_positive": out.n_positive,
                "n_span_tokens": out.n_span_tokens,
            }
        )

    def evaluate(self, eval_fn: Callable[[object], dict], step: int) -> None:
        """``eval_fn(model)`` in ``eval()`` mode, recorded at ``step``; training mode after."""
        self.model.eval()
        self.hist.evals.append({"step": step, **eval_fn(self.model)})
        self.model.train()

    def finish(self, eval_fn: Callable[[object], dict] | None) -> TrainHistory:
        """The history, after the final evaluation (unless the last step was just evaluated); an
        error when no step ran."""
        hist = self.hist
        if not hist.steps:
            raise ValueError(
                "no training step ran: every batch was dropped (unlocalized='drop_example' and every "
                "example has an unlocalizable error)"
            )
        if eval_fn is not None and not (hist.evals and hist.evals[-1]["step"] == self.total):
            hist.evals.append({"step": self.total, **eval_fn(self.model)})
        return hist


try:  # transformers is the `llm` extra
    from transformers import Seq2SeqTrainer as _Trainer
except ImportError:  # pragma: no cover
    _Trainer = None

if _Trainer is not None:
    from icml25.llm.distributed import GlobalBatchNormalisation
    from icml25.llm.training import MixedPrecision

    class TWAHFTrainer(GlobalBatchNormalisation, _Trainer):
        """``transformers.Seq2SeqTrainer`` with the TWA loss, for seq2seq and causal models.

        Args (beyond the ``Seq2SeqTrainer``'s):
            data_collator: a :class:`TWACollator` (default: ``TWACollator(processing_class,
                model_type=model_type)``; the loss reads its token roles).
            model_type: ``"causal"`` or ``"seq2seq"`` (default: the collator's, else from
                ``model.config.is_encoder_decoder``).
            twa_loss_kwargs: options of :func:`twa_loss` (``unlikelihood``, ``reduction``,
                ``eps``).

        ``args`` needs ``remove_unused_columns=False`` (the collator reads the raw records).
        ``args=None`` takes :meth:`default_args`: :class:`TWAConfig`'s defaults (ours; the paper's
        optimiser settings could not be read, docs/twa.md), a temporary output folder (nothing is
        written to the working directory, no checkpoints: ``trainer.save_model(path)`` saves) and
        bf16 mixed precision only on a GPU that has it. ``eval_dataset`` and
        ``trainer.evaluate(dataset)`` report the TWA loss (``eval_loss``); with
        ``predict_with_generate=True`` (seq2seq) the predictions are generated translations for
        ``compute_metrics``. Dropout stays on in training, as in TRL's SFT (docs/twa.md).

        A training step's loss is normalised over the GLOBAL batch: the summed TWA loss of every
        micro-batch (over the accumulated micro-batches and the processes) divided by the summed
        count of :func:`~icml25.twa.collate.twa_loss_denominator` (the tokens that receive a loss for
        ``"token_mean"``, the sequences for ``"seq_mean"``; ``"sum"`` is the global sum), so 2
        processes x batch B, or gradient accumulation 2 x B, train as one process with batch 2B
        (:class:`~icml25.llm.distributed.GlobalBatchNormalisation`). Evaluation reports the
        per-batch mean. A step where no token of any micro-batch receives a loss (every example
        with only unlocalizable errors, ``unlocalized="no_positive"``) has loss 0."""

        @staticmethod
        def default_args(output_dir=None, **overrides):
            """``Seq2SeqTrainingArguments`` from :class:`TWAConfig`'s defaults: AdamW at lr 1e-5,
            32 examples per device, one epoch, constant rate, no weight decay, clipping 1.0, seed
            0; ``remove_unused_columns=False``; a new temporary ``output_dir`` unless given;
            ``overrides`` replace single fields."""
            import os
            import tempfile

            from transformers import Seq2SeqTrainingArguments

            c = TWAConfig()
            if output_dir is None:
                output_dir = tempfile.mkdtemp(prefix="icml25-twa-")
            kwargs = dict(
                learning_rate=c.lr,  # ours (TWAConfig)
                per_device_train_batch_size=c.batch_size,  # ours
                num_train_epochs=c.epochs,  # ours
                lr_scheduler_type="constant",  # ours: warm-up (0 steps) then constant
                warmup_steps=c.warmup_steps,
                weight_decay=c.weight_decay,
                max_grad_norm=c.max_grad_norm,
                seed=c.seed,
                remove_unused_columns=False,  # TWACollator reads the raw records
                bf16=bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported()),
                save_strategy="no",
                report_to="none",
            )
            kwargs.update(overrides)
            return Seq2SeqTrainingArguments(os.fspath(output_dir), **kwargs)

        def __init__(
            self,
            model=None,
            args=None,
            data_collator=None,
            train_dataset=None,
            eval_dataset=None,
            processing_class=None,
            *,
            model_type: str | None = None,
            twa_loss_kwargs: dict | None = None,
            **kwargs,
        ) -> None:
            # float32 master weights for a bf16/fp16 checkpoint (the Trainer's AdamW would update
            # the low-precision weights in place); with bf16=True the Trainer autocasts the forward
            if isinstance(model, torch.nn.Module) and kwargs.get("peft_config") is None:
                MixedPrecision.prepare(model)
            if data_collator is None and getattr(processing_class, "is_fast", False):
                mt = _model_type(model, model_type)
                data_collator = TWACollator(processing_class, model_type=mt)
            if not isinstance(data_collator, TWACollator):
                raise TypeError(
                    "TWAHFTrainer needs data_collator=TWACollator(tokenizer, model_type=...) (or "
                    "processing_class=<a fast tokenizer>): the TWA loss reads its roles, got "
                    f"{type(data_collator).__name__}"
                )
            if model_type is None:
                model_type = data_collator.model_type
            if data_collator.model_type != model_type:
                raise ValueError(
                    f"the collator's model_type {data_collator.model_type!r} differs from the "
                    f"trainer's {model_type!r}"
                )
            if args is None:
                args = self.default_args()
            if getattr(args, "remove_unused_columns", False):
                raise ValueError(
                    "TWAHFTrainer needs TrainingArguments(remove_unused_columns=False): the "
                    "collator reads the raw source/target/spans records"
                )
            if getattr(args, "predict_with_generate", False) and model_type != "seq2seq":
                raise ValueError(
                    "predict_with_generate=True needs a seq2seq model: a causal batch holds the "
                    "target after the prompt; generate from the prompts yourself "
                    "(icml25.twa.translate_with_backend)"
                )
            from icml25.twa.loss import REDUCTIONS

            twa_loss_kwargs = dict(twa_loss_kwargs or {})
            unknown = sorted(set(twa_loss_kwargs) - {"unlikelihood", "reduction", "eps"})
            if unknown:
                raise ValueError(
                    f"twa_loss_kwargs has unknown keys {unknown}; valid: "
                    "'unlikelihood', 'reduction', 'eps' (twa_loss's options)"
                )
            if twa_loss_kwargs.get("reduction", "token_mean") not in REDUCTIONS:
                raise ValueError(
                    f"twa_loss_kwargs['reduction'] must be one of {REDUCTIONS}, got "
                    f"{twa_loss_kwargs['reduction']!r}"
                )
            self.model_type, self.twa_loss_kwargs = model_type, twa_loss_kwargs
            super().__init__(
                model=model,
                args=args,
                data_collator=data_collator,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=processing_class,
                **kwargs,
            )

        # no token of a step receives a loss on any process: twa_loss's sums are exact zeros
        empty_step_is_zero = True

        def loss_denominator(self, batch):
            """The count the micro-batch's summed TWA loss is divided by (tokens for
            ``"token_mean"``, sequences for ``"seq_mean"``; 1 for ``"sum"``)."""
            reduction = self.twa_loss_kwargs.get("reduction", "token_mean")
            return twa_loss_denominator(batch, model_type=self.model_type, reduction=reduction)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            kw = dict(self.twa_loss_kwargs)
            reduction = kw.pop("reduction", "token_mean")
            if num_items_in_batch is None:  # evaluation: the per-batch reduction
                out = twa_loss_on_batch(
                    model, inputs, model_type=self.model_type, reduction=reduction, **kw
                )
                return (out.loss, out) if return_outputs else out.loss
            # training: this micro-batch's sum over the global count (denominator 1 for "sum")
            out = twa_loss_on_batch(
                model, inputs, model_type=self.model_type, reduction="sum", **kw
            )
            if reduction == "sum":
                num_items_in_batch = torch.ones((), device=out.loss.device)
            loss = self.global_mean(out.loss, num_items_in_batch)
            return (loss, out) if return_outputs else loss

        def prediction_step(
            self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs
        ):
            """The TWA loss of an evaluation batch; with ``predict_with_generate`` (seq2seq) also
            the generated token ids and the labels."""
            inputs = self._prepare_inputs(inputs)
            with torch.no_grad(), self.compute_loss_context_manager():
                loss = self.compute_loss(model, inputs).detach()
            if prediction_loss_only or not self.args.predict_with_generate:
                return loss, None, None
            kw = {**getattr(self, "_gen_kwargs", {}), **gen_kwargs}
            with torch.no_grad():
                tokens = self.accelerator.unwrap_model(model).generate(
                    input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], **kw
                )
            return loss, tokens, inputs["labels"]

else:  # pragma: no cover

    class TWAHFTrainer:  # type: ignore[no-redef]
        def __init__(self, *args, **kwargs):
            raise ImportError("TWAHFTrainer needs transformers: pip install 'icml25[llm]'")
