"""Collator, offline reference cache, the training loop and its promises."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from icml25.fpo import (
    PreferenceCollator,
    PreferenceConfig,
    ReferenceCache,
    build_reference_cache,
    fpo_loss,
    train_preference,
)
from icml25.fpo.forward import preference_pass
from icml25.preference import load_preferences


def test_collator_masks_prompt_and_padding(toy):
    tok, _, recs = toy
    b = PreferenceCollator(tok)(recs[:3])
    assert b["input_ids"].shape[0] == 6 and b["index"].tolist() == [0, 1, 2]
    lab, comp = b["labels"], b["completion_mask"]
    assert bool(((lab != -100) == comp.bool()).all())
    # every response ends with the end-of-turn / EOS token
    for r in range(6):
        last = int(comp[r].nonzero()[-1])
        assert int(b["input_ids"][r, last]) == tok.eos_token_id
    # chosen (rows 0-2) and rejected (rows 3-5) share each pair's prompt
    for i in range(3):
        p = int((comp[i] == 0).logical_and(b["attention_mask"][i] == 1).sum())
        assert torch.equal(b["input_ids"][i, :p], b["input_ids"][i + 3, :p])


def test_collator_truncation_and_empty_response(toy):
    tok, _, _ = toy
    long = {"prompt": " ".join(["a"] * 30), "chosen": "b c", "rejected": "c"}
    col = PreferenceCollator(tok, max_length=12, max_prompt_length=8)
    b = col([long])
    ids = b["input_ids"][0][b["attention_mask"][0].bool()].tolist()
    assert len(ids) <= 12 and tok.convert_ids_to_tokens(ids[:1]) == ["▁a"]  # prompt kept its end
    from icml25.fpo.logps import response_logps

    labels = torch.tensor([[-100, 3, 4], [-100, -100, -100]])
    with pytest.raises(ValueError, match="example 1 of the batch has an empty response"):
        response_logps(torch.zeros(2, 3, 10), labels)
    with pytest.raises(ValueError, match=r"lacks \['rejected'\]"):
        col([{"prompt": "a", "chosen": "b"}])
    with pytest.raises(ValueError, match="max_prompt_length=8 must be below max_length=8"):
        PreferenceCollator(tok, max_length=8, max_prompt_length=8)


def test_left_and_right_padding_give_identical_losses(toy, toy_sae):
    tok, model, recs = toy
    outs = []
    for side in ("right", "left"):
        b = PreferenceCollator(tok, padding_side=side)(recs[:6])
        with torch.no_grad():
            outs.append(preference_pass(model, b, sae=toy_sae, layer=1))
    assert torch.allclose(outs[0].sum, outs[1].sum, atol=1e-5)
    assert torch.allclose(outs[0].codes, outs[1].codes, atol=1e-5)


def test_prompt_and_pad_tokens_do_not_change_response_quantities(toy, toy_sae):
    tok, model, recs = toy
    b = PreferenceCollator(tok)(recs[:4])
    with torch.no_grad():
        base = preference_pass(model, b, sae=toy_sae, layer=1)
        b2 = dict(b)
        ids = b["input_ids"].clone()
        ids[b["attention_mask"] == 0] = 7  # other pad ids: masked out by attention
        b2["input_ids"] = ids
        other = preference_pass(model, b2, sae=toy_sae, layer=1)
    assert torch.allclose(base.sum, other.sum, atol=1e-5)
    assert torch.allclose(base.codes, other.codes, atol=1e-5)


def _gpt2(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(1)
    return GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=64)
    ).eval()


@pytest.mark.parametrize("topk", [None, 4])
def test_offline_cache_equals_online_reference(toy, toy_sae, tmp_path, topk):
    tok, _, recs = toy
    ref = _gpt2(tok)
    policy = copy.deepcopy(ref)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    col = PreferenceCollator(tok)
    cache = build_reference_cache(
        ref, toy_sae, recs, layer=1, collator=col, batch_size=5, cache_topk=topk, progress=False
    )
    cache.save(tmp_path / "ref.safetensors")
    cache = ReferenceCache.load(tmp_path / "ref.safetensors")
    b = col([dict(r, idx=i) for i, r in enumerate(recs[:8])])
    with torch.no_grad():
        pol = preference_pass(policy, b, sae=toy_sae, layer=1)
        live = preference_pass(ref, b, sae=toy_sae, layer=1)
    c = cache.batch(b["index"], fingerprints=b["fingerprint"])
    (mw, ml), (cw, cl) = pol.halves("mean"), pol.halves("codes")
    online = fpo_loss(mw, ml, *live.halves("mean"), cw, cl, *live.halves("codes"), k=8)
    offline = fpo_loss(
        mw, ml, c["ref_mean_w"], c["ref_mean_l"], cw, cl, c["ref_codes_w"], c["ref_codes_l"], k=8
    )
    if topk is None:  # exact: every non-zero kept
        assert abs(float(online.loss) - float(offline.loss)) < 1e-5
        assert torch.allclose(c["ref_codes_w"], live.halves("codes")[0], atol=1e-6)
    else:  # the paper's top-k storage: at most k non-zeros per response
        assert int((c["ref_codes_w"] > 0).sum(-1).max()) <= topk
    assert torch.allclose(c["ref_sum_w"], live.halves("sum")[0], atol=1e-5)


def test_cache_fingerprint_and_compatibility_errors(toy, toy_sae):
    tok, model, recs = toy
    col = PreferenceCollator(tok)
    cache = build_reference_cache(model, toy_sae, recs[:6], layer=1, collator=col, progress=False)
    edited = [dict(r) for r in recs[:6]]
    edited[2] = {"prompt": "a b c", "chosen": "c b a", "rejected": "c b"}
    b = col([dict(r, idx=i) for i, r in enumerate(edited)])
    with pytest.raises(RuntimeError, match="reference cache mismatch at pair index 2"):
        cache.batch(b["index"], fingerprints=b["fingerprint"])
    with pytest.raises(RuntimeError, match="built with layer=1"):
        cache.check_compatible(layer=0)
    with pytest.raises(RuntimeError, match="built with pool='mean'"):
        cache.check_compatible(pool="sum")
    with pytest.raises(RuntimeError, match="pair index 99 is not in the reference cache"):
        cache.batch([99])
    with pytest.raises(ValueError, match="pair index must be an integer, got 0.5"):
        cache.batch([0.5])
    other = copy.deepcopy(model)
    with torch.no_grad():
        next(other.parameters()).add_(0.01)
    with pytest.raises(RuntimeError, match="built with model_fingerprint="):
        cache.check_compatible(model=other)
    cache.check_compatible(model=model)  # the same reference passes


def test_training_promises(toy, toy_sae, tmp_path):
    """One forward per FPO step, two per TDPO-2 step; FPO needs an SAE; layer range; resume."""
    tok, model, recs = toy
    seen = {}
    for method in ("fpo", "tdpo2", "dpo", "simpo", "sft", "tdpo1"):
        pol = copy.deepcopy(model)
        cfg = PreferenceConfig(
            method=method, layer=1, k=8, lr=1e-3, batch_size=8, warmup_steps=2, progress=False
        )
        h = train_preference(pol, tok, recs, cfg, sae=toy_sae, ref_model=model)
        seen[method] = h.forwards_per_step
        assert len(h.step_seconds) == 3 and all(
            torch.isfinite(torch.tensor(s["loss"])) for s in h.steps
        )
        moved = any(not torch.equal(a, b) for a, b in zip(pol.parameters(), model.parameters()))
        assert moved, method
    assert seen["fpo"] == 1 and seen["tdpo2"] == 2 and seen["simpo"] == 1 and seen["dpo"] == 1
    with pytest.raises(ValueError, match="FPO needs an SAE"):
        train_preference(
            copy.deepcopy(model), tok, recs, PreferenceConfig(layer=1), ref_model=model
        )
    with pytest.raises(ValueError, match="layer 5 is out of range"):
        train_preference(
            copy.deepcopy(model), tok, recs, PreferenceConfig(layer=5), sae=toy_sae, ref_model=model
        )
    with pytest.raises(ValueError, match="needs ref_cache= or ref_model="):
        train_preference(copy.deepcopy(model), tok, recs, PreferenceConfig(layer=1), sae=toy_sae)
    from icml25.fpo import SparseAutoencoder

    with pytest.raises(ValueError, match="SAE's d_in=16 differs from the model's hidden size 32"):
        train_preference(
            copy.deepcopy(model),
            tok,
            recs,
            PreferenceConfig(layer=1),
            sae=SparseAutoencoder(16, 32),
            ref_model=model,
        )


def test_checkpoint_resume_equals_uninterrupted(toy, toy_sae, tmp_path):
    tok, model, recs = toy
    cfg = PreferenceConfig(
        method="fpo", layer=1, k=8, lr=1e-3, batch_size=4, warmup_steps=2, progress=False
    )
    full = copy.deepcopy(model)
    train_preference(full, tok, recs, cfg, sae=toy_sae, ref_model=model)

    class Stop(Exception):
        pass

    def crash(step, _m):
        if step == 4:
            raise Stop

    part = copy.deepcopy(model)
    ck = tmp_path / "run.pt"
    with pytest.raises(Stop):
        train_preference(
            part,
            tok,
            recs,
            cfg,
            sae=toy_sae,
            ref_model=model,
            checkpoint=ck,
            save_every=2,
            callback=crash,
        )
    resumed = copy.deepcopy(model)
    h = train_preference(
        resumed, tok, recs, cfg, sae=toy_sae, ref_model=model, checkpoint=ck, save_every=2
    )
    assert len(h.step_seconds) == 6  # 2 before the last checkpoint + 4 after
    for a, b in zip(full.parameters(), resumed.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_gradient_reaches_layers_below_through_the_feature_term(toy, toy_sae):
    """With α > 0 and all log-prob terms cancelled, block 0 still gets gradient from D_FPO(y_l),
    with activation checkpointing on too; block 1's MLP output (above the hook) gets none."""
    tok, model, recs = toy
    col = PreferenceCollator(tok)
    b = col(recs[:4])
    for ckpt in (False, True):
        pol = copy.deepcopy(model).train()
        if ckpt:
            pol.gradient_checkpointing_enable({"use_reentrant": False})
        out = preference_pass(pol, b, sae=toy_sae, layer=0)
        with torch.no_grad():
            ref = preference_pass(model, b, sae=toy_sae, layer=0)
        cw, cl = out.halves("codes")
        rw, rl = ref.halves("codes")
        z = torch.zeros(4)
        o = fpo_loss(z, z, z, z, cw, cl, rw, rl * 0 + 0.3, k=8, alpha=1.0)
        o.loss.backward()
        g0 = pol.model.layers[0].self_attn.q_proj.weight.grad
        g1 = pol.model.layers[1].mlp.down_proj.weight.grad
        assert g0 is not None and float(g0.abs().sum()) > 0
        assert g1 is None or float(g1.abs().sum()) == 0


