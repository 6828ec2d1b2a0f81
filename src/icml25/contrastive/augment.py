"""Batched, generator-driven augmentations for small images such as sklearn's 8x8 digits."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["digits_augment"]


def digits_augment(
    x: Tensor,
    generator: torch.Generator,
    *,
    shift: int = 1,
    cutout: int = 3,
    cutout_p: float = 0.5,
    scale: tuple[float, float] = (0.8, 1.2),
    noise: float = 0.1,
) -> Tensor:
    """Integer translation (zero padding), a ``cutout x cutout`` hole with probability ``cutout_p``,
    intensity scale ``U[scale]`` and Gaussian noise; ``x`` is ``(N, 1, H, W)``. No clamping."""
    if x.ndim != 4:
        raise ValueError(f"x must be (N, C, H, W), got {tuple(x.shape)}")
    n, _, h, w = x.shape
    g = generator
    padded = torch.nn.functional.pad(x, (shift, shift, shift, shift))
    dx = torch.randint(0, 2 * shift + 1, (n,), generator=g)
    dy = torch.randint(0, 2 * shift + 1, (n,), generator=g)
    rows = dy[:, None] + torch.arange(h)[None, :]  # (n, h)
    cols = dx[:, None] + torch.arange(w)[None, :]  # (n, w)
    out = padded[
        torch.arange(n)[:, None, None, None],
        torch.arange(x.shape[1])[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]
    hole = torch.rand(n, generator=g) < cutout_p
    cy = torch.randint(0, h - cutout + 1, (n,), generator=g)
    cx = torch.randint(0, w - cutout + 1, (n,), generator=g)
    yy = torch.arange(h)[None, :, None]
    xx = torch.arange(w)[None, None, :]
    inside = (
        (yy >= cy[:, None, None])
        & (yy < cy[:, None, None] + cutout)
        & (xx >= cx[:, None, None])
        & (xx < cx[:, None, None] + cutout)
        & hole[:, None, None]
    )
    out = out.masked_fill(inside[:, None], 0.0)
    factor = scale[0] + (scale[1] - scale[0]) * torch.rand(n, generator=g)
    out = out * factor[:, None, None, None]
    return out + noise * torch.randn(out.shape, generator=g)
