"""The TWA loss (paper §3-§4; docs/twa.md): cross-entropy on the tokens before the first error,
a severity-weighted span-level unlikelihood on every error span, and nothing on the
off-trajectory tokens after the first error.

Per translation, with ``l_t = log p(y_t | y_<t, x)`` (float32) and span ``j = [a_j, b_j)``::

    S_j  = sum_{t in span j} l_t                 # the span's log-probability
    UL_j = -log(1 - exp(S_j))                    # span-level unlikelihood
    L    = sum_{t in P} -l_t + sum_j w_j UL_j

``UL_j`` is computed as ``-log1mexp(S_j + log(1 - eps))``: finite (at most ``-log(eps)``) and
differentiable everywhere, never clamped (a clamp would zero the gradient exactly where the span
is most likely). ``unlikelihood="token"`` is Welleck et al.'s token-level form
``sum_{t in span} w_j (-log(1 - p_t))``, for the ablation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from icml25.preference import IGNORE_INDEX, token_logprobs

__all__ = ["TWALossOutput", "log1mexp", "span_unlikelihood", "token_unlikelihood", "twa_loss"]

REDUCTIONS = ("token_mean", "sum", "seq_mean")


def log1mexp(s: Tensor) -> Tensor:
    """``log(1 - exp(s))`` for ``s <= 0``, stable at both ends (Mächler 2012): ``log(-expm1(s))``
    for ``s > -ln 2``, ``log1p(-exp(s))`` otherwise. ``s = 0`` gives ``-inf``; ``-inf`` gives 0."""
    s = torch.as_tensor(s)
    if bool((s > 0).any()):
        raise ValueError(f"log1mexp needs s <= 0 (a log-probability), got max {float(s.max())}")
    near = s > -math.log(2.0)
    a = torch.log(-torch.expm1(torch.where(near, s, torch.full_like(s, -1.0))))
    b = torch.log1p(-torch.exp(torch.where(near, torch.full_like(s, -1.0), s)))
    return torch.where(near, a, b)


def span_unlikelihood(span_logprob: Tensor, eps: float = 1e-6) -> Tensor:
    """``-log(1 - (1 - eps) exp(S))`` elementwise: the smoothed span unlikelihood (0 at
    ``S = -inf``, at most ``-log(eps)`` at ``S = 0``)."""
    if not 0 < eps < 1:
        raise ValueError(f"eps must be in (0, 1), got {eps!r}")
    return -log1mexp(span_logprob + math.log1p(-eps))


def token_unlikelihood(token_logprob: Tensor, eps: float = 1e-6) -> Tensor:
    """Welleck et al.'s ``-log(1 - p_t)`` per token, with the same smoothing."""
    return span_unlikelihood(token_logprob, eps)


@dataclass
class TWALossOutput:
    """``loss`` (reduced); ``ce_sum`` and ``ul_sum`` (summed over the batch, unreduced parts);
    ``n_positive`` and ``n_span_tokens`` (counts); ``span_logprob (B, K)`` (``S_j``, detached;
    ``-inf``-free: 0 for padding spans)."""

    loss: Tensor
    ce_sum: Tensor
    ul_sum: Tensor
    n_positive: int
    n_span_tokens: int
    span_logprob: Tensor


def _check(logits, labels, positive, span_ids, span_weights) -> None:
    for name, t in (("logits", logits), ("labels", labels), ("positive", positive),
                    ("span_ids", span_ids), ("span_weights", span_weights)):  # fmt: skip
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    if logits.ndim != 3:
        raise ValueError(f"logits must be (B, T, V), got shape {tuple(logits.shape)}")
    B, T = logits.shape[:2]
    if B == 0:
        raise ValueError("the batch is empty")
    for name, t in (("labels", labels), ("positive", positive), ("span_ids", span_ids)):
        if tuple(t.shape) != (B, T):
            raise ValueError(f"{name} must be (B, T) = ({B}, {T}), got {tuple(t.shape)}")
    if positive.dtype != torch.bool:
        raise TypeError(f"positive must be a bool tensor, got {positive.dtype}")
    if span_weights.ndim != 2 or span_weights.shape[0] != B:
        raise ValueError(f"span_weights must be (B, K), got {tuple(span_weights.shape)}")
    K = span_weights.shape[1]
    if bool((span_ids < -1).any()) or (span_ids.numel() and int(span_ids.max()) >= K):
        raise ValueError(
            f"span_ids must lie in -1..{K - 1} (-1: outside every span; K = {K} from span_weights)"
        )
    if bool((span_weights < 0).any()) or not bool(torch.isfinite(span_weights).all()):
        raise ValueError("span_weights must be finite and >= 0")
    ignored = labels == IGNORE_INDEX
    if bool((positive & ignored.to(positive.device)).any()) or bool(
        ((span_ids >= 0) & ignored.to(span_ids.device)).any()
    ):
        raise ValueError("positions with label -100 must have positive=False and span_ids=-1")
    if bool((positive & (span_ids.to(positive.device) >= 0)).any()):
        raise ValueError("a token cannot be both positive and inside an error span")


