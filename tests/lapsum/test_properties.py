"""Issue 49: spearman_corr on constant rows, numpy scalars, and random rows against scipy."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import spearmanr

from icml25.lapsum import soft_rank, spearman_corr


def test_spearman_of_a_constant_row_is_nan_as_scipy():
    pred = torch.tensor([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]], requires_grad=True)
    target = torch.tensor([[3.0, 1.0, 2.0], [1.0, 2.0, 3.0]])
    rho = spearman_corr(pred, target, alpha=1e-3)
    assert math.isnan(float(rho[0]))  # before: 0
    assert float(rho[1]) == pytest.approx(1.0)
    assert math.isnan(spearmanr([1.0, 1.0, 1.0], [3.0, 1.0, 2.0]).statistic)
    rho[1].backward()
    assert bool(torch.isfinite(pred.grad).all())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(-5, 5), min_size=3, max_size=8).flatmap(
        lambda a: st.tuples(st.just(a), st.permutations(list(range(len(a)))))
    ),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_spearman_with_tiny_alpha_equals_scipy(data, dtype):
    a, b = data
    pred = torch.tensor(a, dtype=dtype) + 1e-2 * torch.arange(len(a), dtype=dtype)  # no ties
    target = torch.tensor(b, dtype=dtype)
    expected = spearmanr(pred.double().numpy(), target.double().numpy()).statistic
    got = float(spearman_corr(pred, target, alpha=1e-4))
    assert got == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("alpha", [np.float64(0.5), 0.5, torch.tensor(0.5)])
def test_numpy_and_python_scalars_are_accepted(alpha):
    x = torch.tensor([3.0, 1.0, 2.0])
    assert torch.allclose(soft_rank(x, alpha), soft_rank(x, 0.5))


@pytest.mark.parametrize("alpha", [math.nan, True])
def test_bad_alpha_is_refused_naming_it(alpha):
    with pytest.raises((TypeError, ValueError), match="alpha"):
        soft_rank(torch.tensor([3.0, 1.0, 2.0]), alpha)
