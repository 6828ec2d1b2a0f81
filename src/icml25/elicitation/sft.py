"""Stage 1: the reverse model (arXiv:2502.01236, §3.1). Pairs ``(x, y)`` from a prompt source
and the target's responses are reversed into ``(behaviour = y, prompt = x)`` and the
investigator is fine-tuned with cross-entropy on the prompt tokens only,
``L_SFT = -Σ log q_θ(x | y)``, giving ``q_SFT ≈ p(x | y)``: an amortised posterior over prompts.

The loop follows TRL's ``SFTTrainer`` conventions: the targets are the completion tokens of
:meth:`Investigator.row` tokenised as TRL tokenises a prompt-completion row (the chat template's
end of turn, or the EOS of a text row), the loss is their mean negative log-likelihood over the
batch, dropout stays as the model configures it (TRL's SFT does not disable it), and a bf16/fp16
investigator trains with float32 master weights and the forward under autocast in its dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from icml25.elicitation._decode import train_mode
from icml25.elicitation.investigator import Investigator, _check_strings, _int

__all__ = ["build_reverse_pairs", "reverse_sft"]


def build_reverse_pairs(target: Any, prompts: Sequence[str], *, y_source: str = "target",
                        responses: Sequence[str] | None = None, max_new_tokens: int = 64,
                        greedy: bool = False, seed: int | None = 0) -> list[tuple[str, str]]:  # fmt: skip
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


def reverse_sft(inv: Investigator, pairs: Sequence[tuple[str, str]], *, epochs: float = 3.0,
                steps: int | None = None, lr: float = 5e-5, batch_size: int = 16, warmup: int = 50,
                weight_decay: float = 0.0, seed: int = 0, disable_dropout: bool = False,
                progress: bool | None = None) -> Investigator:  # fmt: skip
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
    """
    from icml25.progress import track

    if not isinstance(inv, Investigator):
        raise TypeError(f"inv must be an Investigator, got {type(inv).__name__}")
    pairs = list(pairs)
    if not pairs:
        raise ValueError("pairs is empty")
    for i, p in enumerate(pairs):
        if not (
            isinstance(p, (tuple, list)) and len(p) == 2 and all(isinstance(s, str) for s in p)
        ):
            raise TypeError(
                f"pairs[{i}] must be a (behaviour, prompt) pair of strings, got {p!r:.60}"
            )
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    batch_size = _int("batch_size", batch_size)
    if steps is None and not (isinstance(epochs, (int, float)) and epochs > 0):
        raise ValueError(f"epochs must be > 0, got {epochs!r}")
    n_steps = (
        _int("steps", steps)
        if steps is not None
        else max(1, math.ceil(epochs * len(pairs) / batch_size))
    )
    if warmup >= n_steps:
        import warnings

        warnings.warn(f"warmup={warmup} >= the {n_steps} training steps: the learning rate never leaves the "
                      "warm-up; lower warmup or train longer", stacklevel=2)  # fmt: skip
    model = inv.model
    mp = inv.mixed_precision()  # float32 master weights before the optimizer holds them
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, n_steps - warmup)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    gen = torch.Generator().manual_seed(seed)
    order: list[int] = []
    losses = []
    with train_mode(model, disable_dropout=disable_dropout):
        for _ in track(
            range(n_steps),
            "reverse SFT",
            total=n_steps,
            disable=None if progress is None else not progress,
        ):
            if len(order) < batch_size:
                order += torch.randperm(len(pairs), generator=gen).tolist()
            idx, order = order[:batch_size], order[batch_size:]
            bs, xs = [pairs[i][0] for i in idx], [pairs[i][1] for i in idx]
            with mp.autocast():
                total, counts = inv._scores(bs, xs)
            loss = -(total.sum() / counts.sum().clamp(min=1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
            if not (torch.isfinite(loss) and torch.isfinite(norm)):
                dtype = inv.compute_dtype or next(model.parameters()).dtype
                raise FloatingPointError(
                    f"reverse SFT produced a non-finite loss or gradient ({float(loss)}, grad norm "
                    f"{float(norm)}) in the {dtype} investigator"
                    + (
                        "; float16 overflows here: load it in bfloat16 or float32"
                        if dtype == torch.float16
                        else ""
                    )
                )
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
    inv.sft_losses = losses
    return inv
