"""RLTHF: targeted human feedback for LLM alignment (Xu et al., ICML 2025, arXiv:2502.13417).

Start from AI labels, train a reward model on them, and spend a small human budget where the
reward model's sorted margins say the AI labels are wrong; leave out the AI labels it rejects and
up-weight the human ones. docs/rlthf.md has the method, an example and the reproduction.

* :func:`run_rlthf`, :class:`RLTHFConfig`, :class:`RLTHFResult`: the loop (``loop.py``).
* :class:`RewardDistribution`, :func:`find_bend`, :func:`window_accuracy`: the sorted margins and
  their bends (``distribution.py``); :func:`select_targets`, :func:`backoff_drop_mask`
  (``selection.py``).
* Reward models: :class:`EmbeddingRewardModel`, :class:`TrainableHFRewardModel`
  (``reward_model.py``), trained with :func:`weighted_bt_loss` (``losses.py``); TRL:
  :class:`WeightedRewardTrainer` and its defaults, :func:`reward_config`.
* Labellers: :class:`ChatLabeler`, :class:`HumanOracle`, :class:`CallbackHumanLabeler`,
  :class:`CSVHumanLabeler`, :class:`SyntheticLabeler` (``labelers.py``).
* Data: :class:`PreferencePairs` with ``to_trl``/``from_trl`` (``data.py``); baselines in
  ``baselines.py``; the offline world in ``textworld.py``.
"""

from __future__ import annotations

import importlib
from typing import Any

from icml25.rlthf.baselines import (
    run_ai_only,
    run_full_human,
    run_random,
    run_self_confidence,
    run_self_improvement,
    run_uncertainty,
)
from icml25.rlthf.data import PreferencePairs
from icml25.rlthf.distribution import RewardDistribution, find_bend, window_accuracy
from icml25.rlthf.labelers import (
    AnnotationPending,
    BudgetExceeded,
    CallbackHumanLabeler,
    ChatLabeler,
    CSVHumanLabeler,
    HumanOracle,
    Labeler,
    SyntheticLabeler,
    parse_choice,
)
from icml25.rlthf.loop import (
    RLTHFConfig,
    RLTHFResult,
    cross_fit_margins,
    preference_accuracy,
    run_rlthf,
)
from icml25.rlthf.losses import weighted_bt_loss
from icml25.rlthf.reward_model import (
    EmbeddingRewardModel,
    RewardModel,
    TrainableHFRewardModel,
    hashing_encoder,
    minilm_encoder,
)
from icml25.rlthf.selection import backoff_drop_mask, drop_position, select_targets
from icml25.rlthf.textworld import TextWorld, make_textworld

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
    "SyntheticLabeler",
    "TextWorld",
    "TrainableHFRewardModel",
    "WeightedRewardTrainer",
    "backoff_drop_mask",
    "cross_fit_margins",
    "drop_position",
    "find_bend",
    "hashing_encoder",
    "make_textworld",
    "minilm_encoder",
    "parse_choice",
    "run_ai_only",
    "run_full_human",
    "run_random",
    "run_rlthf",
    "run_self_confidence",
    "run_self_improvement",
    "run_uncertainty",
    "select_targets",
    "preference_accuracy",
    "reward_config",
    "weighted_bt_loss",
    "window_accuracy",
]


def __getattr__(name: str) -> Any:  # TRL loads only when its trainer is asked for
    if name in ("WeightedRewardTrainer", "reward_config"):
        return getattr(importlib.import_module("icml25.rlthf.trl_trainer"), name)
    raise AttributeError(f"module 'icml25.rlthf' has no attribute {name!r}")
