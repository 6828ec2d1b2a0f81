"""Several processes: SimplexDPOTrainer under two gloo processes equals one process on the same
global batch; the full-batch stages refuse to run duplicated under torch.distributed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("datasets")

WORKER = Path(__file__).with_name("_ddp_worker.py")


def _in_this_process(out: Path, *args: int) -> dict:
    """The worker's run in this process (no process group): ``args`` are the pairs per batch and
    the accumulated micro-batches per step."""
    import importlib.util
    import json

    module_spec = importlib.util.spec_from_file_location("_proxy_feedback_ddp_worker", WORKER)
    worker = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(worker)
    threads = torch.get_num_threads()
    try:
        worker.main(str(out), *args)
    finally:
        torch.set_num_threads(threads)
    return json.loads((out / "rank0.json").read_text())


def _assert_same_weights(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k, v in got.items():
        torch.testing.assert_close(
            torch.tensor(v, dtype=torch.float64),
            torch.tensor(want[k], dtype=torch.float64),
            rtol=0,
            atol=1e-12,
            msg=k,
        )


def test_simplex_dpo_trainer_accumulated_micro_batches_equal_one_batch(tmp_path):
    """Two accumulated micro-batches of 3 pairs (3 and 1 in every second step) equal one batch of
    6 (4): the loss of each step is the mean over its pairs, not the mean of the micro-batch
    means (that would give the lone pair half the step instead of a quarter)."""
    one = _in_this_process(tmp_path / "one", 6)
    acc = _in_this_process(tmp_path / "accumulated", 3, 2)
    assert one["step_pairs"] == [6, 4, 6, 4] and acc["step_pairs"] == [3, 3, 3, 1] * 2
    assert one["moved"] > 1e-3  # training changed the weights
    # each micro-batch returns its sum over pairs / the step's count: they add up to the step
    steps = [a + b for a, b in zip(acc["step_losses"][::2], acc["step_losses"][1::2])]
    assert steps == pytest.approx(one["step_losses"], abs=1e-12)
    assert abs(one["step_losses"][0] - 0.6931471805599453) > 1e-4  # not a trivial log 2
    assert acc["logged"] == pytest.approx(one["logged"], abs=1e-6)
    assert acc["margins"] == pytest.approx(one["margins"], abs=1e-12)
    _assert_same_weights(acc["weights"], one["weights"])


def test_simplex_dpo_trainer_two_processes_equal_one(ranks, tmp_path):
    """4 steps on 10 pairs: 2 gloo processes x 3 pairs against 1 process x 6 pairs. Every second
    step rank 0 holds 3 pairs and rank 1 one (``even_batches=False``), so a per-rank mean would
    weigh that pair twice as much as one process does; the loss of each step (mean of the ranks'
    losses), the logged metrics, the trained weights and the checkpoint written by rank 0 must
    all equal one process's."""
    one = _in_this_process(tmp_path / "one", 6)
    two = ranks(WORKER, "3", nproc=2)
    assert one["world"] == 1 and [r["world"] for r in two] == [2, 2]
    # the design: the same rows per step, unequal pair counts on the two ranks
    assert one["step_pairs"] == [6, 4, 6, 4]
    assert two[0]["step_pairs"] == [3, 3, 3, 3] and two[1]["step_pairs"] == [3, 1, 3, 1]
    # each rank returns sum over its pairs / global count * world: their mean is the global mean
    per_step = [(a + b) / 2 for a, b in zip(two[0]["step_losses"], two[1]["step_losses"])]
    assert per_step == pytest.approx(one["step_losses"], abs=1e-12)
    assert abs(one["step_losses"][0] - 0.6931471805599453) > 1e-4  # not a trivial log 2
    for r in two:  # the logged loss and rewards are the global batch's on every rank
        assert r["logged"] == pytest.approx(one["logged"], abs=1e-6)
        assert r["margins"] == pytest.approx(one["margins"], abs=1e-12)
    assert one["moved"] > 1e-3  # training changed the weights
    for r in two:
        _assert_same_weights(r["weights"], one["weights"])
    # the checkpoint written by the main process reloads to the trained weights
    assert two[0]["reloaded"].keys() == one["weights"].keys()
    for k, v in two[0]["reloaded"].items():
        assert v == two[0]["weights"][k], k


def test_single_process_stages_refuse_several_processes(monkeypatch):
    """The full-batch stages and the plain LLM loops are single-process: under a torch.distributed
    group of 2 they raise, naming the data-parallel entry point, instead of repeating the fit."""
    import icml25.llm.distributed as dist
    from icml25.proxy_feedback import (
        fit_finetune_all,
        fit_pooled,
        fit_proxy_stage,
        fit_true_only,
        fit_true_stage,
    )
    from icml25.proxy_feedback.data import PreferenceBatch
    from icml25.proxy_feedback.llm import dpo_stage, warmup_bottleneck
    from icml25.proxy_feedback.model import SimplexPolicy

    model = SimplexPolicy(d_x=2, n_outputs=3, D=2, encoder_hidden=8)
    x = torch.randn(4, 2)
    batch = PreferenceBatch.from_arrays(x, torch.tensor([0, 1, 2, 0]), torch.tensor([1, 2, 0, 2]))
    calls = {
        "fit_proxy_stage": lambda: fit_proxy_stage(model, batch, epochs=1),
        "fit_true_stage": lambda: fit_true_stage(model, batch, steps=1),
        "fit_true_only": lambda: fit_true_only(model, batch, steps=1),
        "fit_finetune_all": lambda: fit_finetune_all(model, batch, steps=1),
        "fit_pooled": lambda: fit_pooled(model, batch, batch, epochs=1),
        "dpo_stage": lambda: dpo_stage(model, None, [], tokenizer=None),
        "warmup_bottleneck": lambda: warmup_bottleneck(model, [], tokenizer=None),
    }
    before = {k: v.clone() for k, v in model.state_dict().items()}
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    for name, call in calls.items():
        with pytest.raises(
            RuntimeError, match=f"{name} is a single-process loop.*SimplexDPOTrainer"
        ):
            call()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    monkeypatch.setattr(dist, "world_size", lambda: 1)
    assert len(fit_true_only(model, batch, steps=1)["loss"]) == 1  # one process runs as before
