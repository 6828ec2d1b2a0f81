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
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25._validate import as_int
from icml25.preference import (
    IGNORE_INDEX,
    check_preference_record,
    dpo_loss,
    sequence_logprob,
    shift_for_causal_lm,
)
from icml25.proxy_feedback.model import make_adapter

__all__ = [
    "SimplexBottleneckLM",
    "dpo_stage",
    "encode_pairs",
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

    ``forward(input_ids, attention_mask=None, use_adapter=True)`` returns logits ``[b, t, V]``
    (the wrapped model's contract); ``return_base_logits=True`` also returns the wrapped model's
    own logits from the same pass (the warm-up's target).
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
        if isinstance(temperature, bool) or not float(temperature) > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
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
        return_base_logits: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         output_hidden_states=True)  # fmt: skip
        h = out.hidden_states[-1]
        # the simplex maths in float32 or wider, whatever the model's dtype (bf16, fp16, fp64)
        work = torch.promote_types(h.dtype, torch.float32)
        logp = torch.log_softmax((h.to(work) @ self.W_tau.to(work).T) / self.temperature, -1)
        if use_adapter:
            a = next(self.adapter.parameters(), None)
            logp = self.adapter.forward_log(logp.to(a.dtype if a is not None else work)).to(work)
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


def _steps(name: str, v: Any) -> int:
    return as_int(name, v, 1)


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _encode_texts(tokenizer: Any, texts: Sequence[str], max_length: int) -> tuple[Tensor, Tensor]:
    if isinstance(texts, str) or not isinstance(texts, Sequence) or not texts:
        raise ValueError("texts must be a non-empty list of strings")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise ValueError(f"texts[{bad[0]}] is not a non-empty string")
    enc = tokenizer(list(texts), return_tensors="pt", padding=True, truncation=True,
                    max_length=max_length)  # fmt: skip
    return enc["input_ids"], enc["attention_mask"]


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
    are 10 or more) are kept out and their KL reported. Returns ``{"kl": [...], "heldout_kl"}``."""
    model = _check_wrapper(model, "warmup_bottleneck")
    _steps("steps", steps)
    _steps("batch_size", batch_size)
    ids, mask = _encode_texts(tokenizer, texts, max_length)
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
    opt = torch.optim.Adam(params, lr=lr)

    def kl(idx: Tensor) -> Tensor:
        logits, base = model(ids[idx], mask[idx], use_adapter=False, return_base_logits=True)
        base = torch.log_softmax(base.detach().float(), -1)
        lq = torch.log_softmax(logits.float(), -1)
        per = (base.exp() * (base - lq)).sum(-1)
        m = mask[idx].to(per.dtype)
        return (per * m).sum() / m.sum().clamp(min=1)

    hist = []
    was = model.training
    model.eval()  # no dropout: the target is the base model's deterministic output
    try:
        for _ in range(steps):
            idx = train[torch.randint(0, len(train), (min(batch_size, len(train)),), generator=gen)]
            loss = kl(idx.to(dev))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            hist.append(loss.item())
        with torch.no_grad():
            held = float(kl(hold.to(dev))) if n_hold else float("nan")
    finally:
        for p in model.parameters():
            p.requires_grad_(flags[id(p)])
        model.train(was)
    return {"kl": hist, "heldout_kl": held}


def encode_pairs(tokenizer: Any, pairs: Sequence[Any], max_length: int = 256) -> dict[str, Tensor]:
    """Token ids of TRL-format pairs (``prompt``, ``chosen``, ``rejected`` strings), built as
    TRL's DPO builds them: ``prompt + completion`` tokenised together (with the tokenizer's
    special tokens), the completion's tokens from where they diverge from the prompt's, then EOS
    (a completion should start on a token boundary, e.g. with a space); labels are -100 on the prompt and on padding (right-padded). Returns ``input_ids``,
    ``attention_mask``, ``labels`` of shape ``(2N, T)``: the N chosen rows, then the N rejected."""
    if isinstance(pairs, (str, dict)) or not isinstance(pairs, Sequence) or not pairs:
        raise ValueError("pairs must be a non-empty list of {'prompt','chosen','rejected'} records")
    rows = []
    eos = tokenizer.eos_token_id
    for i, r in enumerate(pairs):
        r = check_preference_record(i, r)
        for key in ("prompt", "chosen", "rejected"):
            if not isinstance(r[key], str):
                raise TypeError(f"record {i}: {key!r} must be a string here (plain-text pairs)")
        if r["chosen"] == r["rejected"]:
            raise ValueError(f"record {i}: chosen == rejected ({r['chosen']!r}); a tie carries no "
                             "preference")  # fmt: skip
        p = tokenizer(r["prompt"])["input_ids"]
        for key in ("chosen", "rejected"):
            # as TRL's DPO: tokenise prompt + completion together; the completion starts where
            # the tokens diverge from the prompt's own (a merge across the boundary moves it)
            full = tokenizer(r["prompt"] + r[key])["input_ids"]
            k = 0
            while k < min(len(p), len(full)) and p[k] == full[k]:
                k += 1
            rows.append((key, full[:k], full[k:] + ([eos] if eos is not None else [])))
    chosen = [x for x in rows if x[0] == "chosen"]
    rejected = [x for x in rows if x[0] == "rejected"]
    seqs = [(p + c)[:max_length] for _, p, c in chosen + rejected]
    labs = [([IGNORE_INDEX] * len(p) + c)[:max_length] for _, p, c in chosen + rejected]
    for j, lb in enumerate(labs):
        if all(t == IGNORE_INDEX for t in lb):
            raise ValueError(
                f"pair {j % len(chosen)}: no {('chosen', 'rejected')[j // len(chosen)]} token "
                f"is left within max_length={max_length} (the prompt fills it); shorten the "
                "prompt or raise max_length"
            )
    T = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    lab = torch.full((len(seqs), T), IGNORE_INDEX, dtype=torch.long)
    att = torch.zeros((len(seqs), T), dtype=torch.long)
    for j, (s, lb) in enumerate(zip(seqs, labs)):
        ids[j, : len(s)] = torch.tensor(s)
        lab[j, : len(lb)] = torch.tensor(lb)
        att[j, : len(s)] = 1
    return {"input_ids": ids, "attention_mask": att, "labels": lab}


def pair_logprobs(
    model: nn.Module, batch: dict[str, Tensor], **forward_kw: Any
) -> tuple[Tensor, Tensor]:
    """Summed response-token log-probabilities ``(N,)`` of the chosen and rejected halves of an
    :func:`encode_pairs` batch under ``model`` (a :class:`SimplexBottleneckLM` or any HF causal
    LM); padding and prompt tokens are excluded."""
    dev = _device(model)
    ids, att, lab = (batch[k].to(dev) for k in ("input_ids", "attention_mask", "labels"))
    out = model(ids, att, **forward_kw)
    logits = out if isinstance(out, Tensor) else out.logits
    s = sequence_logprob(*shift_for_causal_lm(logits, lab))
    n = s.shape[0] // 2
    return s[:n], s[n:]


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
) -> dict[str, Any]:
    """One DPO stage (sigmoid loss, TRL's conventions) on TRL-format ``pairs``. ``model`` is a
    :class:`SimplexBottleneckLM` or, for the baselines, any causal LM (``trainable="all"``: all
    its parameters).

    ``trainable="adapter"`` (stage 2): only the adapter's ``(D+1)^2 + D + 1`` parameters move.
    ``trainable="all"`` (stage 1): the body, ``W_τ`` and ``Θ`` move, the adapter stays at the
    identity. A list of the model's parameters (e.g. LoRA matrices injected into the body) trains
    exactly those. Every other parameter is frozen and checked bitwise unchanged afterwards. ``ref_model`` (the
    warmed-up model for stage 1, the stage-1 model for stage 2) is used without gradients;
    ``None`` is a uniform reference. With Bradley-Terry labels whose reward is ``log π(y|x)``
    (the paper's synthetic setting), DPO's optimum is ``π_ref · π^{1/β}`` (normalised), so only
    a uniform reference with ``β = 1`` targets ``π`` itself (docs/proxy_feedback.md, "LLM").
    Returns ``{"loss": [...], "reward_margin": [...]}``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module (a SimplexBottleneckLM or a causal LM), got "
                        f"{type(model).__name__}")  # fmt: skip
    bottleneck = isinstance(model, SimplexBottleneckLM)
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta!r}")
    _steps("steps", steps)
    _steps("batch_size", batch_size)
    enc = encode_pairs(tokenizer, pairs, max_length)
    n = len(pairs)
    if isinstance(trainable, str):
        if trainable not in TRAINABLE:
            raise ValueError(
                f"trainable must be one of {TRAINABLE} or a list of the model's parameters, got "
                f"{trainable!r}"
            )
        if not bottleneck:
            if trainable == "adapter":
                raise TypeError(f"trainable='adapter' needs a SimplexBottleneckLM, got "
                                f"{type(model).__name__}")  # fmt: skip
            params = list(model.parameters())
        elif trainable == "adapter":
            params = model.adapter_parameters()
        else:
            params = model.non_adapter_parameters()
        if not params:
            raise ValueError("the model's adapter has no parameters (adapter='identity')")
    else:
        params = list(trainable)
        own = {id(p) for p in model.parameters()}
        if not params or not all(isinstance(p, nn.Parameter) and id(p) in own for p in params):
            raise ValueError("trainable must be 'adapter', 'all' or a non-empty list of the "
                             "model's own parameters (e.g. its LoRA matrices)")  # fmt: skip
    pid = {id(p) for p in params}
    # everything not trained must come out bitwise unchanged (checked after training)
    frozen = {k: v.detach().clone() for k, v in model.named_parameters() if id(v) not in pid}
    flags = {id(p): p.requires_grad for p in model.parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in pid)
    if ref_model is None:  # uniform reference: its log-probs cancel in the DPO margin
        ref_c = ref_r = torch.zeros(n, device=_device(model))
    else:
        ref_model.eval()
        with torch.no_grad():
            ref_c, ref_r = [], []
            for i in range(0, n, batch_size):
                c, r = pair_logprobs(ref_model, _slice(enc, i, i + batch_size, n))
                ref_c.append(c)
                ref_r.append(r)
            ref_c, ref_r = torch.cat(ref_c), torch.cat(ref_r)
    opt = torch.optim.Adam(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    hist, margins = [], []
    was = model.training
    model.train()
    try:
        for _ in range(steps):
            idx = torch.randperm(n, generator=gen)[:batch_size]
            b = _take(enc, idx, n)
            c, r = pair_logprobs(model, b)
            dev = c.device
            out = dpo_loss(
                c, r, ref_c[idx.to(ref_c.device)].to(dev), ref_r[idx.to(ref_r.device)].to(dev), beta
            )
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
    """``(n, V)`` next-token probabilities after each prompt (left-padded batch)."""
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(list(prompts), return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = side
    dev = _device(model)
    out = model(enc["input_ids"].to(dev), enc["attention_mask"].to(dev), **forward_kw)
    logits = out if isinstance(out, Tensor) else out.logits
    return F.softmax(logits[:, -1].float(), -1)
