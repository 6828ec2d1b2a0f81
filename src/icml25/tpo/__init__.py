"""Test-time preference optimisation (Li, Hu, Qu, Li, Cheng, ICML 2025, arXiv:2501.12895).

    >>> result = tpo_optimize(query, backend, reward, TPOConfig(width=5, depth=2))
    >>> result.best_response, result.best_reward

``backend`` is any :class:`icml25.llm.ChatBackend` (an OpenAI-compatible server, a local Hugging
Face model), ``reward`` any :class:`icml25.llm.RewardModel`. Modes: ``"tpo"``, ``"revision"``
and ``"bon"`` (Best-of-N). ``tpo_batch`` runs many queries with a resumable JSONL file; the shell
command is ``icml25 tpo``. ``PromptSet.from_textgrad()`` gives TextGrad's exact gradient and update
prompts. The offline role model of the reproduction is in :mod:`icml25.tpo.tiny`.
"""

from icml25._moved import moved as _moved
from icml25.tpo.engine import TPOConfig, TPOResult, best_of_n, tpo_batch, tpo_optimize
from icml25.tpo.prompts import PromptSet

__all__ = [
    "PromptSet",
    "TPOConfig",
    "TPOResult",
    "best_of_n",
    "tpo_batch",
    "tpo_optimize",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "CacheEntry": "engine",
        "IterationLog": "engine",
        "extract_tagged": "prompts",
        "short_value": "prompts",
    },
)
