"""LapSum: differentiable ranking, sorting and top-k in O(n log n) (Struski et al., ICML 2025).

One building block, the sum of Laplace CDFs ``LapSum_alpha(x; t) = sum_i Lap((t - x_i)/alpha)``,
has a closed-form inverse; soft top-k, soft rank, soft sort and soft permutations all follow from it
with exact O(n log n) forward and backward passes and O(n) saved memory.

    >>> import torch
    >>> from icml25.lapsum import soft_topk
    >>> p = soft_topk(torch.randn(64, 1000), k=10, alpha=0.1)   # each row sums to 10
"""

from icml25._moved import moved as _moved
from icml25.lapsum.functional import (
    lapsum,
    lapsum_inverse,
    log_soft_topk,
    soft_permutation_matrix,
    soft_rank,
    soft_sort,
    soft_topk,
    spearman_corr,
)

__all__ = [
    "lapsum",
    "lapsum_inverse",
    "log_soft_topk",
    "soft_permutation_matrix",
    "soft_rank",
    "soft_sort",
    "soft_topk",
    "spearman_corr",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "knn_topk_loss": "functional",
        "laplace_cdf": "functional",
        "laplace_log_cdf": "functional",
        "laplace_pdf": "functional",
        "permutation_cross_entropy": "functional",
        "topk_cross_entropy": "functional",
    },
)
