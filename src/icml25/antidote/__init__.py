"""Antidote (paper 17): post-fine-tuning safety recovery by one-shot pruning of the weights that
are most important on harmful data (Wanda score, per-row top-``rho``), after a harmful
fine-tuning attack. See ``docs/antidote.md``.

    from icml25.antidote import antidote_prune, AntidoteConfig, make_realign_batches
    batches = make_realign_batches(tokenizer, harmful_pairs, batch_size=8)
    result = antidote_prune(peft_model, batches, AntidoteConfig(dense_ratio=0.1))
"""

from icml25._moved import moved as _moved
from icml25.antidote.evaluation import (
    CallableModerator,
    ChatModerator,
    finetune_accuracy,
    harmful_score,
)
from icml25.antidote.pipeline import compare_pruning, make_realign_batches
from icml25.antidote.prune import AntidoteConfig, AntidoteResult, antidote_prune
from icml25.antidote.scores import wanda_scores

__all__ = [
    "AntidoteConfig",
    "AntidoteResult",
    "CallableModerator",
    "ChatModerator",
    "antidote_prune",
    "compare_pruning",
    "finetune_accuracy",
    "harmful_score",
    "make_realign_batches",
    "wanda_scores",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "HarmfulFinetuneExperiment": "pipeline",
        "LoRAFactor": "targets",
        "Moderator": "icml25.llm.moderation",
        "RuleModerator": "evaluation",
        "ToySettings": "pipeline",
        "activation_sq_norms": "scores",
        "apply_mask": "masks",
        "exact_match_accuracy": "evaluation",
        "generate_responses": "evaluation",
        "grad_magnitude_scores": "scores",
        "gsm8k_answer": "evaluation",
        "harmful_mask": "masks",
        "magnitude_mask": "masks",
        "magnitude_scores": "scores",
        "peft_adapters": "targets",
        "random_mask": "masks",
        "row_mask": "masks",
        "select_target_layers": "targets",
        "tensor_mask": "masks",
        "undo_mask": "masks",
    },
)
