"""RLTHF: targeted human feedback for LLM alignment (Xu et al., ICML 2025, arXiv:2502.13417).

Start from AI labels, train a reward model on them, and spend a small human budget where the
reward model's sorted margins say the AI labels are wrong; leave out the AI labels it rejects and
up-weight the human ones. docs/rlthf.md has the method, an example and the reproduction.

* :func:`run_rlthf`, :class:`RLTHFConfig`, :class:`RLTHFResult`: the loop (``loop.py``).
* :class:`RewardDistribution`, :func:`window_accuracy`: the sorted margins and their bends
  (``distribution.py``); the selection and back-off rules are in ``selection.py``.
* Reward models (:class:`RewardModel`): :class:`EmbeddingRewardModel`,
  :class:`TrainableHFRewardModel` (``reward_model.py``); TRL: :class:`WeightedRewardTrainer`
  (``trl_trainer.py``, imported on use).
* Labellers (:class:`Labeler`): :class:`ChatLabeler`, :class:`HumanOracle`,
  :class:`CallbackHumanLabeler`, :class:`CSVHumanLabeler` (``labelers.py``).
* Data: :class:`PreferencePairs` with ``to_trl``/``from_trl`` (``data.py``); baselines in
  ``baselines.py``; the offline world, :func:`make_textworld`, in ``textworld.py``.
"""

from __future__ import annotations

from icml25._moved import moved as _moved
from icml25.rlthf.data import PreferencePairs
from icml25.rlthf.distribution import RewardDistribution, window_accuracy
from icml25.rlthf.labelers import (
    AnnotationPending,
    BudgetExceeded,
    CallbackHumanLabeler,
    ChatLabeler,
    CSVHumanLabeler,
    HumanOracle,
    Labeler,
)
from icml25.rlthf.loop import RLTHFConfig, RLTHFResult, run_rlthf
from icml25.rlthf.reward_model import EmbeddingRewardModel, RewardModel, TrainableHFRewardModel
from icml25.rlthf.textworld import make_textworld

__all__ = [
    "AnnotationPending",
    "BudgetExceeded",
    "CSVHumanLabeler",
    "CallbackHumanLabeler",
    "ChatLabeler",
    "EmbeddingRewardModel",
    "HumanOracle",
    "Labeler",
    "PreferencePairs",
    "RLTHFConfig",
    "RLTHFResult",
    "RewardDistribution",
    "RewardModel",
    "TrainableHFRewardModel",
    "WeightedRewardTrainer",
    "make_textworld",
    "run_rlthf",
    "window_accuracy",
]


def _weighted_reward_trainer() -> type:
    """TRL (the ``train`` extra) loads only when the trainer is asked for."""
    try:
        from icml25.rlthf.trl_trainer import WeightedRewardTrainer
    except ImportError as e:
        raise ImportError(
            f"WeightedRewardTrainer needs TRL: pip install 'icml25[train]' ({e})"
        ) from e
    return WeightedRewardTrainer


# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "SyntheticLabeler": "labelers",
        "TextWorld": "textworld",
        "backoff_drop_mask": "selection",
        "cross_fit_margins": "loop",
        "drop_position": "selection",
        "find_bend": "distribution",
        "hashing_encoder": "reward_model",
        "minilm_encoder": "reward_model",
        "parse_choice": "labelers",
        "preference_accuracy": "loop",
        "reward_config": "trl_trainer",
        "run_ai_only": "baselines",
        "run_full_human": "baselines",
        "run_random": "baselines",
        "run_self_confidence": "baselines",
        "run_self_improvement": "baselines",
        "run_uncertainty": "baselines",
        "select_targets": "selection",
        "weighted_bt_loss": "losses",
    },
    lazy={"WeightedRewardTrainer": _weighted_reward_trainer},
)
