"""The simplex-bottleneck parameterisation for causal language models (arXiv:2412.16475, Sec. 5:
"adapting existing architectures"; the concrete form is ours, docs/proxy_feedback.md "LLM").

At every position the final hidden state ``h_t`` is embedded into the simplex, adapted, mapped
back to a hidden state and decoded by the model's own unembedding::

    p_t  = softmax(W_τ h_t / T)      τ°: W_τ (D+1) x d
    p'_t = A(p_t)                    adapter π̄†, the identity in stage 1
    h'_t = Θ p'_t                    Θ: d x (D+1), D+1 prototype hidden states
    π(·|x_<=t) = softmax(W_U h'_t)   φ: the model's unembedding (and its bias, if any)

Training: :func:`warmup_bottleneck` (body frozen, KL to the base model), stage 1 with
:func:`dpo_stage` ``trainable="all"`` on proxy pairs, stage 2 with ``trainable="adapter"`` on
expert pairs. Needs ``transformers``-style models (``get_output_embeddings()``, hidden states).

Real checkpoints (GPT-2, Llama, Qwen2, ...) follow TRL's conventions: every model call is by
keyword, with ``position_ids`` from the attention mask when a batch is left-padded; DPO log-probs
come from the policy with dropout off (``disable_dropout=True``, TRL's ``DPOConfig`` default) and
from the reference in eval mode; a bf16/fp16 checkpoint trains with float32 master weights
(:class:`icml25.llm.MixedPrecision`); pairs are tokenised as TRL's ``DPOTrainer`` tokenises them
(:func:`icml25.llm.tokenize_preference`: chat rows end with the template's end of turn). The
``Trainer`` path is :class:`icml25.proxy_feedback.trainer.SimplexDPOTrainer`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25._validate import as_bool, as_int, as_real
from icml25.llm.loading import check_context_length, context_length
from icml25.llm.training import (
    MixedPrecision,
    check_finite_loss,
    dropout_disabled,
    position_ids,
    tokenize_preference,
)
from icml25.preference import (
    IGNORE_INDEX,
    check_preference_record,
    dpo_loss,
    sequence_logprob,
    shift_for_causal_lm,
)
from icml25.proxy_feedback.model import make_adapter
from icml25.proxy_feedback.train import _single_process

__all__ = [
    "SimplexBottleneckLM",
    "dpo_stage",
    "encode_pairs",
    "next_token_probs",
    "pair_logprobs",
    "warmup_bottleneck",
]

TRAINABLE = ("adapter", "all")


class SimplexBottleneckLM(nn.Module):
    """A causal LM with a ``D``-simplex bottleneck before its unembedding.

    Args:
        model: a Hugging Face causal LM (anything with ``get_output_embeddings()`` whose forward
            accepts ``output_hidden_states=True``); it is wrapped, not copied.
        bottleneck_dim: ``D + 1``, the number of simplex vertices (32; our default for real
            models: the paper's value is not known). Must be >= 2; a warning when it reaches
            ``min(d_model, vocab)`` (then it is no longer a bottleneck and ``φ`` is not injective).
        adapter: ``"loglinear"`` (default), ``"mlp"`` or ``"identity"``.
        temperature: ``T`` of the embedding softmax (1).
        seed: seeds the initialisation of ``W_τ`` and ``Θ``.

    ``forward(input_ids, attention_mask=None, use_adapter=True, *, position_ids=None)`` returns
    logits ``[b, t, V]`` (the wrapped model's contract; the wrapped model is called by keyword,
    with ``position_ids`` from the mask when the batch is left-padded); ``return_base_logits=True``
    also returns the wrapped model's own logits from the same pass (the warm-up's target). The
    simplex maths runs in float32 or wider, also under autocast.
    """

    def __init__(
        self,
        model: nn.Module,
        bottleneck_dim: int = 32,
        adapter: str | nn.Module = "loglinear",
        *,
        temperature: float = 1.0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        get = getattr(model, "get_output_embeddings", None)
        out_emb = get() if callable(get) else None
        if not isinstance(out_emb, nn.Module) or not hasattr(out_emb, "weight"):
            raise TypeError(
                f"{type(model).__name__} has no output embeddings (get_output_embeddings() / "
                "lm_head): the bottleneck decodes through the model's own unembedding"
            )
        bottleneck_dim = as_int("bottleneck_dim (D + 1)", bottleneck_dim, 2)
        temperature = as_real("temperature", temperature, low=0, low_open=True)
        V, d = out_emb.weight.shape
        if bottleneck_dim >= min(d, V):
            warnings.warn(
                f"bottleneck_dim = {bottleneck_dim} >= min(d_model = {d}, vocab = {V}): the simplex "
                "is no longer a bottleneck and softmax ∘ W_U is not injective on it",
                stacklevel=2,
            )
        self.model = model
        self.bottleneck_dim = bottleneck_dim
        self.temperature = float(temperature)
        ref = out_emb.weight
        gen = torch.Generator().manual_seed(seed)
        self.W_tau = nn.Parameter(
            (torch.randn(bottleneck_dim, d, generator=gen) / d**0.5).to(ref.device, ref.dtype)
        )
        self.Theta = nn.Parameter(
            (torch.randn(d, bottleneck_dim, generator=gen)).to(ref.device, ref.dtype)
        )
        self.adapter = make_adapter(adapter, bottleneck_dim).to(ref.device)

    @property
    def config(self) -> Any:
        return getattr(self.model, "config", None)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        use_adapter: bool = True,
        *,
        position_ids: Tensor | None = None,
        return_base_logits: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        out = _call_lm(
            self.model,
            input_ids,
            attention_mask,
            position_ids=position_ids,
            output_hidden_states=True,
        )
        h = out.hidden_states[-1]
        # the simplex maths in float32 or wider, whatever the model's dtype (bf16, fp16, fp64) and
        # even under autocast (MixedPrecision): only the body and the unembedding run low
        work = torch.promote_types(h.dtype, torch.float32)
        with torch.autocast(h.device.type, enabled=False):
            logp = torch.log_softmax((h.to(work) @ self.W_tau.to(work).T) / self.temperature, -1)
            if use_adapter:
                a = next(self.adapter.parameters(), None)
                logp = self.adapter.forward_log(logp.to(a.dtype if a is not None else work))
                logp = logp.to(work)
            h2 = logp.exp() @ self.Theta.to(work).T
        unembed = self.model.get_output_embeddings()
        logits = unembed(h2.to(unembed.weight.dtype))
        return (logits, out.logits) if return_base_logits else logits

    def set_adapter_trainable_only(self) -> None:
        """Freeze everything but the adapter (stage 2)."""
        ids = {id(p) for p in self.adapter.parameters()}
        for p in self.parameters():
            p.requires_grad_(id(p) in ids)

    def adapter_parameters(self) -> list[nn.Parameter]:
        return list(self.adapter.parameters())

    def bottleneck_parameters(self) -> list[nn.Parameter]:
        """``W_τ`` and ``Θ``."""
        return [self.W_tau, self.Theta]

    def non_adapter_parameters(self) -> list[nn.Parameter]:
        ids = {id(p) for p in self.adapter.parameters()}
        return [p for p in self.parameters() if id(p) not in ids]


def _check_wrapper(model: Any, fn: str) -> SimplexBottleneckLM:
    if not isinstance(model, SimplexBottleneckLM):
        raise TypeError(f"{fn} needs a SimplexBottleneckLM, got {type(model).__name__}")
    return model


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _left_padded_position_ids(attention_mask: Tensor | None) -> Tensor | None:
    """``position_ids`` ``(b, t)`` counting only the attended tokens (``cumsum(mask) - 1``) when
    some row of ``attention_mask`` starts with padding, else ``None`` (the model's own
    ``arange`` is then right for every real token). Without them a left-padded row sees its first
    real token at position ``#pad`` instead of 0: GPT-2's learned absolute positions then change
    the row's output (RoPE models such as Llama and Qwen2 are invariant to the shift up to
    rounding)."""
    if attention_mask is None or attention_mask.ndim != 2 or bool(attention_mask[:, 0].all()):
        return None
    return position_ids(attention_mask)


def _call_lm(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    position_ids: Tensor | None = None,
    **kwargs: Any,
) -> Any:
    """``model(input_ids=..., attention_mask=..., position_ids=...)`` by keyword: GPT-2's second
    positional argument is its cache, not the mask. ``position_ids`` default to
    :func:`_left_padded_position_ids` (passed only for a left-padded batch)."""
    if position_ids is None:
        position_ids = _left_padded_position_ids(attention_mask)
    if position_ids is not None:
        kwargs["position_ids"] = position_ids
    return model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def _pad_id(tokenizer: Any) -> int:
    """TRL's padding value: the pad token, else eos (GPT-2 has no pad token), else 0."""
    for tid in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if isinstance(tid, int):
            return tid
    return 0