def twa_loss(
    logits: Tensor,
    labels: Tensor,
    positive: Tensor,
    span_ids: Tensor,
    span_weights: Tensor,
    *,
    unlikelihood: Literal["span", "token"] = "span",
    reduction: Literal["token_mean", "sum", "seq_mean"] = "token_mean",
    eps: float = 1e-6,
) -> TWALossOutput:
    """The TWA objective on a batch. ``logits[:, t]`` must score ``labels[:, t]`` (shift first for
    a causal LM); ``positive`` marks the cross-entropy tokens, ``span_ids`` the error span of each
    token (-1: none), ``span_weights[b, k]`` span ``k``'s weight (0 for padding spans).

    ``reduction``: ``"token_mean"`` (default; divide by the tokens that received any loss),
    ``"sum"``, or ``"seq_mean"`` (divide by the sequences that received any loss). A batch where
    no token receives a loss gives an exact, differentiable zero. Computed in float32 on the
    logits' device; bf16/fp16 logits are scored in float32."""
    if unlikelihood not in ("span", "token"):
        raise ValueError(f"unlikelihood must be 'span' or 'token', got {unlikelihood!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    _check(logits, labels, positive, span_ids, span_weights)
    dev = logits.device
    positive, span_ids = positive.to(dev), span_ids.to(dev)
    lp = token_logprobs(logits, labels.to(dev))  # (B, T), float32 or wider, 0 at -100
    weights = span_weights.to(device=dev, dtype=lp.dtype)
    B, K = weights.shape
    in_span = span_ids >= 0
    ce_tok = torch.where(positive, -lp, torch.zeros_like(lp))
    ce_sum = ce_tok.sum()
    n_pos = positive.sum(-1)
    n_span = in_span.sum(-1)
    if K == 0 or not bool(in_span.any()):
        ul_per_seq = torch.zeros(B, device=dev, dtype=lp.dtype)
        S = torch.zeros(B, K, device=dev, dtype=lp.dtype)
    else:
        masked = torch.where(in_span, lp, torch.zeros_like(lp))
        S = torch.zeros(B, K, device=dev, dtype=lp.dtype).scatter_add(
            1, span_ids.clamp(min=0), masked
        )
        if unlikelihood == "span":
            ul = span_unlikelihood(S, eps) * weights
            # which spans occur (a count: a plain scatter of booleans would let the -1 positions,
            # clamped to column 0, overwrite span 0's marks)
            has = (
                torch.zeros(B, K, device=dev).scatter_add(
                    1, span_ids.clamp(min=0), in_span.to(torch.float32)
                )
                > 0
            )
            ul_per_seq = torch.where(has, ul, torch.zeros_like(ul)).sum(-1)
        else:
            w_tok = weights.gather(1, span_ids.clamp(min=0))
            ul_tok = torch.where(in_span, token_unlikelihood(lp, eps) * w_tok, torch.zeros_like(lp))
            ul_per_seq = ul_tok.sum(-1)
    ul_sum = ul_per_seq.sum()
    total = ce_sum + ul_sum
    n_tok = int((n_pos + n_span).sum())
    if n_tok == 0:
        loss = logits.sum() * 0.0  # an exact zero that stays in the graph
    elif reduction == "sum":
        loss = total
    elif reduction == "token_mean":
        loss = total / n_tok
    else:
        loss = total / int(((n_pos + n_span) > 0).sum())
    return TWALossOutput(loss, ce_sum, ul_sum, int(n_pos.sum()), int(n_span.sum()), S.detach())
