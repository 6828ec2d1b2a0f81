"""Triton kernels for CUDA tensors (placeholder until the kernels land: always unavailable)."""

from __future__ import annotations

import torch


def available(x: torch.Tensor) -> tuple[bool, str]:
    return False, "the Triton kernels are not built yet"