def _pad(seqs: Sequence[Sequence[int]], value: int, *, left: bool = False) -> tuple[Tensor, Tensor]:
    T = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), T), value, dtype=torch.long)
    att = torch.zeros((len(seqs), T), dtype=torch.long)
    for j, x in enumerate(seqs):
        sl = slice(T - len(x), T) if left else slice(0, len(x))
        ids[j, sl] = torch.tensor(list(x), dtype=torch.long)
        att[j, sl] = 1
    return ids, att


def _check_texts(texts: Sequence[str], name: str = "texts") -> None:
    if isinstance(texts, str) or not isinstance(texts, Sequence) or not texts:
        raise ValueError(f"{name} must be a non-empty list of strings, got {texts!r:.60}")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise ValueError(f"{name}[{bad[0]}] is not a non-empty string: {texts[bad[0]]!r:.60}")


def _encode_texts(tokenizer: Any, texts: Sequence[str], max_length: int) -> tuple[Tensor, Tensor]:
    """Right-padded ``(ids, mask)``, padded here (not by the tokenizer: GPT-2's has no pad token
    and a chat model's tokenizer may pad on the left)."""
    _check_texts(texts)
    seqs = [tokenizer(t)["input_ids"][:max_length] for t in texts]
    return _pad(seqs, _pad_id(tokenizer))


