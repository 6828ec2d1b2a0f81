"""The shared LoRA layers (``icml25.lora``): exact start at the base, merge/unmerge, the Conv2d
kernel update, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from icml25.lora import (
    LoRAConv2d,
    LoRALinear,
    inject_lora,
    lora_parameters,
    mark_only_lora_trainable,
)

D = torch.float64


def test_lora_linear_starts_at_the_base_and_trains_only_a_b():
    torch.manual_seed(0)
    base = nn.Linear(6, 4).double()
    ref = base.weight.detach().clone()
    lora = LoRALinear(base, r=2, alpha=1.0)
    x = torch.randn(5, 6, dtype=D)
    assert torch.equal(lora(x), base(x))  # B = 0 at init
    with torch.no_grad():
        lora.lora_B.normal_()
    lora(x).sum().backward()
    assert base.weight.grad is None and base.bias.grad is None
    assert lora.lora_A.grad is not None and lora.lora_B.grad is not None
    y = lora(x)
    lora.merge()
    assert torch.allclose(lora(x), y, atol=1e-12) and lora.merged
    lora.unmerge()
    assert torch.allclose(base.weight, ref, atol=1e-12) and torch.allclose(lora(x), y, atol=1e-12)
    # the official init: kaiming_uniform with a = sqrt(50): |A| <= sqrt(6 / (51 fan_in))
    assert float(lora.lora_A.detach().abs().max()) <= math.sqrt(6 / (51 * 6)) + 1e-12
    plain = nn.Linear(3, 2)
    passthrough = LoRALinear(plain, r=0)
    assert torch.equal(passthrough(torch.ones(1, 3)), plain(torch.ones(1, 3)))
    assert not any("lora" in n for n, _ in passthrough.named_parameters())
    with pytest.raises(ValueError, match="rank"):
        LoRALinear(nn.Linear(3, 2), r=-1)


def test_lora_conv_equals_conv_with_the_merged_kernel():
    torch.manual_seed(1)
    base = nn.Conv2d(3, 5, 3, padding=1, stride=2).double()
    lora = LoRAConv2d(base, r=2, alpha=2.0)
    with torch.no_grad():
        lora.lora_B.normal_()
    x = torch.randn(2, 3, 9, 9, dtype=D)
    merged = F.conv2d(x, base.weight + lora.delta_weight(), base.bias, 2, 1)
    assert torch.allclose(lora(x), merged, atol=1e-12)
    assert lora.lora_A.numel() == 2 * 3 * 3 * 3 and lora.lora_B.numel() == 5 * 2
    with pytest.raises(ValueError, match="groups=1"):
        LoRAConv2d(nn.Conv2d(4, 4, 3, groups=2))


def test_inject_lora_by_name_and_peft_style_parameter_names():
    net = nn.Sequential()
    net.block = nn.Sequential()
    net.block.fc1, net.block.fc2, net.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)
    out = inject_lora(net, ["fc1", "block.fc2"], r=2, init_a=math.sqrt(5))
    assert set(out) == {"block.fc1", "block.fc2"}
    assert isinstance(net.block.fc1, LoRALinear) and isinstance(net.head, nn.Linear)
    names = [n for n, _ in lora_parameters(net)]
    assert names == ["block.fc1.lora_A", "block.fc1.lora_B", "block.fc2.lora_A", "block.fc2.lora_B"]
    assert mark_only_lora_trainable(net) == 4
    assert [n for n, p in net.named_parameters() if p.requires_grad] == names
    with pytest.raises(ValueError, match="matched the target"):
        inject_lora(net, ["fc3"])
    with pytest.raises(ValueError, match="no LoRA parameters"):
        mark_only_lora_trainable(nn.Linear(2, 2))


def test_inject_lora_checks_rank_and_alpha_through_the_shared_helper():
    # issue 49: np.int64(2) was refused with a message contradicting itself, alpha=inf gave NaN
    # outputs, alpha="1" a raw TypeError and r=0 a layer with nothing to train
    import numpy as np

    from icml25.lora import inject_lora

    net = nn.Sequential(nn.Linear(4, 4))
    out = inject_lora(net, ["0"], r=np.int64(2), alpha=np.float32(1.0))
    assert out["0"].r == 2 and type(out["0"].r) is int and out["0"].alpha == 1.0
    for kw, match in [
        (dict(alpha=float("inf")), "alpha must be a finite number > 0, got inf"),
        (dict(alpha="1"), "alpha must be a finite number > 0, got '1'"),
        (dict(r=0), "rank r must be an integer >= 1, got 0"),
        (dict(r=2.0), "rank r must be an integer >= 1, got 2.0"),
    ]:
        with pytest.raises(ValueError, match=match):
            inject_lora(nn.Sequential(nn.Linear(4, 4)), ["0"], **kw)
    with pytest.raises(ValueError, match="alpha"):
        LoRALinear(nn.Linear(3, 2), r=2, alpha=float("nan"))