def test_nan_logits_raise_floating_point_error(toy, toy_sae):
    tok, model, recs = toy
    bad = copy.deepcopy(model)
    with torch.no_grad():
        bad.lm_head.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match="NaN or inf in the model's logits"):
        preference_pass(bad, PreferenceCollator(tok)(recs[:2]), sae=toy_sae, layer=1)


def test_identical_pairs_warn(toy, toy_sae):
    tok, model, recs = toy
    same = [dict(r, rejected=r["chosen"]) for r in recs[:4]] + recs[4:8]
    with pytest.warns(UserWarning, match="4 of 8 pairs have identical"):
        train_preference(
            copy.deepcopy(model),
            tok,
            same,
            PreferenceConfig(method="simpo", batch_size=8, lr=1e-4, progress=False),
        )


def test_config_defaults_follow_table5_and_bad_values():
    assert (PreferenceConfig().beta, PreferenceConfig().alpha, PreferenceConfig().k) == (
        0.1,
        0.5,
        50,
    )
    s = PreferenceConfig(method="simpo")
    assert (s.beta, s.gamma) == (2.0, 0.5)
    off = PreferenceConfig(paper_mode=False)
    assert (off.site, off.index_mode, off.pool, off.needs_ref_model) == (
        "hf_hidden_states",
        "policy",
        "official",
        True,
    )
    with pytest.raises(ValueError, match="method must be one of"):
        PreferenceConfig(method="ppo")
    with pytest.raises(ValueError, match="beta must be a finite number > 0, got 0"):
        PreferenceConfig(beta=0)
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0, got -1"):
        PreferenceConfig(alpha=-1)
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        PreferenceConfig(k=0)