def _check_context(model: nn.Module, lengths: Tensor, what: Any) -> None:
    """``ValueError`` naming the first item longer than the model's context."""
    limit = context_length(model)
    if limit is None:
        return
    over = (lengths > limit).nonzero().flatten().tolist()
    if over:
        j = over[0]
        check_context_length(model, int(lengths[j]), what=what(j))


def warmup_bottleneck(
    model: SimplexBottleneckLM,
    texts: Sequence[str],
    steps: int = 300,
    *,
    tokenizer: Any,
    lr: float = 1e-2,
    batch_size: int = 16,
    max_length: int = 128,
    heldout: float = 0.1,
    seed: int = 0,
) -> dict[str, Any]:
    """Fit ``W_τ`` and ``Θ`` so the bottlenecked model reproduces the base model: minimise
    ``KL(π_base || π_bottleneck)`` over the non-padding positions of ``texts`` with the body and
    the adapter frozen (adapter = identity). ``heldout`` of the texts (at least one, when there
    are 10 or more) are kept out and their KL reported. Returns ``{"kl": [...], "heldout_kl"}``.

    The model runs without dropout (its target is the base model's deterministic output); on a
    bf16/fp16 checkpoint ``W_τ`` and ``Θ`` are upcast to float32 master weights and stay float32
    (:class:`icml25.llm.MixedPrecision`). ``ValueError`` for a text longer than the model's
    context after truncation to ``max_length``.

    Single-process (a plain loop; ``RuntimeError`` under several ``torch.distributed``
    processes): the warm-up trains only ``W_τ`` and ``Θ`` and is short."""
    _single_process("warmup_bottleneck")
    model = _check_wrapper(model, "warmup_bottleneck")
    steps = as_int("steps", steps, 1)
    batch_size = as_int("batch_size", batch_size, 1)
    ids, mask = _encode_texts(tokenizer, texts, max_length)
    _check_context(model, mask.sum(-1), lambda j: f"texts[{j}]")
    n_hold = int(len(texts) * heldout) if len(texts) >= 10 else 0
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(texts), generator=gen)
    hold, train = perm[:n_hold], perm[n_hold:]
    dev = _device(model)
    ids, mask = ids.to(dev), mask.to(dev)
    params = model.bottleneck_parameters()
    flags = {id(p): p.requires_grad for p in model.parameters()}
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    mp = MixedPrecision.prepare(model)  # before the optimizer: it must hold the float32 masters
    opt = torch.optim.Adam(params, lr=lr)

    def kl(idx: Tensor) -> Tensor:
        with mp.autocast():
            logits, base = model(
                input_ids=ids[idx],
                attention_mask=mask[idx],
                use_adapter=False,
                return_base_logits=True,
            )
        base = torch.log_softmax(base.detach().float(), -1)
        lq = torch.log_softmax(logits.float(), -1)
        per = (base.exp() * (base - lq)).sum(-1)
        m = mask[idx].to(per.dtype)
        return (per * m).sum() / m.sum().clamp(min=1)

    hist = []
    try:
        with dropout_disabled(model):
            for _ in range(steps):
                n = min(batch_size, len(train))
                idx = train[torch.randint(0, len(train), (n,), generator=gen)]
                loss = kl(idx.to(dev))
                check_finite_loss(loss, f"warmup_bottleneck step {len(hist)}")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                hist.append(loss.item())
            with torch.no_grad():
                held = float(kl(hold.to(dev))) if n_hold else float("nan")
    finally:
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
    return {"kl": hist, "heldout_kl": held}


