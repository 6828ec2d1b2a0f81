"""OR-Bench (Cui et al., ICML 2025): an over-refusal benchmark built by LLM rewriting and
moderation, and the evaluation of models on it. See docs/orbench.md.

Build your own benchmark (paper Sec. 3: Algorithms 1-4) with :func:`build_orbench`, or its
stages :func:`generate_toxic_seeds`, :func:`rewrite_seeds`, :class:`EnsembleModerator`,
:func:`select_hard`, :func:`select_toxic`; evaluate a model (Sec. 4) with :func:`evaluate` and a
:class:`KeywordRefusalDetector` or an :class:`LLMRefusalJudge`; compare models with
:func:`compare_models` and :func:`plot_tradeoff`. :func:`load_orbench` reads the released files.

Importing this package is cheap (no torch).
"""

from __future__ import annotations

from icml25.orbench.categories import (
    CATEGORIES,
    CATEGORY_DEFINITIONS,
    NONE_OF_THE_ABOVE,
    normalize_category,
)
from icml25.orbench.dataset import load_orbench, save_records
from icml25.orbench.evaluation import EvalResult, evaluate
from icml25.orbench.generation import (
    CandidateRecord,
    SeedRecord,
    generate_all_seeds,
    generate_toxic_seeds,
    rewrite_seeds,
)
from icml25.orbench.judge import LLMRefusalJudge
from icml25.orbench.lm_eval_task import to_lm_eval_task
from icml25.orbench.moderation import (
    EnsembleModerator,
    LLMModerator,
    ModerationResult,
    vote_threshold,
)
from icml25.orbench.parsing import (
    JudgeLabel,
    ModerationVote,
    extract_bracketed,
    parse_judge_label,
    parse_moderation,
)
from icml25.orbench.pipeline import BuildReport, build_orbench
from icml25.orbench.records import SUBSETS, ORBenchRecord, record_id
from icml25.orbench.refusal import KeywordRefusalDetector
from icml25.orbench.selection import HardSelection, select_hard, select_toxic
from icml25.orbench.templates import PromptTemplates
from icml25.orbench.tradeoff import (
    PAPER_FIGURE1,
    TradeoffSummary,
    compare_models,
    plot_tradeoff,
    rank_agreement,
    spearman_bootstrap,
)
from icml25.orbench.xstest import XSTestPrompt, load_xstest

__all__ = [
    "CATEGORIES",
    "CATEGORY_DEFINITIONS",
    "NONE_OF_THE_ABOVE",
    "PAPER_FIGURE1",
    "SUBSETS",
    "BuildReport",
    "CandidateRecord",
    "EnsembleModerator",
    "EvalResult",
    "HardSelection",
    "JudgeLabel",
    "KeywordRefusalDetector",
    "LLMModerator",
    "LLMRefusalJudge",
    "ModerationResult",
    "ModerationVote",
    "ORBenchRecord",
    "PromptTemplates",
    "SeedRecord",
    "TradeoffSummary",
    "XSTestPrompt",
    "build_orbench",
    "compare_models",
    "evaluate",
    "extract_bracketed",
    "generate_all_seeds",
    "generate_toxic_seeds",
    "load_orbench",
    "load_xstest",
    "normalize_category",
    "parse_judge_label",
    "parse_moderation",
    "plot_tradeoff",
    "rank_agreement",
    "record_id",
    "rewrite_seeds",
    "save_records",
    "select_hard",
    "select_toxic",
    "spearman_bootstrap",
    "to_lm_eval_task",
    "vote_threshold",
]
