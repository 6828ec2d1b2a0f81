"""A local Hugging Face vision-language model as an ``icml25.llm`` chat backend (arXiv:2412.12722:
DPS needs one sample per call, text and image parts, no log-probs).

:class:`HFVisionChat` maps OpenAI-format ``image_url`` parts (base64 data URLs) to the processor's
``{"type": "image"}`` parts plus decoded PIL images, renders the processor's chat template, and
generates with ``AutoModelForImageTextToText`` (Qwen2-VL, LLaVA, Idefics, ...). Served models go
through ``icml25.llm.OpenAIChat`` unchanged.

A folder loads through :func:`icml25.llm.load_model` (kind ``vision_lm``, with ``device`` and
``dtype``) and :func:`icml25.llm.load_processor`; stock processors of some families (Qwen2-VL's
video processor) need ``torchvision``: ``pip install 'icml25[vision]'``.
"""

from __future__ import annotations

from typing import Any

from icml25._validate import as_int
from icml25.dps.images import decode_data_url
from icml25.llm.base import BaseChat, Completion

__all__ = ["HFVisionChat"]


class HFVisionChat(BaseChat):
    """Chat with a local vision-language model.

    Args:
        model: an ``AutoModelForImageTextToText`` model, or a local folder to load one from.
        processor: its processor (loaded from ``model`` when that is a path); it must have a
            chat template.
        device: where to run. A folder loads on ``"auto"`` (the GPU when there is one) when
            ``device`` is ``None``; a model object stays where it is unless ``device`` is given.
        dtype: ``"auto"`` (a folder loads in the checkpoint's dtype; a model object is left as
            it is), ``"bf16"``, ``"fp16"``, ``"fp32"`` or a ``torch.dtype``.
        device_map: for a folder, passed to ``load_model`` (shards a large model; replaces
            ``device``).
        max_new_tokens: cap on the reply length (512).

    Greedy when ``temperature`` is 0 or unset, else sampled (seeded by ``seed`` per sample). A
    reply ends at the model's ``generation_config`` EOS ids, the tokenizer's EOS and the chat
    template's end of turn; a prompt (image tokens included) that does not fit the model's context
    with ``max_tokens`` new tokens is a ``ValueError``.
    """

    concurrency = 1

    def __init__(
        self,
        model: Any,
        processor: Any = None,
        *,
        device: Any = None,
        dtype: Any = "auto",
        device_map: Any = None,
        max_new_tokens: int = 512,
        name: str | None = None,
    ) -> None:
        import os

        from icml25.llm.loading import load_or_place, load_processor, resolve_dtype

        resolve_dtype(dtype)  # a bad dtype fails before anything loads
        if isinstance(model, (str, os.PathLike)):
            model = os.fspath(model)
            if not os.path.isdir(os.path.expanduser(model)):
                raise ValueError(
                    f"model {model!r} is not a local folder (nothing is downloaded here)"
                )
            processor = processor or load_processor(model)
        model = load_or_place(model, "vision_lm", device=device, dtype=dtype, device_map=device_map)
        if processor is None:
            raise ValueError("HFVisionChat needs the model's processor")
        if not getattr(processor, "chat_template", None):
            raise ValueError(
                "the processor has no chat template; set processor.chat_template (we do not guess one)"
            )
        max_new_tokens = as_int("max_new_tokens", max_new_tokens, 1)
        self.model = model
        self.model.eval()
        self.processor, self.max_new_tokens = processor, max_new_tokens
        self.name = (
            name
            or f"hf-vision:{getattr(model.config, '_name_or_path', '') or type(model).__name__}"
        )
        self.eos_ids = _stop_ids(model, getattr(processor, "tokenizer", None))

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
        from icml25.llm.loading import check_context_length

        inputs = self.processor(images=images or None, text=text, return_tensors="pt")
        first = next(self.model.parameters())
        # Pixels in the model's own dtype (a bf16 checkpoint), token ids and masks as they are.
        inputs = {
            k: (v.to(first.device, first.dtype) if v.is_floating_point() else v.to(first.device))
            if isinstance(v, torch.Tensor)
            else v
            for k, v in inputs.items()
        }
        limit = min(self.max_new_tokens, params.max_tokens or self.max_new_tokens)
        check_context_length(self.model, int(inputs["input_ids"].shape[1]), limit)
        sample = bool(params.temperature) and params.temperature > 0
        out = []
        for j in range(params.n):
            if params.seed is not None:
                torch.manual_seed(int(params.seed) + j)
            kw: dict[str, Any] = {"do_sample": sample}
            if self.eos_ids:
                kw["eos_token_id"] = self.eos_ids
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


def _stop_ids(model: Any, tokenizer: Any) -> list[int]:
    """EOS ids a reply ends at: the ``generation_config``'s, the tokenizer's EOS and the (special)
    token closing an assistant turn in the tokenizer's chat template."""
    ids: set[int] = set()
    gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if gen is not None:
        ids |= set(gen) if isinstance(gen, (list, tuple)) else {gen}
    if tokenizer is not None:
        from icml25.llm.hf import end_of_turn_ids

        if getattr(tokenizer, "eos_token_id", None) is not None:
            ids.add(tokenizer.eos_token_id)
        ids |= end_of_turn_ids(tokenizer)
    return sorted(int(i) for i in ids)
