"""SWAN: SGD with Whitening And Normalization, a stateless optimizer for LLM training
(Ma, Gong, Scetbon, Meeds, ICML 2025, arXiv:2412.13148).

    >>> from icml25.swan import SWAN, swan_param_groups
    >>> opt = SWAN(swan_param_groups(model, lr=1e-3))   # any HF or plain PyTorch model

Hidden matrices get GradNorm (row standardisation) then GradWhitening (``(G G^T)^{-1/2} G``) of the
current gradient only, and a plain SGD step: no optimizer state. Embeddings, the LM head, norms and
biases take AdamW inside the same optimizer.
"""

from icml25.swan.functional import (
    grad_norm,
    muon_orthogonalize,
    newton_schulz_inv_sqrt,
    newton_schulz_polar,
    nsds_inv_sqrt,
    quintic_polar,
    sinkhorn_normalize,
    swan_direction,
    whiten,
)
from icml25.swan.groups import describe_groups, paper_param_groups, swan_param_groups
from icml25.swan.memory import (
    expected_adamw_state_bytes,
    model_bytes,
    optimizer_state_bytes,
    tensor_bytes,
)
from icml25.swan.optim import SWAN, VARIANTS, SinkGD

__all__ = [
    "SWAN",
    "VARIANTS",
    "SinkGD",
    "describe_groups",
    "expected_adamw_state_bytes",
    "grad_norm",
    "model_bytes",
    "muon_orthogonalize",
    "newton_schulz_inv_sqrt",
    "newton_schulz_polar",
    "nsds_inv_sqrt",
    "optimizer_state_bytes",
    "paper_param_groups",
    "quintic_polar",
    "sinkhorn_normalize",
    "swan_direction",
    "swan_param_groups",
    "tensor_bytes",
    "whiten",
]
