"""Issue 49 review: labels outside the model's outputs, and ``evaluate`` before ``fit``."""

import pytest
import torch
from torch import nn

from icml25.knowledge_swap import KnowledgeSwapper, inject_lora
from icml25.knowledge_swap.metrics import accuracy_on


def _net():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
    inject_lora(m, ["0", "2"], r=2)
    return m


def test_accuracy_on_refuses_a_label_the_model_cannot_output():
    m, x = _net(), torch.randn(10, 4)
    with pytest.raises(ValueError, match=r"label 9, outside the model's 6 outputs"):
        accuracy_on(m, (x, torch.full((10,), 9)))
    with pytest.raises(ValueError, match=r"label -1"):
        accuracy_on(m, (x, torch.full((10,), -1)))
    pred = m(x).argmax(-1)
    assert accuracy_on(m, (x, pred)) == 100.0
    assert m.training  # the model's mode is restored after a refusal too


def test_evaluate_before_fit_says_why_h_is_nan():
    m, x = _net(), torch.randn(30, 4)
    sw = KnowledgeSwapper(m, epochs_per_stage=1, batch_size=8)
    sets = ((x[:10], torch.arange(10) % 2), (x[10:20], 2 + torch.arange(10) % 2), None)
    with pytest.warns(UserWarning, match="h is NaN: it needs the forget-set accuracy"):
        res = sw.evaluate(*sets)
    assert res["h"] != res["h"] and 0 <= res["acc_r"] <= 100
    res = sw.evaluate(*sets, acc_f_before=90.0)  # with the reference: a number, no warning
    assert res["h"] == res["h"]