def encode_pairs(tokenizer: Any, pairs: Sequence[Any], max_length: int = 256) -> dict[str, Tensor]:
    """Token ids of TRL-format pairs (``prompt``, ``chosen``, ``rejected``), tokenised exactly as
    TRL's ``DPOTrainer`` tokenises them (:func:`icml25.llm.tokenize_preference`): text rows as
    ``tokenizer(prompt + completion + eos_token)`` (the eos token string appended unless the
    completion already ends with it); chat rows (lists of ``{"role", "content"}`` messages) through
    the tokenizer's chat template, so a completion ends with the template's own end of turn
    (``<|eot_id|>``, ``<|im_end|>``), not with ``eos_token``. The completion starts where the
    tokenised prompt and prompt + completion diverge (a merge across the boundary moves it), and
    each sequence keeps its first ``max_length`` tokens (TRL's ``truncation_mode="keep_start"``).

    Returns ``input_ids``, ``attention_mask``, ``labels`` (``-100`` on the prompt and on padding)
    of shape ``(2N, T)``, right-padded with the pad token (else eos, as TRL): the N chosen rows,
    then the N rejected. ``ValueError`` for a tie or a pair with no completion token left within
    ``max_length`` (TRL drops such a pair silently)."""
    if isinstance(pairs, (str, dict)) or not isinstance(pairs, Sequence) or not pairs:
        raise ValueError("pairs must be a non-empty list of {'prompt','chosen','rejected'} records")
    max_length = as_int("max_length", max_length, 1)
    chosen, rejected = [], []
    for i, r in enumerate(pairs):
        r = check_preference_record(i, r)
        if r["chosen"] == r["rejected"]:
            raise ValueError(
                f"record {i}: chosen == rejected ({r['chosen']!r:.60}); a tie carries no preference"
            )
        try:
            t = tokenize_preference(tokenizer, r["prompt"], r["chosen"], r["rejected"])
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"record {i}: {exc}") from None
        p = t["prompt_ids"]
        chosen.append((p, t["chosen_ids"]))
        rejected.append((p, t["rejected_ids"]))
    seqs = [(p + c)[:max_length] for p, c in chosen + rejected]
    labs = [([IGNORE_INDEX] * len(p) + c)[:max_length] for p, c in chosen + rejected]
    for j, lb in enumerate(labs):
        if all(t == IGNORE_INDEX for t in lb):
            raise ValueError(
                f"pair {j % len(chosen)}: no {('chosen', 'rejected')[j // len(chosen)]} token "
                f"is left within max_length={max_length} (the prompt fills it); shorten the "
                "prompt or raise max_length"
            )
    ids, att = _pad(seqs, _pad_id(tokenizer))
    lab = torch.full_like(ids, IGNORE_INDEX)
    for j, lb in enumerate(labs):
        lab[j, : len(lb)] = torch.tensor(lb, dtype=torch.long)
    return {"input_ids": ids, "attention_mask": att, "labels": lab}


def pair_logprobs(
    model: nn.Module, batch: dict[str, Tensor], **forward_kw: Any
) -> tuple[Tensor, Tensor]:
    """Summed response-token log-probabilities ``(N,)`` (float32 or wider) of the chosen and
    rejected halves of an :func:`encode_pairs` batch under ``model`` (a
    :class:`SimplexBottleneckLM` or any HF causal LM, called by keyword; ``position_ids`` from
    the mask if the batch is left-padded); padding and prompt tokens are excluded. The model runs
    in whatever mode it is in: wrap the call in :func:`icml25.llm.dropout_disabled` for TRL's
    dropout-free log-probs (:func:`dpo_stage` does)."""
    dev = _device(model)
    ids, att, lab = (batch[k].to(dev) for k in ("input_ids", "attention_mask", "labels"))
    out = _call_lm(model, ids, att, **forward_kw)
    logits = out if isinstance(out, Tensor) else out.logits
    s = sequence_logprob(*shift_for_causal_lm(logits, lab))
    n = s.shape[0] // 2
    return s[:n], s[n:]


