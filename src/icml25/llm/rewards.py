"""Reward models: ``score(queries, responses) -> list[float]``, one float per pair."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["CallableReward", "HFRewardModel", "RewardModel", "check_pairs"]


@runtime_checkable
class RewardModel(Protocol):
    def score(self, queries: Sequence[str], responses: Sequence[str]) -> list[float]: ...


def check_pairs(queries: Sequence[str], responses: Sequence[str]) -> tuple[list[str], list[str]]:
    """Validate two equally long lists of strings."""
    for label, xs in (("queries", queries), ("responses", responses)):
        if isinstance(xs, str) or not isinstance(xs, Sequence):
            raise TypeError(f"{label} must be a list of strings, got {type(xs).__name__}")
        bad = [i for i, x in enumerate(xs) if not isinstance(x, str)]
        if bad:
            raise TypeError(f"{label}[{bad[0]}] is {type(xs[bad[0]]).__name__}, expected str")
    if len(queries) != len(responses):
        raise ValueError(
            f"queries and responses must pair up: got {len(queries)} queries, {len(responses)} responses"
        )
    return list(queries), list(responses)


class CallableReward:
    """Wrap ``fn(query, response) -> float`` (called per pair) as a :class:`RewardModel`."""

    def __init__(self, fn: Callable[[str, str], float], *, name: str = "callable") -> None:
        if not callable(fn):
            raise TypeError(f"CallableReward needs a callable, got {type(fn).__name__}")
        self.fn = fn
        self.name = name

    def score(self, queries: Sequence[str], responses: Sequence[str]) -> list[float]:
        qs, rs = check_pairs(queries, responses)
        return [float(self.fn(q, r)) for q, r in zip(qs, rs)]


class HFRewardModel:
    """A sequence-classification reward model (one output logit), scored on the chat rendering.

    Each pair is rendered as ``[user: query, assistant: response]`` with the tokenizer's chat
    template (plain ``User:/Assistant:`` text without one); the raw logit is the reward. With
    ``strip_bos_text`` the BOS string is removed from the rendered text because the tokenizer adds
    it again when encoding (the RewardBench / official TPO convention).

    Args:
        model: an ``AutoModelForSequenceClassification`` (``num_labels=1``) or a local path / name.
        tokenizer: its tokenizer (loaded with the model when that is a string).
        device: where to run; default the model's device.
        batch_size: pairs per forward pass (padding is excluded through the attention mask).
        max_length: truncate the encoded pair to this many tokens (``None``: no truncation).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        device: Any = None,
        batch_size: int = 8,
        max_length: int | None = None,
        strip_bos_text: bool = True,
    ) -> None:
        if isinstance(model, str):
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForSequenceClassification.from_pretrained(model)
        if tokenizer is None:
            raise ValueError("HFRewardModel needs the model's tokenizer (tokenizer=None was given)")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if device is not None:
            model = model.to(device)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.strip_bos_text = strip_bos_text
        if tokenizer.pad_token_id is None:
            # Sequence classifiers pool the last non-pad token: they need to know the pad id.
            tokenizer.pad_token = tokenizer.eos_token
        if getattr(model.config, "pad_token_id", None) is None:
            model.config.pad_token_id = tokenizer.pad_token_id

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

    def score(self, queries: Sequence[str], responses: Sequence[str]) -> list[float]:
        import torch

        qs, rs = check_pairs(queries, responses)
        texts = [self.render(q, r) for q, r in zip(qs, rs)]
        device = next(self.model.parameters()).device
        out: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(
                texts[start : start + self.batch_size],
                return_tensors="pt",
                padding=True,
                truncation=self.max_length is not None,
                max_length=self.max_length,
            ).to(device)
            with torch.inference_mode():
                logits = self.model(**enc).logits
            if logits.shape[-1] != 1:
                raise ValueError(
                    f"a reward model has one output logit; this one has {logits.shape[-1]}"
                )
            out += logits[:, 0].float().tolist()
        return out
