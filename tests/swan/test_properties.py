"""Issue 49: SWAN's compute dtype, and packed Q/K/V whitening."""

import pytest
import torch
from torch import nn

from icml25.swan import SWAN


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.bool, "float32"])
def test_non_floating_compute_dtype_is_refused_at_construction(dtype):
    with pytest.raises(ValueError, match="compute_dtype"):  # before: accepted, failed at step
        SWAN(nn.Linear(4, 4).parameters(), compute_dtype=dtype)


def test_packed_in_proj_is_whitened_per_block_by_swan_param_groups():
    from icml25.swan import swan_param_groups

    groups = swan_param_groups(nn.MultiheadAttention(8, 2))
    fused = [g for g in groups if g.get("blocks", 1) == 3]
    assert fused and any("in_proj_weight" in n for g in fused for n in g["names"])
