"""Eliciting language-model behaviours with investigator agents (Li et al., ICML 2025;
arXiv:2502.01236). Guide: docs/elicitation.md.

An investigator ``q_θ(x | b)`` writes prompts ``x`` that make a target model show behaviour ``b``:
trained as a reverse model (:func:`build_reverse_pairs`, :func:`reverse_sft`; TRL through
:func:`reverse_sft_trainer` with :func:`default_reverse_sft_config`), then by DPO rounds on the
target's likelihood (:func:`dpo_round`, :func:`train_dpo`; TRL through :func:`dpo_trainer` with
:func:`default_dpo_config`), then by Frank-Wolfe iterations for diversity (:func:`frank_wolfe`,
:class:`InvestigatorMixture`). Targets are local Hugging Face models (:class:`HFTargetModel`) or
OpenAI-compatible servers (:class:`OpenAICompatTarget`); rewards are string likelihoods
(:class:`StringReward`) or rubric verifiers (:class:`RubricReward`, :class:`LLMJudge`).
Checkpoints load through ``icml25.llm.load_model`` (:meth:`Investigator.load`,
:meth:`HFTargetModel.load`, with ``device`` and ``dtype``); training follows TRL's conventions
(dropout off for DPO log-probs, float32 master weights for bf16 checkpoints, targets tokenised as
TRL tokenises them). The plain loops are single-process; the TRL entry points run data-parallel
under ``torchrun`` / ``accelerate launch``.

Importing this package imports torch.
"""

from __future__ import annotations

from icml25._moved import moved as _moved
from icml25.elicitation.backends import HFTargetModel, OpenAICompatTarget, TargetModel
from icml25.elicitation.dpo import (
    PreferencePair,
    default_dpo_config,
    dpo_round,
    dpo_trainer,
    train_dpo,
)
from icml25.elicitation.frank_wolfe import frank_wolfe
from icml25.elicitation.investigator import Investigator, InvestigatorMixture
from icml25.elicitation.metrics import success_rate
from icml25.elicitation.rewards import LLMJudge, RubricReward, StringReward
from icml25.elicitation.sft import (
    build_reverse_pairs,
    default_reverse_sft_config,
    reverse_sft,
    reverse_sft_trainer,
)
from icml25.elicitation.toy import PlantedTriggerWorld

__all__ = [
    "HFTargetModel",
    "Investigator",
    "InvestigatorMixture",
    "LLMJudge",
    "OpenAICompatTarget",
    "PlantedTriggerWorld",
    "PreferencePair",
    "RubricReward",
    "StringReward",
    "TargetModel",
    "build_reverse_pairs",
    "default_dpo_config",
    "default_reverse_sft_config",
    "dpo_round",
    "dpo_trainer",
    "frank_wolfe",
    "reverse_sft",
    "reverse_sft_trainer",
    "success_rate",
    "train_dpo",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "PenalizedReward": "rewards",
        "ToyTargetError": "toy",
        "distinct_n": "metrics",
        "dpo_loss": "dpo",
        "fw_step_size": "frank_wolfe",
        "load_texts": "data",
        "mean_logprob": "metrics",
        "pairwise_jaccard": "metrics",
        "sample_preference_pairs": "dpo",
        "successes": "metrics",
        "trigger_coverage": "metrics",
    },
)
