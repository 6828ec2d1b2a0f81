"""Safety Reasoning with Guidelines (SRG) vs refusal training (Wang et al., ICML 2025;
arXiv:2502.04040). Guide: docs/safety_reasoning.md.

* the diagnosis of refusal training (§3): :func:`best_of_n` (latent safety knowledge),
  :func:`asr` with the judges (:class:`LlamaGuardJudge`, :class:`RefusalKeywordJudge`,
  :class:`RuleJudge`), and the representation view (:func:`representation_divergence`; its
  pieces are in :mod:`~icml25.safety_reasoning.representation`);
* SRG (§4): guidelines (:data:`DEFAULT_GUIDELINES`), the reasoning format
  (:class:`ReasoningFormat`), synthesis of guideline-following reasoning by a teacher with
  rejection sampling (:func:`synthesize` and the filters), and SFT on the bare query
  (:func:`build_srg_dataset`, :func:`sft`, or TRL's ``SFTTrainer`` through :func:`sft_trainer`
  with the same defaults, :func:`sft_config`);
* OOD attacks as prompt transformations (:mod:`~icml25.safety_reasoning.attacks`).

Every LLM role (teacher, guideline judge, safety judge, attack rewriters, the model under test)
is an ``icml25.llm`` chat backend: an OpenAI-compatible server or a local Hugging Face model.
Importing this package does not import torch.
"""

from __future__ import annotations

from icml25._moved import moved as _moved
from icml25.safety_reasoning.attacks import (
    CipherAttack,
    PAIRAttack,
    PastTenseAttack,
    PersuasionAttack,
    TemplateAttack,
    apply_attack,
)
from icml25.safety_reasoning.data import Query, build_rt_dataset, build_srg_dataset, load_queries
from icml25.safety_reasoning.evaluation import (
    AttackResult,
    BoNResult,
    LlamaGuardJudge,
    RefusalKeywordJudge,
    RuleJudge,
    asr,
    best_of_n,
    load_attack_prompts,
)
from icml25.safety_reasoning.filters import FormatFilter, GuidelineFilter, OutcomeFilter
from icml25.safety_reasoning.formats import ReasoningFormat
from icml25.safety_reasoning.guidelines import DEFAULT_GUIDELINES, Guideline
from icml25.safety_reasoning.representation import DivergenceReport, representation_divergence
from icml25.safety_reasoning.synthesis import SynthesisReport, synthesize
from icml25.safety_reasoning.training import sft, sft_config, sft_trainer

__all__ = [
    "DEFAULT_GUIDELINES",
    "AttackResult",
    "BoNResult",
    "CipherAttack",
    "DivergenceReport",
    "FormatFilter",
    "Guideline",
    "GuidelineFilter",
    "LlamaGuardJudge",
    "OutcomeFilter",
    "PAIRAttack",
    "PastTenseAttack",
    "PersuasionAttack",
    "Query",
    "ReasoningFormat",
    "RefusalKeywordJudge",
    "RuleJudge",
    "SynthesisReport",
    "TemplateAttack",
    "apply_attack",
    "asr",
    "best_of_n",
    "build_rt_dataset",
    "build_srg_dataset",
    "load_attack_prompts",
    "load_queries",
    "representation_divergence",
    "sft",
    "sft_config",
    "sft_trainer",
    "synthesize",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "AttackTransform": "attacks",
        "Decision": "filters",
        "PERSUASION_TECHNIQUES": "attacks",
        "ParsedOutput": "formats",
        "SRGExample": "data",
        "bon_safety_curve": "evaluation",
        "last_token_states": "representation",
        "masked_lm_loss": "training",
        "pca_projection": "representation",
        "proxy_a_distance": "representation",
        "render_guidelines": "guidelines",
        "teacher_messages": "guidelines",
        "to_chat_sft": "data",
        "to_trl_rows": "training",
    },
)
