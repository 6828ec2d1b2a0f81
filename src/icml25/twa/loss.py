"""The TWA loss (paper §3-§4; docs/twa.md): cross-entropy on the tokens before the first error,
a severity-weighted span-level unlikelihood on every error span, and nothing on the
off-trajectory tokens after the first error.

Per translation, with ``l_t = log p(y_t | y_<t, x)`` (float32) and span ``j = [a_j, b_j)``::

    S_j  = sum_{t in span j} l_t                 # the span's log-probability
    UL_j = -log(1 - exp(S_j))                    # span-level unlikelihood
    L    = sum_{t in P} -l_t + sum_j w_j UL_j

Overlapping spans (a Minor error inside a Major span, or two spans sharing tokens) each keep
their own term over their own tokens: ``span_mask[b, j, t]`` says which tokens span ``j`` holds
(docs/twa.md, "Decisions").

``UL_j`` is computed from each token's complementary log-probability ``log(1 - p_t)`` (a
log-sum-exp over the other logits), never from ``exp`` of a rounded ``l_t``: float32 rounds
``l_t`` to 0 from ``p_t >= 1 - 6e-8`` on, which made ``1 - p(span)`` 0 and the gradient vanish
exactly where the span is most likely. With ``u = -S_j = sum_t -log p_t`` kept as ``log u``
(a log-sum-exp over the span), ``UL_j = -log(-expm1(-u))``, and ``-log u + u/2`` for tiny
``u``: finite for finite logits, and its gradient on a target logit is ``p(span)``-weighted
and at most 1 in size (``d(-log(1 - p))/dz = p`` for a one-token span). ``eps > 0`` smooths it
to ``-log(1 - (1 - eps) p(span))`` (bounded by ``-log(eps)``, at the cost of a gradient that
vanishes as ``p(span) -> 1``). ``unlikelihood="token"`` is Welleck et al.'s token-level form
``sum_{t in span} w_j (-log(1 - p_t))``, for the ablation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from icml25._validate import as_real
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


def span_unlikelihood(span_logprob: Tensor, eps: float = 0.0) -> Tensor:
    """``-log(1 - (1 - eps) exp(S))`` elementwise from a span's log-probability ``S`` (0 at
    ``S = -inf``; ``inf`` at ``S = 0`` when ``eps = 0``, at most ``-log(eps)`` otherwise). From
    log-probabilities alone a float32 ``S`` near 0 is already rounded: :func:`twa_loss` computes
    the term from the logits instead (see the module docstring)."""
    eps = as_real("eps", eps, low=0, high=1, high_open=True)
    return -log1mexp(span_logprob + math.log1p(-eps)) if eps else -log1mexp(span_logprob)


def token_unlikelihood(token_logprob: Tensor, eps: float = 0.0) -> Tensor:
    """Welleck et al.'s ``-log(1 - p_t)`` per token, with the same smoothing."""
    return span_unlikelihood(token_logprob, eps)


def _unlikelihood_from_log_u(log_u: Tensor, eps: float) -> Tensor:
    """``-log(1 - (1 - eps) exp(-u))`` from ``log u`` (``u = -S >= 0``), exact for tiny ``u``:
    ``-log(-expm1(-u))`` where ``u`` is not tiny, ``-log u + u/2`` (error ``O(u^2)``) below."""
    if eps:
        log_u = torch.logaddexp(log_u, torch.full_like(log_u, math.log(-math.log1p(-eps))))
    u = torch.exp(log_u)
    tiny = u < 1e-4
    big = -torch.log(-torch.expm1(-torch.where(tiny, torch.ones_like(u), u)))
    return torch.where(tiny, -log_u + u / 2, big)


