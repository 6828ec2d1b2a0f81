"""The weighted Bradley-Terry loss every RLTHF reward model trains with (paper Sec. 3.3: the
amplified human labels and the curated AI labels enter as weights), shared by the plain loop in
``reward_model.py`` and TRL's trainer in ``trl_trainer.py``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["weighted_bt_loss"]


def weighted_bt_loss(
    r_chosen: Tensor,
    r_rejected: Tensor,
    weights: Tensor | None = None,
    margin: Tensor | None = None,
    *,
    reduction: str = "mean",
) -> Tensor:
    """Weighted Bradley-Terry loss ``-sum_i w_i log sigma(r_c,i - r_r,i - margin_i) / sum_i w_i``.

    ``r_chosen``, ``r_rejected``: ``(n,)`` (or a reward head's ``(n, 1)``) rewards; ``weights``: ``(n,)`` non-negative with a
    positive sum (``None``: all 1, which is TRL's ``RewardTrainer`` loss); ``margin``: ``(n,)``
    or a scalar, TRL's optional ``margin`` column. Returns a 0-d tensor in the rewards' dtype.
    Integer weights give the loss of the dataset with each pair replicated that many times.

    ``reduction="sum"`` returns the numerator ``-sum_i w_i log sigma(...)`` alone: a trainer that
    splits one optimiser step over micro-batches or processes divides the sum of these by the
    step's total weight (:class:`~icml25.rlthf.trl_trainer.WeightedRewardTrainer` does), so the
    step follows the weighted mean over the whole global batch, not a mean of per-batch ratios.

    NaN rewards propagate to a NaN loss (as in TRL's ``RewardTrainer``; a diverged model is
    caught where its margins are read, :class:`~icml25.rlthf.RewardDistribution`); NaN/inf
    weights and margins are a ``ValueError``.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    for name, t in (("r_chosen", r_chosen), ("r_rejected", r_rejected)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(
                f"{name} must be a floating-point tensor (rewards), got dtype {t.dtype}; "
                "cast with .float()"
            )
    # a reward head's (n, 1) output: TRL's RewardTrainer takes logits[:, 0] the same way
    if r_chosen.ndim == 2 and r_chosen.shape[1] == 1:
        r_chosen = r_chosen[:, 0]
    if r_rejected.ndim == 2 and r_rejected.shape[1] == 1:
        r_rejected = r_rejected[:, 0]
    if r_chosen.ndim != 1 or r_chosen.shape != r_rejected.shape:
        raise ValueError(
            f"r_chosen {tuple(r_chosen.shape)} and r_rejected {tuple(r_rejected.shape)} must be "
            "1-D of equal length"
        )
    if r_chosen.numel() == 0:
        raise ValueError("weighted_bt_loss got no pairs (n = 0)")
    diff = r_chosen - r_rejected
    if margin is not None:
        margin = torch.as_tensor(margin, dtype=diff.dtype, device=diff.device)
        if margin.ndim not in (0, 1) or (margin.ndim == 1 and margin.shape != diff.shape):
            raise ValueError(f"margin must be a scalar or shape {tuple(diff.shape)}")
        if not torch.isfinite(margin).all():
            raise ValueError("margin holds NaN/inf values; give finite margins")
        diff = diff - margin
    logsig = F.logsigmoid(diff)
    if weights is None:
        return -logsig.sum() if reduction == "sum" else -logsig.mean()
    w = torch.as_tensor(weights, dtype=diff.dtype, device=diff.device)
    if w.shape != diff.shape:
        raise ValueError(f"weights has shape {tuple(w.shape)}; expected {tuple(diff.shape)}")
    bad = ~torch.isfinite(w) | (w < 0)
    if bad.any():
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"weights must be finite and >= 0; weights[{i}] is {float(w[i])} "
            f"({int(bad.sum())} of {w.numel()} invalid)"
        )
    if reduction == "sum":
        return -(w * logsig).sum()
    total = w.sum()
    if total <= 0:
        raise ValueError("weights sum to 0: at least one pair needs a positive weight")
    return -(w * logsig).sum() / total
