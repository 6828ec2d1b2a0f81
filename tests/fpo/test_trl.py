"""FPOTrainer (a TRL DPOTrainer) on a tiny random-init Llama, and our losses against TRL's."""

from __future__ import annotations

import copy

import pytest
import torch

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")


@pytest.fixture
def setup(toy, toy_sae, tmp_path):
    tok, model, recs = toy
    ds = datasets.Dataset.from_list(
        [
            {k: r[k] for k in ("prompt", "chosen", "rejected")}
            for r in recs
            if isinstance(r["prompt"], list)
        ]
    )
    return tok, model, ds, toy_sae, tmp_path


def _args(tmp_path, **kw):
    base = dict(
        precompute_ref_log_probs=True,
        bf16=False,
        per_device_train_batch_size=4,
        max_steps=3,
        report_to=[],
        logging_steps=1,
        learning_rate=1e-3,
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
    )
    return trl.DPOConfig(str(tmp_path / "out"), **{**base, **kw})


def _first_batch(trainer):
    return next(iter(trainer.get_train_dataloader()))


def test_fpo_trainer_trains_with_checkpointing_and_reuses_its_cache(setup):
    from icml25.fpo import FPOTrainer, ReferenceCache

    tok, model, ds, sae, tmp = setup
    pol = copy.deepcopy(model)
    path = tmp / "codes.safetensors"
    tr = FPOTrainer(
        pol,
        args=_args(tmp, gradient_checkpointing=True),
        train_dataset=ds,
        processing_class=tok,
        sae=sae,
        layer=1,
        k=8,
        ref_cache_path=path,
    )
    tr.train()
    logs = [x for x in tr.state.log_history if "loss" in x]
    assert len(logs) == 3 and all("fpo/d_rejected" in x for x in logs)
    assert logs[0]["fpo/d_rejected"] < 1e-8  # step 1: the policy is the reference
    assert any(not torch.equal(a, b) for a, b in zip(pol.parameters(), model.parameters()))
    assert path.is_file() and len(ReferenceCache.load(path)) == len(ds)
    tr2 = FPOTrainer(
        copy.deepcopy(model),
        args=_args(tmp),
        train_dataset=ds,
        processing_class=tok,
        sae=sae,
        layer=1,
        k=8,
        ref_cache_path=path,
    )
    assert torch.equal(
        tr2.fpo_cache.tensors["codes_w_values"], ReferenceCache.load(path).tensors["codes_w_values"]
    )


def test_fpo_alpha0_equals_trl_sigmoid_norm_and_dpo_equals_trl_sigmoid(setup):
    from icml25.fpo import FPOTrainer, dpo_loss
    from icml25.fpo.forward import preference_pass

    tok, model, ds, sae, tmp = setup
    pol = copy.deepcopy(model)
    with torch.no_grad():
        for p in pol.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    ref = copy.deepcopy(model)
    fpo = FPOTrainer(
        pol,
        ref_model=ref,
        args=_args(tmp),
        train_dataset=ds,
        processing_class=tok,
        sae=sae,
        layer=1,
        k=8,
        fpo_alpha=0.0,
    )
    norm = trl.DPOTrainer(
        pol,
        ref_model=ref,
        args=_args(tmp, loss_type=["sigmoid_norm"]),
        train_dataset=ds,
        processing_class=tok,
    )
    sig = trl.DPOTrainer(
        pol, ref_model=ref, args=_args(tmp), train_dataset=ds, processing_class=tok
    )
    b_fpo, b_norm, b_sig = _first_batch(fpo), _first_batch(norm), _first_batch(sig)
    with torch.no_grad():
        l_fpo = fpo.compute_loss(pol, dict(b_fpo))
        l_norm = norm.compute_loss(pol, dict(b_norm))
        l_sig = sig.compute_loss(pol, dict(b_sig))
        batch = {
            "input_ids": b_sig["input_ids"],
            "attention_mask": b_sig["attention_mask"],
            "labels": b_sig["input_ids"].masked_fill(b_sig["completion_mask"] == 0, -100),
        }
        s = preference_pass(pol, batch).halves("sum")
        ours = dpo_loss(*s, b_sig["ref_chosen_logps"], b_sig["ref_rejected_logps"], 0.1)[0]
    assert abs(float(l_fpo) - float(l_norm)) < 1e-6
    assert abs(float(ours) - float(l_sig)) < 1e-5
    assert abs(float(l_sig) - float(l_norm)) > 1e-6  # the two TRL losses differ: the test can fail


def test_simpo_equals_trl_cpo_simpo(setup):
    cpo = pytest.importorskip("trl.experimental.cpo")
    from icml25.fpo import simpo_loss

    tok, model, ds, _, tmp = setup
    pol = copy.deepcopy(model)
    args = cpo.CPOConfig(
        str(tmp / "cpo"),
        loss_type="simpo",
        cpo_alpha=0.0,
        simpo_gamma=0.5,
        beta=2.0,
        bf16=False,
        report_to=[],
        use_cpu=True,
        per_device_train_batch_size=4,
        max_length=64,
    )
    tr = cpo.CPOTrainer(pol, args=args, train_dataset=ds, processing_class=tok)
    b = _first_batch(tr)
    with torch.no_grad():
        out = tr.concatenated_forward(pol, b)
        n = len(b["chosen_input_ids"])
        trl_losses = tr.cpo_loss(out[0], out[1])[0]
    ours = simpo_loss(out[0], out[1], beta=2.0, gamma=0.5)[1]
    assert out[0].shape == (n,)
    assert torch.allclose(ours, trl_losses.float(), atol=1e-6)


