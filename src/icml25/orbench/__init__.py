"""OR-Bench (Cui et al., ICML 2025): an over-refusal benchmark built by LLM rewriting and
moderation, and the evaluation of models on it. See docs/orbench.md.

Build your own benchmark (paper Sec. 3: Algorithms 1-4) with :func:`build_orbench` (the
moderators as backends, :class:`LLMModerator` objects or an :class:`EnsembleModerator`); its
stages are public in :mod:`icml25.orbench.generation` (seeds, rewrites),
:class:`EnsembleModerator` and :mod:`icml25.orbench.selection` (hard and toxic subsets); evaluate a model (Sec. 4) with :func:`evaluate` and a
:class:`KeywordRefusalDetector` or an :class:`LLMRefusalJudge`; compare models with
:func:`compare_models` and :func:`plot_tradeoff`. :func:`load_orbench` reads the released files.

Importing this package is cheap (no torch).
"""

from __future__ import annotations

from icml25._moved import moved as _moved
from icml25.orbench.categories import CATEGORIES
from icml25.orbench.dataset import load_orbench
from icml25.orbench.evaluation import EvalResult, evaluate
from icml25.orbench.judge import LLMRefusalJudge
from icml25.orbench.lm_eval_task import to_lm_eval_task
from icml25.orbench.moderation import EnsembleModerator, LLMModerator
from icml25.orbench.pipeline import BuildReport, build_orbench
from icml25.orbench.refusal import KeywordRefusalDetector
from icml25.orbench.templates import PromptTemplates
from icml25.orbench.tradeoff import PAPER_FIGURE1, TradeoffSummary, compare_models, plot_tradeoff
from icml25.orbench.xstest import load_xstest

__all__ = [
    "CATEGORIES",
    "PAPER_FIGURE1",
    "BuildReport",
    "EnsembleModerator",
    "EvalResult",
    "KeywordRefusalDetector",
    "LLMModerator",
    "LLMRefusalJudge",
    "PromptTemplates",
    "TradeoffSummary",
    "build_orbench",
    "compare_models",
    "evaluate",
    "load_orbench",
    "load_xstest",
    "plot_tradeoff",
    "to_lm_eval_task",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "CATEGORY_DEFINITIONS": "categories",
        "CandidateRecord": "generation",
        "HardSelection": "selection",
        "JudgeLabel": "parsing",
        "ModerationResult": "moderation",
        "ModerationVote": "parsing",
        "NONE_OF_THE_ABOVE": "categories",
        "ORBenchRecord": "records",
        "SUBSETS": "records",
        "SeedRecord": "generation",
        "XSTestPrompt": "xstest",
        "extract_bracketed": "parsing",
        "generate_all_seeds": "generation",
        "generate_toxic_seeds": "generation",
        "normalize_category": "categories",
        "parse_judge_label": "parsing",
        "parse_moderation": "parsing",
        "rank_agreement": "tradeoff",
        "record_id": "records",
        "rewrite_seeds": "generation",
        "save_records": "dataset",
        "select_hard": "selection",
        "select_toxic": "selection",
        "spearman_bootstrap": "tradeoff",
        "vote_threshold": "moderation",
    },
)
