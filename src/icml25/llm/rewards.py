"""Reward models: ``score(queries, responses) -> list[float]``, one float per pair."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from icml25._validate import as_int

__all__ = ["CallableReward", "HFRewardModel", "RewardModel", "check_pairs"]


@runtime_checkable
class RewardModel(Protocol):
    """A reward model: ``score(queries, responses)`` gives one float per pair."""

    def score(self, queries: Sequence[str], responses: Sequence[str]) -> list[float]: ...


def check_pairs(
    queries: Sequence[str],
    responses: Sequence[str],
    *,
    names: tuple[str, str, str, str] = ("queries", "responses", "query", "response"),
) -> tuple[list[str], list[str]]:
    """Validate two equally long lists of strings; ``names`` (plural and singular of each side)
    go into the error messages. Shared by the reward models and the moderators."""
    for label, xs in ((names[0], queries), (names[1], responses)):
        if isinstance(xs, (str, bytes)) or not isinstance(xs, Sequence):
            raise TypeError(f"{label} must be a list of strings, got {type(xs).__name__}")
        bad = [i for i, x in enumerate(xs) if not isinstance(x, str)]
        if bad:
            raise TypeError(
                f"{label}[{bad[0]}] is {type(xs[bad[0]]).__name__}, expected str: "
                f"{xs[bad[0]]!r:.60}"
            )
    if len(queries) != len(responses):
        raise ValueError(
            f"need one {names[3]} per {names[2]}: got {len(queries)} {names[0]}, "
            f"{len(responses)} {names[1]}"
        )
    return list(queries), list(responses)


class CallableReward:
    """Wrap ``fn(query, response) -> float`` (called per pair) as a :class:`RewardModel`."""

    def __init__(self, fn: Callable[[str, str], float], *, name: str = "callable") -> None:
        if not callable(fn):
            raise TypeError(f"CallableReward needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name

    def cache_identity(self) -> str:
        """The name and the fingerprint of ``fn`` (a function's code, defaults and closure
        values, :func:`~icml25.llm.store.wrapped_function_identity`): two reward functions under
        one name, or one function edited, are told apart by every cache and store."""
        parts = self.identity_parts()
        if "fn" not in parts:
            return self.name
        from icml25.llm.store import settings_fingerprint

        return f"{self.name} fn={settings_fingerprint({'fn': parts['fn']})}"

    def identity_parts(self) -> dict[str, Any]:
        """What :func:`~icml25.llm.store.describe` shows in a store's settings: the name and
        ``fn``'s description (code digest, defaults, closure values)."""
        from icml25.llm.store import wrapped_function_identity

        ident = wrapped_function_identity(self.fn)
        if ident is None:
            return {"cache_identity": self.name}
        return {"cache_identity": self.name, "fn": ident}

    def score(self, queries: Sequence[str], responses: Sequence[str]) -> list[float]:
        qs, rs = check_pairs(queries, responses)
        return [float(self.fn(q, r)) for q, r in zip(qs, rs)]


