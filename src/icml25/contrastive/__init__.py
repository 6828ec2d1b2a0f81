"""Contrastive losses in one framework, and the VRNS auxiliary loss (Lee, Lim, Lee, Sohn, ICML 2025,
arXiv:2506.09781).

    >>> from icml25.contrastive import ContrastiveLoss
    >>> crit = ContrastiveLoss("simclr", temperature=0.2, vrns_weight=30, n_train=len(dataset))
    >>> loss = crit(z1, z2)      # two views' projections, (m, d) each

``vrns_weight`` is the one switch that adds the paper's variance-reducing term; ``theory`` exposes
the closed forms (thresholds, predicted optima, bounds) to check a setting against.
"""

from icml25._moved import moved as _moved
from icml25.contrastive import theory
from icml25.contrastive.losses import (
    ContrastiveLoss,
    SigmoidLoss,
    gather_with_grad,
    global_index,
    vrns_loss,
)
from icml25.contrastive.stats import similarity_stats

__all__ = [
    "ContrastiveLoss",
    "SigmoidLoss",
    "gather_with_grad",
    "global_index",
    "similarity_stats",
    "theory",
    "vrns_loss",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "SimilarityStats": "stats",
        "dcl_loss": "losses",
        "dhel_loss": "losses",
        "embed_two_views": "stats",
        "independent_additive_loss": "losses",
        "info_nce_family": "losses",
        "infonce_loss": "losses",
        "nt_xent_loss": "losses",
        "sigmoid_loss": "losses",
        "spectral_contrastive_loss": "losses",
    },
)
