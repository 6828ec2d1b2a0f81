"""``lapsum_path``: runs a test module on both CPU paths, the torch one (``_ref``) and the
compiled kernels (``_cpu``), through ``ICML25_LAPSUM_BACKEND``. Module-scoped, so hypothesis
tests can use it."""

from __future__ import annotations

import os

import pytest

from icml25.lapsum import _cpu


@pytest.fixture(scope="module", params=["torch", "cpu"])
def lapsum_path(request):
    if request.param == "cpu":
        ok, why = _cpu.available()
        if not ok:
            pytest.skip(f"the compiled CPU kernels are not available: {why}")
    old = os.environ.get("ICML25_LAPSUM_BACKEND")
    os.environ["ICML25_LAPSUM_BACKEND"] = request.param
    yield request.param
    if old is None:
        os.environ.pop("ICML25_LAPSUM_BACKEND", None)
    else:
        os.environ["ICML25_LAPSUM_BACKEND"] = old
