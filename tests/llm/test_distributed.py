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


def test_the_step_denominator_sums_the_micro_batches():
    t = _Weighted()
    batches = [{"weight": torch.tensor([1.0, 2.0])}, {"weight": torch.tensor([0.5])}]
    total = t._get_num_items_in_batch(batches, torch.device("cpu"))
    assert float(total) == 3.5
    loss = t.global_mean(torch.tensor(7.0), total)
    assert float(loss) == pytest.approx(2.0)  # the loss is not divided again by the steps


def test_a_single_process_loop_refuses_a_multi_process_launch(monkeypatch):
    from icml25.llm.distributed import launched_processes, refuse_several_processes

    refuse_several_processes("loop", "Trainer")  # one process: nothing happens
    monkeypatch.setenv("WORLD_SIZE", "4")  # torchrun sets it before any process group exists
    assert launched_processes() == 4
    with pytest.raises(RuntimeError, match=r"loop is a single-process loop.*one of 4.*Launch Tr"):
        refuse_several_processes("loop", "Trainer")
    monkeypatch.setenv("WORLD_SIZE", "not a number")
    assert launched_processes() == 1


def _trainer(n_rows, world, batch, even=True, drop_last=False):
    args = types.SimpleNamespace(
        world_size=world, per_device_train_batch_size=batch, dataloader_drop_last=drop_last
    )
    return types.SimpleNamespace(
        args=args,
        train_dataset=list(range(n_rows)),
        accelerator=types.SimpleNamespace(even_batches=even),
    )


def test_global_batches_that_the_rows_do_not_fill_are_named(recwarn):
    from icml25.llm.distributed import check_global_batches

    check_global_batches(_trainer(16, 2, 4))  # 2 full global batches of 8
    check_global_batches(_trainer(13, 1, 4))  # one process: nothing to share
    assert not recwarn.list
    with pytest.warns(
        UserWarning, match="14 training rows do not fill .* with 2 rows from the start"
    ):
        check_global_batches(_trainer(14, 2, 4))
    # even_batches=False: 10 rows in batches of 3 -> 4 batches, 2 per process: fine
    check_global_batches(_trainer(10, 2, 3, even=False))
    with pytest.raises(ValueError, match="7 batches, which 2 processes cannot share"):
        check_global_batches(_trainer(14, 2, 2, even=False))
    with pytest.raises(ValueError, match="3 batches"):
        check_global_batches(_trainer(7, 2, 2, even=False, drop_last=True))


def test_an_empty_step_is_refused_by_name_or_is_zero():
    t = _Weighted()
    t.state = types.SimpleNamespace(global_step=4)
    with pytest.raises(ValueError, match=r"optimiser step 5 is 0.0 .*_Weighted.loss_denominator"):
        t._get_num_items_in_batch([{"weight": torch.zeros(2)}], torch.device("cpu"))
    t.empty_step_is_zero = True
    assert float(t._get_num_items_in_batch([{"weight": torch.zeros(2)}], torch.device("cpu"))) == 1
