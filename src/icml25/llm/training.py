"""TRL's training conventions for the plain torch loops of the LLM papers.

The papers' small-scale loops (SFT, DPO-style preference steps, per-token losses) run without a
``Trainer``; on a real checkpoint they must still train what TRL would train:

- :func:`dropout_disabled`: log-probabilities for a preference loss come from the model with
  dropout off (TRL's ``DPOConfig.disable_dropout=True``): with the policy equal to the reference,
  the first DPO loss is then exactly ``log 2``. The module is put in eval mode for the forward;
  gradients flow as usual. A reference model always runs in eval mode.
- :class:`MixedPrecision`: a bf16/fp16 checkpoint (every Llama-3.1 loads in bf16) trains with
  float32 master weights: the trainable parameters are upcast to float32 and the forward runs
  under ``torch.autocast`` in the checkpoint's dtype, as ``accelerate``'s mixed precision does.
  Pure-bf16 AdamW at ``lr=1e-5`` rounds most updates away (a weight of 0.02 moves only by at least
  ``2^-8 x 0.02``); the trained parameters stay in float32 (cast with ``model.to(torch.bfloat16)``
  before saving if you want the checkpoint's size back).
- :func:`tokenize_prompt_completion` / :func:`tokenize_preference`: SFT and DPO targets tokenised
  as TRL's ``SFTTrainer`` / ``DPOTrainer`` tokenise them: for chat rows the whole conversation is
  rendered by the chat template, so the target ends with the template's own end of turn
  (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``), not with ``tokenizer.eos_token``; plain-text
  rows get the eos token string appended. The completion starts where the tokenised prompt and
  prompt + completion diverge (TRL's ``common_prefix_length``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MixedPrecision",
    "check_finite_loss",
    "common_prefix_length",
    "dropout_disabled",
    "end_of_turn_id",
    "position_ids",
    "special_token_ids",
    "tokenize_preference",
    "tokenize_prompt_completion",
]

IGNORE_INDEX = -100


@contextlib.contextmanager
def dropout_disabled(*models: Any, enabled: bool = True) -> Iterator[None]:
    """Run ``models`` without dropout inside the block (eval mode; gradients still flow), then
    restore every submodule's own ``training`` flag. ``enabled=False`` leaves them as they are
    (dropout as configured, which is what TRL's SFT does).

    Eval mode, rather than zeroing ``nn.Dropout`` modules as TRL's ``disable_dropout_in_model``
    does, also covers dropout that models apply functionally from their config (OPT, Llama's
    ``attention_dropout``). One consequence: ``transformers`` runs gradient checkpointing only in
    train mode, so inside this block it is off; at the scale where that matters use the TRL
    trainers, which keep it."""
    if not enabled:
        yield
        return
    saved = [[(m, m.training) for m in model.modules()] for model in models if model is not None]
    for model in models:
        if model is not None:
            model.eval()
    try:
        yield
    finally:
        for modules in saved:
            for m, flag in modules:
                m.training = flag


@dataclass
class MixedPrecision:
    """Float32 master weights for a low-precision checkpoint.

    ``MixedPrecision.prepare(model)`` upcasts every trainable bf16/fp16 parameter to float32 in
    place and remembers the checkpoint's dtype; ``with mp.autocast(): loss = ...`` runs the
    forward in that dtype. For a float32/float64 model both are no-ops. Build the optimizer after
    ``prepare`` (it must hold the float32 parameters). The checkpoint's dtype is remembered on the
    model, so preparing it again for a second round of training still computes in that dtype.

    Attributes:
        compute_dtype: the checkpoint's low-precision dtype, or ``None`` for a full-precision model.
        device_type: ``"cpu"``/``"cuda"``/... of the model's parameters (what autocast needs).
        upcast: how many parameters were upcast.
    """

    compute_dtype: Any = None
    device_type: str = "cpu"
    upcast: int = 0

    @classmethod
    def prepare(cls, model: Any, *, enabled: bool = True) -> MixedPrecision:
        import torch

        params = list(model.parameters())
        if not params:
            raise ValueError("the model has no parameters to train")
        device_type = params[0].device.type
        low = {p.dtype for p in params if p.dtype in (torch.bfloat16, torch.float16)}
        # A model prepared before (a second round of training) is float32 throughout but still
        # computes in its checkpoint's dtype: the first call left it on the model.
        earlier = getattr(model, "_icml25_compute_dtype", None)
        if not enabled or not (low or earlier):
            return cls(None, device_type, 0)
        # A checkpoint is one dtype; a mix (a float32 LoRA on a bf16 base) computes in the low one.
        compute = earlier
        if low:
            compute = torch.bfloat16 if torch.bfloat16 in low else torch.float16
        n = 0
        for p in params:
            if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16):
                p.data = p.data.float()
                n += 1
        model._icml25_compute_dtype = compute
        return cls(compute, device_type, n)

    def autocast(self) -> contextlib.AbstractContextManager:
        """``torch.autocast`` in the checkpoint's dtype, or a no-op for a full-precision model."""
        import torch

        if self.compute_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.compute_dtype)


