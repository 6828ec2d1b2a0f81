"""Issue 49 review: a tensor seed."""

import numpy as np
import pytest
import torch

from icml25.future_of_work import shapley_tmc


def test_shapley_tmc_accepts_numpy_and_torch_seeds():
    def U(s):  # not additive: the estimate depends on the permutations the seed draws
        return float(len(s) >= 2) + 0.5 * ("a" in s)

    ref = shapley_tmc(U, ["a", "b", "c"], seed=3, max_perms=8)
    for seed in (torch.tensor(3), np.int64(3)):
        got = shapley_tmc(U, ["a", "b", "c"], seed=seed, max_perms=8)
        assert dict(got) == dict(ref)
    with pytest.raises(ValueError, match="seed must be an integer >= 0, got 1.5"):
        shapley_tmc(U, ["a", "b"], seed=1.5)
