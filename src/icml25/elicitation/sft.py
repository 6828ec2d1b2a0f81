"""Stage 1: the reverse model (arXiv:2502.01236, §3.1). Pairs ``(x, y)`` from a prompt source
and the target's responses are reversed into ``(behaviour = y, prompt = x)`` and the
investigator is fine-tuned with cross-entropy on the prompt tokens only,
``L_SFT = -Σ log q_θ(x | y)``, giving ``q_SFT ≈ p(x | y)``: an amortised posterior over prompts.

The loop follows TRL's ``SFTTrainer`` conventions: the targets are the completion tokens of
:meth:`Investigator.row` tokenised as TRL tokenises a prompt-completion row (the chat template's
end of turn, or the EOS of a text row), the loss is their mean negative log-likelihood over the
batch, dropout stays as the model configures it (TRL's SFT does not disable it), and a bf16/fp16
investigator trains with float32 master weights and the forward under autocast in its dtype.

:func:`reverse_sft` is a single-process loop (it refuses to run under several processes).
:func:`reverse_sft_trainer` builds TRL's ``SFTTrainer`` on the same rows and targets with the same
defaults (:func:`default_reverse_sft_config`): the entry point for several GPUs, data-parallel
under ``torchrun`` / ``accelerate launch`` with the loss normalised by the completion-token count
of the whole global batch (docs/elicitation.md, Several GPUs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from icml25._validate import as_int, as_real
from icml25.elicitation._decode import train_mode
from icml25.elicitation.investigator import Investigator, _check_strings
from icml25.llm.distributed import check_global_batches, refuse_several_processes

__all__ = [
    "build_reverse_pairs",
    "default_reverse_sft_config",
    "reverse_sft",
    "reverse_sft_trainer",
]


def _check_pairs(pairs: Any, what: str = "pairs") -> list[tuple[str, str]]:
    """``pairs`` as a list of ``(behaviour, prompt)`` string pairs, or a clear error."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise TypeError(
            f"{what} must be a list of (behaviour, prompt) pairs, got {type(pairs).__name__}"
        )
    pairs = list(pairs)
    if not pairs:
        raise ValueError(f"{what} is empty")
    for i, p in enumerate(pairs):
        if not (
            isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(s, str) for s in p)
        ):
            raise TypeError(
                f"{what}[{i}] must be a (behaviour, prompt) pair of strings, got {p!r:.60}"
            )
    return [(p[0], p[1]) for p in pairs]


def build_reverse_pairs(
    target: Any,
    prompts: Sequence[str],
    *,
    y_source: str = "target",
    responses: Sequence[str] | None = None,
    max_new_tokens: int = 64,
    greedy: bool = False,
    seed: int | None = 0,
) -> list[tuple[str, str]]:
    """``(behaviour, prompt)`` pairs for :func:`reverse_sft`.

    ``y_source="target"``: the behaviour is the target's response to the prompt (sampled at
    temperature 1 by default, ``greedy=True`` for greedy); ``"given"``: ``responses`` (e.g. a
    document's true continuation). Pairs with an empty behaviour are dropped.
    """
    ps = _check_strings("prompts", prompts)
    if y_source == "target":
        if responses is not None:
            raise ValueError(
                "responses are used with y_source='given'; with y_source='target' the target answers"
            )
        if isinstance(target, torch.nn.Module):
            raise TypeError(
                "target is a bare model: wrap it, HFTargetModel(model, tokenizer, use_chat_template=...)"
            )
        if not hasattr(target, "generate"):
            raise TypeError(
                f"target must have generate(...) (a TargetModel), got {type(target).__name__}"
            )
        try:
            ys = target.generate(ps, max_new_tokens, greedy=greedy, seed=seed)
        except TypeError:  # a target without the seed keyword
            ys = target.generate(ps, max_new_tokens, greedy=greedy)
    elif y_source == "given":
        if responses is None:
            raise ValueError("y_source='given' needs responses")
        ys = _check_strings("responses", responses, allow_empty=True)
        if len(ys) != len(ps):
            raise ValueError(f"{len(ps)} prompts but {len(ys)} responses")
    else:
        raise ValueError(f"y_source must be 'target' or 'given', got {y_source!r}")
    return [(y, x) for x, y in zip(ps, ys) if y.strip()]


