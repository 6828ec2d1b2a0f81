"""Investigators: causal LMs that read a behaviour and write a prompt, ``q_θ(x | b)``
(arXiv:2502.01236, §3), and their Frank-Wolfe mixtures ``q̄ = Σ_t w_t q_t`` (§4).

An :class:`Investigator` wraps any Hugging Face causal LM (optionally PEFT-wrapped). The behaviour
is its context, the prompt its continuation, one prompt-completion row as TRL trains on it
(:meth:`Investigator.row`):

* ``template="chat"`` (default when the tokenizer has a chat template): the behaviour is the user
  message and the prompt the assistant's reply, so the prompt ends with the template's own end of
  turn (``<|eot_id|>``, ``<|im_end|>``, ...), as TRL's ``SFTTrainer``/``DPOTrainer`` render a
  conversational row;
* ``template="tags"``: raw text ``"<behavior> {b} <prompt>"`` then ``" " + prompt`` and the
  tokenizer's EOS (base models; the tags are configurable), as TRL tokenises a text row.

Sampling and scoring share one masked log-softmax when ``allowed_token_ids`` is given, so
``logprob`` is the exact log-probability of what ``sample`` draws. ``logprob`` sums over the
completion tokens exactly as TRL tokenises them (the prompt and its end of turn; with a fixed
length, the prompt's tokens only) and is differentiable unless called under ``torch.no_grad``.
Scoring and sampling run with dropout off, and a bf16/fp16 investigator computes in its
checkpoint's dtype (under autocast once training has given it float32 master weights).
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from icml25._validate import as_int, as_real
from icml25.elicitation._decode import decode, end_of_turn_ids, low_precision, restrict
from icml25.llm.training import position_ids, special_token_ids

__all__ = ["Investigator", "InvestigatorMixture"]

IGNORE_INDEX = -100


def _max_positions(model: Any) -> int | None:
    from icml25.llm.loading import context_length

    return context_length(model)


def check_length(n: int, limit: int | None, what: str) -> None:
    """``ValueError`` when a sequence of ``n`` tokens exceeds the model's ``limit`` positions."""
    if limit is not None and n > limit:
        raise ValueError(f"{what} has {n} tokens, more than the model's {limit} positions")


def _check_strings(name: str, xs: Any, *, allow_empty: bool = False) -> list[str]:
    if isinstance(xs, (str, bytes)) or not isinstance(xs, Sequence):
        raise TypeError(f"{name} must be a list of strings, got {type(xs).__name__}")
    out = list(xs)
    if not out:
        raise ValueError(f"{name} is empty")
    for i, x in enumerate(out):
        if not isinstance(x, str):
            raise TypeError(f"{name}[{i}] must be a string, got {type(x).__name__}")
        if not allow_empty and not x.strip():
            raise ValueError(f"{name}[{i}] is an empty string")
    return out


