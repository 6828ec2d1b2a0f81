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

Loading checkpoints: :func:`load_model` (``kind`` = causal LM, sequence classifier, seq2seq,
vision-language, CLIP, encoder; ``device``/``dtype``/``device_map``), :func:`load_tokenizer`,
:func:`load_processor`; :func:`add_model_args` gives a command ``--device``/``--dtype``.
:func:`check_context_length` refuses a prompt longer than the model's context.

Training conventions shared by the plain loops (TRL's): :func:`dropout_disabled`,
:class:`MixedPrecision` (float32 master weights for bf16/fp16 checkpoints),
:func:`tokenize_prompt_completion` and :func:`tokenize_preference` (targets as TRL tokenises them).

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
from icml25.llm.loading import (
    add_model_args,
    check_context_length,
    context_length,
    load_model,
    load_or_place,
    load_processor,
    load_tokenizer,
    model_kwargs,
    resolve_device,
    resolve_dtype,
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
    SettingsMismatch,
    json_safe,
    run_resumable,
)
from icml25.llm.training import (
    MixedPrecision,
    check_finite_loss,
    dropout_disabled,
    tokenize_preference,
    tokenize_prompt_completion,
)

__all__ = [
    "BackendUnavailableError",
    "BatchFailed",
    "BatchReport",
    "CachedChat",
    "CallableChat",
    "CallableModerator",
    "CallableReward",
    "ChatBackend",
    "ChatModerator",
    "ChatServer",
    "CircuitOpenError",
    "Completion",
    "HFChat",
    "HFRewardModel",
    "ItemError",
    "JsonlStore",
    "KeywordRefusalDetector",
    "LLMRequestError",
    "MixedPrecision",
    "Moderator",
    "OpenAIChat",
    "RequestResult",
    "RewardModel",
    "SamplingParams",
    "ScriptedChat",
    "SettingsMismatch",
    "TokenLogprob",
    "add_model_args",
    "check_context_length",
    "check_finite_loss",
    "context_length",
    "dropout_disabled",
    "json_safe",
    "load_model",
    "load_or_place",
    "load_processor",
    "load_tokenizer",
    "model_kwargs",
    "resolve_device",
    "resolve_dtype",
    "run_resumable",
    "tokenize_preference",
    "tokenize_prompt_completion",
    "validate_messages",
]

_LAZY = {
    "BackendUnavailableError": "icml25.llm.base",
    "CachedChat": "icml25.llm.cache",
    "ChatServer": "icml25.llm.server",
    "CircuitOpenError": "icml25.llm.openai_http",
    "HFChat": "icml25.llm.hf",
    "LLMRequestError": "icml25.llm.openai_http",
    "OpenAIChat": "icml25.llm.openai_http",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'icml25.llm' has no attribute {name!r}")
