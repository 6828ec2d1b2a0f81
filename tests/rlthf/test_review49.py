"""Issue 49 review: bf16 and empty curves to find_bend."""

import numpy as np
import pytest
import torch

from icml25.rlthf.distribution import find_bend


def test_find_bend_takes_bf16_and_refuses_an_empty_curve():
    y = torch.tensor([5.0, 1.0, 0.5, 0.4, 0.3])
    assert find_bend(y.bfloat16()) == find_bend(y) == find_bend(y.numpy()) == 1
    with pytest.raises(ValueError, match="non-empty"):
        find_bend(np.ones(0))
    assert find_bend([2.0]) == 0