class Investigator:
    """``q_θ(x | b)`` on a Hugging Face causal LM.

    Args:
        model, tokenizer: any ``AutoModelForCausalLM`` (or PEFT model) and its tokenizer.
        template: ``"chat"`` or ``"tags"`` (default: ``"chat"`` when the tokenizer has a chat
            template).
        behavior_tag, prompt_tag: the separators of the ``"tags"`` format.
        max_prompt_tokens: sampling budget (default 64, the third-party recipe's prompt length,
            or half the model's positions when that is less).
        max_behavior_tokens: longer behaviours are cut from the left, with a warning (64).
        allowed_token_ids: restrict sampling *and* scoring to these ids (e.g. content words); the
            ids that end a prompt (end of turn, EOS) are added unless ``exact_length`` is set.
        exact_length: every prompt has exactly this many tokens (no end-of-turn token).

    Attributes:
        end_ids: the ids that end a prompt when sampling (the chat template's end of turn, then
            EOS; ``"tags"``: EOS).
        compute_dtype: the checkpoint's bf16/fp16 dtype, or ``None`` (float32): training keeps
            float32 master weights and computes in this dtype.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        template: str | None = None,
        behavior_tag: str = "<behavior>",
        prompt_tag: str = "<prompt>",
        max_prompt_tokens: int | None = None,
        max_behavior_tokens: int = 64,
        allowed_token_ids: Sequence[int] | None = None,
        exact_length: int | None = None,
    ) -> None:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"model must be a loaded causal LM (torch module), got {type(model).__name__}; "
                "load a checkpoint with icml25.llm.load_model(path, device=..., dtype=...)"
            )
        if tokenizer is None:
            raise ValueError("tokenizer is None: pass the investigator's tokenizer")
        has_template = bool(getattr(tokenizer, "chat_template", None))
        template = template or ("chat" if has_template else "tags")
        if template not in ("chat", "tags"):
            raise ValueError(f"template must be 'chat' or 'tags', got {template!r}")
        if template == "chat" and not has_template:
            raise ValueError(
                "template='chat' but the tokenizer has no chat template; use template='tags'"
            )
        max_behavior_tokens = as_int("max_behavior_tokens", max_behavior_tokens, 1)
        limit = _max_positions(model)
        if max_prompt_tokens is None:  # 64 (the third-party recipe's), or what fits the model
            max_prompt_tokens = 64 if limit is None else max(1, min(64, limit // 2))
        max_prompt_tokens = as_int("max_prompt_tokens", max_prompt_tokens, 1)
        if exact_length is not None:
            exact_length = as_int("exact_length", exact_length, 1)
        self.model, self.tokenizer, self.template = model, tokenizer, template
        self.behavior_tag, self.prompt_tag = behavior_tag, prompt_tag
        self.max_prompt_tokens, self.max_behavior_tokens = max_prompt_tokens, max_behavior_tokens
        self.exact_length = exact_length
        self.compute_dtype = low_precision(model)
        vocab = int(model.get_output_embeddings().weight.shape[0])
        eos = tokenizer.eos_token_id
        if eos is None and exact_length is None:
            raise ValueError(
                "the tokenizer has no eos_token_id; give exact_length for fixed-length prompts"
            )
        self.eos_id = eos
        self.end_ids = (
            end_of_turn_ids(tokenizer) if template == "chat" else ([eos] if eos is not None else [])
        )
        # what the row appends after an (empty) prompt: the end of turn and, for ChatML and
        # Gemma, the newline after it; every one must be drawable and scorable
        tail = [] if exact_length is not None else self._encode("b", "")[1]
        self.user_restricted = allowed_token_ids is not None
        if allowed_token_ids is not None:
            ids = sorted({int(i) for i in allowed_token_ids})
            if not ids or ids[0] < 0 or ids[-1] >= vocab:
                raise ValueError(
                    f"allowed_token_ids must be non-empty ids in [0, {vocab}), got {ids[:5]}..."
                )
            if exact_length is None:
                ids = sorted(set(ids) | set(self.end_ids) | set(tail))
        else:
            # special tokens other than the ends of a prompt are never part of one: decoding
            # would drop them, so the text returned would not be what was drawn (and scored)
            special = special_token_ids(tokenizer) - set(self.end_ids) - set(tail)
            ids = [i for i in range(vocab) if i not in special]
        if exact_length is not None:
            ids = [i for i in ids if i not in set(self.end_ids)]  # a fixed length never ends early
        self.allowed = torch.tensor(ids, dtype=torch.long)
        self.max_positions = limit
        if (
            self.max_positions is not None
            and (exact_length or max_prompt_tokens) >= self.max_positions
        ):
            raise ValueError(
                f"prompts of up to {exact_length or max_prompt_tokens} tokens do not fit the model's "
                f"{self.max_positions} positions with a behaviour before them; lower max_prompt_tokens"
            )
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (eos or 0)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- formats -----------------------------------------------------------------------------
    def format(self, behavior: str) -> str:
        """The investigator's context for one behaviour as text (what precedes the prompt)."""
        if self.template == "chat":
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": behavior}], add_generation_prompt=True, tokenize=False
            )
        return f"{self.behavior_tag} {behavior} {self.prompt_tag}"

    def row(self, behavior: str, prompt: str) -> tuple[Any, Any]:
        """``(prompt, completion)`` of ``(b, x)`` as TRL's trainers take it: ``"chat"``: a user
        message and an assistant message (a conversational row); ``"tags"``: the text
        ``"<behavior> {b} <prompt>"`` and ``" " + x`` (a text row; TRL appends the EOS). The
        context ends on a token boundary, so TRL's prompt is the context the investigator samples
        from."""
        x = prompt if prompt.strip() else ""
        if self.template == "chat":
            return [{"role": "user", "content": behavior}], [{"role": "assistant", "content": x}]
        return self.format(behavior), (f" {x}" if x else "")

    def _behavior(self, behavior: str) -> str:
        b_ids = self.tokenizer(behavior, add_special_tokens=False)["input_ids"]
        if len(b_ids) <= self.max_behavior_tokens:
            return behavior
        warnings.warn(
            f"a behaviour of {len(b_ids)} tokens is cut from the left to "
            f"max_behavior_tokens={self.max_behavior_tokens}",
            stacklevel=4,
        )
        return self.tokenizer.decode(b_ids[-self.max_behavior_tokens :], skip_special_tokens=True)

    def _context_ids(self, behavior: str) -> list[int]:
        """The ids the investigator samples after: TRL's prompt ids (the chat template with the
        generation prompt, or the tokenised text with the tokenizer's BOS)."""
        b = self._behavior(behavior)
        if self.template == "chat":
            got = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": b}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
            return [int(i) for i in got]
        return [int(i) for i in self.tokenizer(self.format(b))["input_ids"]]

    def _encode(self, behavior: str, prompt: str) -> tuple[list[int], list[int]]:
        """``(context ids, completion ids)`` of one pair: TRL's tokenisation of :meth:`row`
        (``icml25.llm.tokenize_prompt_completion``); with ``exact_length``, the prompt's own
        tokens and no end of turn."""
        from icml25.llm.training import common_prefix_length, tokenize_prompt_completion

        b = self._behavior(behavior)
        if self.exact_length is None:
            got = tokenize_prompt_completion(self.tokenizer, *self.row(b, prompt))
            ids, labels = got["input_ids"], got["labels"]
            n = next((i for i, t in enumerate(labels) if t != IGNORE_INDEX), len(labels))
            return ids[:n], ids[n:]
        if not prompt.strip():
            return self._context_ids(b), []
        if self.template == "chat":
            return self._context_ids(b), self.tokenizer(prompt, add_special_tokens=False)[
                "input_ids"
            ]
        p_text, c_text = self.row(b, prompt)
        p_ids = self.tokenizer(p_text)["input_ids"]
        ids = self.tokenizer(p_text + c_text)["input_ids"]
        n = common_prefix_length(p_ids, ids)
        return ids[:n], ids[n:]

    def _prompt_ids(self, prompt: str, behavior: str = "b") -> list[int]:
        """The completion ids :meth:`logprob` sums over for ``prompt``."""
        return self._encode(behavior, prompt)[1]

    def autocast(self) -> contextlib.AbstractContextManager:
        """``torch.autocast`` in :attr:`compute_dtype` (a no-op for a float32 investigator): a
        bf16 investigator computes in bf16 before and after training gives it float32 master
        weights, and the same way as its bf16 reference."""
        if self.compute_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.compute_dtype)

    @contextlib.contextmanager
    def _overflow_hint(self) -> Any:
        """Name a float16 overflow as such (weights finite in float32 can overflow float16)."""
        try:
            yield
        except FloatingPointError as exc:
            if self.compute_dtype != torch.float16:
                raise
            raise FloatingPointError(
                f"{exc} in the torch.float16 investigator: float16 activations overflow; load it "
                "in bfloat16 or float32 (dtype='bf16')"
            ) from exc

    def mixed_precision(self) -> Any:
        """``icml25.llm.MixedPrecision`` for training: upcasts the trainable bf16/fp16 parameters
        to float32 (once; build the optimizer after) and autocasts to :attr:`compute_dtype`."""
        from icml25.llm.training import MixedPrecision

        mp = MixedPrecision.prepare(self.model)
        if mp.compute_dtype is None and self.compute_dtype is not None:
            mp = MixedPrecision(self.compute_dtype, self.device.type, 0)
        return mp

    # -- sampling ------------------------------------------------------------------------------
    def sample(
        self,
        behaviors: Sequence[str],
        n: int = 1,
        *,
        temperature: float = 1.0,
        top_p: float = 0.95,
        seed: int | None = None,
        greedy: bool = False,
    ) -> list[list[str]]:
        """``n`` prompts for each behaviour (temperature 1.0 and top-p 0.95: the third-party
        recipe's sampling; docs/elicitation.md, Decisions). ``seed`` fixes the draw. Runs with
        dropout off; a row of a batch gets what it gets alone."""
        bs = _check_strings("behaviors", behaviors)
        n = as_int("n", n, 1)
        temperature = as_real("temperature", temperature, low=0, low_open=True)
        top_p = as_real("top_p", top_p, low=0, high=1, low_open=True)
        gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        contexts = [self._context_ids(b) for b in bs for _ in range(n)]
        check_length(
            max(len(c) for c in contexts) + (self.exact_length or self.max_prompt_tokens),
            self.max_positions,
            "a behaviour's context plus the prompt budget",
        )
        with self._overflow_hint(), self.autocast():
            new = decode(
                self.model,
                contexts,
                max_new_tokens=self.max_prompt_tokens,
                pad_id=self.pad_id,
                eos_ids=self.end_ids,
                greedy=greedy,
                temperature=float(temperature),
                top_p=float(top_p),
                allowed=self.allowed,
                exact_length=self.exact_length,
                generator=gen,
            )
        texts = [self.tokenizer.decode(x, skip_special_tokens=True).strip() for x in new]
        return [texts[i * n : (i + 1) * n] for i in range(len(bs))]

    # -- scoring -------------------------------------------------------------------------------
    def logprob(
        self,
        behaviors: Sequence[str],
        prompts: Sequence[str],
        *,
        normalize: str = "sum",
        batch_size: int = 64,
    ) -> torch.Tensor:
        """``log q(x | b)`` per pair, ``(B,)`` float32 on the model's device: summed (or
        ``normalize="mean"``: averaged) over the completion tokens (:meth:`row`, tokenised as
        TRL does), with the restricted log-softmax when ``allowed_token_ids`` is set.
        Deterministic: the model runs with dropout off (every submodule's mode restored after).
        Differentiable unless under ``torch.no_grad``. A prompt that tokenises to nothing gets the
        floor -1e4."""
        from icml25.llm.training import dropout_disabled

        with dropout_disabled(self.model):
            return self._logprob(behaviors, prompts, normalize=normalize, batch_size=batch_size)

    def _logprob(
        self,
        behaviors: Sequence[str],
        prompts: Sequence[str],
        *,
        normalize: str = "sum",
        batch_size: int = 64,
    ) -> torch.Tensor:
        """:meth:`logprob` in the model's current mode (a training loop sets dropout itself)."""
        if normalize not in ("sum", "mean"):
            raise ValueError(f"normalize must be 'sum' or 'mean', got {normalize!r}")
        total, counts = self._scores(behaviors, prompts, batch_size=batch_size)
        total = torch.where(counts > 0, total, torch.full_like(total, -1e4))
        return total / counts.clamp(min=1) if normalize == "mean" else total

    def _scores(
        self, behaviors: Sequence[str], prompts: Sequence[str], *, batch_size: int = 64
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Summed completion log-probs and completion lengths, in the model's current mode
        (training loops choose dropout themselves)."""
        bs, xs = (
            _check_strings("behaviors", behaviors),
            _check_strings("prompts", prompts, allow_empty=True),
        )
        if len(bs) != len(xs):
            raise ValueError(f"{len(bs)} behaviors but {len(xs)} prompts")
        batch_size = as_int("batch_size", batch_size, 1)
        totals, counts = [], []
        for s in range(0, len(bs), batch_size):
            t, c = self._score_batch(bs[s : s + batch_size], xs[s : s + batch_size])
            totals.append(t)
            counts.append(c)
        return torch.cat(totals), torch.cat(counts)

    def _score_batch(self, bs: list[str], xs: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.device
        rows, spans = [], []
        for b, x in zip(bs, xs):
            c, p = self._encode(b, x)
            if self.exact_length is not None and p and len(p) != self.exact_length:
                raise ValueError(
                    f"prompt {x!r:.40} has {len(p)} tokens; this investigator's prompts have "
                    f"exactly {self.exact_length}"
                )
            check_length(len(c) + len(p), self.max_positions, f"behaviour + prompt {x!r:.30}")
            rows.append(c + p)
            spans.append((len(c), len(p)))
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            ids[r, : len(row)] = torch.tensor(row)
            mask[r, : len(row)] = 1
        ids, mask = ids.to(device), mask.to(device)
        with self.autocast():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask))
        logits = out.logits.float()
        logp = torch.log_softmax(
            restrict(logits[:, :-1], self.allowed.to(device) if self.allowed is not None else None),
            -1,
        )
        tok = logp.gather(-1, ids[:, 1:, None]).squeeze(-1).clamp(min=-1e4)
        sel = torch.zeros_like(tok)
        for r, (c, p) in enumerate(spans):
            sel[r, c - 1 : c - 1 + p] = 1.0
        return (tok * sel).sum(-1), sel.sum(-1)

    # -- persistence ---------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {
            "template": self.template,
            "behavior_tag": self.behavior_tag,
            "prompt_tag": self.prompt_tag,
            "max_prompt_tokens": self.max_prompt_tokens,
            "max_behavior_tokens": self.max_behavior_tokens,
            "allowed_token_ids": self.allowed.tolist() if self.user_restricted else None,
            "exact_length": self.exact_length,
        }

    def save(self, path: str | Path) -> None:
        """The model, tokenizer and settings in a folder (``save_pretrained``). A trained bf16
        investigator is saved with its float32 master weights."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        dtype = (
            None if self.compute_dtype is None else str(self.compute_dtype).removeprefix("torch.")
        )
        (path / "investigator.json").write_text(
            json.dumps({**self.config(), "compute_dtype": dtype})
        )

    @classmethod
    def load(
        cls, path: str | Path, *, device: Any = "auto", dtype: Any = "auto", **kwargs: Any
    ) -> Investigator:
        """An investigator saved with :meth:`save`, loaded through ``icml25.llm.load_model``
        (``device``: ``"auto"`` = CUDA when there is one; ``dtype``: ``"auto"`` = the saved
        dtype, or ``"bf16"``, ``"fp32"``, ...); ``kwargs`` override the saved settings. With
        ``dtype="auto"`` a trained bf16 investigator (saved with float32 master weights) computes
        in bf16 again, as it did before saving."""
        from icml25.llm.loading import load_model, load_tokenizer

        path = Path(path)
        if not (path / "investigator.json").exists():
            raise FileNotFoundError(
                f"{path} holds no investigator.json (save with Investigator.save)"
            )
        cfg = {**json.loads((path / "investigator.json").read_text()), **kwargs}
        compute = cfg.pop("compute_dtype", None)
        model = load_model(path, "causal_lm", device=device, dtype=dtype)
        inv = cls(model, load_tokenizer(path), **cfg)
        if compute is not None and dtype in ("auto", None) and inv.compute_dtype is None:
            inv.compute_dtype = getattr(torch, compute)
        return inv

    def copy(self) -> Investigator:
        """An independent copy (new weights, same settings, same compute dtype): a Frank-Wolfe
        iterate's start."""
        import copy

        new = Investigator(copy.deepcopy(self.model), self.tokenizer, **self.config())
        new.compute_dtype = self.compute_dtype
        return new


