"""Shared test setup: quiet progress output, and tests marked ``gpu`` skip where CUDA is absent."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("ICML25_QUIET", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip)
