"""Contrastive losses in one framework, and the VRNS auxiliary loss (Lee, Lim, Lee, Sohn, ICML 2025,
arXiv:2506.09781).

    >>> from icml25.contrastive import ContrastiveLoss
    >>> crit = ContrastiveLoss("simclr", temperature=0.2, vrns_weight=30, n_train=len(dataset))
    >>> loss = crit(z1, z2)      # two views' projections, (m, d) each

``vrns_weight`` is the one switch that adds the paper's variance-reducing term; ``theory`` exposes
the closed forms (thresholds, predicted optima, bounds) to check a setting against.
"""

from icml25.contrastive import theory
from icml25.contrastive.losses import (
    ContrastiveLoss,
    SigmoidLoss,
    dcl_loss,
    dhel_loss,
    gather_with_grad,
    global_index,
    independent_additive_loss,
    info_nce_family,
    infonce_loss,
    nt_xent_loss,
    sigmoid_loss,
    spectral_contrastive_loss,
    vrns_loss,
)
from icml25.contrastive.stats import SimilarityStats, embed_two_views, similarity_stats

__all__ = [
    "ContrastiveLoss",
    "SigmoidLoss",
    "SimilarityStats",
    "dcl_loss",
    "dhel_loss",
    "embed_two_views",
    "gather_with_grad",
    "global_index",
    "independent_additive_loss",
    "info_nce_family",
    "infonce_loss",
    "nt_xent_loss",
    "sigmoid_loss",
    "similarity_stats",
    "spectral_contrastive_loss",
    "theory",
    "vrns_loss",
]
