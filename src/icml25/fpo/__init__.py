"""FPO: feature-level constrained preference optimization with sparse autoencoders.

Yin et al., "Constrain Alignment with Sparse Autoencoders", ICML 2025 (arXiv:2411.07618; official
code: github.com/MikaStars39/FeatureAlignment). FPO is a SimPO-style length-normalised
preference loss with the reference's length-normalised margin (precomputed offline) and a
TDPO-2-style constraint on the rejected response, measured as the squared difference of pooled
sparse-autoencoder features at one layer (paper Eq. 10-11) instead of the sequential KL.

* :func:`fpo_loss`, :func:`dpo_loss`, :func:`simpo_loss`, :func:`tdpo_loss`: the losses over
  tensors (their pieces, such as the feature discrepancy and the pooling, are in
  :mod:`~icml25.fpo.losses`).
* :class:`SparseAutoencoder`, :func:`load_gemma_scope_npz`, :func:`from_sae_lens`,
  :func:`harvest_activations`, :func:`train_sae`: the SAE.
* :func:`build_reference_cache`, :class:`ReferenceCache`: the offline reference (safetensors).
* :class:`PreferenceCollator`: TRL-format data.
* :class:`PreferenceConfig`, :func:`train_preference` (its :class:`History`): a plain
  single-process loop; :class:`FPOTrainer`: a TRL ``DPOTrainer`` subclass for real scale and
  several GPUs (extra ``train``; data-parallel under ``torchrun`` / ``accelerate launch``).
* :mod:`~icml25.fpo.hooks`: block ℓ's residual stream by hook; :mod:`~icml25.fpo.metrics`: win
  rates, reward accuracy, entropy, sequential KL.

See docs/fpo.md.
"""

from __future__ import annotations

from icml25._moved import moved as _moved
from icml25.fpo.cache import ReferenceCache, build_reference_cache
from icml25.fpo.data import PreferenceCollator
from icml25.fpo.losses import FPOOutput, dpo_loss, fpo_loss, simpo_loss, tdpo_loss
from icml25.fpo.sae import (
    SparseAutoencoder,
    from_sae_lens,
    harvest_activations,
    load_gemma_scope_npz,
    train_sae,
)
from icml25.fpo.trainer import History, PreferenceConfig, train_preference

__all__ = [
    "FPOOutput",
    "FPOTrainer",
    "History",
    "PreferenceCollator",
    "PreferenceConfig",
    "ReferenceCache",
    "SparseAutoencoder",
    "build_reference_cache",
    "dpo_loss",
    "fpo_loss",
    "from_sae_lens",
    "harvest_activations",
    "load_gemma_scope_npz",
    "simpo_loss",
    "tdpo_loss",
    "train_preference",
    "train_sae",
]


def _fpo_trainer() -> type:
    """TRL (the ``train`` extra) loads only when ``FPOTrainer`` is asked for."""
    from icml25.fpo.trl_trainer import FPOTrainer

    return FPOTrainer


# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "COLUMNS": "data",
        "PassOutput": "forward",
        "ResidualCapture": "hooks",
        "feature_discrepancy": "losses",
        "get_decoder_layers": "hooks",
        "head_to_head": "metrics",
        "load_preferences": "icml25.preference",
        "pool_codes": "losses",
        "pool_positions": "losses",
        "preference_pass": "forward",
        "response_logps": "logps",
        "reward_accuracy": "metrics",
        "sae_metrics": "sae",
        "sequential_kl": "metrics",
        "sequential_kl_from_logits": "logps",
        "token_entropy": "metrics",
        "top_k_active": "losses",
        "win_rate": "metrics",
    },
    lazy={"FPOTrainer": _fpo_trainer},
)
