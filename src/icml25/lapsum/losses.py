"""``nn.Module`` wrappers of the LapSum operators and losses, with an optional learnable alpha.

``learn_alpha=True`` stores ``theta = log alpha`` as an ``nn.Parameter`` and uses
``alpha = exp(theta)`` (the official experiment scripts' ``--alpha_trainable``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from icml25._validate import as_real
from icml25.lapsum import functional as F

__all__ = [
    "KNNTopKLoss",
    "PermutationCrossEntropyLoss",
    "SoftRank",
    "SoftSort",
    "SoftTopK",
    "TopKCrossEntropyLoss",
]


class _Alpha(nn.Module):
    def __init__(self, alpha: float, learn_alpha: bool) -> None:
        super().__init__()
        alpha = as_real("alpha", alpha, low=0, low_open=True)
        self.learn_alpha = learn_alpha
        if learn_alpha:
            self.log_alpha = nn.Parameter(torch.tensor(math.log(alpha)))
        else:
            self.register_buffer("log_alpha", torch.tensor(math.log(alpha)), persistent=False)
            self._alpha = float(alpha)

    @property
    def alpha(self):
        """The scale as passed to the operators (a tensor when learnable, else a float)."""
        return self.log_alpha.exp() if self.learn_alpha else self._alpha

    def extra_repr(self) -> str:
        return f"alpha={float(self.log_alpha.exp()):.4g}, learn_alpha={self.learn_alpha}"


class SoftTopK(_Alpha):
    """``forward(x) = soft_topk(x, k, alpha, dim, largest, log=log)``."""

    def __init__(
        self,
        k,
        alpha: float = 1.0,
        largest: bool = True,
        log: bool = False,
        dim: int = -1,
        learn_alpha: bool = False,
    ) -> None:
        super().__init__(alpha, learn_alpha)
        self.k, self.largest, self.log, self.dim = k, largest, log, dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.soft_topk(x, self.k, self.alpha, self.dim, self.largest, log=self.log)


class SoftRank(_Alpha):
    """``forward(x) = soft_rank(x, alpha, dim, descending, one_based)``."""

    def __init__(
        self,
        alpha: float = 1.0,
        descending: bool = False,
        one_based: bool = False,
        dim: int = -1,
        learn_alpha: bool = False,
    ) -> None:
        super().__init__(alpha, learn_alpha)
        self.descending, self.one_based, self.dim = descending, one_based, dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.soft_rank(x, self.alpha, self.dim, self.descending, self.one_based)


class SoftSort(_Alpha):
    """``forward(x) = soft_sort(x, alpha, dim, descending)``."""

    def __init__(
        self, alpha: float = 1.0, descending: bool = False, dim: int = -1, learn_alpha: bool = False
    ) -> None:
        super().__init__(alpha, learn_alpha)
        self.descending, self.dim = descending, dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.soft_sort(x, self.alpha, self.dim, self.descending)


class TopKCrossEntropyLoss(_Alpha):
    """Drop-in for ``nn.CrossEntropyLoss(logits, labels)`` optimising top-k accuracy (docs/lapsum.md).

    ``p_k``: distribution over k (``p_k[0]`` is k = 1), e.g. ``[0, 0, 0, 0, 1]`` for top-5;
    ``top1_mode``: ``"smce"`` (default, difftopk's CIFAR-100 default), ``"sm"`` or ``"lapsum"``.
    """

    def __init__(
        self,
        p_k: Sequence[float],
        alpha: float = 1.0,
        top1_mode: str = "smce",
        learn_alpha: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__(alpha, learn_alpha)
        self.p_k = F._check_p_k(p_k)
        if top1_mode not in ("smce", "sm", "lapsum"):
            raise ValueError(f"top1_mode must be 'smce', 'sm' or 'lapsum', got {top1_mode!r}")
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
        self.top1_mode, self.reduction = top1_mode, reduction

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.topk_cross_entropy(
            logits, labels, self.p_k, self.alpha, self.top1_mode, self.reduction
        )


class PermutationCrossEntropyLoss(_Alpha):
    """``forward(scores, target) = permutation_cross_entropy(...)`` (target: true positions)."""

    def __init__(
        self,
        alpha: float = 1.0,
        descending: bool = False,
        learn_alpha: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__(alpha, learn_alpha)
        self.descending, self.reduction = descending, reduction

    def forward(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.permutation_cross_entropy(
            scores, target, self.alpha, -1, self.descending, self.reduction
        )


class KNNTopKLoss(_Alpha):
    """``forward(query, candidates, query_labels, candidate_labels) = knn_topk_loss(...)``."""

    def __init__(
        self, k, alpha: float = 1.0, metric: str = "sqeuclidean", learn_alpha: bool = False
    ) -> None:
        super().__init__(alpha, learn_alpha)
        self.k, self.metric = k, metric

    def forward(self, query, candidates, query_labels, candidate_labels) -> torch.Tensor:
        return F.knn_topk_loss(
            query, candidates, query_labels, candidate_labels, self.k, self.alpha, self.metric
        )
