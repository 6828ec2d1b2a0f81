"""TWAHFTrainer's loss over the global batch: gradient accumulation and two gloo processes equal
one process with the whole batch (losses, trained weights, the checkpoint rank 0 saves); the
plain loop train_twa refuses to run as one of several processes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

WORKER = Path(__file__).with_name("_ddp_worker.py")


def _worker():
    found = importlib.util.spec_from_file_location("twa_ddp_worker", WORKER)
    mod = importlib.util.module_from_spec(found)
    found.loader.exec_module(mod)
    return mod


def _train(tmp_path, rows, batch, ga, **twa_loss_kwargs):
    from icml25.twa import TWAHFTrainer

    w = _worker()
    tok, model = w.build("causal")
    args = TWAHFTrainer.default_args(
        str(tmp_path / f"{batch}x{ga}"),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=ga,
        max_steps=len(rows) // (batch * ga),
        learning_rate=1e-3,
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
        train_sampling_strategy="sequential",
    )
    tr = TWAHFTrainer(
        model=model,
        args=args,
        train_dataset=rows,
        processing_class=tok,
        twa_loss_kwargs=twa_loss_kwargs,
    )
    tr.train()
    return [x["loss"] for x in tr.state.log_history if "loss" in x], model


@pytest.mark.parametrize("model_type", ["causal", "seq2seq"])
def test_the_denominator_is_the_count_the_loss_divides_by(model_type):
    from icml25.twa import TWACollator, twa_loss_on_batch
    from icml25.twa.collate import twa_loss_denominator

    w = _worker()
    tok, model = w.build(model_type)
    batch = TWACollator(tok, model_type=model_type)(w.rows(1))
    with torch.no_grad():
        total = twa_loss_on_batch(model, batch, model_type=model_type, reduction="sum")
        for reduction in ("token_mean", "seq_mean", "sum"):
            n = twa_loss_denominator(batch, model_type=model_type, reduction=reduction)
            mean = twa_loss_on_batch(model, batch, model_type=model_type, reduction=reduction)
            assert float(total.loss) / n == pytest.approx(float(mean.loss), rel=1e-12)
    tokens = twa_loss_denominator(batch, model_type=model_type)
    assert tokens == total.n_positive + total.n_span_tokens
    assert twa_loss_denominator(batch, model_type=model_type, reduction="seq_mean") == 4
    with pytest.raises(ValueError, match="reduction must be one of"):
        twa_loss_denominator(batch, model_type=model_type, reduction="mean")


@pytest.mark.parametrize("reduction", ["token_mean", "seq_mean", "sum"])
def test_gradient_accumulation_equals_one_batch_twice_as_large(tmp_path, reduction):
    """Accumulating 2 micro-batches of 2 rows (2 and 8-9 scored tokens per row) trains as one
    batch of 4: a per-micro-batch token mean would weight the short rows' tokens ~4x (and fail)."""
    rows = _worker().rows(2)
    big_losses, big = _train(tmp_path, rows, 4, 1, reduction=reduction)
    acc_losses, acc = _train(tmp_path, rows, 2, 2, reduction=reduction)
    assert acc_losses == pytest.approx(big_losses, rel=1e-6)  # the log is float32
    init = _worker().build("causal")[1]
    moved = max(
        float((p - q).detach().abs().max()) for p, q in zip(big.parameters(), init.parameters())
    )
    assert moved > 1e-3
    for (n, p), q in zip(big.named_parameters(), acc.parameters()):
        assert torch.allclose(p, q, rtol=0, atol=1e-12), n


def test_a_step_where_no_token_is_scored_has_loss_zero(tmp_path):
    """Only source-side (unlocalizable) errors with unlocalized="no_positive": no token of the
    step gets a loss, the step's loss is 0 and the weights stay (not 0 / 0)."""
    from icml25.twa import AnnotatedTranslation, ErrorSpan

    rows = [AnnotatedTranslation("s1 s2", "t1 t2", [ErrorSpan(0, 2, "Major", side="source")])] * 4
    losses, model = _train(tmp_path, rows, 2, 2)
    init = _worker().build("causal")[1]
    assert losses == [0.0]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), init.parameters()))


