"""Issue 49 review: an undefined Bradley-Terry margin and bool indices."""

import numpy as np
import pytest
import torch

from icml25.proxy_feedback import PreferenceBatch
from icml25.proxy_feedback.losses import preference_nll

INF = float("inf")


def test_preference_nll_refuses_minus_inf_on_both_sides():
    with pytest.raises(ValueError, match="margin of pair 0 is undefined"):
        preference_nll(torch.tensor([-INF]), torch.tensor([-INF]))
    with pytest.raises(ValueError, match="margin of pair 2 is undefined"):
        preference_nll(torch.tensor([0.0, 1.0, -INF]), torch.tensor([0.0, 0.0, -INF]))
    assert float(preference_nll(torch.zeros(1), torch.tensor([-INF]))) == 0.0
    assert float(preference_nll(torch.tensor([-INF]), torch.zeros(1))) == INF


def test_preference_batch_refuses_bool_indices():
    x = np.random.default_rng(0).normal(size=(5, 2))
    b = PreferenceBatch.from_arrays(x, np.array([0, 1, 2, 0, 1]), np.array([1, 2, 0, 1, 0]))
    for idx in (True, False, np.bool_(True), torch.tensor(True)):
        with pytest.raises(TypeError, match="not by the bool"):
            b[idx]
    assert len(b[1]) == 1 and len(b[np.array([True, False, True, False, False])]) == 2
