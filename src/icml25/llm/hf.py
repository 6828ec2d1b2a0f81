"""``HFChat``: a local Hugging Face causal LM behind the chat protocol, plus ``logprobs``.

Prompts are rendered with the tokenizer's chat template (``add_generation_prompt=True``); a template
that rejects the ``system`` role gets the system text folded into the first user turn; a tokenizer
without a template gets a plain ``System:/User:/Assistant:`` rendering, with a warning (or an error
with ``require_template=True``). Generation is batched with left padding, all ``n`` samples of all
requests in one batch, each row with its own generator (see :mod:`icml25.llm.sampling`) seeded from
the request's seed, the prompt and the sample index, so distinct prompts draw independent samples
while a repeated request reproduces its answer; only new tokens are decoded.

Real checkpoints: a path loads through :func:`icml25.llm.load_model` (``device``, ``dtype``);
generation and scoring run with dropout off (a policy in ``train()`` mode keeps it on for its
training step only); a reply ends at the tokenizer's EOS, at every ``generation_config.eos_token_id``
and at the (special) token that closes an assistant turn in the chat template (Llama-3's
``<|eot_id|>``, ChatML's ``<|im_end|>``, Gemma's ``<end_of_turn>``); a prompt that does not fit
the model's context (with ``max_tokens`` new tokens when given) is a ``ValueError`` for that
request, as a vLLM server answers it; without ``max_tokens`` a reply stops where the context ends.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from icml25._validate import as_int
from icml25.llm.base import (
    BaseChat,
    Completion,
    RequestResult,
    SamplingParams,
    TokenLogprob,
    message_text,
    validate_messages,
)
from icml25.llm.loading import (
    check_context_length,
    context_length,
    load_or_place,
    load_tokenizer,
    resolve_dtype,
)
from icml25.llm.sampling import make_decoder, sample
from icml25.llm.training import dropout_disabled, end_of_turn_id

__all__ = ["HFChat", "end_of_turn_ids", "render_plain", "row_seed", "weights_fingerprint"]


def render_plain(messages: Sequence[dict[str, Any]]) -> str:
    """``System: ...\\nUser: ...\\nAssistant:`` for tokenizers without a chat template."""
    lines = [f"{m['role'].capitalize()}: {message_text(m)}" for m in messages]
    return "\n".join(lines) + "\nAssistant:"


class HFChat(BaseChat):
    """Chat with a local ``transformers`` causal LM.

    Args:
        model: a ``PreTrainedModel`` or a local path / hub name, loaded with
            :func:`icml25.llm.load_model` (kind ``causal_lm``; a name is only downloaded when
            you ask for it).
        tokenizer: its tokenizer (loaded from ``model`` when that is a path).
        device: where to run. For a path: ``None``/``"auto"`` is the GPU when there is one, else
            the CPU. A model object stays where it is unless ``device`` is given.
        dtype: ``"auto"`` (a path loads in the checkpoint's own dtype; a model object is left as
            it is), ``"bf16"``, ``"fp16"``, ``"fp32"`` or a ``torch.dtype`` (a model object is
            cast in place).
        device_map: for a path, passed to ``load_model`` (e.g. ``"auto"`` to shard a large model
            over the GPUs); replaces ``device``.
        batch_size: rows (requests x n) generated together.
        fast: use :class:`~icml25.llm.sampling.FastLlamaDecoder` (default: where it applies).
        name: the backend's name (default ``hf:<name_or_path>``); cache keys add a fingerprint of
            the weights (:meth:`cache_identity`).
        require_template: raise instead of warning when the tokenizer has no chat template.
        max_new_tokens: the length limit of a request that leaves ``max_tokens`` at ``None``.

    Sampling arguments left at ``None`` take the model's ``generation_config`` values
    (``temperature``, ``top_p``; 1.0 where it has none), as vLLM does.
    """

    native_batching = True

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        device: str | torch.device | None = None,
        dtype: Any = "auto",
        device_map: Any = None,
        batch_size: int = 16,
        fast: bool | None = None,
        name: str | None = None,
        require_template: bool = False,
        max_new_tokens: int = 1024,
    ) -> None:
        batch_size = as_int("batch_size", batch_size, 1)
        max_new_tokens = as_int("max_new_tokens", max_new_tokens, 1)
        resolve_dtype(dtype)  # a bad dtype fails before anything loads
        if isinstance(model, (str, os.PathLike)):
            tokenizer = tokenizer or load_tokenizer(model)
        model = load_or_place(model, "causal_lm", device=device, dtype=dtype, device_map=device_map)
        if tokenizer is None:
            raise ValueError("HFChat needs the model's tokenizer (tokenizer=None was given)")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.require_template = bool(require_template)
        self.max_new_tokens = max_new_tokens
        self._warned_plain = False
        self._fingerprint: tuple[tuple, str] | None = None
        if require_template and not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                "require_template=True but the tokenizer has no chat_template; set "
                "tokenizer.chat_template (a Jinja string) or allow the plain rendering"
            )
        self.concurrency = 1
        self.name = (
            name or f"hf:{getattr(model.config, '_name_or_path', '') or type(model).__name__}"
        )
        self.decoder = make_decoder(model, fast)
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            eos |= set(gen_eos) if isinstance(gen_eos, (list, tuple)) else {gen_eos}
        eos |= end_of_turn_ids(tokenizer)
        self.eos_ids = sorted(eos)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def cache_identity(self) -> str:
        """``name`` plus a fingerprint of the weights: a SHA-256 over every parameter's name,
        shape, dtype and values (models up to 2^26 weights in full; larger ones through a fixed
        strided sample of 2^16 values per tensor, which any training step changes). Recomputed
        only when a parameter was modified in place since the last call (torch's version
        counters), so a model retrained in place gets a new identity."""
        params = list(self.model.named_parameters())
        stamp = tuple((n, p.data_ptr(), p._version) for n, p in params)
        if self._fingerprint is None or self._fingerprint[0] != stamp:
            self._fingerprint = (stamp, weights_fingerprint(self.model))
        return f"{self.name}#{self._fingerprint[1][:16]}"

    # -- prompts -----------------------------------------------------------------------------
    def render(self, messages: Sequence[dict[str, Any]]) -> str:
        """The prompt text the model sees for ``messages`` (generation prompt included)."""
        messages = [
            {"role": m["role"], "content": message_text(m)} for m in validate_messages(messages)
        ]
        if not getattr(self.tokenizer, "chat_template", None):
            if self.require_template:
                raise ValueError(
                    "the tokenizer has no chat_template and require_template=True; set "
                    "tokenizer.chat_template or allow the plain System:/User:/Assistant: rendering"
                )
            if not self._warned_plain:
                self._warned_plain = True
                warnings.warn(
                    f"{self.name}: the tokenizer has no chat template; prompts are rendered as "
                    "plain 'System:/User:/Assistant:' text, which a chat-tuned model was not "
                    "trained on (HFChat(..., require_template=True) makes this an error)",
                    UserWarning,
                    stacklevel=3,
                )
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
        (result,) = self._complete_many([messages], params)
        if isinstance(result, BaseException):
            raise result
        return result

    def _resolved(self, params: SamplingParams) -> tuple[float, float, int]:
        gc = getattr(self.model, "generation_config", None)
        t = params.temperature
        if t is None:
            t = getattr(gc, "temperature", None)
            t = 1.0 if t is None else float(t)
        p = params.top_p
        if p is None:
            p = getattr(gc, "top_p", None)
            p = 1.0 if p is None else float(p)
        return t, p, params.max_tokens if params.max_tokens is not None else self.max_new_tokens

    def _complete_many(
        self, requests: list[list[dict[str, Any]]], params: SamplingParams
    ) -> list[RequestResult]:
        results: list[RequestResult | None] = [None] * len(requests)
        prompts: dict[int, list[int]] = {}
        temperature, top_p, max_tokens = self._resolved(params)
        limit = context_length(self.model)
        room: dict[int, int] = {}  # new tokens each request may generate
        for i, r in enumerate(requests):
            try:
                ids = self.encode_prompt(r)
                # A max_tokens the caller asked for must fit (vLLM's rule); the default one is
                # cut to the room left, which must be at least one token.
                asked = params.max_tokens is not None
                check_context_length(self.model, len(ids), max_tokens if asked else 1)
                room[i] = (
                    max_tokens if asked or limit is None else min(max_tokens, limit - len(ids))
                )
                prompts[i] = ids
            except Exception as exc:  # noqa: BLE001 - this request fails, the others go on
                results[i] = exc
        rows = [(i, j) for i in prompts for j in range(params.n)]
        rows.sort(key=lambda ij: len(prompts[ij[0]]))  # similar lengths together: less padding
        texts: dict[tuple[int, int], Completion] = {}
        k = None if not params.logprobs else int(params.top_logprobs or 0)
        for start in range(0, len(rows), self.batch_size):
            batch = rows[start : start + self.batch_size]
            gens = []
            for i, j in batch:
                g = torch.Generator()
                g.manual_seed(
                    row_seed(params.seed, prompts[i], j)
                    if params.seed is not None
                    else int(torch.randint(0, 2**62, ()))
                )
                gens.append(g)
            stop_fn = self._stop_fn(params.stop) if params.stop else None
            try:
                with dropout_disabled(self.model):
                    got = sample(
                        self.decoder,
                        [prompts[i] for i, _ in batch],
                        max_new_tokens=[room[i] for i, _ in batch],
                        temperature=temperature,
                        top_p=top_p,
                        eos_ids=self.eos_ids,
                        pad_id=self.pad_id,
                        generators=gens,
                        device=self.device,
                        stop_fn=stop_fn,
                        logprobs=k,
                    )
            except Exception as exc:  # noqa: BLE001 - e.g. out of memory: this chunk fails
                for i, _ in batch:
                    results[i] = exc
                continue
            new_ids, lps = got if k is not None else (got, None)
            for r, (key, ids) in enumerate(zip(batch, new_ids)):
                texts[key] = self._finish(
                    ids, room[key[0]], params.stop, None if lps is None else lps[r]
                )
        for i in prompts:
            if results[i] is None:
                results[i] = [texts[(i, j)] for j in range(params.n)]
        return results  # type: ignore[return-value]

    def _stop_fn(self, stops: tuple[str, ...]):
        def hit(_row: int, ids: list[int]) -> bool:
            tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=True)
            return any(s in tail for s in stops)

        return hit

    def _finish(
        self, ids: list[int], max_tokens: int, stops: tuple[str, ...], lps: list | None
    ) -> Completion:
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        reason = "length" if len(ids) >= max_tokens else "stop"
        for s in stops:
            cut = text.find(s)
            if cut >= 0:
                text, reason = text[:cut], "stop"
        logprobs = None
        if lps is not None:
            piece = self.tokenizer.convert_ids_to_tokens
            logprobs = [
                TokenLogprob(piece(t), lp, [(piece(a), v) for a, v in top])
                for t, (lp, top) in zip(ids, lps)
            ]
        return Completion(text=text, finish_reason=reason, logprobs=logprobs)

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
        check_context_length(self.model, len(prompt) + len(cont), what="prompt + continuation")
        ids = torch.tensor([prompt + cont], device=self.device)
        with torch.inference_mode(), dropout_disabled(self.model):
            logits = self.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        logp = torch.log_softmax(logits, dim=-1)
        return logp.gather(-1, ids[0, len(prompt) :, None]).squeeze(-1)

    def text_logprobs(self, text: str) -> list[tuple[str, int, float | None]]:
        """``(token, char offset, log p(token | tokens before))`` for every token of raw
        ``text`` as the tokenizer encodes it (special tokens such as BOS included; the first
        token has no log-prob: ``None``). What a vLLM server returns for ``echo=True,
        logprobs=1`` on ``/v1/completions``; :class:`~icml25.llm.ChatServer` answers that route
        with it."""
        tokens, starts, _ends, values = self._scored(text)
        return list(zip(tokens, starts, values))

    def _scored(self, text: str) -> tuple[list[str], list[int], list[int], list[float | None]]:
        if not isinstance(text, str) or not text:
            raise ValueError(f"text must be a non-empty string, got {text!r:.40}")
        try:
            enc = self.tokenizer(text, return_offsets_mapping=True)
        except NotImplementedError as exc:  # slow (Python) tokenizers have no offsets
            raise NotImplementedError(
                "text_logprobs needs a fast tokenizer (offset mapping)"
            ) from exc
        ids = list(enc["input_ids"])
        starts = [int(a) for a, _ in enc["offset_mapping"]]
        ends = [int(b) for _, b in enc["offset_mapping"]]
        values: list[float | None] = [None]
        check_context_length(self.model, len(ids), what="text")
        if len(ids) > 1:
            x = torch.tensor([ids], device=self.device)
            with torch.inference_mode(), dropout_disabled(self.model):
                logp = torch.log_softmax(self.model(input_ids=x).logits[0, :-1].float(), dim=-1)
            values += logp.gather(-1, x[0, 1:, None]).squeeze(-1).tolist()
        return self.tokenizer.convert_ids_to_tokens(ids), starts, ends, values

    def continuation_logprobs(self, prompt: str, continuation: str) -> list[float]:
        """Per-token ``log p(continuation | prompt)`` of raw text (no chat template): the tokens
        of ``prompt + continuation`` that start at or after ``len(prompt)``, exactly as
        :meth:`icml25.llm.OpenAIChat.continuation_logprobs` selects them from a server's echo.
        A token that straddles the boundary raises ``ValueError`` (with byte-level BPE, start
        the continuation with its space: ``("Answer:", " yes")``)."""
        if not isinstance(prompt, str) or not isinstance(continuation, str):
            raise TypeError("prompt and continuation must be strings")
        if not continuation:
            raise ValueError("continuation must not be empty")
        _tokens, starts, ends, values = self._scored(prompt + continuation)
        begin = len(prompt)
        if any(a < begin < b for a, b in zip(starts, ends)):
            from icml25.llm.openai_http import _STRADDLE

            raise ValueError(_STRADDLE.format(at=begin))
        picked = [v for o, v in zip(starts, values) if o >= begin and not (o == 0 and v is None)]
        if not picked or any(v is None for v in picked):
            raise ValueError("no scorable continuation token: pass a non-empty prompt")
        return [float(v) for v in picked]


def _check_local_path(name: str) -> None:
    """A name that is written as a path (absolute, ``./``, ``../``, ``~``) must exist: otherwise
    transformers would read it as a hub id and answer with a confusing hub error."""
    import os

    looks_local = os.path.isabs(name) or name.startswith(("./", "../", "~"))
    if looks_local and not os.path.isdir(os.path.expanduser(name)):
        raise FileNotFoundError(
            f"no model folder {name!r}: pass an existing local folder (save_pretrained output) "
            "or a hub id such as 'Qwen/Qwen2.5-0.5B-Instruct'"
        )


def end_of_turn_ids(tokenizer: Any) -> set[int]:
    """The special token that closes an assistant turn in ``tokenizer``'s chat template (Llama-3's
    ``<|eot_id|>``, ChatML's ``<|im_end|>``, Gemma's ``<end_of_turn>``, Mistral's ``</s>``) as a
    set of stop ids (:func:`icml25.llm.training.end_of_turn_id`); empty when there is no template
    or the template writes no special token after a reply."""
    eot = end_of_turn_id(tokenizer)
    return set() if eot is None else {eot}


def row_seed(seed: int, prompt_ids: Sequence[int], sample_index: int) -> int:
    """The generator seed of sample ``sample_index`` of a request: a hash of the request's
    seed, its prompt token ids and the index (63 bits), so distinct prompts sharing one seed
    draw independent samples and a repeated request reproduces its answer."""
    h = hashlib.sha256(f"{int(seed)}:{int(sample_index)}:".encode())
    h.update(",".join(map(str, prompt_ids)).encode())
    return int.from_bytes(h.digest()[:8], "little") >> 1


def weights_fingerprint(model: Any, *, full_limit: int = 2**26, sample: int = 2**16) -> str:
    """SHA-256 hex digest of a model's parameters (see :meth:`HFChat.cache_identity`)."""
    params = list(model.named_parameters())
    total = sum(p.numel() for _, p in params)
    h = hashlib.sha256(type(model).__name__.encode())
    with torch.no_grad():
        for name, p in params:
            flat = p.detach().reshape(-1)
            if total > full_limit and flat.numel() > sample:
                step = flat.numel() // sample
                flat = flat[::step][:sample]
            h.update(f"{name}:{tuple(p.shape)}:{p.dtype}:".encode())
            h.update(flat.to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()
