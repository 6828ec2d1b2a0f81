"""Topological signatures of adversaries in multimodal alignments (Vu et al., ICML 2025,
arXiv:2501.18006): differentiable persistence, the TP and MK topological-contrastive losses,
per-sample signatures, MMD tests that use them, and the non-topological neighbourhood
features (k-NN distances, LID) that control for them.

    >>> from icml25.topo_detect import tp_loss, mk_loss, sample_signatures
    >>> loss = tp_loss(image_emb, paired_text_emb)          # (N, d) clouds; differentiable
"""

from icml25.topo_detect.attacks import fgsm, pgd_linf
from icml25.topo_detect.controls import knn_features
from icml25.topo_detect.losses import TopologicalContrastiveLoss, mk_loss, tp_loss
from icml25.topo_detect.mmd import (
    gaussian_gram,
    median_bandwidth,
    mmd2_unbiased,
    mmd_h1_variance,
    permutation_test,
    wild_bootstrap_test,
)
from icml25.topo_detect.models import (
    AlignmentModel,
    HFCLIPAdapter,
    TinyTwoTower,
    digit_prompt_embeddings,
)
from icml25.topo_detect.persistence import (
    PersistenceDiagram,
    distance_matrix,
    multiscale_kernel,
    total_persistence,
    vr_diagrams,
)
from icml25.topo_detect.signatures import chunks, sample_signatures, signature_curve
from icml25.topo_detect.two_sample import (
    DeepKernelMMD,
    GaussianMMD,
    MMDTest,
    SemanticAwareMMD,
    TestResult,
    TopologicalMMD,
)

__all__ = [
    "AlignmentModel",
    "DeepKernelMMD",
    "MMDTest",
    "SemanticAwareMMD",
    "GaussianMMD",
    "HFCLIPAdapter",
    "PersistenceDiagram",
    "TestResult",
    "TinyTwoTower",
    "TopologicalContrastiveLoss",
    "TopologicalMMD",
    "chunks",
    "digit_prompt_embeddings",
    "distance_matrix",
    "fgsm",
    "gaussian_gram",
    "knn_features",
    "median_bandwidth",
    "mk_loss",
    "mmd2_unbiased",
    "mmd_h1_variance",
    "multiscale_kernel",
    "permutation_test",
    "pgd_linf",
    "sample_signatures",
    "signature_curve",
    "total_persistence",
    "tp_loss",
    "vr_diagrams",
    "wild_bootstrap_test",
]