def reverse_sft(
    inv: Investigator,
    pairs: Sequence[tuple[str, str]],
    *,
    epochs: float = 3.0,
    steps: int | None = None,
    lr: float = 5e-5,
    batch_size: int = 16,
    warmup: int = 50,
    weight_decay: float = 0.0,
    seed: int = 0,
    disable_dropout: bool = False,
    progress: bool | None = None,
) -> Investigator:
    """Fine-tune ``inv`` in place on ``(behaviour, prompt)`` pairs; the loss is ``-log q(x | b)``
    per completion token (the mean over the batch's completion tokens, as TRL's SFT loss),
    through the scoring of :meth:`Investigator.logprob` (so a restricted vocabulary is trained
    with the same masked log-softmax it samples with; behaviour tokens carry no loss).

    Defaults follow the third-party Llama-3.1-8B recipe (3 epochs, lr 5e-5, batch 16, 50 warm-up
    steps; docs/elicitation.md, Decisions); ``steps`` overrides ``epochs``. AdamW, linear
    warm-up then cosine decay, gradient clip 1.0. The model trains in train mode (dropout as
    configured, like TRL's ``SFTTrainer``; ``disable_dropout=True`` turns it off) and every
    submodule's mode is restored afterwards. A bf16/fp16 investigator keeps float32 master weights
    (``inv.mixed_precision()``). The losses are kept in ``inv.sft_losses``.

    Single-process: under ``torchrun`` (``torch.distributed`` initialised with more than one
    process) it raises ``RuntimeError`` rather than train a copy per process on all the pairs;
    :func:`reverse_sft_trainer` is the entry point for several GPUs.
    """
    from icml25.progress import track

    refuse_several_processes(
        "reverse_sft",
        "icml25.elicitation.reverse_sft_trainer (TRL's SFTTrainer, data-parallel under torchrun / accelerate launch)",
    )
    if not isinstance(inv, Investigator):
        raise TypeError(f"inv must be an Investigator, got {type(inv).__name__}")
    pairs = _check_pairs(pairs)
    lr = as_real("lr", lr, low=0, low_open=True)
    batch_size = as_int("batch_size", batch_size, 1)
    if steps is None:
        epochs = as_real("epochs", epochs, low=0, low_open=True)
    n_steps = (
        as_int("steps", steps, 1)
        if steps is not None
        else max(1, math.ceil(epochs * len(pairs) / batch_size))
    )
    if warmup >= n_steps:
        import warnings

        warnings.warn(
            f"warmup={warmup} >= the {n_steps} training steps: the learning rate never leaves the "
            "warm-up; lower warmup or train longer",
            stacklevel=2,
        )
    sft = _ReverseSFT.start(inv, pairs, lr, batch_size, n_steps, warmup, weight_decay, seed)
    with train_mode(inv.model, disable_dropout=disable_dropout):
        for _ in track(
            range(n_steps),
            "reverse SFT",
            total=n_steps,
            disable=None if progress is None else not progress,
        ):
            sft.step()
    inv.sft_losses = sft.losses
    return inv


def _warmup_cosine(warmup: int, n_steps: int) -> Callable[[int], float]:
    """The learning-rate factor of step ``step``: linear warm-up to 1 over ``warmup`` steps (from
    ``1 / warmup``), then cosine decay to 0 at ``n_steps``."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, n_steps - warmup)))

    return factor


@dataclass
class _ReverseSFT:
    """A reverse-SFT run: the investigator, its optimiser and schedule, the batch order (a fresh
    seeded permutation of the pairs whenever fewer than a batch are left) and the losses."""

    inv: Investigator
    pairs: list[tuple[str, str]]
    batch_size: int
    mp: Any  # the investigator's MixedPrecision (autocast in its dtype)
    params: list[torch.nn.Parameter]
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    gen: torch.Generator
    order: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        inv: Investigator,
        pairs: list[tuple[str, str]],
        lr: float,
        batch_size: int,
        n_steps: int,
        warmup: int,
        weight_decay: float,
        seed: int,
    ) -> _ReverseSFT:
        """AdamW with the warm-up and cosine schedule, on float32 master weights."""
        mp = inv.mixed_precision()  # float32 master weights before the optimizer holds them
        params = [p for p in inv.model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, _warmup_cosine(warmup, n_steps))
        gen = torch.Generator().manual_seed(seed)
        return cls(inv, pairs, batch_size, mp, params, opt, sched, gen)

    def batch(self) -> tuple[list[str], list[str]]:
        """The next batch's behaviours and prompts."""
        if len(self.order) < self.batch_size:
            self.order += torch.randperm(len(self.pairs), generator=self.gen).tolist()
        idx, self.order = self.order[: self.batch_size], self.order[self.batch_size :]
        return [self.pairs[i][0] for i in idx], [self.pairs[i][1] for i in idx]

    def step(self) -> None:
        """One step on ``L_SFT = -Σ log q_θ(x | b)``, the mean over the batch's prompt tokens;
        gradient clip 1.0."""
        bs, xs = self.batch()
        with self.mp.autocast():
            total, counts = self.inv._scores(bs, xs)
        loss = -(total.sum() / counts.sum().clamp(min=1))
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        if not (torch.isfinite(loss) and torch.isfinite(norm)):
            dtype = self.inv.compute_dtype or next(self.inv.model.parameters()).dtype
            raise FloatingPointError(
                f"reverse SFT produced a non-finite loss or gradient ({float(loss)}, grad norm "
                f"{float(norm)}) in the {dtype} investigator"
                + (
                    "; float16 overflows here: load it in bfloat16 or float32"
                    if dtype == torch.float16
                    else ""
                )
            )
        self.opt.step()
        self.sched.step()
        self.losses.append(float(loss.detach()))


