"""Issue 49 review: an undefined DPO margin, and a flat list to trigger_coverage."""

import pytest
import torch

from icml25.elicitation.dpo import dpo_loss
from icml25.elicitation.metrics import trigger_coverage


def test_dpo_loss_refuses_minus_inf_on_both_sides():
    inf = float("inf")
    z = torch.zeros(2)
    with pytest.raises(ValueError, match="margin of pair 1 is undefined"):
        dpo_loss(torch.tensor([0.0, -inf]), torch.tensor([0.0, -inf]), z, z)
    loss, stats = dpo_loss(z, torch.tensor([0.0, -inf]), z, z)
    assert torch.isfinite(loss) and stats["reward_accuracy"] == 0.5


def test_trigger_coverage_says_which_shape_it_expects():
    with pytest.raises(
        TypeError, match=r"one list of credited strategies per behaviour.*credited\[0\] = 0.1"
    ):
        trigger_coverage([0.1, 0.2], 0.05)
    with pytest.raises(TypeError, match="per behaviour"):
        trigger_coverage("abc")
    assert trigger_coverage([[0, 0, 1], [2]], 0.3) == 1.5
