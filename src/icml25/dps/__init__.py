"""DPS: defending vision-language models through partial-perception supervision (Zhou et al.,
ICML 2025; arXiv:2412.12722). Guide: docs/dps.md.

:class:`DPSDefense` wraps any ``icml25.llm`` chat backend that accepts ``image_url`` parts
(OpenAI-compatible vision servers, ...): weak agents see partial views (:mod:`~icml25.dps.crops`),
a helper condenses what they say (:mod:`~icml25.dps.helper`), and the strong agent re-examines
its answer. Baselines share one signature (:mod:`~icml25.dps.baselines`). A local
vision-language model is :class:`~icml25.dps.backends.HFVisionChat` (imported from its module: it
needs transformers). The offline stand-in
(:mod:`~icml25.dps.standin`) and the tensor attacks (:mod:`~icml25.dps.attacks`) import torch
when imported; this package itself does not.
"""

from __future__ import annotations

from icml25.dps.baselines import (
    crop_vote,
    ecso,
    mllm_protector,
    normalize_answer,
    self_reflect,
    smooth_vlm,
    step,
    vanilla,
    warning,
)
from icml25.dps.crops import (
    auto_mask,
    center_box,
    center_crop,
    parse_boxes,
    random_box,
    random_crop,
)
from icml25.dps.defense import REFUSAL, BackendError, Conversation, DPSDefense, DPSResult
from icml25.dps.helper import Helper, LLMHelper, RuleHelper
from icml25.dps.images import decode_data_url, encode_data_url, image_part, last_image, to_pil
from icml25.dps.metrics import (
    LabelJudge,
    attack_success_rate,
    clean_accuracy,
    misleading_asr,
    relative_asr_reduction,
)
from icml25.dps.prompts import SLOTS, DPSPrompts

__all__ = [
    "REFUSAL",
    "SLOTS",
    "BackendError",
    "Conversation",
    "DPSDefense",
    "DPSPrompts",
    "DPSResult",
    "Helper",
    "LabelJudge",
    "LLMHelper",
    "RuleHelper",
    "attack_success_rate",
    "auto_mask",
    "center_box",
    "center_crop",
    "clean_accuracy",
    "crop_vote",
    "decode_data_url",
    "ecso",
    "encode_data_url",
    "image_part",
    "last_image",
    "misleading_asr",
    "mllm_protector",
    "normalize_answer",
    "parse_boxes",
    "random_box",
    "random_crop",
    "relative_asr_reduction",
    "self_reflect",
    "smooth_vlm",
    "step",
    "to_pil",
    "vanilla",
    "warning",
]