class HFRewardModel:
    """A sequence-classification reward model (one output logit), scored on the chat rendering.

    Each pair is rendered as ``[user: query, assistant: response]`` with the tokenizer's chat
    template (plain ``User:/Assistant:`` text without one); the raw logit is the reward. With
    ``strip_bos_text`` the BOS string is removed from the rendered text because the tokenizer adds
    it again when encoding (the RewardBench / official TPO convention).

    The score is the head's output at the last real token of each pair, exactly as a batch of
    one through the ``transformers`` pipeline gives it (official TPO ``reward_model.py``), at
    any batch size: Hugging Face sequence classifiers pool the last token that is not the pad
    id, so a template that ends in EOS with pad = EOS would be pooled one token early. Batches
    are right-padded with an id that occurs in none of the batch's pairs, and the model's pad id
    is set to it for the forward pass only; the user's model and tokenizer are not modified.

    This holds for left- and right-padding tokenizers alike (the batch is built here, not by
    the tokenizer) and for every Hugging Face classifier that pools the last non-pad token
    (Llama, Qwen2, Mistral, GPT-2, ...). A pair longer than the model's context (after the
    ``max_length`` cut) is a ``ValueError`` naming it: the model cannot read it whole.

    Args:
        model: an ``AutoModelForSequenceClassification`` (``num_labels=1``), or a local path / hub
            id loaded by :func:`icml25.llm.load_model` (``kind="seq_cls"``) in eval mode.
        tokenizer: its tokenizer (loaded with the model when that is a path).
        device: where to run. Loading a path: ``"auto"``/``None`` (CUDA when available, else
            CPU) or a device; a model instance is moved there (in place), ``None`` leaves it.
        dtype: ``"auto"`` (a path: the checkpoint's own dtype; an instance: unchanged),
            ``"bf16"``, ``"fp16"``, ``"fp32"`` or a ``torch.dtype`` (an instance is cast in
            place, as ``device`` moves it).
        batch_size: pairs per forward pass (padding is excluded through the attention mask).
        max_length: cut the encoded pair to its first ``max_length`` tokens (``None``: no cut);
            the cut is at the end, so a long query can leave little or nothing of the response.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        device: Any = None,
        dtype: Any = "auto",
        batch_size: int = 8,
        max_length: int | None = None,
        strip_bos_text: bool = True,
    ) -> None:
        import os

        from icml25.llm.loading import load_or_place, load_tokenizer

        if isinstance(model, (str, os.PathLike)):
            tokenizer = tokenizer or load_tokenizer(model)
        model = load_or_place(model, "seq_cls", device=device, dtype=dtype)
        if tokenizer is None:
            raise ValueError("HFRewardModel needs the model's tokenizer (tokenizer=None was given)")
        batch_size = as_int("batch_size", batch_size, 1)
        if max_length is not None:
            max_length = as_int("max_length", max_length, 1)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.strip_bos_text = strip_bos_text
        self._lock = threading.Lock()

    def render(self, query: str, response: str) -> str:
        messages = [{"role": "user", "content": query}, {"role": "assistant", "content": response}]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(messages, tokenize=False)
        else:
            text = f"User: {query}\nAssistant: {response}"
        bos = self.tokenizer.bos_token
        if self.strip_bos_text and bos and text.startswith(bos):
            text = text[len(bos) :]
        return text

    def truncate(self, text: str, n_tokens: int) -> str:
        """``text`` cut to its first ``n_tokens`` tokens of this model's tokenizer (special
        tokens counted, then dropped when decoding), as official TPO's ``truncate_text`` cuts the
        chosen and rejected responses before they enter a prompt; unchanged when it fits."""
        n_tokens = as_int("n_tokens", n_tokens, 1)
        ids = self.tokenizer.encode(text)
        if len(ids) <= n_tokens:
            return text
        return self.tokenizer.decode(ids[:n_tokens], skip_special_tokens=True)

    def score(self, queries: Sequence[str], responses: Sequence[str]) -> list[float]:
        import torch

        from icml25.llm.loading import context_length

        qs, rs = check_pairs(queries, responses)
        encoded = [list(self.tokenizer(self.render(q, r))["input_ids"]) for q, r in zip(qs, rs)]
        if self.max_length is not None:
            encoded = [e[: self.max_length] for e in encoded]
        if any(not e for e in encoded):
            raise ValueError("a pair encoded to no tokens at all; nothing to score")
        limit = context_length(self.model)
        too_long = [i for i, e in enumerate(encoded) if limit is not None and len(e) > limit]
        if too_long:
            i = too_long[0]
            raise ValueError(
                f"pair {i} (query + response) has {len(encoded[i])} tokens, more than the model's "
                f"context of {limit} positions ({len(too_long)} pair(s) too long); shorten it or "
                "pass max_length to cut it"
            )
        device = next(self.model.parameters()).device
        config = self.model.config
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        out: list[float] = []
        for start in range(0, len(encoded), self.batch_size):
            rows = encoded[start : start + self.batch_size]
            used = {t for r in rows for t in r}
            sentinel = next(i for i in range(len(used) + 1) if i not in used)
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), sentinel, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, r in enumerate(rows):
                ids[i, : len(r)] = torch.tensor(r)
                mask[i, : len(r)] = 1
            with self._lock, torch.inference_mode():
                saved = (config.pad_token_id, text_config.pad_token_id)
                config.pad_token_id = text_config.pad_token_id = sentinel
                try:
                    logits = self.model(
                        input_ids=ids.to(device), attention_mask=mask.to(device)
                    ).logits
                finally:
                    config.pad_token_id, text_config.pad_token_id = saved
            if logits.shape[-1] != 1:
                raise ValueError(
                    f"a reward model has one output logit; this one has {logits.shape[-1]}"
                )
            out += logits[:, 0].float().tolist()
        return out
