"""Issue 49 review: TPOConfig converts its numbers at construction."""

import numpy as np
import pytest
import torch

from icml25.tpo import TPOConfig


def test_tpo_config_converts_at_construction():
    c = TPOConfig(seed=np.int64(3), width=torch.tensor(2), temperature=np.float32(0.5))
    assert type(c.seed) is int and type(c.width) is int and type(c.temperature) is float
    assert c.temperature == 0.5
    with pytest.raises(ValueError, match="TPOConfig.seed"):
        TPOConfig(seed=1.5)
