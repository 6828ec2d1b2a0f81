"""Pixel-space attacks on the zero-shot alignment (§8): PGD-L-inf and FGSM."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["fgsm", "pgd_linf"]


def _check(x: Tensor, eps: float) -> None:
    if not bool(((x >= 0) & (x <= 1)).all()):
        raise ValueError("pixel attacks need inputs in [0, 1]")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
        raise ValueError(f"eps must be a finite number >= 0 (the L-inf radius), got {eps!r}")


def pgd_linf(model, x: Tensor, labels: Tensor, class_text_emb: Tensor, eps: float, steps: int = 20,
             step_size: float | None = None, random_start: bool = True, generator=None) -> Tensor:  # fmt: skip
    """Maximise the CE of ``model.logits(x, class_text_emb)`` against ``labels`` in the L-inf ball
    of radius ``eps`` (random start, step ``eps / 4`` by default), projecting and clamping to
    [0, 1] each step. ``eps = 0`` returns ``x``; a negative eps is an error."""
    x = torch.as_tensor(x)
    _check(x, eps)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if step_size is not None and not (isinstance(step_size, (int, float)) and step_size > 0):
        raise ValueError(f"step_size must be a number > 0 or None, got {step_size!r}")
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
