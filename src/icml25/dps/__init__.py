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

from icml25._moved import moved as _moved
from icml25.dps.baselines import (
    crop_vote,
    ecso,
    mllm_protector,
    self_reflect,
    smooth_vlm,
    step,
    vanilla,
    warning,
)
from icml25.dps.defense import BackendError, DPSDefense, DPSResult
from icml25.dps.helper import Helper, LLMHelper, RuleHelper
from icml25.dps.prompts import DPSPrompts

__all__ = [
    "BackendError",
    "DPSDefense",
    "DPSPrompts",
    "DPSResult",
    "Helper",
    "LLMHelper",
    "RuleHelper",
    "crop_vote",
    "ecso",
    "mllm_protector",
    "self_reflect",
    "smooth_vlm",
    "step",
    "vanilla",
    "warning",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "Conversation": "defense",
        "LabelJudge": "metrics",
        "REFUSAL": "defense",
        "SLOTS": "prompts",
        "attack_success_rate": "metrics",
        "auto_mask": "crops",
        "center_box": "crops",
        "center_crop": "crops",
        "clean_accuracy": "metrics",
        "decode_data_url": "images",
        "encode_data_url": "images",
        "image_part": "images",
        "last_image": "images",
        "misleading_asr": "metrics",
        "normalize_answer": "baselines",
        "parse_boxes": "crops",
        "random_box": "crops",
        "random_crop": "crops",
        "relative_asr_reduction": "metrics",
        "to_pil": "images",
    },
)
