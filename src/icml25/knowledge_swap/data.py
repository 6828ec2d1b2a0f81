"""The offline benchmark of the reproduction: scikit-learn's 8x8 digits as a swap task (docs/knowledge_swap.md, "Reproduction"), the small CNN with LoRA on every hidden layer, and its pretraining.

Classes: forget F = {0, 1}, retain R = {2..7}, learn L = {8, 9}. The model is pretrained on R u F
with 8-way logits (the first 8 rows of a 10-way head); rows 8-9 are then re-initialised (xavier,
seeded) and frozen with the rest, so that new classes are learned by moving features (official).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25.lora import inject_lora, mark_only_lora_trainable

__all__ = ["DigitsSwapTask", "digits_cnn", "pretrain", "swap_ready"]

FORGET, RETAIN, LEARN = (0, 1), (2, 3, 4, 5, 6, 7), (8, 9)


@dataclass
class DigitsSwapTask:
    """Stratified 50/50 split from the shared loader :func:`icml25.toy.digits_split`
    (``random_state = seed``) and the swap subsets: ``frac`` of the retain and forget training sets
    (at least ``min_per_set`` each; official 10%), the full learn set."""

    seed: int = 0
    frac: float = 0.1
    min_per_set: int = 16

    def __post_init__(self) -> None:
        from icml25.toy import digits_split

        if not 0 < self.frac <= 1:
            raise ValueError(f"frac must be in (0, 1], got {self.frac}")
        self.x_train, self.y_train, self.x_test, self.y_test = digits_split(
            0.5, seed=self.seed, shape="image"
        )
        g = torch.Generator().manual_seed(self.seed)

        def pick(classes, split, subset):
            xs, ys = (
                (self.x_train, self.y_train) if split == "train" else (self.x_test, self.y_test)
            )
            idx = torch.nonzero(torch.isin(ys, torch.tensor(classes))).squeeze(1)
            if subset:
                n = max(self.min_per_set, math.ceil(self.frac * len(idx)))
                idx = idx[torch.randperm(len(idx), generator=g)[: min(n, len(idx))]]
            return xs[idx], ys[idx]

        self.pretrain_data = pick(RETAIN + FORGET, "train", False)
        self.retain_train = pick(RETAIN, "train", True)
        self.forget_train = pick(FORGET, "train", True)
        self.learn_train = pick(LEARN, "train", False)
        self.retain_test = pick(RETAIN, "test", False)
        self.forget_test = pick(FORGET, "test", False)
        self.learn_test = pick(LEARN, "test", False)


class DigitsCNN(nn.Module):
    """conv(1->16)-conv(16->32)-pool-conv(32->32)-pool-fc(128->128)-fc(128->128)-head(128->10)."""

    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc1 = nn.Linear(128, 128)
        self.fc2 = nn.Linear(128, 128)
        self.head = nn.Linear(128, n_classes)

    def features(self, x: Tensor) -> Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.relu(self.fc2(x))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


HIDDEN = ("conv1", "conv2", "conv3", "fc1", "fc2")


def digits_cnn(seed: int = 0) -> DigitsCNN:
    """A fresh :class:`DigitsCNN` (10-way head), initialised under ``torch.manual_seed(seed)``
    (this seeds torch's global generator)."""
    torch.manual_seed(seed)
    return DigitsCNN()


def pretrain(model: DigitsCNN, task: DigitsSwapTask, steps: int = 800, seed: int = 0) -> DigitsCNN:
    """Adam 1e-3, batch 64, on R u F with the first 8 logits only (docs/knowledge_swap.md)."""
    x, y = task.pretrain_data
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(steps):
        idx = torch.randint(0, len(y), (64,), generator=g)
        loss = F.cross_entropy(model(x[idx])[:, :8], y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model


def swap_ready(
    pretrained: DigitsCNN, seed: int = 0, r: int = 4, alpha: float = 4.0, lora: bool = True
) -> DigitsCNN:
    """A copy with head rows 8-9 re-initialised (xavier, seeded: every strategy starts from the same
    model) and LoRA (r = 4, alpha = 4, ``init_a = sqrt(5)``) on the five hidden layers; only LoRA
    trains."""
    import copy

    model = copy.deepcopy(pretrained)
    g = torch.Generator().manual_seed(10_000 + seed)
    with torch.no_grad():
        bound = math.sqrt(6.0 / (model.head.in_features + 2))
        model.head.weight[8:] = (torch.rand(2, model.head.in_features, generator=g) * 2 - 1) * bound
        model.head.bias[8:] = 0
    if not lora:  # the no-LoRA baseline: the hidden layers themselves train, the head stays frozen
        for p in model.parameters():
            p.requires_grad_(False)
        return model
    inject_lora(model, list(HIDDEN), r=r, alpha=alpha, init_a=math.sqrt(5))
    for m in model.modules():
        if hasattr(m, "reset_lora"):
            m.reset_lora(generator=g)
    mark_only_lora_trainable(model)
    return model