def _span_terms(logits: Tensor, labels: Tensor, lp: Tensor, at: Tensor) -> Tensor:
    """``log(-log p_t)`` at the positions ``at`` (a bool (B, T) mask), float32 or wider, from the
    logits: ``log(-l_t)`` where ``p_t <= 1/2``; where ``p_t > 1/2`` from ``log q_t = log(1 -
    p_t)`` (a log-sum-exp over the other logits), as ``log q_t + log(-log1p(-q_t) / q_t)``."""
    z = logits[at].to(lp.dtype)  # (N, V): only the span tokens
    y = labels[at].clamp(min=0)
    # below -1e4 the term's u exceeds 1e4 and its loss is exactly 0 either way; the floor keeps
    # a -inf label logit (p = 0) from an infinite u, whose 0 * inf would be a NaN gradient
    l_t = lp[at].clamp(min=-1e4)
    others = z.scatter(-1, y[:, None], torch.full_like(z[:, :1], -math.inf))
    # the label the only finite logit (the others masked to -inf): q = 0, and a log-sum-exp over
    # nothing but -inf would send NaN back, so those rows get log q = -inf through a safe row
    other = torch.isfinite(others).any(-1)
    safe = torch.where(other[:, None], others, torch.zeros_like(others))
    log_q = torch.where(
        other,
        torch.logsumexp(safe, -1) - torch.logsumexp(z, -1),
        torch.full_like(l_t, -math.inf),
    )
    q = torch.exp(log_q)
    is_far = l_t < -math.log(2.0)
    small = q < 1e-6  # -log1p(-q)/q = 1 + q/2 + ...
    # the branch torch.where does not take must still have finite derivatives, or its zero
    # weight times an infinite one gives NaN: q is 1 in float32 for p < 6e-8 (log1p(-1) = -inf)
    qs = torch.where(small | is_far, torch.full_like(q, 0.5), q)
    near = log_q + torch.where(small, q / 2, torch.log(-torch.log1p(-qs) / qs))
    far = torch.log(-torch.where(is_far, l_t, torch.full_like(l_t, -1.0)))
    return torch.where(is_far, far, near)


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


def _check(logits, labels, positive, span_ids, span_weights, span_mask=None) -> None:
    for name, t in (
        ("logits", logits),
        ("labels", labels),
        ("positive", positive),
        ("span_ids", span_ids),
        ("span_weights", span_weights),
    ):
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
    bad = torch.isnan(logits).any() | torch.isposinf(logits).any()
    if bool(bad):
        n_nan, n_inf = int(torch.isnan(logits).sum()), int(torch.isposinf(logits).sum())
        raise ValueError(
            f"logits hold {n_nan} NaN and {n_inf} +inf values: the model's output is broken "
            "(-inf, a masked-out token, is allowed)"
        )
    if span_mask is not None:
        if not isinstance(span_mask, Tensor) or span_mask.dtype != torch.bool:
            raise TypeError(
                f"span_mask must be a bool tensor, got {type(span_mask).__name__}"
                f"{'' if not isinstance(span_mask, Tensor) else ' of ' + str(span_mask.dtype)}"
            )
        if tuple(span_mask.shape) != (B, K, T):
            raise ValueError(
                f"span_mask must be (B, K, T) = ({B}, {K}, {T}), got {tuple(span_mask.shape)}"
            )
        if not torch.equal(span_mask.any(1).to(span_ids.device), span_ids >= 0):
            raise ValueError(
                "span_mask and span_ids disagree: a token is in some span of span_mask exactly "
                "when its span_ids entry is >= 0"
            )