def test_fpo_trainer_bad_input(setup):
    from icml25.fpo import FPOTrainer, SparseAutoencoder

    tok, model, ds, sae, tmp = setup
    with pytest.raises(ValueError, match="precompute_ref_log_probs=True"):
        FPOTrainer(
            model,
            args=_args(tmp, precompute_ref_log_probs=False),
            train_dataset=ds,
            processing_class=tok,
            sae=sae,
            layer=1,
        )
    with pytest.raises(ValueError, match="layer 7 is out of range"):
        FPOTrainer(model, args=_args(tmp), train_dataset=ds, processing_class=tok, sae=sae, layer=7)
    with pytest.raises(ValueError, match="d_in=8 differs from the model's hidden size 32"):
        FPOTrainer(
            model,
            args=_args(tmp),
            train_dataset=ds,
            processing_class=tok,
            sae=SparseAutoencoder(8, 16),
            layer=1,
        )
    with pytest.raises(TypeError, match="sae must be an icml25.fpo.SparseAutoencoder"):
        FPOTrainer(
            model, args=_args(tmp), train_dataset=ds, processing_class=tok, sae=None, layer=1
        )


def test_train_preference_refuses_to_run_as_one_of_several_processes(setup, monkeypatch):
    """Under torchrun every process would train the same batches: a clear error naming the
    data-parallel entry point (the 2-process worker checks it under a real launch too)."""
    from icml25.fpo import PreferenceConfig, train_preference

    tok, model, ds, _, _ = setup
    pol = copy.deepcopy(model)
    before = [p.detach().clone() for p in pol.parameters()]
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match=r"single-process loop.*one of 2 processes.*FPOTrainer"):
        train_preference(pol, tok, ds, PreferenceConfig(method="simpo", batch_size=4))
    assert all(torch.equal(a, b) for a, b in zip(before, pol.parameters()))
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process: it trains
    hist = train_preference(pol, tok, ds, PreferenceConfig(method="simpo", batch_size=4, lr=1e-3))
    assert hist.steps and any(not torch.equal(a, b) for a, b in zip(before, pol.parameters()))


@pytest.mark.slow
def test_fpo_trainer_two_gloo_processes_equal_one_process(ranks):
    """FPOTrainer under torchrun with 2 gloo processes x 4 pairs equals 1 process x 8 pairs:
    the logged losses of 3 steps, the trained weights on both ranks, and the checkpoint that
    ``trainer.save_model`` wrote on rank 0 (it reloads to the trained weights). Both the
    records held in memory (a list) and a ``datasets`` folder. Each rank looks up its own pairs'
    precomputed reference log-probs and SAE codes (keyed by content), the values of the
    one-process run; the pairs' reference values all differ (another rank's rows would change
    the loss: reading rank 0's rows on rank 1 moves the losses by ~3e-3)."""
    from pathlib import Path

    from safetensors.torch import load_file

    worker = Path(__file__).with_name("_ddp_worker.py")
    (one,) = ranks(worker, "8", "3", "list", nproc=1)
    two = ranks(worker, "4", "3", "list,disk", nproc=2)
    want = torch.load(Path(one["out"]) / "params-list-rank0.pt")
    losses = one["list"]["losses"]
    assert len(losses) == 3 and one["list"]["moved"] > 1e-3  # training moved the weights
    assert one["list"]["reload_max_diff"] == 0.0
    seen = one["list"]["seen"]
    refs = [v[0] for step in seen for v in step.values()]
    assert len(refs) == 24 and len({round(v, 4) for v in refs}) > 20  # values differ per pair
    for source in ("list", "disk"):
        for r, rec in enumerate(two):
            assert rec["world"] == 2
            assert rec[source]["losses"] == pytest.approx(losses, rel=1e-5, abs=0), (source, r)
            got = torch.load(Path(rec["out"]) / f"params-{source}-rank{r}.pt")
            for n, p in want.items():
                assert torch.allclose(got[n], p, rtol=0, atol=5e-6), (source, r, n)
        assert two[0][source]["reload_max_diff"] == 0.0
        saved = load_file(Path(two[0]["out"]) / f"model-{source}" / "model.safetensors")
        assert saved and all(torch.allclose(saved[n], want[n], rtol=0, atol=5e-6) for n in saved)
        for step, expect in enumerate(seen):
            r0, r1 = two[0][source]["seen"][step], two[1][source]["seen"][step]
            assert len(r0) == len(r1) == 4 and not set(r0) & set(r1)  # each rank its own pairs
            got = {**r0, **r1}
            assert got.keys() == expect.keys()
            for k, v in expect.items():
                assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-6), (source, step, k)
    for rec in two:  # the plain loop refuses to run duplicated, before and after DDP set-up
        for key in ("guard_env", "guard_group"):
            assert "single-process loop" in rec[key] and "FPOTrainer" in rec[key], rec[key]
