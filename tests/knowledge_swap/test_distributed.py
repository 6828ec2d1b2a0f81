"""KnowledgeSwapper data-parallel through accelerate: two gloo processes equal one process on the
same global batch (docs/knowledge_swap.md, "Several GPUs"), and the global-batch cross-entropy."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

WORKER = Path(__file__).with_name("_ddp_worker.py")


def _close_steps(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want) and got
    for g, w in zip(got, want):
        assert sorted(g) == sorted(w)
        for k in w:
            assert g[k] == pytest.approx(w[k], rel=1e-9, abs=1e-12), (g["step"], k, g[k], w[k])


def _flat(weights: dict) -> torch.Tensor:
    return torch.cat([torch.tensor(weights[k], dtype=torch.float64) for k in sorted(weights)])


def _worker():
    found = importlib.util.spec_from_file_location("knowledge_swap_ddp_worker", WORKER)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def test_swapper_under_two_gloo_processes_equals_one_process(ranks, tmp_path):
    two = ranks(WORKER, "--batch", "6", "--aux", "4", nproc=2)
    worker = _worker()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks run
    try:
        _compare(two, worker)
    finally:
        torch.set_num_threads(threads)
    # rank 0 alone wrote the adapter; every rank reloaded it; it reloads here too
    assert [r["saves"] for r in two] == [1, 0]
    assert all(r["reload_max_diff"] == 0.0 for r in two)
    from icml25.lora import load_lora, lora_state_dict

    fresh = load_lora(worker.base_model(), tmp_path / "world2-1" / "adapter.pt")
    saved = {k: v.flatten().tolist() for k, v in lora_state_dict(fresh).items()}
    assert saved == two[0]["explicit"]["weights"]
    assert "gradient_accumulation_steps=2" in two[0]["accumulation_error"]


def _compare(two: list[dict], worker) -> None:
    for mode, sizes in (("explicit", worker.EXPLICIT_SIZES), ("auto", worker.AUTO_SIZES)):
        # the reference: the plain loop (no Accelerator) in this process on the global batch
        local: list[int] = []
        ref = worker.record(*worker.swap(None, 12, 8, sizes, local))
        assert ref["num_processes"] == 1 and ref["wrapper"] == "MLP"
        r0, r1 = two[0][mode], two[1][mode]
        # auto: the Accelerator was created from torchrun's environment
        assert r0["num_processes"] == r1["num_processes"] == 2, mode
        assert r0["wrapper"] == "DistributedDataParallel", mode
        # DDP holds the LoRA matrices only: the backbone was frozen before it wrapped the model
        assert r0["requires_grad"] == sorted(r0["weights"]), (mode, r0["requires_grad"])
        assert "head.weight" in ref["requires_grad"]  # the plain loop leaves the flags
        # the ranks agree exactly: losses are gathered, DDP averages the gradients
        assert r0["losses"] == r1["losses"] and r0["weights"] == r1["weights"], mode
        # the two ranks together took the rows of the one-process batch, in its order
        assert r0["stages"] == ref["stages"] and r0["labels"] == ref["labels"], mode
        _close_steps(r0["losses"], ref["losses"])
        w2, w1 = _flat(r0["weights"]), _flat(ref["weights"])
        assert (w1 - _flat(ref["init_weights"])).abs().max() > 1e-2, mode  # training moved them
        assert torch.allclose(w2, w1, rtol=0, atol=1e-12), (mode, float((w2 - w1).abs().max()))
        if mode == "explicit":
            # the design holds: the ranks' retain batches differ in size (6 + 2 at epoch ends),
            # so a per-rank mean could not equal the one-process mean
            sizes2 = [two[r]["explicit"]["local_retain_sizes"] for r in (0, 1)]
            assert sizes2[0] != sizes2[1] and 2 in sizes2[1]
            assert [a + b for a, b in zip(*sizes2)] == local


def test_global_cross_entropy_is_the_global_batch_mean(monkeypatch):
    """Two processes simulated: this one holds 3 items, the other 5 (sum of CE ``other``)."""
    import icml25.llm.distributed as dist
    from icml25.knowledge_swap.parallel import global_cross_entropy

    torch.manual_seed(0)
    logits = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([0, 3, 1])
    other_sum, other_n = 7.25, 5.0
    single = global_cross_entropy(logits, target)
    assert torch.equal(single, F.cross_entropy(logits, target))  # one process: unchanged
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    monkeypatch.setattr(
        dist, "all_reduce_sum", lambda x: x.detach() + torch.tensor([other_sum, other_n])
    )
    got = global_cross_entropy(logits, target)
    local_sum = F.cross_entropy(logits, target, reduction="sum")
    assert float(got.detach()) == pytest.approx(
        (float(local_sum.detach()) + other_sum) / (3 + other_n), rel=1e-12
    )
    (g,) = torch.autograd.grad(got, logits)
    (want,) = torch.autograd.grad(local_sum * 2 / (3 + other_n), logits)
    assert torch.allclose(g, want, rtol=1e-12, atol=0)  # DDP's average over 2 -> global mean
    # the per-process mean would weight this process's 3 items like the other's 5
    assert not math.isclose(
        float(got.detach()), float(F.cross_entropy(logits, target).detach()), rel_tol=1e-3
    )


def test_the_plain_loop_needs_no_accelerator_and_a_bad_one_is_named(monkeypatch):
    from torch import nn

    from icml25.knowledge_swap import KnowledgeSwapper, inject_lora

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    net = nn.Sequential(nn.Linear(4, 4))
    inject_lora(net, ["0"], r=2)
    sw = KnowledgeSwapper(net)
    assert sw.accelerator is None and sw.num_processes == 1
    with pytest.raises(TypeError, match="accelerate.Accelerator or None, got str"):
        KnowledgeSwapper(net, accelerator="cuda")