def _trainable_parameters(model: nn.Module, trainable: Any) -> list[nn.Parameter]:
    """The parameters ``trainable`` names: ``"adapter"``, ``"all"`` or a list of ``model``'s own."""
    bottleneck = isinstance(model, SimplexBottleneckLM)
    if isinstance(trainable, str):
        if trainable not in TRAINABLE:
            raise ValueError(
                f"trainable must be one of {TRAINABLE} or a list of the model's parameters, got "
                f"{trainable!r}"
            )
        if not bottleneck:
            if trainable == "adapter":
                raise TypeError(
                    f"trainable='adapter' needs a SimplexBottleneckLM, got {type(model).__name__}"
                )
            params = list(model.parameters())
        elif trainable == "adapter":
            params = model.adapter_parameters()
        else:
            params = model.non_adapter_parameters()
        if not params:
            raise ValueError("the model's adapter has no parameters (adapter='identity')")
        return params
    params = list(trainable)
    own = {id(p) for p in model.parameters()}
    if not params or not all(isinstance(p, nn.Parameter) and id(p) in own for p in params):
        raise ValueError(
            "trainable must be 'adapter', 'all' or a non-empty list of the "
            "model's own parameters (e.g. its LoRA matrices)"
        )
    return params


def _check_pairs_fit(model: nn.Module, enc: dict[str, Tensor]) -> None:
    n = enc["input_ids"].shape[0] // 2
    what = lambda j: f"pair {j % n} ({'chosen' if j < n else 'rejected'})"  # noqa: E731
    _check_context(model, enc["attention_mask"].sum(-1), what)


