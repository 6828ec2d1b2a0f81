"""Target models: what the investigator elicits behaviour from (arXiv:2502.01236, §3).

A target scores ``log p_m(y | x)`` (string elicitation needs it) and generates responses (rubric
elicitation and evaluation). Prompts are exchanged as *strings*: the target re-tokenises them with
its own tokenizer and chat template, so investigator and target need not share a vocabulary.

* :class:`HFTargetModel`: a local Hugging Face causal LM, scored by one teacher-forced forward
  pass per batch (right padding), generating with a KV cache (left padding); both with dropout off
  and ``position_ids`` from the attention mask, so a row of a batch scores and generates what it
  would alone. A chat model's reply ends with its template's end of turn (``<|eot_id|>``,
  ``<|im_end|>``, ...): generation stops there and ``add_eos`` scores it.
* :class:`OpenAICompatTarget`: any OpenAI-compatible server; scoring through ``/v1/completions``
  with ``echo=true`` and ``logprobs`` (vLLM, llama.cpp), which OpenAI's own API does not offer
  (``NotImplementedError``: use rubric elicitation there).

Log-probabilities are float32 CPU tensors of shape ``(B,)``; per-token values are clamped at
-1e4 so a masked or impossible token cannot make a reward ``-inf``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from icml25._validate import as_int, as_real
from icml25.elicitation._decode import decode, end_of_turn_ids
from icml25.elicitation.investigator import _check_strings, _max_positions, check_length
from icml25.llm.training import position_ids

__all__ = ["HFTargetModel", "OpenAICompatTarget", "TargetModel"]

FLOOR = -1e4


@runtime_checkable
class TargetModel(Protocol):
    """A target language model as the investigator sees it: ``logprob`` of responses given
    prompts and ``generate``."""

    def logprob(
        self, prompts: list[str], responses: list[str], normalize: str = "sum"
    ) -> torch.Tensor: ...

    def generate(
        self, prompts: list[str], max_new_tokens: int, greedy: bool = True
    ) -> list[str]: ...


def _pairs(prompts: Any, responses: Any, normalize: str) -> tuple[list[str], list[str]]:
    ps, ys = (
        _check_strings("prompts", prompts, allow_empty=True),
        _check_strings("responses", responses),
    )
    if len(ps) != len(ys):
        raise ValueError(f"{len(ps)} prompts but {len(ys)} responses")
    if normalize not in ("sum", "mean"):
        raise ValueError(f"normalize must be 'sum' or 'mean', got {normalize!r}")
    return ps, ys


class HFTargetModel:
    """A local causal LM as the target.

    Args:
        model, tokenizer: the target and its tokenizer.
        use_chat_template: render the prompt as a user message with the chat template (chat
            models); ``False`` scores and continues the raw text (base models).
        add_eos: the response is scored with the token that ends it after it (an *exact*
            response; ``False``: the response as a prefix of what the model says): the chat
            template's end of turn with ``use_chat_template``, else the EOS.
        device: where to run (default: the model's device).
        batch_size: sequences per forward pass.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        use_chat_template: bool | None = None,
        add_eos: bool = False,
        device: str | torch.device | None = None,
        batch_size: int = 16,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"model must be a loaded causal LM (torch module), got {type(model).__name__}"
            )
        if use_chat_template is None:
            use_chat_template = False
            if getattr(tokenizer, "chat_template", None):
                import warnings

                warnings.warn(
                    "the tokenizer has a chat template but use_chat_template was not given: prompts are "
                    "scored and continued as raw text (a base model); pass use_chat_template=True for a "
                    "chat model, or False to silence this",
                    stacklevel=2,
                )
        if use_chat_template and not getattr(tokenizer, "chat_template", None):
            raise ValueError("use_chat_template=True but the tokenizer has no chat template")
        batch_size = as_int("batch_size", batch_size, 1)
        self.max_positions = _max_positions(model)
        if add_eos and tokenizer.eos_token_id is None:
            raise ValueError("add_eos=True but the tokenizer has no eos_token_id")
        self.model = model.to(device) if device is not None else model
        self.tokenizer, self.use_chat_template, self.add_eos = (
            tokenizer,
            bool(use_chat_template),
            bool(add_eos),
        )
        self.batch_size = batch_size
        self.pad_id = (
            tokenizer.pad_token_id
            if tokenizer.pad_token_id is not None
            else (tokenizer.eos_token_id or 0)
        )
        # where a reply ends: the template's end of turn (then EOS) for a chat model
        self.end_ids = (
            end_of_turn_ids(tokenizer)
            if self.use_chat_template
            else ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
        )

    @classmethod
    def load(
        cls, path: Any, *, device: Any = "auto", dtype: Any = "auto", **kwargs: Any
    ) -> HFTargetModel:
        """A target from a ``save_pretrained`` folder or a hub id, loaded through
        ``icml25.llm.load_model`` (``device``: ``"auto"`` = CUDA when there is one; ``dtype``:
        ``"auto"`` = the checkpoint's own, or ``"bf16"``, ``"fp32"``, ...) with its tokenizer;
        ``kwargs`` as the constructor (``use_chat_template=True``, ``add_eos=...``)."""
        from icml25.llm.loading import load_model, load_tokenizer

        model = load_model(path, "causal_lm", device=device, dtype=dtype)
        return cls(model, load_tokenizer(path), **kwargs)

    def _prompt_ids(self, prompt: str) -> list[int]:
        if self.use_chat_template:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt)["input_ids"]  # a base model: its BOS, if any

    @torch.inference_mode()
    def logprob(
        self, prompts: Sequence[str], responses: Sequence[str], normalize: str = "sum"
    ) -> torch.Tensor:
        """``log p_m(y | x)`` per pair (sum or mean over the response tokens)."""
        from icml25.llm.training import dropout_disabled

        ps, ys = _pairs(prompts, responses, normalize)
        device = next(self.model.parameters()).device
        out = []
        with dropout_disabled(self.model):
            for s in range(0, len(ps), self.batch_size):
                rows, spans = [], []
                for x, y in zip(ps[s : s + self.batch_size], ys[s : s + self.batch_size]):
                    p = self._prompt_ids(x)
                    r = self.tokenizer(y, add_special_tokens=False)["input_ids"]
                    r = r + (self.end_ids[:1] if self.add_eos else [])
                    if not p:
                        p = [self.pad_id]
                    check_length(
                        len(p) + len(r), self.max_positions, f"prompt + response {x!r:.30}"
                    )
                    rows.append(p + r)
                    spans.append((len(p), len(r)))
                width = max(len(r) for r in rows)
                ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for i, row in enumerate(rows):
                    ids[i, : len(row)] = torch.tensor(row)
                    mask[i, : len(row)] = 1
                ids, mask = ids.to(device), mask.to(device)
                logits = self.model(
                    input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)
                ).logits.float()
                tok = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
                tok = tok.clamp(min=FLOOR)
                for i, (a, n) in enumerate(spans):
                    v = tok[i, a - 1 : a - 1 + n]
                    out.append(v.sum() if normalize == "sum" else v.mean())
        return torch.stack(out).float().cpu()

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 64,
        greedy: bool = True,
        *,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[str]:
        """The target's responses (greedy by default), stopping at the end of its turn (the chat
        template's end-of-turn token or the EOS)."""
        ps = _check_strings("prompts", prompts, allow_empty=True)
        max_new_tokens = as_int("max_new_tokens", max_new_tokens, 1)
        if not greedy:
            temperature = as_real(
                "temperature (for sampling, greedy=False)", temperature, low=0, low_open=True
            )
        gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        out: list[str] = []
        eos = self.end_ids
        for s in range(0, len(ps), max(self.batch_size, 64)):
            ctx = [
                self._prompt_ids(x) or [self.pad_id] for x in ps[s : s + max(self.batch_size, 64)]
            ]
            check_length(
                max(len(c) for c in ctx) + max_new_tokens,
                self.max_positions,
                "the longest prompt plus max_new_tokens",
            )
            new = decode(
                self.model,
                ctx,
                max_new_tokens=max_new_tokens,
                pad_id=self.pad_id,
                eos_ids=eos,
                greedy=greedy,
                temperature=temperature,
                generator=gen,
            )
            out += [self.tokenizer.decode(x, skip_special_tokens=True).strip() for x in new]
        return out


