"""Issue 49 (review): soft ranks that collapse to round-off gave exactly 0 ("uncorrelated")."""

import math

import pytest
import torch

from icml25.lapsum import spearman_corr


def test_float32_collapsed_ranks_are_nan_not_zero():
    t = torch.tensor([[1.0, 2, 3, 4]])
    assert math.isnan(float(spearman_corr(t * 1e-8, t)))  # was exactly 0.0
    assert math.isnan(float(spearman_corr(t, t * 1e-8)))


def test_float64_keeps_the_value_float32_loses():
    t = torch.tensor([[1.0, 2, 3, 4]], dtype=torch.float64)
    r = float(spearman_corr(t * 1e-8, t))
    assert r == pytest.approx(0.9998, abs=1e-4)  # soft ranks spread 1e-8: still resolved


@pytest.mark.parametrize(
    "dtype,lost,kept", [(torch.float32, 1e-6, 1e-5), (torch.float64, 1e-17, 1e-9)]
)
def test_floor_is_dtype_relative_and_rows_above_it_are_accurate(dtype, lost, kept):
    g = torch.Generator().manual_seed(0)
    t = torch.randn(3, 16, generator=g, dtype=torch.float64)
    u = t + 0.5 * torch.randn(3, 16, generator=g, dtype=torch.float64)
    exact = spearman_corr(t * kept, u)  # float64 value of the soft correlation
    assert bool(torch.isnan(spearman_corr((t * lost).to(dtype), u.to(dtype))).all())
    got = spearman_corr((t * kept).to(dtype), u.to(dtype))
    assert not bool(torch.isnan(got).any()) and not bool((got == 0).any())
    torch.testing.assert_close(got.double(), exact, rtol=0, atol=1e-3)


def test_collapsed_row_does_not_poison_other_rows_gradients():
    t = torch.tensor([[1.0, 2, 3, 4], [4.0, 1, 3, 2]])
    p = torch.cat([t[:1] * 1e-8, t[1:]]).requires_grad_(True)
    r = spearman_corr(p, t)
    rd = r.detach()
    assert math.isnan(float(rd[0])) and not math.isnan(float(rd[1]))
    r[1].backward()
    assert bool(torch.isfinite(p.grad).all())
