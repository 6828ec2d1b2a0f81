"""A minimal SimCLR trainer for any encoder, and linear probes (the repro's and users' path)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25._validate import as_int, as_real
from icml25.contrastive.losses import ContrastiveLoss
from icml25.progress import track

__all__ = ["DigitsSimCLR", "linear_probe", "train_simclr"]


class DigitsSimCLR(nn.Module):
    """The repro's small encoder (docs/contrastive.md, part B): backbone MLP to 256-d features, projector to 64-d.
    ``forward(x) -> (features, projections)`` like any model ``train_simclr`` accepts."""

    def __init__(self, in_dim: int = 64, feat: int = 256, proj: int = 64) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_dim, 512),
            nn.BatchNorm1d(512),
            nn.ReLU(),
            nn.Linear(512, feat),
            nn.BatchNorm1d(feat),
            nn.ReLU(),
        )
        self.projector = nn.Sequential(
            nn.Linear(feat, feat), nn.BatchNorm1d(feat), nn.ReLU(), nn.Linear(feat, proj)
        )

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.backbone(x)
        return h, self.projector(h)


def train_simclr(
    model: nn.Module,
    data: Tensor,
    augment: Callable[[Tensor, torch.Generator], Tensor],
    *,
    loss: ContrastiveLoss,
    batch_size: int,
    steps: int | None = None,
    epochs: int | None = None,
    lr: float = 1e-3,
    weight_decay: float = 1e-5,
    seed: int = 0,
    device: torch.device | str | None = None,
    progress: bool | None = None,
) -> list[dict]:
    """SimCLR training by steps (or ``epochs``, each ``len(data) // batch_size`` steps): each step
    draws ``batch_size`` instances (fresh ``randperm`` per epoch, ``drop_last``), two
    augmentations each, and minimises ``loss(z1, z2)``. The same seeded CPU generator drives
    shuffling and augmentation, so a run is the same on any device. ``device``: where the batches
    go (default: the model's device; ``data`` may stay on the CPU), in the model's floating dtype.
    ``model(x)`` must return ``(features, projections)``; the loss sees the projections. Returns
    one dict per step: ``{"loss": value}`` plus the loss's ``last_components`` on the steps it
    recorded them (every ``loss.log_every``-th). The model is left in ``eval()`` mode, ready
    for feature extraction."""
    batch_size = as_int("batch_size", batch_size, 2, len(data))
    if (steps is None) == (epochs is None):
        raise ValueError("give exactly one of steps and epochs")
    if epochs is not None:
        epochs = as_int("epochs", epochs, 1)
        steps = epochs * (len(data) // batch_size)
    steps = as_int("steps", steps, 1)
    lr = as_real("lr", lr, low=0.0, low_open=True)
    weight_decay = as_real("weight_decay", weight_decay, low=0.0)
    if device is None:
        device = next((p.device for p in model.parameters()), data.device)
    device = torch.device(device)
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    history: list[dict] = []
    order: list[Tensor] = []
    disable = None if progress is None else not progress
    for _ in track(range(steps), f"SimCLR b={batch_size}", total=steps, disable=disable):
        if not order:
            perm = torch.randperm(len(data), generator=g)
            order = list(perm[: len(perm) // batch_size * batch_size].split(batch_size))
        idx = order.pop(0)
        x = data[idx].to(device, non_blocking=True)
        if dtype is not None and x.is_floating_point():
            x = x.to(dtype)
        z1, z2 = _projections(model(augment(x, g))), _projections(model(augment(x, g)))
        value = loss(z1, z2)
        opt.zero_grad()
        value.backward()
        opt.step()
        every = getattr(loss, "log_every", 1)
        fresh = (getattr(loss, "_calls", 1) - 1) % every == 0
        logged = getattr(loss, "last_components", {}) if fresh else {}
        history.append({"loss": value.item(), **logged})
    model.eval()
    return history


def _projections(out) -> Tensor:
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        kind = f"a tuple of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
        raise ValueError(
            "train_simclr needs model(x) to return (features, projections), as DigitsSimCLR "
            f"does (the loss sees the projections, the probe the features); got {kind}"
        )
    return out[1]


def linear_probe(
    features_train: Tensor, y_train: Tensor, features_test: Tensor, y_test: Tensor, C: float = 10.0
) -> float:
    """Test accuracy of logistic regression on L2-normalised frozen features (sklearn)."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    ftr = F.normalize(features_train.double(), dim=-1).numpy()
    fte = F.normalize(features_test.double(), dim=-1).numpy()
    with threadpool_limits(1):  # tiny fits are far faster single-threaded (CONVENTIONS)
        clf = LogisticRegression(C=C, max_iter=2000).fit(ftr, y_train.numpy())
    return float(clf.score(fte, y_test.numpy()))