def default_reverse_sft_config(**overrides: Any) -> Any:
    """The ``trl.SFTConfig`` :func:`reverse_sft_trainer` uses when ``args=None``: the defaults of
    :func:`reverse_sft` (the third-party Llama-3.1-8B recipe; the paper, §3.1, states none):

    - ``num_train_epochs=3``, ``learning_rate=5e-5``, ``per_device_train_batch_size=16`` (and
      ``per_device_eval_batch_size=16``), ``warmup_steps=50`` then cosine decay to 0, AdamW with
      ``weight_decay=0``, gradient clip 1.0, ``seed=0``;
    - ``max_length=None``: no truncation (:func:`reverse_sft` keeps every token; behaviours are
      already cut to the investigator's ``max_behavior_tokens``), no packing, no gradient
      checkpointing (:func:`reverse_sft` uses none);
    - ``average_tokens_across_devices=True`` (``transformers``' default, set explicitly): the loss
      is the sum over completion tokens divided by their count over the whole step (all processes
      and accumulated micro-batches), :func:`reverse_sft`'s mean over the batch's completion
      tokens, however the batch is split over processes;
    - ``output_dir``: a fresh temporary folder, ``save_strategy="no"``, ``report_to=[]``,
      ``logging_steps=1``: nothing is written in the working directory;
    - ``bf16=True`` only on a CUDA device that supports it, otherwise float32 (``use_cpu`` when
      there is no CUDA device).

    Two differences of the ``Trainer`` from :func:`reverse_sft` remain: its warm-up starts at
    learning rate 0 (ours at ``lr / warmup``), and it batches each epoch separately (ours draws
    batches across epoch boundaries). ``overrides`` replace any field (``SFTConfig`` keywords).
    """
    from trl import SFTConfig

    fields = dict(
        num_train_epochs=3.0,
        learning_rate=5e-5,
        per_device_train_batch_size=16,
        per_device_eval_batch_size=16,
        warmup_steps=50,
        lr_scheduler_type="cosine",
        weight_decay=0.0,
        max_grad_norm=1.0,
        seed=0,
        max_length=None,
        average_tokens_across_devices=True,
    )
    return _trl_config(SFTConfig, "icml25-elicit-sft-", fields, overrides)


def _check_trl_investigator(inv: Investigator, loop: str) -> None:
    """``ValueError`` for an investigator that TRL's trainers cannot train as ``loop`` does."""
    if inv.user_restricted:
        raise ValueError(
            f"TRL scores over the whole vocabulary; an investigator with allowed_token_ids "
            f"must train with {loop} (the same masked log-softmax it samples with)"
        )
    if inv.exact_length is not None:
        raise ValueError(
            "TRL ends every completion with an end of turn; an investigator with "
            f"exact_length must train with {loop}"
        )


def _trl_config(config_cls: Any, prefix: str, fields: dict, overrides: dict) -> Any:
    """``config_cls(**fields, **overrides)`` (a TRL ``SFTConfig``/``DPOConfig``) with what both
    trainers' defaults share: a fresh temporary ``output_dir`` named ``prefix...``, no saving or
    reports, a log line per step, bf16 only on a CUDA device that supports it (float32 and
    ``use_cpu`` elsewhere) and no gradient checkpointing (the plain loops use none)."""
    import tempfile

    cuda = torch.cuda.is_available()
    kw: dict[str, Any] = dict(
        output_dir=tempfile.mkdtemp(prefix=prefix),
        save_strategy="no",
        report_to=[],
        logging_steps=1,
        bf16=bool(cuda and torch.cuda.is_bf16_supported()),
        fp16=False,
        use_cpu=not cuda,
        **fields,
    )
    # transformers 5 renamed gradient_checkpointing (TRL's default: on) to activation_checkpointing
    names = getattr(config_cls, "__dataclass_fields__", {})
    checkpointing = (
        "activation_checkpointing"
        if "activation_checkpointing" in names
        else "gradient_checkpointing"
    )
    kw[checkpointing] = False
    kw.update(overrides)
    return config_cls(**kw)


