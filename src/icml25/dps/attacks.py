"""Vision attacks on image tensors, for the offline reproduction and for users' own classifiers
(docs/dps.md, "Reproduction"). Images are float tensors ``(N, C, H, W)`` in [0, 1]; a model maps
them to logits ``(N, K)``. Black-box (transfer) attacks are crafted on surrogate models, as the
paper's API setting requires.

* :func:`pgd_linf`: targeted L∞ PGD (Madry et al., 2018) on one model or the mean loss of an
  ensemble; ``‖δ‖∞ <= eps`` and values in [0, 1] are kept after every step.
* :func:`universal_patch`: one square patch per target class, optimised with Adam to push an
  ensemble toward the class while pasted at a random corner (the analogue of injected content,
  which cropping removes); :func:`apply_patch` pastes it.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from icml25._validate import as_int, as_real

__all__ = ["CORNERS", "apply_patch", "pgd_linf", "universal_patch"]

CORNERS = ("top-left", "top-right", "bottom-left", "bottom-right")


def _models(model: Any) -> list[Any]:
    ms = list(model) if isinstance(model, (list, tuple)) else [model]
    if not ms or not all(callable(m) for m in ms):
        raise TypeError("model must be a callable (images -> logits) or a list of them")
    return ms


def _check_images(x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.ndim != 4 or not x.is_floating_point():
        raise ValueError(
            f"images must be a float tensor (N, C, H, W), got {getattr(x, 'shape', type(x))}"
        )
    if x.numel() and not bool(torch.isfinite(x).all()):
        raise ValueError("images must hold finite values in [0, 1], got NaN or infinite values")
    if x.numel() and (x.min() < 0 or x.max() > 1):
        raise ValueError(
            f"images must hold values in [0, 1], got {float(x.min()):.3g}..{float(x.max()):.3g}"
        )


def _n_classes(ms: list[Any], x: torch.Tensor) -> int:
    with torch.no_grad():
        return int(ms[0](x[:1]).shape[-1])


def _check_target(target: Any, n: int, k: int, device: Any) -> torch.Tensor:
    """One class index for every image, or an integer tensor of ``n`` of them, in ``[0, k)``."""
    if isinstance(target, bool):
        raise TypeError(f"target must be a class index or an integer tensor, got {target!r}")
    if isinstance(target, numbers.Integral):
        target = torch.full((n,), as_int("target", target), dtype=torch.long)
    if not isinstance(target, torch.Tensor) or target.dtype not in (
        torch.long,
        torch.int32,
        torch.int16,
        torch.uint8,
    ):
        raise TypeError(
            f"target must be a class index or an integer tensor of class indices, got {target!r:.60}"
        )
    if target.shape != (n,):
        raise ValueError(f"target must have shape ({n},), got {tuple(target.shape)}")
    if n and (int(target.min()) < 0 or int(target.max()) >= k):
        raise ValueError(
            f"target classes must be in [0, {k}) for a {k}-class model, got {int(target.min())}..{int(target.max())}"
        )
    return target.to(device=device, dtype=torch.long)


def pgd_linf(
    model: Any,
    x: torch.Tensor,
    target: torch.Tensor,
    *,
    eps: float = 0.15,
    step: float = 0.02,
    steps: int = 20,
    random_start: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Targeted L∞ PGD: minimise the cross-entropy toward ``target`` (one class index, or an
    integer tensor ``(N,)`` of them) averaged over a model or an ensemble (a list).
    Returns ``x + δ`` with ``‖δ‖∞ <= eps``, clamped to [0, 1], detached, on ``x``'s device."""
    _check_images(x)
    # finite: an infinite step gives inf * sign(0) = NaN pixels, an infinite eps no bound at all
    eps = as_real("eps", eps, low=0.0)
    step = as_real("step", step, low=0.0, low_open=True)
    steps = as_int("steps", steps, 0)
    if len(x) == 0:
        raise ValueError("images must hold at least one image, got an empty batch")
    ms = _models(model)
    target = _check_target(target, x.shape[0], _n_classes(ms, x), x.device)
    delta = torch.zeros_like(x)
    if random_start:
        delta = (torch.rand(x.shape, generator=generator).to(x) * 2 - 1) * eps
    delta = ((x + delta).clamp(0, 1) - x).detach()
    for _ in range(steps):
        delta.requires_grad_(True)
        loss = sum(F.cross_entropy(m(x + delta), target) for m in ms) / len(ms)
        (grad,) = torch.autograd.grad(loss, delta)
        with torch.no_grad():
            delta = (delta - step * grad.sign()).clamp(-eps, eps)
            delta = (x + delta).clamp(0, 1) - x
    return (x + delta).detach()


