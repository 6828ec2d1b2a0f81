"""The Bradley-Terry / DPO negative log-likelihood of both stages (Sec. 4 of arXiv:2412.16475):
``-(1/|D|) Σ w_i log σ(β[(log π(y_w|x) - log π_ref(y_w|x)) - (log π(y_l|x) - log π_ref(y_l|x))])``.

A thin wrapper over the library's sigmoid-DPO loss (:func:`icml25.preference.dpo_losses`, the same
numbers as TRL's ``loss_type="sigmoid"``), with the uniform reference of the synthetic setting as
the default (its terms cancel) and optional per-triple weights (pooled training).
"""

from __future__ import annotations

import torch
from torch import Tensor

from icml25._validate import as_real
from icml25.preference import dpo_losses

__all__ = ["preference_nll", "triple_logprobs"]


def triple_logprobs(logp: Tensor, y_w: Tensor, y_l: Tensor) -> tuple[Tensor, Tensor]:
    """``(log π(y_w|x), log π(y_l|x))`` ``(n,)`` each, from ``(n, K)`` log-probabilities."""
    if logp.ndim != 2 or y_w.shape != (logp.shape[0],) or y_l.shape != (logp.shape[0],):
        raise ValueError(
            f"need (n, K) log-probs and (n,) indices, got {tuple(logp.shape)}, "
            f"{tuple(y_w.shape)}, {tuple(y_l.shape)}"
        )
    k = logp.shape[1]
    for name, y in (("y_w", y_w), ("y_l", y_l)):
        if y.dtype.is_floating_point or y.dtype.is_complex or y.dtype == torch.bool:
            raise TypeError(f"{name} must hold integer output indices, got {y.dtype}")
        if y.numel() and not (int(y.min()) >= 0 and int(y.max()) < k):
            raise ValueError(
                f"{name} holds indices outside 0..{k - 1}: min {int(y.min())}, max {int(y.max())}"
            )
    yw, yl = y_w.to(logp.device), y_l.to(logp.device)
    return logp.gather(1, yw[:, None]).squeeze(1), logp.gather(1, yl[:, None]).squeeze(1)


def preference_nll(
    logp_w: Tensor,
    logp_l: Tensor,
    ref_logp_w: Tensor | None = None,
    ref_logp_l: Tensor | None = None,
    beta: float = 1.0,
    *,
    weights: Tensor | None = None,
) -> Tensor:
    """Mean (or ``weights``-weighted mean) Bradley-Terry NLL of ``(n,)`` winner/loser
    log-probabilities. ``ref_*=None`` is a uniform reference (``β = 1``: the synthetic setting);
    with a reference it is TRL's sigmoid DPO loss. Float64 stays float64 (gradcheck). A NaN
    log-probability is a ``ValueError``; ``-inf`` (probability 0) gives the loss's limit."""
    if (ref_logp_w is None) != (ref_logp_l is None):
        raise ValueError("pass both ref_logp_w and ref_logp_l, or neither (uniform reference)")
    if ref_logp_w is None:
        ref_logp_w = torch.zeros_like(logp_w)
        ref_logp_l = torch.zeros_like(logp_l)
    beta = as_real("beta", beta, low=0, low_open=True)
    for name, x in (
        ("logp_w", logp_w),
        ("logp_l", logp_l),
        ("ref_logp_w", ref_logp_w),
        ("ref_logp_l", ref_logp_l),
    ):
        if isinstance(x, Tensor) and x.is_floating_point() and bool(torch.isnan(x).any()):
            raise ValueError(f"{name} holds NaN log-probabilities")
    _, u = dpo_losses(logp_w, logp_l, ref_logp_w, ref_logp_l, beta)
    # -log σ(u) itself: the shared form adds 0 · log σ(-u), NaN at u = +inf (a loser of
    # probability 0), where the loss's limit is 0
    losses = -torch.nn.functional.logsigmoid(u)
    if weights is None:
        return losses.mean()
    w = torch.as_tensor(weights, device=losses.device, dtype=losses.dtype)
    if (
        w.shape != losses.shape
        or not bool(torch.isfinite(w).all())
        or bool((w < 0).any())
        or not float(w.sum()) > 0
    ):
        raise ValueError(
            f"weights must be ({losses.shape[0]},) finite, non-negative, with a positive sum, got shape "
            f"{tuple(w.shape)}, min {float(w.min()) if w.numel() else 'n/a'}, sum "
            f"{float(w.sum()) if w.numel() else 0.0}"
        )
    return (w * losses).sum() / w.sum()
