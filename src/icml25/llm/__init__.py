"""Chat and reward-model backends shared by the LLM papers.

One protocol (:class:`ChatBackend`), several implementations:

- :class:`OpenAIChat`: any OpenAI-compatible HTTP server (vLLM, llama.cpp server, OpenAI);
- :class:`HFChat`: a local ``transformers`` causal LM (also ``logprobs``);
- :class:`CachedChat`: a persistent SQLite cache around any backend, for resumable pipelines;
- :class:`CallableChat` / :class:`ScriptedChat`: a Python function or canned replies, for tests;
- :class:`ChatServer`: serve any backend over the OpenAI protocol on 127.0.0.1.

Batch pipelines write through :class:`JsonlStore` (append-only, key-based done-ness, error rows)
with :func:`run_resumable`; ``complete_many(..., errors="return")`` gives every request its own
result or exception.

Refusal detection: :class:`KeywordRefusalDetector` (``detector(response) -> bool``).

Moderators (``moderator(prompts, responses) -> list[bool]``, True = harmful):
:class:`CallableModerator`, :class:`ChatModerator` (a served judge such as Llama-Guard).

Reward models follow :class:`RewardModel` (``score(queries, responses) -> list[float]``):
:class:`HFRewardModel`, :class:`CallableReward`.

Importing this package is cheap; torch and transformers load with :class:`HFChat` /
:class:`HFRewardModel`.
"""

from __future__ import annotations

import importlib
from typing import Any

from icml25.llm.base import (
    ChatBackend,
    Completion,
    RequestResult,
    SamplingParams,
    TokenLogprob,
    validate_messages,
)
from icml25.llm.moderation import CallableModerator, ChatModerator, Moderator
from icml25.llm.refusal import KeywordRefusalDetector
from icml25.llm.rewards import CallableReward, HFRewardModel, RewardModel
from icml25.llm.scripted import CallableChat, ScriptedChat
from icml25.llm.store import (
    BatchFailed,
    BatchReport,
    ItemError,
    JsonlStore,
    json_safe,
    run_resumable,
)

__all__ = [
    "BatchFailed",
    "BatchReport",
    "CachedChat",
    "CallableChat",
    "CallableModerator",
    "CallableReward",
    "ChatBackend",
    "ChatModerator",
    "ChatServer",
    "Completion",
    "HFChat",
    "HFRewardModel",
    "ItemError",
    "JsonlStore",
    "KeywordRefusalDetector",
    "LLMRequestError",
    "Moderator",
    "OpenAIChat",
    "RequestResult",
    "RewardModel",
    "SamplingParams",
    "ScriptedChat",
    "TokenLogprob",
    "json_safe",
    "run_resumable",
    "validate_messages",
]

_LAZY = {
    "CachedChat": "icml25.llm.cache",
    "ChatServer": "icml25.llm.server",
    "HFChat": "icml25.llm.hf",
    "LLMRequestError": "icml25.llm.openai_http",
    "OpenAIChat": "icml25.llm.openai_http",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'icml25.llm' has no attribute {name!r}")
