"""A local Hugging Face vision-language model as an ``icml25.llm`` chat backend (arXiv:2412.12722:
DPS needs one sample per call, text and image parts, no log-probs).

:class:`HFVisionChat` maps OpenAI-format ``image_url`` parts (base64 data URLs) to the processor's
``{"type": "image"}`` parts plus decoded PIL images, renders the processor's chat template, and
generates with ``AutoModelForImageTextToText`` (Qwen2-VL, LLaVA, Idefics, ...). Served models go
through ``icml25.llm.OpenAIChat`` unchanged.
"""

from __future__ import annotations

from typing import Any

from icml25.dps.images import decode_data_url
from icml25.llm.base import BaseChat, Completion

__all__ = ["HFVisionChat"]


class HFVisionChat(BaseChat):
    """Chat with a local vision-language model.

    Args:
        model: an ``AutoModelForImageTextToText`` model, or a local folder to load one from.
        processor: its processor (loaded from ``model`` when that is a path); it must have a
            chat template.
        device: where to run (default the model's device).
        max_new_tokens: cap on the reply length (512).

    Greedy when ``temperature`` is 0 or unset, else sampled (seeded by ``seed`` per sample).
    """

    concurrency = 1

    def __init__(self, model: Any, processor: Any = None, *, device: str | None = None,
                 max_new_tokens: int = 512, name: str | None = None) -> None:  # fmt: skip
        if isinstance(model, str):
            import os

            if not os.path.isdir(model):
                raise ValueError(
                    f"model {model!r} is not a local folder (nothing is downloaded here)"
                )
            from transformers import AutoModelForImageTextToText, AutoProcessor

            processor = processor or AutoProcessor.from_pretrained(model)
            model = AutoModelForImageTextToText.from_pretrained(model)
        if processor is None:
            raise ValueError("HFVisionChat needs the model's processor")
        if not getattr(processor, "chat_template", None):
            raise ValueError(
                "the processor has no chat template; set processor.chat_template (we do not guess one)"
            )
        if (
            isinstance(max_new_tokens, bool)
            or not isinstance(max_new_tokens, int)
            or max_new_tokens < 1
        ):
            raise ValueError(f"max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
        self.model = model.to(device) if device is not None else model
        self.model.eval()
        self.processor, self.max_new_tokens = processor, max_new_tokens
        self.name = (
            name
            or f"hf-vision:{getattr(model.config, '_name_or_path', '') or type(model).__name__}"
        )

    def convert(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
        """Processor-format messages and the images in order of appearance."""
        conv, images = [], []
        for m in messages:
            content = m["content"]
            if isinstance(content, str):
                conv.append({"role": m["role"], "content": [{"type": "text", "text": content}]})
                continue
            parts = []
            for p in content:
                if p.get("type") == "text":
                    parts.append({"type": "text", "text": p["text"]})
                elif p.get("type") == "image_url":
                    body = p.get("image_url")
                    url = body.get("url") if isinstance(body, dict) else None
                    images.append(decode_data_url(url).convert("RGB"))
                    parts.append({"type": "image"})
                else:
                    raise ValueError(f"unsupported content part type {p.get('type')!r}")
            conv.append({"role": m["role"], "content": parts})
        return conv, images

    def _complete(self, messages: list[dict[str, Any]], params: Any) -> list[Completion]:
        import torch

        conv, images = self.convert(messages)
        text = self.processor.apply_chat_template(conv, add_generation_prompt=True)
        inputs = self.processor(images=images or None, text=text, return_tensors="pt")
        device = next(self.model.parameters()).device
        inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}
        limit = min(self.max_new_tokens, params.max_tokens or self.max_new_tokens)
        sample = bool(params.temperature) and params.temperature > 0
        out = []
        for j in range(params.n):
            if params.seed is not None:
                torch.manual_seed(int(params.seed) + j)
            kw = {"do_sample": sample}
            if sample:
                kw.update(temperature=float(params.temperature), top_p=float(params.top_p or 1.0))
            with torch.no_grad():
                ids = self.model.generate(**inputs, max_new_tokens=limit, **kw)
            new = ids[0, inputs["input_ids"].shape[1] :]
            out.append(
                Completion(
                    self.processor.decode(new, skip_special_tokens=True).strip(),
                    finish_reason="stop",
                )
            )
        return out