def _reverse_rows(inv: Investigator, pairs: Any, what: str) -> Any:
    """A ``datasets.Dataset`` of TRL prompt-completion rows (:meth:`Investigator.row`, the
    behaviour cut to ``max_behavior_tokens`` as :func:`reverse_sft` cuts it) from ``(behaviour,
    prompt)`` pairs; a ``datasets.Dataset`` (or a dict of them) passes through."""
    import datasets

    if isinstance(pairs, (datasets.Dataset, datasets.IterableDataset)):
        return pairs
    if isinstance(pairs, dict):
        return {k: _reverse_rows(inv, v, f"{what}[{k!r}]") for k, v in pairs.items()}
    rows = []
    for b, x in _check_pairs(pairs, what):
        prompt, completion = inv.row(inv._behavior(b), x)
        rows.append({"prompt": prompt, "completion": completion})
    return datasets.Dataset.from_list(rows)


def reverse_sft_trainer(
    inv: Investigator,
    pairs: Sequence[tuple[str, str]],
    args: Any = None,
    *,
    eval_dataset: Any = None,
    **kwargs: Any,
) -> Any:
    """TRL's ``SFTTrainer`` for the reverse model (§3.1) on the ``(behaviour, prompt)`` pairs of
    :func:`reverse_sft` (needs ``icml25[train]``); call ``.train()`` on it. The entry point for
    several GPUs: run the script under ``torchrun --nproc_per_node N`` (or ``accelerate launch
    --num_processes N``); each process takes its share of every global batch, and with
    :func:`default_reverse_sft_config` the loss is the mean over the completion tokens of the whole
    global batch, so two gloo processes train to the weights of one process on the same batch
    (tests/elicitation/test_distributed.py). Call ``trainer.save_model(path)`` (or
    ``inv.save(path)`` on the main process) after training.

    Rows are :meth:`Investigator.row` (conversational for a ``"chat"`` investigator, ended by the
    template's end of turn; text rows to which TRL appends the EOS for ``"tags"``): TRL tokenises
    them into the context and completion ids :func:`reverse_sft` trains on, with the loss on the
    completion only, the mean over the batch's completion tokens. One difference: TRL's
    log-softmax runs over the whole vocabulary, :func:`reverse_sft`'s (through
    :meth:`Investigator.logprob`) over the ids the investigator can draw (special tokens other
    than a prompt's ends left out, so that what it samples is what it scores); TRL's loss is
    higher by the probability the model puts on those special tokens (negligible for a trained
    chat model, visible on a random-init one). ``args=None``: :func:`default_reverse_sft_config` (:func:`reverse_sft`'s
    defaults). ``eval_dataset``: more pairs (or a ``datasets.Dataset`` of rows) for
    ``trainer.evaluate()``. A bf16/fp16 investigator gets float32 master weights first. An
    investigator with ``allowed_token_ids`` or ``exact_length`` must train with :func:`reverse_sft`
    (TRL normalises over the whole vocabulary and ends every completion with an end of turn).
    ``kwargs`` go to ``SFTTrainer`` (``peft_config``, ``callbacks``...)."""
    try:
        import datasets  # noqa: F401
        from trl import SFTTrainer
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("reverse_sft_trainer needs TRL: pip install 'icml25[train]'") from exc
    if not isinstance(inv, Investigator):
        raise TypeError(f"inv must be an Investigator, got {type(inv).__name__}")
    _check_trl_investigator(inv, "reverse_sft")
    train = _reverse_rows(inv, pairs, "pairs")
    evals = None if eval_dataset is None else _reverse_rows(inv, eval_dataset, "eval_dataset")
    if args is None:
        args = default_reverse_sft_config()
    inv.mixed_precision()
    trainer = SFTTrainer(
        model=inv.model,
        args=args,
        train_dataset=train,
        eval_dataset=evals,
        processing_class=inv.tokenizer,
        **kwargs,
    )
    check_global_batches(trainer)
    return trainer