class OpenAICompatTarget:
    """A target behind an OpenAI-compatible server, through ``/v1/completions`` (raw text) for
    both scoring and generation, so both see the same text.

    ``logprob`` posts ``render(prompt) + separator + response`` with ``echo=true`` and
    ``logprobs`` and sums the log-probs of the tokens from the response on
    (``icml25.llm.OpenAIChat.continuation_logprobs``; the separator, a space added when neither
    side has one, is scored with the response, as byte-level and SentencePiece tokenizers attach
    it to the next word). ``generate`` continues ``render(prompt)``. Servers without echoed
    prompt log-probs (OpenAI's API) raise ``NotImplementedError`` in ``logprob``: use rubric
    elicitation (:class:`~icml25.elicitation.rewards.RubricReward`) there.

    Args:
        base_url, model, api_key: the server (``api_key`` default ``$OPENAI_API_KEY``).
        chat_template: for a chat model, the rendering of one user turn and the start of the
            assistant's reply with a ``{prompt}`` slot (e.g. Llama 3's
            ``"<|start_header_id|>user<|end_header_id|>\\n\\n{prompt}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\\n\\n"``);
            ``None``: the prompt is raw text (a base model).
        concurrency: requests in flight.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        chat_template: str | None = None,
        concurrency: int = 8,
        timeout: float = 60.0,
        separator: str = " ",
    ) -> None:
        from icml25.llm import OpenAIChat

        if chat_template is not None and (
            not isinstance(chat_template, str) or "{prompt}" not in chat_template
        ):
            raise ValueError(
                f"chat_template must be a string with a {{prompt}} slot, got {chat_template!r:.60}"
            )
        concurrency = as_int("concurrency", concurrency, 1)
        self.chat = OpenAIChat(
            base_url, model, api_key=api_key, concurrency=concurrency, timeout=timeout
        )
        self.concurrency, self.separator, self.chat_template = concurrency, separator, chat_template

    def render(self, prompt: str) -> str:
        """The text the server sees for ``prompt``."""
        return (
            prompt if self.chat_template is None else self.chat_template.replace("{prompt}", prompt)
        )

    def _map(self, fn: Any, items: list[Any]) -> list[Any]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(fn, items))

    def logprob(
        self, prompts: Sequence[str], responses: Sequence[str], normalize: str = "sum"
    ) -> torch.Tensor:
        ps, ys = _pairs(prompts, responses, normalize)

        def one(pair: tuple[str, str]) -> float:
            x, y = self.render(pair[0]), pair[1]
            if x and not x[-1].isspace() and not y[:1].isspace():
                y = self.separator + y  # the space belongs to the response's first token
            vals = [max(FLOOR, float(v)) for v in self.chat.continuation_logprobs(x, y)]
            if not vals:
                return FLOOR
            return sum(vals) if normalize == "sum" else sum(vals) / len(vals)

        return torch.tensor(self._map(one, list(zip(ps, ys))), dtype=torch.float32)

    def generate(
        self,
        prompts: Sequence[str],
        max_new_tokens: int = 64,
        greedy: bool = True,
        *,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[str]:
        ps = _check_strings("prompts", prompts, allow_empty=True)
        max_new_tokens = as_int("max_new_tokens", max_new_tokens, 1)

        def one(x: str) -> str:
            body = {
                "model": self.chat.model,
                "prompt": self.render(x),
                "max_tokens": max_new_tokens,
                "temperature": 0.0 if greedy else float(temperature),
            }
            if seed is not None:
                body["seed"] = int(seed)
            data = self.chat._post("completions", body)
            try:
                return str(data["choices"][0]["text"]).strip()
            except (KeyError, IndexError, TypeError) as exc:
                raise ValueError(
                    f"{self.chat.base_url}/completions returned no text: {data!r:.200}"
                ) from exc

        return self._map(one, ps)
