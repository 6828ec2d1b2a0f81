"""Issue 49 review: the compute_dtype message and the packed-QKV warning."""

import pytest
import torch
from torch import nn

from icml25.swan import SWAN


def test_compute_dtype_given_as_a_string_is_named_as_such():
    p = [nn.Parameter(torch.zeros(3, 3))]
    with pytest.raises(
        ValueError, match=r"torch floating dtype, e.g. torch.float32.*got 'float32'$"
    ):
        SWAN([{"params": p, "use_swan": True}], compute_dtype="float32")
    for bad, why in (
        (torch.int32, "real floating dtype"),
        (torch.complex64, "real floating dtype"),
        (torch.bool, "real floating dtype"),
        (torch.float8_e4m3fn, "no float8 kernels"),
    ):
        with pytest.raises(ValueError, match=why):  # float8 failed only at step() before issue 50
            SWAN([{"params": p, "use_swan": True}], compute_dtype=bad)


def test_bare_parameters_warn_about_packed_qkv():
    m = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, batch_first=True)
    with pytest.warns(UserWarning, match=r"in_proj_weight.*swan_param_groups"):
        SWAN(m.parameters())
