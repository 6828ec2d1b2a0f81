"""Topological signatures of adversaries in multimodal alignments (Vu et al., ICML 2025,
arXiv:2501.18006): differentiable persistence, the TP and MK topological-contrastive losses,
per-sample signatures, MMD tests that use them, and the non-topological neighbourhood
features (k-NN distances, LID) that control for them.

    >>> from icml25.topo_detect import tp_loss, mk_loss, sample_signatures
    >>> loss = tp_loss(image_emb, paired_text_emb)          # (N, d) clouds; differentiable
"""

from icml25._moved import moved as _moved
from icml25.topo_detect.controls import knn_features
from icml25.topo_detect.losses import TopologicalContrastiveLoss, mk_loss, tp_loss
from icml25.topo_detect.models import AlignmentModel, HFCLIPAdapter
from icml25.topo_detect.signatures import sample_signatures, signature_curve
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
    "TestResult",
    "TopologicalContrastiveLoss",
    "TopologicalMMD",
    "knn_features",
    "mk_loss",
    "sample_signatures",
    "signature_curve",
    "tp_loss",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "PersistenceDiagram": "persistence",
        "TinyTwoTower": "models",
        "chunks": "signatures",
        "digit_prompt_embeddings": "models",
        "distance_matrix": "persistence",
        "fgsm": "attacks",
        "gaussian_gram": "mmd",
        "median_bandwidth": "mmd",
        "mmd2_unbiased": "mmd",
        "mmd_h1_variance": "mmd",
        "multiscale_kernel": "persistence",
        "permutation_test": "mmd",
        "pgd_linf": "attacks",
        "total_persistence": "persistence",
        "vr_diagrams": "persistence",
        "wild_bootstrap_test": "mmd",
    },
)