def twa_loss(
    logits: Tensor,
    labels: Tensor,
    positive: Tensor,
    span_ids: Tensor,
    span_weights: Tensor,
    *,
    span_mask: Tensor | None = None,
    unlikelihood: Literal["span", "token"] = "span",
    reduction: Literal["token_mean", "sum", "seq_mean"] = "token_mean",
    eps: float = 0.0,
) -> TWALossOutput:
    """The TWA objective on a batch. ``logits[:, t]`` must score ``labels[:, t]`` (shift first for
    a causal LM); ``positive`` marks the cross-entropy tokens, ``span_ids`` the error span of each
    token (-1: none), ``span_weights[b, k]`` span ``k``'s weight (0 for padding spans).

    ``span_mask (B, K, T)`` (bool, optional): the tokens of each span, for spans that overlap
    (a token may be in several; :class:`~icml25.twa.collate.TWACollator` gives it). Without it
    span ``k`` holds the tokens whose ``span_ids`` is ``k``. Each span's term is over its own
    tokens; a token counts once in the reductions' token count.

    ``reduction``: ``"token_mean"`` (default; divide by the tokens that received any loss),
    ``"sum"``, or ``"seq_mean"`` (divide by the sequences that received any loss). A batch where
    no token receives a loss gives an exact, differentiable zero. Computed in float32 on the
    logits' device (bf16/fp16 logits are scored in float32); logits with NaN or ``+inf`` are
    refused (``-inf``, a masked-out token, is allowed). ``eps``: 0 (default) or the smoothing
    ``-log(1 - (1 - eps) p)`` (``eps = 1e-6`` was the default before; docs/twa.md)."""
    if unlikelihood not in ("span", "token"):
        raise ValueError(f"unlikelihood must be 'span' or 'token', got {unlikelihood!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    eps = as_real("eps", eps, low=0, high=1, high_open=True)
    _check(logits, labels, positive, span_ids, span_weights, span_mask)
    dev = logits.device
    positive, span_ids = positive.to(dev), span_ids.to(dev)
    labels = labels.to(dev)
    lp = token_logprobs(logits, labels)  # (B, T), float32 or wider, 0 at -100
    weights = span_weights.to(device=dev, dtype=lp.dtype)
    B, K = weights.shape
    T = lp.shape[1]
    in_span = span_ids >= 0
    if span_mask is None:
        span_mask = (span_ids[:, None, :] == torch.arange(K, device=dev)[None, :, None]) & in_span[
            :, None, :
        ]
    span_mask = span_mask.to(dev)
    ce_tok = torch.where(positive, -lp, torch.zeros_like(lp))
    ce_sum = ce_tok.sum()
    n_pos = positive.sum(-1)
    n_span = in_span.sum(-1)
    S = torch.where(span_mask, lp[:, None, :], torch.zeros_like(lp)[:, None, :]).sum(-1)
    if K == 0 or not bool(in_span.any()):
        ul_per_seq = torch.zeros(B, device=dev, dtype=lp.dtype)
    else:
        # log(-log p_t) for every span token, exact where p_t is near 1
        v = torch.full((B, T), -math.inf, device=dev, dtype=lp.dtype)
        v = v.masked_scatter(in_span, _span_terms(logits, labels, lp, in_span))
        if unlikelihood == "span":
            members = torch.where(span_mask, v[:, None, :], torch.full_like(v, -math.inf)[:, None])
            has = span_mask.any(-1)
            # log u = log(-S_k): a log-sum-exp over the span's own tokens; a span whose tokens
            # all have p = 1 exactly (v = -inf) has u = 0, through a safe row as above
            live = (members > -math.inf).any(-1)
            log_u = torch.where(
                live,
                torch.logsumexp(
                    torch.where(live[..., None], members, torch.zeros_like(members)), -1
                ),
                torch.full_like(live, -math.inf, dtype=members.dtype),
            )
            ul = _unlikelihood_from_log_u(log_u, eps) * weights
            ul_per_seq = torch.where(has, ul, torch.zeros_like(ul)).sum(-1)
        else:
            # a token in several spans carries each span's weight
            w_tok = (span_mask.to(lp.dtype) * weights[..., None]).sum(1)
            safe = torch.where(in_span, v, torch.zeros_like(v))
            ul_tok = torch.where(
                in_span, _unlikelihood_from_log_u(safe, eps) * w_tok, torch.zeros_like(lp)
            )
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
