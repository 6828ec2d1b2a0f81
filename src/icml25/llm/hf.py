"""``HFChat``: a local Hugging Face causal LM behind the chat protocol, plus ``logprobs``.

Prompts are rendered with the tokenizer's chat template (``add_generation_prompt=True``); a template
that rejects the ``system`` role gets the system text folded into the first user turn; a tokenizer
without a template gets a plain ``System:/User:/Assistant:`` rendering. Generation is batched with
left padding, all ``n`` samples of all requests in one batch, each row with its own seeded
generator (see :mod:`icml25.llm.sampling`); only new tokens are decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from icml25.llm.base import BaseChat, Completion, SamplingParams, message_text, validate_messages
from icml25.llm.sampling import make_decoder, sample

__all__ = ["HFChat", "render_plain"]


def render_plain(messages: Sequence[dict[str, Any]]) -> str:
    """``System: ...\\nUser: ...\\nAssistant:`` for tokenizers without a chat template."""
    lines = [f"{m['role'].capitalize()}: {message_text(m)}" for m in messages]
    return "\n".join(lines) + "\nAssistant:"


class HFChat(BaseChat):
    """Chat with a local ``transformers`` causal LM.

    Args:
        model: a ``PreTrainedModel`` or a local path / hub name for ``AutoModelForCausalLM``
            (a name is only downloaded when you ask for it).
        tokenizer: its tokenizer (loaded from ``model`` when that is a string).
        device: where to run; default the model's own device.
        batch_size: rows (requests x n) generated together.
        fast: use :class:`~icml25.llm.sampling.FastLlamaDecoder` (default: where it applies).
        name: the backend name used in cache keys (default ``hf:<name_or_path>``).
    """

    native_batching = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        device: str | torch.device | None = None,
        batch_size: int = 16,
        fast: bool | None = None,
        name: str | None = None,
    ) -> None:
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = tokenizer or AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model)
        if tokenizer is None:
            raise ValueError("HFChat needs the model's tokenizer (tokenizer=None was given)")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if device is not None:
            model = model.to(device)
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.concurrency = 1
        self.name = (
            name or f"hf:{getattr(model.config, '_name_or_path', '') or type(model).__name__}"
        )
        self.decoder = make_decoder(model, fast)
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            eos |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else {gen_eos}
        self.eos_ids = sorted(eos)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- prompts -----------------------------------------------------------------------------
    def render(self, messages: Sequence[dict[str, Any]]) -> str:
        """The prompt text the model sees for ``messages`` (generation prompt included)."""
        messages = [
            {"role": m["role"], "content": message_text(m)} for m in validate_messages(messages)
        ]
        if not getattr(self.tokenizer, "chat_template", None):
            return render_plain(messages)
        try:
            return self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # noqa: BLE001 - jinja raises its own error types
            if messages[0]["role"] != "system" or "system" not in str(exc).lower():
                raise
        # The template rejects a system turn (e.g. Gemma): fold it into the first user turn.
        system, rest = messages[0]["content"], list(messages[1:])
        if rest and rest[0]["role"] == "user":
            rest[0] = {"role": "user", "content": f"{system}\n\n{rest[0]['content']}"}
        else:
            rest.insert(0, {"role": "user", "content": system})
        return self.tokenizer.apply_chat_template(rest, add_generation_prompt=True, tokenize=False)

    def encode_prompt(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        # The template already carries any BOS text: no second one from the tokenizer.
        return list(self.tokenizer(self.render(messages), add_special_tokens=False)["input_ids"])

    # -- generation ----------------------------------------------------------------------------
    def _complete(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[Completion]:
        return self._complete_many([messages], params)[0]

    def _complete_many(
        self, requests: list[list[dict[str, Any]]], params: SamplingParams
    ) -> list[list[Completion]]:
        prompts = [self.encode_prompt(r) for r in requests]
        rows = [(i, j) for i in range(len(requests)) for j in range(params.n)]
        rows.sort(key=lambda ij: len(prompts[ij[0]]))  # similar lengths together: less padding
        texts: dict[tuple[int, int], Completion] = {}
        for start in range(0, len(rows), self.batch_size):
            batch = rows[start : start + self.batch_size]
            gens = []
            for _i, j in batch:
                g = torch.Generator()
                # seed + j: reproducible per request, different across its n samples
                g.manual_seed(
                    params.seed + j if params.seed is not None else int(torch.randint(0, 2**62, ()))
                )
                gens.append(g)
            stop_fn = self._stop_fn(params.stop) if params.stop else None
            new_ids = sample(
                self.decoder,
                [prompts[i] for i, _ in batch],
                max_new_tokens=params.max_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                eos_ids=self.eos_ids,
                pad_id=self.pad_id,
                generators=gens,
                device=self.device,
                stop_fn=stop_fn,
            )
            for key, ids in zip(batch, new_ids):
                texts[key] = self._finish(ids, params)
        return [[texts[(i, j)] for j in range(params.n)] for i in range(len(requests))]

    def _stop_fn(self, stops: tuple[str, ...]):
        def hit(_row: int, ids: list[int]) -> bool:
            tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=True)
            return any(s in tail for s in stops)

        return hit

    def _finish(self, ids: list[int], params: SamplingParams) -> Completion:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        reason = "length" if len(ids) >= params.max_tokens else "stop"
        for s in params.stop:
            cut = text.find(s)
            if cut >= 0:
                text, reason = text[:cut], "stop"
        return Completion(text=text, finish_reason=reason)

    # -- scoring -------------------------------------------------------------------------------
    def logprobs(
        self, messages: Sequence[dict[str, Any]], continuation: str, *, add_eos: bool = False
    ) -> torch.Tensor:
        """Per-token log-probabilities of ``continuation`` as the assistant's reply to ``messages``.

        Returns a float32 tensor of shape ``(T,)`` on the model's device, one entry per token of
        ``continuation`` (plus the EOS token when ``add_eos``); its sum is the sequence log-likelihood.
        """
        if not isinstance(continuation, str):
            raise TypeError(f"continuation must be a string, got {type(continuation).__name__}")
        prompt = self.encode_prompt(messages)
        if not prompt:
            raise ValueError(
                "the rendered prompt is empty; logprobs needs at least one prompt token"
            )
        cont = list(self.tokenizer(continuation, add_special_tokens=False)["input_ids"])
        if add_eos:
            if not self.eos_ids:
                raise ValueError("add_eos=True but the tokenizer has no EOS token")
            cont.append(self.tokenizer.eos_token_id or self.eos_ids[0])
        if not cont:
            return torch.zeros(0, device=self.device)
        ids = torch.tensor([prompt + cont], device=self.device)
        with torch.inference_mode():
            logits = self.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        return logp.gather(-1, ids[0, len(prompt) :, None]).squeeze(-1)
