"""FPO: feature-level constrained preference optimization with sparse autoencoders.

Yin et al., "Constrain Alignment with Sparse Autoencoders", ICML 2025 (arXiv:2411.07618; official
code: github.com/MikaStars39/FeatureAlignment). FPO is a SimPO-style length-normalised
preference loss with the reference's length-normalised margin (precomputed offline) and a
TDPO-2-style constraint on the rejected response, measured as the squared difference of pooled
sparse-autoencoder features at one layer (paper Eq. 10-11) instead of the sequential KL.

* :func:`fpo_loss`, :func:`dpo_loss`, :func:`simpo_loss`, :func:`tdpo_loss`,
  :func:`feature_discrepancy`, :func:`pool_codes`: the losses over tensors.
* :class:`SparseAutoencoder`, :func:`load_gemma_scope_npz`, :func:`from_sae_lens`,
  :func:`harvest_activations`, :func:`train_sae`, :func:`sae_metrics`: the SAE.
* :class:`ResidualCapture`, :func:`get_decoder_layers`: block ℓ's residual stream by hook.
* :func:`build_reference_cache`, :class:`ReferenceCache`: the offline reference (safetensors).
* :class:`PreferenceCollator`, :func:`load_preferences`: TRL-format data.
* :class:`PreferenceConfig`, :func:`train_preference`: a plain single-process loop;
  :class:`FPOTrainer`: a TRL ``DPOTrainer`` subclass for real scale and several GPUs (extra
  ``train``; data-parallel under ``torchrun`` / ``accelerate launch``).
* :mod:`~icml25.fpo.metrics`: win rates, reward accuracy, entropy, sequential KL.

See docs/fpo.md.
"""

from __future__ import annotations

from icml25.fpo.cache import ReferenceCache, build_reference_cache
from icml25.fpo.data import COLUMNS, PreferenceCollator, load_preferences
from icml25.fpo.forward import PassOutput, preference_pass
from icml25.fpo.hooks import ResidualCapture, get_decoder_layers
from icml25.fpo.logps import response_logps, sequential_kl_from_logits
from icml25.fpo.losses import (
    FPOOutput,
    dpo_loss,
    feature_discrepancy,
    fpo_loss,
    pool_codes,
    pool_positions,
    simpo_loss,
    tdpo_loss,
    top_k_active,
)
from icml25.fpo.metrics import (
    head_to_head,
    reward_accuracy,
    sequential_kl,
    token_entropy,
    win_rate,
)
from icml25.fpo.sae import (
    SparseAutoencoder,
    from_sae_lens,
    harvest_activations,
    load_gemma_scope_npz,
    sae_metrics,
    train_sae,
)
from icml25.fpo.trainer import History, PreferenceConfig, train_preference

__all__ = [
    "COLUMNS",
    "FPOOutput",
    "FPOTrainer",
    "History",
    "PassOutput",
    "PreferenceCollator",
    "PreferenceConfig",
    "ReferenceCache",
    "ResidualCapture",
    "SparseAutoencoder",
    "build_reference_cache",
    "dpo_loss",
    "feature_discrepancy",
    "fpo_loss",
    "from_sae_lens",
    "get_decoder_layers",
    "harvest_activations",
    "head_to_head",
    "load_gemma_scope_npz",
    "load_preferences",
    "pool_codes",
    "pool_positions",
    "preference_pass",
    "response_logps",
    "reward_accuracy",
    "sae_metrics",
    "sequential_kl",
    "sequential_kl_from_logits",
    "simpo_loss",
    "tdpo_loss",
    "top_k_active",
    "token_entropy",
    "train_preference",
    "train_sae",
    "win_rate",
]


def __getattr__(name: str):
    if name == "FPOTrainer":  # TRL is the `train` extra: import it on use
        from icml25.fpo.trl_trainer import FPOTrainer

        return FPOTrainer
    raise AttributeError(f"module 'icml25.fpo' has no attribute {name!r}")
