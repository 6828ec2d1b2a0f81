"""SWAN: SGD with Whitening And Normalization, a stateless optimizer for LLM training
(Ma, Gong, Scetbon, Meeds, ICML 2025, arXiv:2412.13148).

    >>> from icml25.swan import SWAN, swan_param_groups
    >>> opt = SWAN(swan_param_groups(model, lr=1e-3))   # any HF or plain PyTorch model

Hidden matrices get GradNorm (row standardisation) then GradWhitening (``(G G^T)^{-1/2} G``) of the
current gradient only, and a plain SGD step: no optimizer state. Embeddings, the LM head, norms and
biases take AdamW inside the same optimizer.
"""

from icml25._moved import moved as _moved
from icml25.swan.functional import swan_direction
from icml25.swan.groups import paper_param_groups, swan_param_groups
from icml25.swan.memory import optimizer_state_bytes
from icml25.swan.optim import SWAN, SinkGD

__all__ = [
    "SWAN",
    "SinkGD",
    "optimizer_state_bytes",
    "paper_param_groups",
    "swan_direction",
    "swan_param_groups",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "VARIANTS": "optim",
        "describe_groups": "groups",
        "expected_adamw_state_bytes": "memory",
        "grad_norm": "functional",
        "model_bytes": "memory",
        "muon_orthogonalize": "functional",
        "newton_schulz_inv_sqrt": "functional",
        "newton_schulz_polar": "functional",
        "nsds_inv_sqrt": "functional",
        "quintic_polar": "functional",
        "sinkhorn_normalize": "functional",
        "tensor_bytes": "memory",
        "whiten": "functional",
    },
)
