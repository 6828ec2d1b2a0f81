"""Several processes: the TRL entry points (``dpo_trainer``, ``reverse_sft_trainer``) under two
gloo processes train as one process on the same global batch; the plain loops (``reverse_sft``,
``dpo_round``, ``train_dpo``) refuse to run once per process; ``reverse_sft_trainer`` trains on
the targets and the loss of ``reverse_sft``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from icml25.elicitation import Investigator

WORKER = Path(__file__).with_name("_ddp_worker.py")


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float64)
    return {k: v.detach() for k, v in model.named_parameters()}  # tied weights once


def _two_equal_one(ranks, tmp_path, mode: str, atol: float) -> tuple[list[dict], dict]:
    """Run the worker in ``mode`` under 2 processes x batch 2 and 1 process x batch 4 and check
    that the losses, the ranks' weights and rank 0's reloaded checkpoint agree."""
    two = ranks(WORKER, mode, "2", nproc=2)
    (one,) = ranks(WORKER, mode, "4", nproc=1)
    assert [r["world"] for r in two] == [2, 2] and one["world"] == 1
    assert len(one["losses"]) == 2
    for r in two:  # logged in float32
        assert r["losses"] == pytest.approx(one["losses"], rel=1e-6, abs=0)
    assert two[0]["checksum"] == pytest.approx(two[1]["checksum"], rel=1e-12)
    assert abs(one["checksum"] - one["init"]) > 1e-2  # training moved the weights
    w2, w1 = _weights(tmp_path / "world2-1" / "ckpt"), _weights(tmp_path / "world1-2" / "ckpt")
    assert w2.keys() == w1.keys()
    for k in w1:
        torch.testing.assert_close(w2[k], w1[k], rtol=1e-6, atol=atol, msg=k)
    assert abs(float(sum(v.sum() for v in w2.values())) - two[1]["checksum"]) < 1e-9
    for r in two:  # the plain loops refuse, naming the entry point that scales
        errs = r["errors"]
        assert (
            "single-process" in errs["reverse_sft"] and "reverse_sft_trainer" in errs["reverse_sft"]
        )
        for loop in ("dpo_round", "train_dpo"):
            assert "single-process" in errs[loop] and "dpo_trainer" in errs[loop]
    return two, one


@pytest.mark.slow
def test_dpo_trainer_two_gloo_processes_equal_one_process(ranks, tmp_path):
    pytest.importorskip("trl")
    # 8 pairs per step (TRL's random sampler: accelerate shards one seeded permutation); SGD
    # without clipping, float64 model with TRL's float32 LM head: max |diff| was 3e-8 here
    two, one = _two_equal_one(ranks, tmp_path, "dpo", atol=5e-7)
    assert all(r["counts"] == [4, 4, 4, 4] for r in two) and one["counts"] == [8, 8, 8, 8]


@pytest.mark.slow
def test_reverse_sft_trainer_two_gloo_processes_equal_one_process(ranks, tmp_path):
    pytest.importorskip("trl")
    # max |diff| was 5e-9 here; a per-rank token mean or a swapped batch moves weights far more
    two, one = _two_equal_one(ranks, tmp_path, "reverse", atol=1e-7)
    # per micro-batch, rank 0 holds several times rank 1's completion tokens, and the one-process
    # micro-batch exactly both
    c0, c1 = two[0]["counts"], two[1]["counts"]
    assert all(a >= 5 * b > 0 for a, b in zip(c0, c1))
    assert one["counts"] == [a + b for a, b in zip(c0, c1)]
    assert all(r["average_tokens_across_devices"] for r in two)


@pytest.mark.parametrize("template", ["chat", "tags"])
def test_reverse_sft_trainer_trains_the_targets_and_loss_of_reverse_sft(world, tok, tiny, template):
    trl = pytest.importorskip("trl")
    import datasets

    from icml25.elicitation import default_reverse_sft_config, reverse_sft_trainer

    datasets.disable_progress_bars()
    inv = Investigator(tiny, tok, template=template)
    pairs = [
        (world.behaviors[i % 4], " ".join(f"w{(5 * i + k) % 32}" for k in range(1 + 2 * i)))
        for i in range(4)
    ] + [(world.behaviors[0], "")]
    args = default_reverse_sft_config(max_steps=1, per_device_train_batch_size=5)
    assert isinstance(args, trl.SFTConfig) and args.learning_rate == 5e-5
    assert (args.num_train_epochs, args.warmup_steps, args.max_length) == (3.0, 50, None)
    assert args.average_tokens_across_devices
    trainer = reverse_sft_trainer(inv, pairs, args)
    rows = [trainer.train_dataset[i] for i in range(len(pairs))]
    for (b, x), row in zip(pairs, rows):  # reverse_sft's context and completion ids
        context, completion = inv._encode(b, x)
        batch = trainer.data_collator([row])
        assert batch["input_ids"][0].tolist() == context + completion
        assert batch["labels"][0].tolist() == [-100] * len(context) + completion
    # the loss: the mean over the batch's completion tokens, as reverse_sft's, but TRL's
    # log-softmax runs over the whole vocabulary where reverse_sft's leaves out the special tokens
    # the investigator never draws: equal once the investigator's scoring covers every id
    batch = trainer.data_collator(rows)
    bs, xs = [b for b, _ in pairs], [x for _, x in pairs]
    with torch.no_grad():
        got = float(trainer.compute_loss(tiny, batch))
        total, counts = inv._scores(bs, xs)
        masked = float(-(total.sum() / counts.sum()))
        inv.allowed = torch.arange(tiny.config.vocab_size)
        total, counts = inv._scores(bs, xs)
    assert got == pytest.approx(float(-(total.sum() / counts.sum())), rel=1e-5)
    assert got > masked + 1e-3  # the mass a random-init model puts on the special tokens


def test_reverse_sft_trainer_bad_input(world, tok, tiny, inv):
    pytest.importorskip("trl")
    from icml25.elicitation import reverse_sft_trainer

    with pytest.raises(ValueError, match="whole vocabulary"):
        reverse_sft_trainer(
            inv, [("b", "w1")]
        )  # the conftest investigator restricts the vocabulary
    free = Investigator(tiny, tok)
    with pytest.raises(ValueError, match="empty"):
        reverse_sft_trainer(free, [])
    with pytest.raises(TypeError, match=r"pairs\[0\]"):
        reverse_sft_trainer(free, [("b",)])
    with pytest.raises(TypeError, match="Investigator"):
        reverse_sft_trainer(tiny, [("b", "w1")])


@pytest.mark.parametrize("loop", ["reverse_sft", "dpo_round", "train_dpo"])
def test_plain_loops_refuse_several_processes(monkeypatch, world, tok, tiny, loop):
    import icml25.llm.distributed as dist
    from icml25.elicitation import dpo_round, reverse_sft, train_dpo

    inv = Investigator(tiny, tok)
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    monkeypatch.setattr(dist, "world_size", lambda: 2)
    calls = {
        "reverse_sft": lambda: reverse_sft(inv, [(world.behaviors[0], "w1 w2")], steps=1, warmup=0),
        "dpo_round": lambda: dpo_round(inv, inv.copy(), None, world.behaviors),
        "train_dpo": lambda: train_dpo(inv, inv.copy(), None, world.behaviors, 1),
    }
    scalable = "reverse_sft_trainer" if loop == "reverse_sft" else "dpo_trainer"
    with pytest.raises(
        RuntimeError, match=rf"{loop} is a single-process loop.*2 processes.*{scalable}"
    ):
        calls[loop]()
    assert all(torch.equal(before[k], v) for k, v in tiny.state_dict().items())