def dpo_stage(
    model: SimplexBottleneckLM,
    ref_model: nn.Module | None,
    pairs: Sequence[Any],
    *,
    tokenizer: Any,
    trainable: str | Sequence[nn.Parameter] = "adapter",
    beta: float = 0.1,  # DPO's and TRL's default
    lr: float = 1e-2,
    steps: int = 100,
    batch_size: int = 16,
    max_length: int = 256,
    seed: int = 0,
    disable_dropout: bool = True,  # TRL's DPOConfig.disable_dropout
) -> dict[str, Any]:
    """One DPO stage (sigmoid loss, TRL's conventions) on TRL-format ``pairs``. ``model`` is a
    :class:`SimplexBottleneckLM` or, for the baselines, any causal LM (``trainable="all"``: all
    its parameters).

    ``trainable="adapter"`` (stage 2): only the adapter's ``(D+1)^2 + D + 1`` parameters move.
    ``trainable="all"`` (stage 1): the body, ``W_τ`` and ``Θ`` move, the adapter stays at the
    identity. A list of the model's parameters (e.g. LoRA matrices injected into the body) trains
    exactly those. Every other parameter is frozen and checked bitwise unchanged afterwards.
    ``ref_model`` (the warmed-up model for stage 1, the stage-1 model for stage 2) is used
    without gradients, in eval mode; ``None`` is a uniform reference. With Bradley-Terry labels
    whose reward is ``log π(y|x)`` (the paper's synthetic setting), DPO's optimum is
    ``π_ref · π^{1/β}`` (normalised), so only a uniform reference with ``β = 1`` targets ``π``
    itself (docs/proxy_feedback.md, "LLM").

    TRL's conventions for real checkpoints: ``disable_dropout=True`` computes the policy's
    log-probs with dropout off (so with the policy equal to the reference the first loss is
    exactly ``log 2``); a bf16/fp16 model trains with float32 master weights (the trainable
    parameters are upcast in place and stay float32; the forward runs under autocast in the
    checkpoint's dtype, :class:`icml25.llm.MixedPrecision`); pairs are tokenised by
    :func:`encode_pairs`, and a pair longer than the model's context is a ``ValueError``.
    Returns ``{"loss": [...], "reward_margin": [...]}``.

    Single-process (a plain loop; ``RuntimeError`` under several ``torch.distributed``
    processes). The same stage data-parallel, with the same loss:
    :class:`icml25.proxy_feedback.trainer.SimplexDPOTrainer`."""
    _single_process("dpo_stage")
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model must be an nn.Module (a SimplexBottleneckLM or a causal LM), got "
            f"{type(model).__name__}"
        )
    beta = as_real("beta", beta, low=0, low_open=True)
    disable_dropout = as_bool("disable_dropout", disable_dropout)
    steps = as_int("steps", steps, 1)
    batch_size = as_int("batch_size", batch_size, 1)
    enc = encode_pairs(tokenizer, pairs, max_length)
    n = len(pairs)
    params = _trainable_parameters(model, trainable)
    _check_pairs_fit(model, enc)
    if ref_model is not None:
        _check_pairs_fit(ref_model, enc)
    pid = {id(p) for p in params}
    # everything not trained must come out bitwise unchanged (checked after training)
    frozen = {k: v.detach().clone() for k, v in model.named_parameters() if id(v) not in pid}
    flags = {id(p): p.requires_grad for p in model.parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in pid)
    if ref_model is None:  # uniform reference: its log-probs cancel in the DPO margin
        ref_c = ref_r = torch.zeros(n, device=_device(model))
    else:
        with torch.no_grad(), dropout_disabled(ref_model):
            ref_c, ref_r = [], []
            for i in range(0, n, batch_size):
                c, r = pair_logprobs(ref_model, _slice(enc, i, i + batch_size, n))
                ref_c.append(c)
                ref_r.append(r)
            ref_c, ref_r = torch.cat(ref_c), torch.cat(ref_r)
    mp = MixedPrecision.prepare(model)  # before the optimizer: it must hold the float32 masters
    opt = torch.optim.Adam(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    hist, margins = [], []
    was = model.training
    model.train()
    try:
        for _ in range(steps):
            idx = torch.randperm(n, generator=gen)[:batch_size]
            b = _take(enc, idx, n)
            with dropout_disabled(model, enabled=disable_dropout), mp.autocast():
                c, r = pair_logprobs(model, b)
            dev = c.device
            out = dpo_loss(
                c, r, ref_c[idx.to(ref_c.device)].to(dev), ref_r[idx.to(ref_r.device)].to(dev), beta
            )
            check_finite_loss(out.loss, f"dpo_stage step {len(hist)} (pairs {idx[:4].tolist()})")
            opt.zero_grad(set_to_none=True)
            out.loss.backward()
            opt.step()
            hist.append(out.loss.item())
            margins.append(float((out.chosen_rewards - out.rejected_rewards).mean()))
    finally:
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
        model.train(was)
    now = dict(model.named_parameters())
    changed = [k for k in frozen if not torch.equal(frozen[k], now[k])]
    if changed:
        raise RuntimeError(f"dpo_stage changed tensors it was to keep frozen: {changed}")
    return {"loss": hist, "reward_margin": margins}


def _slice(enc: dict[str, Tensor], a: int, b: int, n: int) -> dict[str, Tensor]:
    idx = torch.arange(a, min(b, n))
    return _take(enc, idx, n)


def _take(enc: dict[str, Tensor], idx: Tensor, n: int) -> dict[str, Tensor]:
    both = torch.cat([idx, idx + n])
    return {k: v[both] for k, v in enc.items()}


@torch.no_grad()
def next_token_probs(
    model: nn.Module, tokenizer: Any, prompts: Sequence[str], **forward_kw: Any
) -> Tensor:
    """``(n, V)`` float32 next-token probabilities after each prompt, from one left-padded batch
    (padded with the pad token, else eos; ``position_ids`` from the mask, so a row equals the
    prompt alone). ``ValueError`` for a prompt longer than the model's context."""
    _check_texts(prompts, "prompts")
    seqs = [tokenizer(p)["input_ids"] for p in prompts]
    _check_context(model, torch.tensor([len(x) for x in seqs]), lambda j: f"prompts[{j}]")
    ids, att = _pad(seqs, _pad_id(tokenizer), left=True)
    dev = _device(model)
    out = _call_lm(model, ids.to(dev), att.to(dev), **forward_kw)
    logits = out if isinstance(out, Tensor) else out.logits
    return F.softmax(logits[:, -1].float(), -1)
