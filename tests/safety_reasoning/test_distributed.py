"""Several processes: ``sft_trainer`` under two gloo processes trains as one process on the same
global batch; the plain loop ``sft`` refuses to run once per process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("_ddp_worker.py")


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64)
    return {k: v.detach() for k, v in model.named_parameters()}  # tied weights once


@pytest.mark.slow
def test_sft_trainer_two_gloo_processes_equal_one_process(ranks, tmp_path):
    pytest.importorskip("trl")
    two = ranks(WORKER, "2", nproc=2)
    (one,) = ranks(WORKER, "4", nproc=1)
    assert [r["world"] for r in two] == [2, 2] and one["world"] == 1
    # the design: per micro-batch, rank 0 holds many more completion tokens than rank 1, and the
    # one-process micro-batch holds exactly both ranks' rows
    c0, c1 = two[0]["counts"], two[1]["counts"]
    assert all(a >= 5 * b > 0 for a, b in zip(c0, c1))
    assert one["counts"] == [a + b for a, b in zip(c0, c1)]
    # the loss of every step is the global-batch token mean (logged in float32)
    assert len(one["losses"]) == 2
    for r in two:
        assert r["losses"] == pytest.approx(one["losses"], rel=1e-6, abs=0)
    # the ranks agree, training moved the weights, and it moved them as one process does
    assert two[0]["checksum"] == pytest.approx(two[1]["checksum"], rel=1e-12)
    assert abs(one["checksum"] - one["init"]) > 1e-2
    # rank 0's checkpoint reloads to the one-process weights. SGD without clipping, so a weight
    # error is lr times a gradient error (Adam would hide a wrong scale of the loss); the model is
    # float64 but TRL scores the LM head in float32: max |diff| was 5e-9 here, a per-rank token
    # mean moved them by up to 0.4
    w2, w1 = _weights(tmp_path / "world2-1" / "ckpt"), _weights(tmp_path / "world1-2" / "ckpt")
    assert w2.keys() == w1.keys()
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-6, atol=1e-7, msg=k)
    assert abs(float(sum(v.sum() for v in w2.values())) - two[1]["checksum"]) < 1e-9
    # the plain loop refuses to run once per process, and names the entry point that scales
    for r in two:
        assert "single-process" in r["sft_error"] and "sft_trainer" in r["sft_error"]
    assert one["sft_error"] is None
    assert all(r["average_tokens_across_devices"] for r in two)  # sft_config keeps it on


def test_sft_refuses_several_processes(monkeypatch, toy_lm):
    import icml25.llm.distributed as dist
    from icml25.safety_reasoning import sft

    model, tok = toy_lm
    before = {k: v.clone() for k, v in model.state_dict().items()}
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    with pytest.raises(RuntimeError, match=r"single-process.*2 processes.*sft_trainer"):
        sft(model, tok, [("bv0 nt13 f4", "sure do nt13")], steps=1, progress=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
