"""Test-time preference optimisation (Li, Hu, Qu, Li, Cheng, ICML 2025, arXiv:2501.12895).

    >>> result = tpo_optimize(query, backend, reward, TPOConfig(width=5, depth=2))
    >>> result.best_response, result.best_reward

``backend`` is any :class:`icml25.llm.ChatBackend` (an OpenAI-compatible server, a local Hugging
Face model), ``reward`` any :class:`icml25.llm.RewardModel`. Modes: ``"tpo"``, ``"revision"``
and ``"bon"`` (Best-of-N). ``tpo_batch`` runs many queries with a resumable JSONL file; the shell
command is ``icml25 tpo``. ``PromptSet.from_textgrad()`` gives TextGrad's exact gradient and update
prompts. The offline role model of the reproduction is in :mod:`icml25.tpo.tiny`.
"""

from icml25.tpo.engine import (
    CacheEntry,
    IterationLog,
    TPOConfig,
    TPOResult,
    best_of_n,
    tpo_batch,
    tpo_optimize,
)
from icml25.tpo.prompts import PromptSet, extract_tagged, short_value

__all__ = [
    "CacheEntry",
    "IterationLog",
    "PromptSet",
    "TPOConfig",
    "TPOResult",
    "best_of_n",
    "extract_tagged",
    "short_value",
    "tpo_batch",
    "tpo_optimize",
]
