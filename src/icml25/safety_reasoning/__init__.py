"""Safety Reasoning with Guidelines (SRG) vs refusal training (Wang et al., ICML 2025;
arXiv:2502.04040). Guide: docs/safety_reasoning.md.

* the diagnosis of refusal training (§3): :func:`best_of_n` / :func:`bon_safety_curve` (latent
  safety knowledge), :func:`asr` with the judges (:class:`LlamaGuardJudge`,
  :class:`RefusalKeywordJudge`, :class:`RuleJudge`), and the representation view
  (:func:`last_token_states`, :func:`pca_projection`, :func:`proxy_a_distance`);
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

from icml25.safety_reasoning.attacks import (
    PERSUASION_TECHNIQUES,
    AttackTransform,
    CipherAttack,
    PAIRAttack,
    PastTenseAttack,
    PersuasionAttack,
    TemplateAttack,
    apply_attack,
)
from icml25.safety_reasoning.data import (
    Query,
    SRGExample,
    build_rt_dataset,
    build_srg_dataset,
    load_queries,
    to_chat_sft,
)
from icml25.safety_reasoning.evaluation import (
    AttackResult,
    BoNResult,
    LlamaGuardJudge,
    RefusalKeywordJudge,
    RuleJudge,
    asr,
    best_of_n,
    bon_safety_curve,
    load_attack_prompts,
)
from icml25.safety_reasoning.filters import Decision, FormatFilter, GuidelineFilter, OutcomeFilter
from icml25.safety_reasoning.formats import ParsedOutput, ReasoningFormat
from icml25.safety_reasoning.guidelines import (
    DEFAULT_GUIDELINES,
    Guideline,
    render_guidelines,
    teacher_messages,
)
from icml25.safety_reasoning.representation import (
    DivergenceReport,
    last_token_states,
    pca_projection,
    proxy_a_distance,
    representation_divergence,
)
from icml25.safety_reasoning.synthesis import SynthesisReport, synthesize
from icml25.safety_reasoning.training import (
    masked_lm_loss,
    sft,
    sft_config,
    sft_trainer,
    to_trl_rows,
)

__all__ = [
    "DEFAULT_GUIDELINES",
    "PERSUASION_TECHNIQUES",
    "AttackResult",
    "AttackTransform",
    "BoNResult",
    "CipherAttack",
    "Decision",
    "DivergenceReport",
    "FormatFilter",
    "Guideline",
    "GuidelineFilter",
    "LlamaGuardJudge",
    "OutcomeFilter",
    "PAIRAttack",
    "ParsedOutput",
    "PastTenseAttack",
    "PersuasionAttack",
    "Query",
    "ReasoningFormat",
    "RefusalKeywordJudge",
    "RuleJudge",
    "SRGExample",
    "SynthesisReport",
    "TemplateAttack",
    "apply_attack",
    "asr",
    "best_of_n",
    "bon_safety_curve",
    "build_rt_dataset",
    "build_srg_dataset",
    "last_token_states",
    "load_attack_prompts",
    "load_queries",
    "masked_lm_loss",
    "pca_projection",
    "proxy_a_distance",
    "render_guidelines",
    "representation_divergence",
    "sft",
    "sft_config",
    "sft_trainer",
    "synthesize",
    "teacher_messages",
    "to_chat_sft",
    "to_trl_rows",
]