def test_config_choices_are_typed_as_the_values_they_accept(toy):
    """The ``Literal`` types of the configs' string choices list exactly what the checks accept."""
    from typing import get_args, get_type_hints

    from icml25.fpo.hooks import SITES
    from icml25.fpo.losses import INDEX_MODES, POOL_MODES
    from icml25.fpo.trainer import METHODS

    hints = get_type_hints(PreferenceConfig)
    assert get_args(hints["method"]) == METHODS
    assert get_args(hints["pool"]) == POOL_MODES
    assert get_args(hints["index_mode"]) == INDEX_MODES
    assert get_args(hints["site"]) == SITES
    for name in ("optimizer", "dtype"):
        for choice in get_args(hints[name]):
            assert getattr(PreferenceConfig(**{name: choice}), name) == choice
        with pytest.raises(ValueError, match=f"{name} must be"):
            PreferenceConfig(**{name: "other"})
    tok = toy[0]
    col_hints = get_type_hints(PreferenceCollator)
    # PreferenceConfig.truncation goes to the collator, which checks it
    assert get_args(hints["truncation"]) == get_args(col_hints["truncation"])
    for name in ("truncation", "padding_side"):
        for choice in get_args(col_hints[name]):
            assert getattr(PreferenceCollator(tok, **{name: choice}), name) == choice
        with pytest.raises(ValueError, match=f"{name} must be"):
            PreferenceCollator(tok, **{name: "other"})