def test_train_twa_refuses_to_run_as_one_of_several_processes(monkeypatch):
    from icml25.twa import TWAConfig, TWAHFTrainer, train_twa

    w = _worker()
    tok, model = w.build("causal")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(
        RuntimeError, match=r"single-process loop.*one of 2 processes.*TWAHFTrainer"
    ):
        train_twa(model, tok, w.rows(1), TWAConfig(batch_size=2, max_steps=1))
    monkeypatch.setenv("WORLD_SIZE", "1")
    hist = train_twa(model, tok, w.rows(1), TWAConfig(batch_size=2, max_steps=1), progress=False)
    assert len(hist.steps) == 1
    with pytest.raises(ValueError, match=r"twa_loss_kwargs\['reduction'\] must be one of"):
        TWAHFTrainer(
            model=model,
            processing_class=tok,
            train_dataset=w.rows(1),
            twa_loss_kwargs={"reduction": "mean"},
        )
    with pytest.raises(ValueError, match=r"unknown keys \['reducton'\]; valid: 'unlikelihood'"):
        TWAHFTrainer(
            model=model,
            processing_class=tok,
            train_dataset=w.rows(1),
            twa_loss_kwargs={"reducton": "sum"},
        )


@pytest.mark.slow
def test_two_gloo_processes_equal_one_process(ranks):
    """torchrun with 2 gloo processes x 2 rows equals 1 process x 4 rows and 1 process x 2 rows
    x 2 accumulated micro-batches, for a tiny causal Llama and a tiny T5 (float64, dropout 0):
    the logged losses of 3 steps, the trained weights on both ranks, and the checkpoint that
    ``trainer.save_model`` wrote on rank 0 (it reloads to the trained weights). Rank 0's rows
    have 4-8 scored tokens per step, rank 1's 15-47: a per-rank token mean would move the
    losses by ~0.3 and the weights by ~6e-3."""
    from safetensors.torch import load_file

    (one,) = ranks(WORKER, "3", "4:1,2:2", "causal,seq2seq", nproc=1)
    two = ranks(WORKER, "3", "2:1", "causal,seq2seq", nproc=2)
    for arch in ("causal", "seq2seq"):
        ref = one[f"{arch}-4x1"]
        want = torch.load(Path(one["out"]) / f"params-{arch}-4x1-rank0.pt")
        assert len(ref["losses"]) == 3 and ref["moved"] > 1e-3 and ref["reload_max_diff"] == 0
        d0, d1 = two[0][f"{arch}-2x1"]["denominators"], two[1][f"{arch}-2x1"]["denominators"]
        assert all(3 * a < b for a, b in zip(d0, d1))  # unequal token counts per rank
        assert [a + b for a, b in zip(d0, d1)] == ref["denominators"]
        runs = [(one, f"{arch}-2x2", 0)] + [(two[r], f"{arch}-2x1", r) for r in (0, 1)]
        for res, name, r in runs:
            assert res[name]["losses"] == pytest.approx(ref["losses"], rel=1e-6), (name, r)
            got = torch.load(Path(res["out"]) / f"params-{name}-rank{r}.pt")
            for n, p in want.items():
                assert torch.allclose(got[n], p, rtol=0, atol=1e-10), (name, r, n)
        assert two[0][f"{arch}-2x1"]["reload_max_diff"] == 0
        saved = load_file(Path(two[0]["out"]) / f"model-{arch}-2x1" / "model.safetensors")
        assert set(want) <= set(saved)
        assert all(torch.allclose(saved[n], want[n], rtol=0, atol=1e-10) for n in want)
    for rec in two:  # the plain loop refuses, before and after the process group is set up
        for key in ("guard_env", "guard_group"):
            assert "single-process loop" in rec[key] and "TWAHFTrainer" in rec[key], rec[key]


def test_train_dpo_refuses_to_run_as_one_of_several_processes(monkeypatch):
    from icml25.twa import train_dpo

    w = _worker()
    tok, model = w.build("causal")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match=r"train_dpo is a single-process loop.*trl.DPOTrainer"):
        train_dpo(model, model, tok, [{"prompt": "a =", "chosen": "b", "rejected": "c"}])
