"""Pixel-space attacks on the zero-shot alignment (§8): PGD-L-inf and FGSM."""

from __future__ import annotations

import torch
from torch import Tensor

from icml25._validate import as_int, as_real

__all__ = ["fgsm", "pgd_linf"]


def _check(x: Tensor, eps: float) -> float:
    if not bool(((x >= 0) & (x <= 1)).all()):
        raise ValueError("pixel attacks need inputs in [0, 1]")
    return as_real("eps", eps, low=0)  # the L-inf radius


def pgd_linf(
    model,
    x: Tensor,
    labels: Tensor,
    class_text_emb: Tensor,
    eps: float,
    steps: int = 20,
    step_size: float | None = None,
    random_start: bool = True,
    generator=None,
) -> Tensor:
    """Maximise the CE of ``model.logits(x, class_text_emb)`` against ``labels`` in the L-inf ball
    of radius ``eps`` (random start, step ``eps / 4`` by default), projecting and clamping to
    [0, 1] each step. ``eps = 0`` returns ``x``; a negative eps is an error."""
    x = torch.as_tensor(x)
    eps = _check(x, eps)
    steps = as_int("steps", steps, 1)
    if step_size is not None:
        step_size = as_real("step_size", step_size, low=0, low_open=True)
    if eps == 0:
        return x.clone()
    step = eps / 4 if step_size is None else step_size
    adv = x.clone()
    if random_start:
        adv = (
            adv
            + (torch.rand(x.shape, generator=generator, dtype=x.dtype) * 2 - 1).to(x.device) * eps
        ).clamp(0, 1)
    for _ in range(steps):
        adv.requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(model.logits(adv, class_text_emb), labels)
        (g,) = torch.autograd.grad(loss, adv)
        adv = adv.detach() + step * g.sign()
        adv = torch.min(torch.max(adv, x - eps), x + eps).clamp(0, 1)
    return adv.detach()


def fgsm(model, x: Tensor, labels: Tensor, class_text_emb: Tensor, eps: float) -> Tensor:
    """One signed-gradient step of size ``eps``."""
    return pgd_linf(
        model, x, labels, class_text_emb, eps, steps=1, step_size=eps, random_start=False
    )