class InvestigatorMixture:
    """``q̄(x | b) = Σ_t w_t q_t(x | b)`` (weights renormalised; ``w >= 0``, ``Σ w > 0``)."""

    def __init__(
        self, members: Sequence[Investigator], weights: Sequence[float] | None = None
    ) -> None:
        members = list(members)
        if not members or not all(isinstance(m, Investigator) for m in members):
            raise ValueError("members must be a non-empty list of Investigator")
        if weights is None:
            weights = [1.0] * len(members)
        elif isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__"):
            raise TypeError(f"weights must be a list of numbers, got {type(weights).__name__}")
        else:
            weights = [as_real(f"weights[{i}]", w, low=0) for i, w in enumerate(weights)]
        self.members: list[Investigator] = members
        self.weights = self._normalised(weights, len(members))

    @staticmethod
    def _normalised(weights: list[float], n: int) -> list[float]:
        if len(weights) != n:
            raise ValueError(f"{len(weights)} weights for {n} members")
        if any(not math.isfinite(w) or w < 0 for w in weights):
            raise ValueError(f"weights must be finite and >= 0, got {weights}")
        total = sum(weights)
        if not total > 0:
            raise ValueError(f"the weights must sum to > 0, got {weights}")
        return [w / total for w in weights]

    def append(self, q: Investigator, eta: float) -> None:
        """The Frank-Wolfe update ``q̄ <- (1 - eta) q̄ + eta q`` (``eta`` in (0, 1])."""
        if not isinstance(q, Investigator):
            raise TypeError(f"q must be an Investigator, got {type(q).__name__}")
        eta = as_real("eta", eta, low=0, high=1, low_open=True)
        self.members.append(q)
        self.weights = self._normalised(
            [w * (1 - eta) for w in self.weights] + [float(eta)], len(self.members)
        )

    @torch.no_grad()
    def logprob(self, behaviors: Sequence[str], prompts: Sequence[str], **kw: Any) -> torch.Tensor:
        """``log Σ_t w_t q_t(x | b)`` by ``logsumexp`` (float32, CPU)."""
        parts = torch.stack(
            [m.logprob(behaviors, prompts, **kw).float().cpu() for m in self.members]
        )
        logw = torch.log(torch.tensor(self.weights, dtype=torch.float32))[:, None]
        return torch.logsumexp(parts + logw, 0)

    def sample(
        self, behaviors: Sequence[str], n: int = 1, *, seed: int | None = None, **kw: Any
    ) -> list[list[str]]:
        """``n`` prompts per behaviour: for each, a member drawn by weight, then a prompt from it."""
        bs = _check_strings("behaviors", behaviors)
        gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
        which = torch.multinomial(
            torch.tensor(self.weights), len(bs) * n, replacement=True, generator=gen
        ).tolist()
        slots: list[str | None] = [None] * (len(bs) * n)
        for t, m in enumerate(self.members):
            idx = [i for i, w in enumerate(which) if w == t]
            if not idx:
                continue
            sub = [bs[i // n] for i in idx]
            drawn = m.sample(sub, 1, seed=None if seed is None else int(seed) * 1000 + t, **kw)
            for i, d in zip(idx, drawn):
                slots[i] = d[0]
        return [[str(slots[i * n + k]) for k in range(n)] for i in range(len(bs))]