def apply_patch(x: torch.Tensor, patch: torch.Tensor, corners: Sequence[int] | int) -> torch.Tensor:
    """``x`` with ``patch`` (``(C, p, p)`` or ``(N, C, p, p)``) pasted at each image's corner
    (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right)."""
    _check_images(x)
    n, _, h, w = x.shape
    if (
        not isinstance(patch, torch.Tensor)
        or patch.ndim not in (3, 4)
        or not patch.is_floating_point()
    ):
        raise ValueError(
            f"patch must be a float tensor (C, p, p) or (N, C, p, p), got {getattr(patch, 'shape', type(patch))}"
        )
    if patch.ndim == 4 and patch.shape[0] != n:
        raise ValueError(
            f"a (N, C, p, p) patch needs N = {n} (one per image), got {patch.shape[0]}"
        )
    if patch.numel() and (
        not bool(torch.isfinite(patch).all()) or patch.min() < 0 or patch.max() > 1
    ):
        raise ValueError("patch must hold finite values in [0, 1]")
    p = patch.shape[-1]
    if patch.shape[-3] != x.shape[1]:
        raise ValueError(f"the patch has {patch.shape[-3]} channel(s), the images {x.shape[1]}")
    if patch.shape[-2] != p or p > min(h, w):
        raise ValueError(
            f"the patch must be square and fit the image, got {tuple(patch.shape)} for {h}x{w}"
        )
    if isinstance(corners, (list, tuple, np.ndarray, torch.Tensor)) and getattr(corners, "ndim", 1):
        cs = [as_int(f"corners[{i}]", c, 0, 3) for i, c in enumerate(corners)]
        if len(cs) != n:
            raise ValueError(f"corners must be one int in 0..3 or {n} of them, got {len(cs)}")
    else:
        cs = [as_int("corners", corners, 0, 3)] * n
    out = x.clone()
    for i, c in enumerate(cs):
        top = 0 if c in (0, 1) else h - p
        left = 0 if c in (0, 2) else w - p
        out[i, :, top : top + p, left : left + p] = patch if patch.ndim == 3 else patch[i]
    return out


def universal_patch(
    model: Any,
    x: torch.Tensor,
    target: int,
    *,
    size: int = 8,
    steps: int = 300,
    lr: float = 0.05,
    batch_size: int = 64,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A ``(C, size, size)`` patch in [0, 1] that pushes the models toward class ``target``
    wherever it is pasted (a random corner per image and step)."""
    _check_images(x)
    if len(x) == 0:
        raise ValueError("x must hold at least one training image, got an empty batch")
    ms = _models(model)
    k = _n_classes(ms, x)
    target = as_int("target", target, 0, k - 1)  # a class of the k-class model
    steps = as_int("steps", steps, 0)
    size = as_int("size", size, 1, min(x.shape[-2:]))  # the patch fits the images
    batch_size = as_int("batch_size", batch_size, 1)
    lr = as_real("lr", lr, low=0.0, low_open=True)  # finite: Adam at lr = inf gives NaN
    gen = generator or torch.Generator().manual_seed(0)  # deterministic by default
    logit = torch.zeros(
        x.shape[1], size, size, device=x.device, requires_grad=True
    )  # sigmoid -> 0.5 grey
    opt = torch.optim.Adam([logit], lr=lr)
    t = torch.full((min(batch_size, len(x)),), int(target), dtype=torch.long, device=x.device)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (len(t),), generator=gen)
        corners = torch.randint(0, 4, (len(t),), generator=gen).tolist()
        patch = torch.sigmoid(logit)
        xb = x[idx].clone()
        n, _, h, w = xb.shape
        rows = []
        for i, c in enumerate(corners):  # differentiable paste
            top, left = (0 if c in (0, 1) else h - size), (0 if c in (0, 2) else w - size)
            pad = (left, w - size - left, top, h - size - top)
            mask = F.pad(torch.ones_like(patch), pad)
            rows.append(xb[i] * (1 - mask) + F.pad(patch, pad))
        loss = sum(F.cross_entropy(m(torch.stack(rows)), t) for m in ms) / len(ms)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return torch.sigmoid(logit).detach()
