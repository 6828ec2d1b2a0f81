"""Batches for TWA training (docs/twa.md "Use it"): token ids, labels and TWA's token roles.

For a causal LM the prompt (``prompt_template`` filled with the source, or ``prompt_fn``) and
the target are tokenized SEPARATELY and concatenated, so the target's character offsets (and
with them the error spans) refer to the target string alone; prompt tokens are labelled -100 and
the target ends with EOS, or, with :func:`chat_prompt_fn`, with the chat template's own end of
turn (as TRL's ``SFTTrainer`` tokenises a chat row). For a seq2seq model the source is the encoder
input and the target (plus EOS) the labels; the model builds its decoder inputs from the labels.
Batches are right-padded and the model is called by keyword.

``positive``, ``span_ids`` (and ``span_mask (B, K, T)``, each span's own tokens, overlaps
included) are aligned with ``labels``; :func:`twa_loss_on_batch` shifts them with
the logits for causal LMs (``logits[:, t]`` predicts ``labels[:, t + 1]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from icml25._validate import as_int
from icml25.preference import IGNORE_INDEX
from icml25.twa.align import UNLOCALIZED_POLICIES, build_token_roles, char_spans_to_token_spans
from icml25.twa.annotations import AnnotatedTranslation, ErrorSpan, severity_weight
from icml25.twa.loss import TWALossOutput, twa_loss

__all__ = ["TWACollator", "chat_prompt_fn", "twa_loss_denominator", "twa_loss_on_batch"]


_SENTINEL = "\u2063TWA\u2063"  # an assistant reply the template cannot confuse with markup


def _turn_end_ids(tokenizer) -> list[int]:
    """What the chat template puts after an assistant message's content (``<|im_end|>`` and a
    newline for ChatML, ``<|eot_id|>`` for Llama-3, ``<end_of_turn>`` and a newline for Gemma), as
    token ids: the end of a chat-format target in TRL's SFT, which renders the whole conversation
    with the template."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL}],
        tokenize=False,
    )
    at = text.rfind(_SENTINEL)
    tail = text[at + len(_SENTINEL) :] if at >= 0 else ""
    ids = list(tokenizer(tail, add_special_tokens=False)["input_ids"]) if tail else []
    return [int(i) for i in ids] or [int(tokenizer.eos_token_id)]


def _prompt_end_ids(tokenizer, render) -> list[int]:
    """The ids ``render(source)`` puts after the source (the template's marker: ``" ="``, or a
    chat template's end of the user turn and generation prompt), found with a sentinel source."""
    text = render(_SENTINEL)
    at = text.rfind(_SENTINEL)
    tail = text[at + len(_SENTINEL) :] if at >= 0 else ""
    return [int(i) for i in tokenizer(tail, add_special_tokens=False)["input_ids"]] if tail else []


