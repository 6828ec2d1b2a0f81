"""Antidote (paper 17): post-fine-tuning safety recovery by one-shot pruning of the weights that
are most important on harmful data (Wanda score, per-row top-``rho``), after a harmful
fine-tuning attack. See ``docs/antidote.md``.

    from icml25.antidote import antidote_prune, AntidoteConfig, make_realign_batches
    batches = make_realign_batches(tokenizer, harmful_pairs, batch_size=8)
    result = antidote_prune(peft_model, batches, AntidoteConfig(dense_ratio=0.1))
"""

from icml25.antidote.evaluation import (
    CallableModerator,
    ChatModerator,
    Moderator,
    RuleModerator,
    exact_match_accuracy,
    finetune_accuracy,
    generate_responses,
    gsm8k_answer,
    harmful_score,
)
from icml25.antidote.masks import (
    apply_mask,
    harmful_mask,
    magnitude_mask,
    random_mask,
    row_mask,
    tensor_mask,
    undo_mask,
)
from icml25.antidote.pipeline import (
    HarmfulFinetuneExperiment,
    ToySettings,
    compare_pruning,
    make_realign_batches,
)
from icml25.antidote.prune import AntidoteConfig, AntidoteResult, antidote_prune
from icml25.antidote.scores import (
    activation_sq_norms,
    grad_magnitude_scores,
    magnitude_scores,
    wanda_scores,
)
from icml25.antidote.targets import LoRAFactor, peft_adapters, select_target_layers

__all__ = [
    "AntidoteConfig",
    "AntidoteResult",
    "CallableModerator",
    "ChatModerator",
    "HarmfulFinetuneExperiment",
    "LoRAFactor",
    "Moderator",
    "RuleModerator",
    "ToySettings",
    "activation_sq_norms",
    "antidote_prune",
    "apply_mask",
    "compare_pruning",
    "exact_match_accuracy",
    "finetune_accuracy",
    "generate_responses",
    "grad_magnitude_scores",
    "gsm8k_answer",
    "harmful_mask",
    "harmful_score",
    "magnitude_mask",
    "magnitude_scores",
    "make_realign_batches",
    "random_mask",
    "peft_adapters",
    "row_mask",
    "select_target_layers",
    "tensor_mask",
    "undo_mask",
    "wanda_scores",
]
