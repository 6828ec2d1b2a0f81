"""icml25.llm.distributed in one process; two processes run it in tests/rlthf/test_distributed.py."""

from __future__ import annotations

import types

import pytest
import torch

from icml25.llm.distributed import GlobalBatchNormalisation, all_reduce_sum, world_size


def test_one_process_is_the_identity():
    x = torch.tensor([1.5, 2.0], requires_grad=True)
    assert world_size() == 1
    y = all_reduce_sum(x)
    assert torch.equal(y, x.detach()) and not y.requires_grad


class _Weighted(GlobalBatchNormalisation):
    def __init__(self) -> None:
        self.args = types.SimpleNamespace(world_size=1)
        self.accelerator = types.SimpleNamespace(num_processes=1)
        self.current_gradient_accumulation_steps = 2

    def loss_denominator(self, batch):
        return batch["weight"].sum()


def test_the_step_denominator_sums_the_micro_batches_and_refuses_zero():
    t = _Weighted()
    batches = [{"weight": torch.tensor([1.0, 2.0])}, {"weight": torch.tensor([0.5])}]
    total = t._get_num_items_in_batch(batches, torch.device("cpu"))
    assert float(total) == 3.5
    loss = t.global_mean(torch.tensor(7.0), total)
    assert float(loss) == pytest.approx(2.0)  # the loss is not divided again by the steps
    with pytest.raises(ValueError, match="denominator of this optimiser step is 0.0"):
        t._get_num_items_in_batch([{"weight": torch.zeros(3)}], torch.device("cpu"))


def test_a_single_process_loop_refuses_a_multi_process_launch(monkeypatch):
    from icml25.llm.distributed import launched_processes, refuse_several_processes

    refuse_several_processes("loop", "Trainer")  # one process: nothing happens
    monkeypatch.setenv("WORLD_SIZE", "4")  # torchrun sets it before any process group exists
    assert launched_processes() == 4
    with pytest.raises(RuntimeError, match=r"loop is a single-process loop.*one of 4.*Launch Tr"):
        refuse_several_processes("loop", "Trainer")
    monkeypatch.setenv("WORLD_SIZE", "not a number")
    assert launched_processes() == 1