def chat_prompt_fn(tokenizer):
    """``source -> ids`` of the source as one user message rendered with the tokenizer's chat
    template and the generation prompt (how :func:`icml25.toy.train_causal_lm` and
    :class:`icml25.llm.hf.HFChat` show a prompt to the model). The function's ``completion_end``
    attribute holds the ids the template closes an assistant turn with; :class:`TWACollator` ends
    each target with them instead of the EOS (the template's end of turn is not always the EOS:
    Llama-3 ``<|eot_id|>`` vs ``<|end_of_text|>``). Its ``prompt_end`` attribute holds the ids
    after the source (the end of the user turn and the generation prompt): a prompt longer than
    ``max_source_len`` is cut inside the source and keeps them."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; use prompt_template instead")

    def fn(source: str) -> list[int]:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": source}], add_generation_prompt=True, tokenize=False
        )
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def render(source: str) -> str:
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": source}], add_generation_prompt=True, tokenize=False
        )

    fn.completion_end = _turn_end_ids(tokenizer)
    fn.prompt_end = _prompt_end_ids(tokenizer, render)
    return fn


def _as_example(ex: Any, i: int) -> AnnotatedTranslation:
    if isinstance(ex, AnnotatedTranslation):
        return ex
    if isinstance(ex, Mapping):
        missing = [k for k in ("source", "target") if k not in ex]
        if missing:
            raise KeyError(f"example {i} lacks {missing} (keys: {sorted(ex)})")
        spans = ex.get("spans") or []
        try:
            spans = [s if isinstance(s, ErrorSpan) else ErrorSpan(**s) for s in spans]
        except TypeError as exc:
            raise ValueError(
                f"example {i}: a span needs start, end and severity ({exc}); got {spans!r:.80}"
            ) from None
        return AnnotatedTranslation(ex["source"], ex["target"], spans)
    raise TypeError(
        f"example {i} must be an AnnotatedTranslation or a dict with source, target and spans, "
        f"got {type(ex).__name__}"
    )


class TWACollator:
    """``collator(examples) -> dict`` of ``input_ids, attention_mask, labels, positive,
    span_ids, span_weights, span_mask`` (right-padded), for ``model_type="causal"`` or ``"seq2seq"``.

    Args:
        tokenizer: a FAST Hugging Face tokenizer (character offsets).
        prompt_template: the causal LM's prompt, ``"{source} ="`` by default (ours); ignored for
            seq2seq. ``add_bos``: start the causal sequence with BOS (when the tokenizer has one).
        max_source_len, max_target_len: truncation (the target's includes EOS; spans are clipped
            to the kept tokens and the first error is found after clipping). A causal prompt is
            cut inside the source: its start and the template's marker after the source stay.
        ignore_off_trajectory, unlocalized: TWA's role rules (:func:`build_token_roles`).
        weights: None (default): each span's weight as loaded (``load_mqm_tsv`` resolves it),
            else the default table for spans without one; a dict or ``"uniform"``: every span is
            re-weighted from its severity and category (the severity ablation).
        prompt_fn: ``source -> prompt token ids`` for causal LMs, replacing the template (e.g.
            :func:`chat_prompt_fn` for a model trained on chat-rendered prompts). When it has a
            ``completion_end`` attribute (:func:`chat_prompt_fn` does) each target ends with those
            ids (the template's end of turn) instead of EOS.
    """

    def __init__(
        self,
        tokenizer,
        *,
        model_type: Literal["causal", "seq2seq"] = "causal",
        prompt_template: str = "{source} =",
        max_source_len: int = 256,
        max_target_len: int = 256,
        ignore_off_trajectory: bool = True,
        unlocalized: Literal["no_positive", "ignore", "drop_example"] = "no_positive",
        weights: Mapping[str, float] | str | None = None,
        add_bos: bool = True,
        prompt_fn=None,
    ) -> None:
        if model_type not in ("causal", "seq2seq"):
            raise ValueError(f"model_type must be 'causal' or 'seq2seq', got {model_type!r}")
        if unlocalized not in UNLOCALIZED_POLICIES:
            raise ValueError(
                f"unlocalized must be one of {UNLOCALIZED_POLICIES}, got {unlocalized!r}"
            )
        for name, v in (("max_source_len", max_source_len), ("max_target_len", max_target_len)):
            as_int(name, v, 2)
        if "{source}" not in prompt_template:
            raise ValueError(f"prompt_template must contain {{source}}, got {prompt_template!r}")
        if not getattr(tokenizer, "is_fast", False):
            raise TypeError(
                "TWACollator needs a fast tokenizer (character offsets): "
                "AutoTokenizer.from_pretrained(..., use_fast=True)"
            )
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no EOS token; set tokenizer.eos_token first")
        if prompt_fn is not None and not callable(prompt_fn):
            raise TypeError(f"prompt_fn must be callable, got {prompt_fn!r}")
        self.prompt_fn = prompt_fn
        end = getattr(prompt_fn, "completion_end", None) if model_type == "causal" else None
        self.target_end = [int(i) for i in end] if end else [int(tokenizer.eos_token_id)]
        self.tok, self.model_type = tokenizer, model_type
        self.prompt_template, self.add_bos = prompt_template, add_bos
        self.max_source_len = as_int("max_source_len", max_source_len, 2)
        self.max_target_len = as_int("max_target_len", max_target_len, 2)
        self.ignore_off_trajectory, self.unlocalized = ignore_off_trajectory, unlocalized
        self.weights = weights
        if model_type == "causal" and prompt_fn is None:
            self.prompt_end = _prompt_end_ids(tokenizer, lambda s: prompt_template.format(source=s))
        else:
            end = getattr(prompt_fn, "prompt_end", None)
            self.prompt_end = None if end is None else [int(i) for i in end]
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else tokenizer.eos_token_id

    def _encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def features(self, ex: AnnotatedTranslation) -> dict[str, Any] | None:
        """One example's unpadded ids, labels and roles (None when its policy drops it)."""
        ids = self._encode(ex.target)
        cut = len(ids) + len(self.target_end) > self.max_target_len
        # a target cut by truncation gets no end: training EOS there would teach early stops
        kept = ids[: self.max_target_len] if cut else ids
        tgt = kept if cut else ids + self.target_end
        T = len(tgt)
        spans = ex.spans
        if self.weights is not None:  # re-weight from the severities
            spans = [
                ErrorSpan(
                    s.start,
                    s.end,
                    s.severity,
                    s.category,
                    s.side,
                    severity_weight(s.severity, s.category, self.weights),
                )
                for s in spans
            ]
        spans, unloc = char_spans_to_token_spans(ex.target, spans, self.tok, max_length=len(kept))
        roles = build_token_roles(
            T,
            spans,
            ignore_off_trajectory=self.ignore_off_trajectory,
            has_unlocalized=bool(unloc),
            unlocalized=self.unlocalized,
        )
        if roles.drop:
            return None
        if self.model_type == "causal":
            if self.prompt_fn is not None:
                prompt = [int(i) for i in self.prompt_fn(ex.source)]
            else:
                bos = (
                    [self.tok.bos_token_id]
                    if self.add_bos and self.tok.bos_token_id is not None
                    else []
                )
                prompt = bos + self._encode(self.prompt_template.format(source=ex.source))
            prompt = self._fit_prompt(prompt)
            n = len(prompt)
            return {
                "input_ids": prompt + tgt,
                "labels": [IGNORE_INDEX] * n + tgt,
                "positive": [False] * n + roles.positive.tolist(),
                "span_ids": [-1] * n + roles.span_ids.tolist(),
                "span_weights": roles.span_weights.tolist(),
                "span_mask": roles.span_mask,
                "offset": n,
            }
        src = self._encode(ex.source)[: self.max_source_len - 1] + [self.tok.eos_token_id]
        return {
            "input_ids": src,
            "labels": tgt,
            "positive": roles.positive.tolist(),
            "span_ids": roles.span_ids.tolist(),
            "span_weights": roles.span_weights.tolist(),
            "span_mask": roles.span_mask,
            "offset": 0,
        }

    def _fit_prompt(self, prompt: list[int]) -> list[int]:
        """A causal prompt of at most ``max_source_len`` ids, cut inside the source: its start
        (BOS, the template's head) and its end (the template's marker after the source, e.g.
        ``" ="`` or the chat template's generation prompt) survive, so the target still follows
        the marker the model answers after. A ``prompt_fn`` without a ``prompt_end`` attribute
        cannot say where its marker starts: a prompt too long for it is refused."""
        if len(prompt) <= self.max_source_len:
            return prompt
        end = self.prompt_end
        if end is None or len(end) >= self.max_source_len or prompt[-len(end) :] != end:
            why = (
                "prompt_fn has no prompt_end attribute (the ids after the source), so the "
                "prompt cannot be cut inside the source"
                if end is None
                else f"the template's {len(end)} marker ids after the source do not fit or "
                "do not end the prompt"
            )
            raise ValueError(
                f"a causal prompt of {len(prompt)} tokens is longer than max_source_len = "
                f"{self.max_source_len} and {why}; raise max_source_len or shorten the source"
            )
        if not end:
            return prompt[: self.max_source_len]
        return prompt[: self.max_source_len - len(end)] + end

    def __call__(self, examples: Sequence[Any]) -> dict[str, Tensor]:
        if isinstance(examples, (str, bytes, Mapping)) or not isinstance(examples, Sequence):
            raise TypeError(f"the collator takes a list of examples, got {type(examples).__name__}")
        if not examples:
            raise ValueError("the batch is empty")
        feats = [self.features(_as_example(ex, i)) for i, ex in enumerate(examples)]
        feats = [f for f in feats if f is not None]
        if not feats:
            raise ValueError(
                "every example of the batch was dropped (unlocalized='drop_example' and each has "
                "an unlocalizable error)"
            )
        B = len(feats)
        L = max(len(f["input_ids"]) for f in feats)
        Lt = max(len(f["labels"]) for f in feats)
        K = max(len(f["span_weights"]) for f in feats)
        out = {
            "input_ids": torch.full((B, L), self.pad_id, dtype=torch.long),
            "attention_mask": torch.zeros(B, L, dtype=torch.long),
            "labels": torch.full((B, Lt), IGNORE_INDEX, dtype=torch.long),
            "positive": torch.zeros(B, Lt, dtype=torch.bool),
            "span_ids": torch.full((B, Lt), -1, dtype=torch.long),
            "span_weights": torch.zeros(B, K, dtype=torch.float32),
            "span_mask": torch.zeros(B, K, Lt, dtype=torch.bool),
        }
        for b, f in enumerate(feats):
            n, m, k = len(f["input_ids"]), len(f["labels"]), len(f["span_weights"])
            out["input_ids"][b, :n] = torch.tensor(f["input_ids"])
            out["attention_mask"][b, :n] = 1
            out["labels"][b, :m] = torch.tensor(f["labels"])
            out["positive"][b, :m] = torch.tensor(f["positive"], dtype=torch.bool)
            out["span_ids"][b, :m] = torch.tensor(f["span_ids"])
            out["span_weights"][b, :k] = torch.tensor(f["span_weights"])
            o, sm = f["offset"], f["span_mask"]
            out["span_mask"][b, :k, o : o + sm.shape[1]] = sm
        return out


def twa_loss_on_batch(
    model,
    batch: Mapping[str, Tensor],
    *,
    model_type: Literal["causal", "seq2seq"] = "causal",
    **loss_kw,
) -> TWALossOutput:
    """Run ``model`` on a :class:`TWACollator` batch and compute :func:`twa_loss` (shifting the
    causal LM's logits against its labels and roles). Works with Hugging Face models (``.logits``)
    and plain modules returning logits; tensors follow the model's device."""
    if model_type not in ("causal", "seq2seq"):
        raise ValueError(f"model_type must be 'causal' or 'seq2seq', got {model_type!r}")
    enc_dec = getattr(getattr(model, "config", None), "is_encoder_decoder", None)
    if enc_dec is not None and enc_dec != (model_type == "seq2seq"):
        kind = "an encoder-decoder" if enc_dec else "a decoder-only"
        raise ValueError(
            f"model_type={model_type!r} but the model is {kind} model: use model_type="
            f"{'seq2seq' if enc_dec else 'causal'!r} (and the same in TWACollator)"
        )
    from icml25.llm import check_context_length

    p = next(model.parameters())
    b = {k: v.to(p.device) for k, v in batch.items()}
    # a sequence past the model's positions is an index error (GPT-2) or silently meaningless
    # (rotary positions): refused, naming the lengths
    what = "a TWA row (prompt + target)" if model_type == "causal" else "a TWA source"
    check_context_length(model, int(b["attention_mask"].sum(-1).max()), what=what)
    if model_type == "seq2seq":
        check_context_length(model, int(b["labels"].shape[1]), what="a TWA target")
    if model_type == "causal":
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
    else:  # the model builds decoder inputs from the labels (Marian, T5, NLLB)
        out = model(
            input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"]
        )
    logits = out.logits if hasattr(out, "logits") else out
    labels, pos, ids = b["labels"], b["positive"], b["span_ids"]
    mask = b.get("span_mask")  # every span's own tokens (overlaps); older batches lack it
    if model_type == "causal":
        logits, labels, pos, ids = logits[:, :-1], labels[:, 1:], pos[:, 1:], ids[:, 1:]
        mask = None if mask is None else mask[:, :, 1:]
    return twa_loss(logits, labels, pos, ids, b["span_weights"], span_mask=mask, **loss_kw)


def twa_loss_denominator(
    batch: Mapping[str, Tensor],
    *,
    model_type: Literal["causal", "seq2seq"] = "causal",
    reduction: Literal["token_mean", "sum", "seq_mean"] = "token_mean",
) -> int:
    """The count :func:`twa_loss_on_batch` divides the batch's summed loss by, from the
    :class:`TWACollator` batch alone (no forward): ``"token_mean"``, the tokens that receive a
    loss (cross-entropy or inside an error span); ``"seq_mean"``, the sequences with at least one
    such token; ``"sum"``, 1. For a causal LM the first position is dropped, as the loss's shift
    drops it. Summed over the micro-batches and processes of an optimiser step it is the
    denominator of the global-batch loss (:class:`~icml25.twa.train.TWAHFTrainer`)."""
    from icml25.twa.loss import REDUCTIONS

    if model_type not in ("causal", "seq2seq"):
        raise ValueError(f"model_type must be 'causal' or 'seq2seq', got {model_type!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if reduction == "sum":
        return 1
    pos, ids = batch["positive"], batch["span_ids"]
    if model_type == "causal":
        pos, ids = pos[:, 1:], ids[:, 1:]
    scored = pos.bool() | (ids >= 0)
    if reduction == "token_mean":
        return int(scored.sum())
    return int(scored.any(-1).sum())