def check_finite_loss(loss: Any, where: str) -> None:
    """``FloatingPointError`` naming ``where`` (the step, the rows) when ``loss`` is NaN or inf,
    before it reaches ``backward``: a NaN weight, a NaN input or an fp16 overflow otherwise trains
    on silently and every later step is NaN too. One host sync, which a loop that logs its loss
    pays anyway."""
    import torch

    if not bool(torch.isfinite(loss.detach()).all()):
        raise FloatingPointError(
            f"{where}: the loss is {loss.detach().float().flatten()[0].item()}; NaN or inf in the "
            "model's weights, its inputs or its activations (fp16 overflows: load in bf16 or fp32)"
        )


def position_ids(attention_mask: Any) -> Any:
    """Positions counted over the attended tokens (0 at each row's first real token), so a
    left-padded row sees the positions it would see alone: pass them as ``position_ids=`` (GPT-2's
    learned absolute positions otherwise shift by the padding; RoPE models are invariant up to
    rounding)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


# -- targets as TRL tokenises them -----------------------------------------------------------------


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading ids ``a`` and ``b`` share (where a completion starts, as in TRL)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _is_chat(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(isinstance(m, dict) and "role" in m for m in x)


def _chat_ids(tokenizer: Any, messages: Sequence[dict], **kw: Any) -> list[int]:
    out = tokenizer.apply_chat_template(list(messages), tokenize=True, return_dict=True, **kw)
    ids = out["input_ids"]
    if ids and isinstance(ids[0], list):  # processors add a batch dimension
        ids = ids[0]
    return [int(i) for i in ids]


def _text_ids(tokenizer: Any, text: str) -> list[int]:
    return [int(i) for i in tokenizer(text)["input_ids"]]


def _check_row(tokenizer: Any, prompt: Any, completions: Sequence[Any]) -> bool:
    """True for a chat row (lists of messages), False for a text row; TypeError otherwise."""
    if _is_chat(prompt) and all(_is_chat(c) for c in completions):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "chat rows need a tokenizer with a chat template; set tokenizer.chat_template to the "
                "model's own template"
            )
        return True
    if isinstance(prompt, str) and all(isinstance(c, str) for c in completions):
        if not getattr(tokenizer, "eos_token", None):
            raise ValueError("text rows need the tokenizer's eos_token to end the completion")
        return False
    raise TypeError(
        "prompt and completion must both be strings or both lists of {'role', 'content'} messages, "
        f"got {type(prompt).__name__} and {[type(c).__name__ for c in completions]}"
    )


def tokenize_prompt_completion(
    tokenizer: Any, prompt: Any, completion: Any, *, max_length: int | None = None
) -> dict[str, list[int]]:
    """``input_ids`` and ``labels`` (``-100`` on the prompt) of one SFT row, as TRL's
    ``SFTTrainer`` builds them (prompt-completion format, loss on the completion only).

    ``prompt``/``completion``: lists of chat messages (rendered by the chat template: the prompt
    with the generation prompt, the whole conversation without, so the completion ends with the
    template's end of turn) or strings (``tokenizer(prompt + completion + eos_token)``).
    ``max_length``: keep the first ``max_length`` ids (TRL's ``truncation_mode="keep_start"``);
    ``ValueError`` when that leaves no completion token.
    """
    chat = _check_row(tokenizer, prompt, [completion])
    if chat:
        p_ids = _chat_ids(tokenizer, prompt, add_generation_prompt=True)
        ids = _chat_ids(tokenizer, list(prompt) + list(completion))
    else:
        eos = tokenizer.eos_token
        completion = completion if completion.endswith(eos) else completion + eos
        p_ids = _text_ids(tokenizer, prompt)
        ids = _text_ids(tokenizer, prompt + completion)
    n = common_prefix_length(p_ids, ids)
    labels = [IGNORE_INDEX] * n + ids[n:]
    if max_length is not None:
        ids, labels = ids[:max_length], labels[:max_length]
    if all(t == IGNORE_INDEX for t in labels):
        raise ValueError(
            f"no completion token left: the prompt has {n} tokens and max_length={max_length}"
        )
    return {"input_ids": ids, "labels": labels}


def tokenize_preference(
    tokenizer: Any, prompt: Any, chosen: Any, rejected: Any
) -> dict[str, list[int]]:
    """``prompt_ids``, ``chosen_ids`` and ``rejected_ids`` of one preference row, as TRL's
    ``DPOTrainer`` tokenises it (chat rows through the template, text rows with the eos token
    string appended to each response; the prompt cut where either continuation diverges)."""
    chat = _check_row(tokenizer, prompt, [chosen, rejected])
    if chat:
        p_ids = _chat_ids(tokenizer, prompt, add_generation_prompt=True)
        c_ids = _chat_ids(tokenizer, list(prompt) + list(chosen))
        r_ids = _chat_ids(tokenizer, list(prompt) + list(rejected))
    else:
        eos = tokenizer.eos_token
        chosen = chosen if chosen.endswith(eos) else chosen + eos
        rejected = rejected if rejected.endswith(eos) else rejected + eos
        p_ids = _text_ids(tokenizer, prompt)
        c_ids = _text_ids(tokenizer, prompt + chosen)
        r_ids = _text_ids(tokenizer, prompt + rejected)
    n = min(common_prefix_length(p_ids, c_ids), common_prefix_length(p_ids, r_ids))
    return {"prompt_ids": p_ids[:n], "chosen_ids": c_ids[n:], "rejected_ids": r_ids[n:]}


def special_token_ids(tokenizer: Any) -> set[int]:
    """Every special token id: the named ones and the added tokens marked special (Llama-3's
    ``<|eot_id|>`` is only the latter)."""
    ids = {int(i) for i in (getattr(tokenizer, "all_special_ids", None) or [])}
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids |= {int(i) for i, t in added.items() if getattr(t, "special", False)}
    return ids


def end_of_turn_id(tokenizer: Any) -> int | None:
    """The token that closes an assistant turn in the chat template (ChatML's ``<|im_end|>``,
    Llama-3's ``<|eot_id|>``, Gemma's ``<end_of_turn>``, Mistral's ``</s>``): the first special
    token the template renders after an assistant message. ``None`` without a template, or when
    the template writes no special token there. A chat reply should stop at it, whatever the
    tokenizer's ``eos_token`` is (Llama-3.1 base: eos ``<|end_of_text|>``)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    user = [{"role": "user", "content": "hi"}]
    try:
        prompt = _chat_ids(tokenizer, user, add_generation_prompt=True)
        full = _chat_ids(tokenizer, [*user, {"role": "assistant", "content": "ok"}])
    except Exception:  # noqa: BLE001 - a template with rules of its own: no turn end to learn
        return None
    # the probe's own text may tokenise to <unk> (a word vocabulary): not an end of turn
    special = special_token_ids(tokenizer) - {getattr(tokenizer, "unk_token_id", None)}
    for i in full[common_prefix_length(prompt, full) :]:
        if i in special:
            return i
    return None
