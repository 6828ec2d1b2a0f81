"""Test-time preference optimisation (Li, Hu, Qu, Li, Cheng, ICML 2025, arXiv:2501.12895).

    >>> result = tpo_optimize(query, backend, reward, TPOConfig(width=5, depth=2))
    >>> result.best_response, result.best_reward

``backend`` is any :class:`icml25.llm.ChatBackend` (an OpenAI-compatible server, a local Hugging
Face model), ``reward`` any :class:`icml25.llm.RewardModel`. Work in progress (issue 10): the loop,
the prompts and the baselines are here; the offline role model, the reproduction and the
``icml25 tpo`` command are not yet.
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