def test_load_preferences_formats(tmp_path, toy):
    _, _, recs = toy
    plain = [r for r in recs if isinstance(r["prompt"], str)][:3]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in plain))
    assert load_preferences(tmp_path / "p.jsonl") == plain
    import csv

    with open(tmp_path / "p.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["prompt", "chosen", "rejected"])
        w.writeheader()
        w.writerows(plain)
    assert load_preferences(tmp_path / "p.csv") == plain
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(plain), tmp_path / "p.parquet")
    assert load_preferences(tmp_path / "p.parquet") == plain
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list(plain)
    ds.save_to_disk(tmp_path / "dsdir")
    assert load_preferences(tmp_path / "dsdir") == plain
    assert load_preferences(ds) == plain
    with pytest.raises(ValueError, match=r"preference record 0 lacks \['chosen', 'rejected'\]"):
        load_preferences([{"prompt": "a"}])
    with pytest.raises(FileNotFoundError):
        load_preferences(tmp_path / "none.jsonl")


def test_bf16_model_keeps_logps_codes_and_loss_in_float32(toy, toy_sae):
    tok, model, recs = toy
    bf = copy.deepcopy(model).to(torch.bfloat16)
    with torch.no_grad():
        out = preference_pass(bf, PreferenceCollator(tok)(recs[:4]), sae=toy_sae, layer=1)
    assert out.sum.dtype == torch.float32 and out.codes.dtype == torch.float32
    cfg = PreferenceConfig(method="fpo", layer=1, k=8, lr=1e-3, batch_size=8, progress=False)
    h = train_preference(bf, tok, recs[:8], cfg, sae=toy_sae, ref_model=model)
    assert h.steps and all(torch.isfinite(torch.tensor(s["loss"])) for s in h.steps)
    assert next(bf.parameters()).dtype == torch.float32  # float32 master weights (TRL/accelerate)


def test_reference_model_is_left_untouched(toy, toy_sae):
    tok, model, recs = toy
    before = [p.detach().clone() for p in model.parameters()]
    flags = [p.requires_grad for p in model.parameters()]
    for method in ("fpo", "tdpo2"):
        cfg = PreferenceConfig(method=method, layer=1, k=8, lr=1e-3, batch_size=8, progress=False)
        train_preference(copy.deepcopy(model), tok, recs[:8], cfg, sae=toy_sae, ref_model=model)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert flags == [p.requires_grad for p in model.parameters()] and not model.training
