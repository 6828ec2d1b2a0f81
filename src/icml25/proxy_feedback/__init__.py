"""Paper 10 (arXiv:2412.16475): when proxy preference data improves the sample complexity of
learning an expert's policy, and the two-stage parameterisation that realises it.

Stage 1 fits ``π̃ = φ ∘ Θ ∘ id ∘ τ`` to abundant proxy preferences; stage 2 freezes ``τ, Θ, φ``
and fits only a small adapter ``A: Δ^D -> Δ^D`` on scarce expert preferences, giving
``π† = φ ∘ Θ ∘ A ∘ τ``. :func:`check_conditions` says whether a proxy meets the paper's
sufficient conditions. ``llm`` holds the same bottleneck for Hugging Face causal LMs (import
``icml25.proxy_feedback.llm``; it needs ``transformers``), and ``trainer`` its
``transformers.Trainer`` path, ``SimplexDPOTrainer`` (neither is imported here).
"""

from icml25._moved import moved as _moved
from icml25.proxy_feedback.conditions import ConditionReport, check_conditions
from icml25.proxy_feedback.data import PreferenceBatch, sample_preferences
from icml25.proxy_feedback.evaluate import evaluate
from icml25.proxy_feedback.model import MLPPolicy, SimplexPolicy
from icml25.proxy_feedback.train import (
    fit_finetune_all,
    fit_pooled,
    fit_proxy_stage,
    fit_true_only,
    fit_true_stage,
)
from icml25.proxy_feedback.worlds import SyntheticPreferenceWorld

__all__ = [
    "ConditionReport",
    "MLPPolicy",
    "PreferenceBatch",
    "SimplexPolicy",
    "SyntheticPreferenceWorld",
    "check_conditions",
    "evaluate",
    "fit_finetune_all",
    "fit_pooled",
    "fit_proxy_stage",
    "fit_true_only",
    "fit_true_stage",
    "sample_preferences",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "ADAPTERS": "model",
        "IdentityAdapter": "model",
        "LogLinearAdapter": "model",
        "MLPAdapter": "model",
        "SCENARIOS": "worlds",
        "make_adapter": "model",
        "preference_nll": "losses",
        "triple_logprobs": "losses",
    },
)
