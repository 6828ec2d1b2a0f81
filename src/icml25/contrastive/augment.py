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
    intensity scale ``U[scale]`` and Gaussian noise; ``x`` is ``(N, C, H, W)``. No clamping.

    The random numbers are drawn on ``generator``'s device (a CPU generator gives the same
    augmentations for CPU and CUDA inputs) and the result is on ``x``'s device and dtype."""
    if x.ndim != 4:
        raise ValueError(f"x must be (N, C, H, W), got {tuple(x.shape)}")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    n, _, h, w = x.shape
    g = generator
    gd = g.device

    def on_x(t: Tensor) -> Tensor:
        return t.to(x.device)

    padded = torch.nn.functional.pad(x, (shift, shift, shift, shift))
    dx = on_x(torch.randint(0, 2 * shift + 1, (n,), generator=g, device=gd))
    dy = on_x(torch.randint(0, 2 * shift + 1, (n,), generator=g, device=gd))
    ar = lambda k: torch.arange(k, device=x.device)  # noqa: E731
    rows = dy[:, None] + ar(h)[None, :]  # (n, h)
    cols = dx[:, None] + ar(w)[None, :]  # (n, w)
    out = padded[
        ar(n)[:, None, None, None],
        ar(x.shape[1])[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]
    hole = on_x(torch.rand(n, generator=g, device=gd) < cutout_p)
    cy = on_x(torch.randint(0, h - cutout + 1, (n,), generator=g, device=gd))
    cx = on_x(torch.randint(0, w - cutout + 1, (n,), generator=g, device=gd))
    yy = ar(h)[None, :, None]
    xx = ar(w)[None, None, :]
    inside = (
        (yy >= cy[:, None, None])
        & (yy < cy[:, None, None] + cutout)
        & (xx >= cx[:, None, None])
        & (xx < cx[:, None, None] + cutout)
        & hole[:, None, None]
    )
    out = out.masked_fill(inside[:, None], 0.0)
    factor = scale[0] + (scale[1] - scale[0]) * on_x(torch.rand(n, generator=g, device=gd))
    out = out * factor[:, None, None, None].to(x.dtype)
    return out + noise * on_x(torch.randn(out.shape, generator=g, device=gd)).to(x.dtype)
