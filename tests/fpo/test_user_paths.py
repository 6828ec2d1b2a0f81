"""What a new user ran into first (review of the first version): each case fixed and pinned."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from icml25.fpo import (
    PreferenceCollator,
    PreferenceConfig,
    build_reference_cache,
    harvest_activations,
    train_preference,
    train_sae,
)
from icml25.fpo.logps import response_logps
from icml25.fpo.losses import feature_discrepancy, pool_codes
from icml25.fpo.metrics import sequential_kl, token_entropy, win_rate
from icml25.fpo.sae import sae_metrics
from icml25.preference import load_preferences


def _gpt2_with_dropout(tok):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(3)
    return GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=2, n_head=2, n_positions=64)
    ).eval()  # dropouts 0.1 by default


def test_dropout_is_off_so_step_one_is_log2(toy):
    tok, _, recs = toy
    ref = _gpt2_with_dropout(tok)
    pol = copy.deepcopy(ref)
    h = train_preference(
        pol,
        tok,
        recs[:8],
        PreferenceConfig(method="dpo", lr=1e-9, batch_size=8, progress=False),
        ref_model=ref,
    )
    assert h.steps[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    # dropout is off for the forwards only (eval mode inside the step); the model is not mutated
    assert all(m.p == 0.1 for m in pol.modules() if isinstance(m, torch.nn.Dropout))


def test_harvest_is_padding_invariant_on_absolute_positions(toy):
    tok, _, recs = toy
    model = _gpt2_with_dropout(tok)
    a = [
        harvest_activations(model, [PreferenceCollator(tok, padding_side=s)(recs[:6])], layer=0)
        for s in ("right", "left")
    ]
    assert torch.allclose(a[0], a[1], atol=1e-5)


def test_sequential_kl_runs_in_eval_mode(toy):
    tok, _, recs = toy
    model = _gpt2_with_dropout(tok).train()
    kl = sequential_kl(model, model, PreferenceCollator(tok)(recs[:4]))
    assert float(kl.abs().max()) < 1e-6 and model.training


def test_token_entropy_renders_prompts_as_given(toy):
    tok, model, _ = toy
    plain = token_entropy(model, tok, ["a b c"], ["c b a"])
    chat = token_entropy(model, tok, [[{"role": "user", "content": "a b c"}]], ["c b a"])
    assert math.isfinite(plain) and math.isfinite(chat) and plain != chat


def test_checkpoint_of_other_data_is_refused(toy, toy_sae, tmp_path):
    tok, model, recs = toy
    cfg = PreferenceConfig(method="simpo", batch_size=8, lr=1e-4, progress=False)
    ck = tmp_path / "ck.pt"
    train_preference(copy.deepcopy(model), tok, recs[:8], cfg, checkpoint=ck)
    with pytest.raises(RuntimeError, match="written for other training data"):
        train_preference(copy.deepcopy(model), tok, recs[8:16], cfg, checkpoint=ck)


def test_reference_must_not_be_the_policy_and_cache_must_match_it(toy, toy_sae):
    tok, model, recs = toy
    pol = copy.deepcopy(model)
    with pytest.raises(ValueError, match="ref_model is the policy itself"):
        train_preference(pol, tok, recs, PreferenceConfig(method="tdpo2"), ref_model=pol)
    col = PreferenceCollator(tok, max_length=1024, max_prompt_length=512)
    cache = build_reference_cache(model, toy_sae, recs, layer=1, collator=col, progress=False)
    with pytest.raises(RuntimeError, match="model_fingerprint"):
        train_preference(
            pol,
            tok,
            recs,
            PreferenceConfig(layer=1, k=8),
            sae=toy_sae,
            ref_cache=cache,
            ref_model=_gpt2_with_dropout(tok),
        )


def test_negative_layer_and_k_clamped_once(toy, toy_sae):
    tok, model, recs = toy
    cfg = PreferenceConfig(layer=-1, k=500, batch_size=8, lr=1e-4, progress=False)
    with pytest.warns(UserWarning, match="k=500 exceeds") as rec:
        h = train_preference(copy.deepcopy(model), tok, recs, cfg, sae=toy_sae, ref_model=model)
    assert sum("exceeds" in str(w.message) for w in rec) == 1 and len(h.step_seconds) == 3


def test_unused_hyperparameters_warn():
    with pytest.warns(UserWarning, match=r"method 'dpo' does not use \['alpha'\]"):
        PreferenceConfig(method="dpo", alpha=0.5)


def test_nan_error_names_the_step_and_the_model(toy, toy_sae):
    tok, model, recs = toy
    bad = copy.deepcopy(model)
    with torch.no_grad():
        bad.lm_head.weight.fill_(float("nan"))
    with pytest.raises(FloatingPointError, match=r"step 1 .*policy's logits"):
        train_preference(
            bad, tok, recs[:8], PreferenceConfig(method="simpo", batch_size=8, progress=False)
        )
    with pytest.raises(FloatingPointError, match="reference model's logits"):
        train_preference(
            copy.deepcopy(model),
            tok,
            recs[:8],
            PreferenceConfig(method="tdpo2", batch_size=8, progress=False),
            ref_model=bad,
        )


def test_win_rate_refuses_nan():
    with pytest.raises(ValueError, match="scores_a holds NaN at item 1"):
        win_rate([1.0, float("nan")], [0.0, 0.0])


def test_datasetdict_dataframe_and_bad_containers(toy):
    tok, model, recs = toy
    plain = [r for r in recs if isinstance(r["prompt"], str)][:4]
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(plain)})
    assert load_preferences(dd) == plain
    with pytest.raises(ValueError, match="split 'test' is not in the DatasetDict"):
        load_preferences(dd, split="test")
    pd = pytest.importorskip("pandas")
    assert load_preferences(pd.DataFrame(plain)) == plain
    with pytest.raises(TypeError, match="dict of columns"):
        load_preferences({c: [r[c] for r in plain] for c in ("prompt", "chosen", "rejected")})
    with pytest.raises(TypeError, match="must be a dict with keys"):
        load_preferences([("a", "b", "c")])
    with pytest.raises(TypeError, match="takes a LIST of records"):
        PreferenceCollator(tok)(plain[0])
    with pytest.raises(TypeError, match="must be a collated batch"):
        harvest_activations(model, plain, layer=0)


def test_numpy_inputs_get_type_errors(toy_sae):
    import numpy as np

    x = np.zeros((30, 32), dtype=np.float32)
    with pytest.raises(TypeError, match="acts must be a torch tensor"):
        sae_metrics(toy_sae, x)
    with pytest.raises(TypeError, match="acts must be a torch tensor"):
        train_sae(x, d_sae=8)
    with pytest.raises(TypeError, match="logits must be a torch tensor, got ndarray"):
        response_logps(np.zeros((1, 3, 5)), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="codes must be a torch tensor"):
        pool_codes(np.zeros((1, 2, 3)), torch.ones(1, 2))
    with pytest.raises(TypeError, match=r"pol codes must be a torch tensor \(B, m\), got list"):
        feature_discrepancy([[1.0, 0.0]], torch.zeros(1, 2), 1)


def test_fpo_trainer_rebuilds_a_cache_of_another_reference(toy, toy_sae, tmp_path):
    trl = pytest.importorskip("trl")
    from icml25.fpo import FPOTrainer, ReferenceCache

    tok, model, recs = toy
    rows = [
        {k: r[k] for k in ("prompt", "chosen", "rejected")}
        for r in recs
        if isinstance(r["prompt"], list)
    ]
    args = trl.DPOConfig(
        str(tmp_path / "o"),
        precompute_ref_log_probs=True,
        bf16=False,
        use_cpu=True,
        report_to=[],
        max_steps=1,
        per_device_train_batch_size=4,
    )
    path = tmp_path / "c.safetensors"
    FPOTrainer(
        copy.deepcopy(model),
        args=args,
        train_dataset=rows,
        processing_class=tok,
        sae=toy_sae,
        layer=1,
        ref_cache_path=path,
    )  # a list works too
    first = ReferenceCache.load(path).tensors["codes_w_values"].clone()
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    with pytest.warns(UserWarning, match="does not match this run"):
        FPOTrainer(
            other,
            args=args,
            train_dataset=rows,
            processing_class=tok,
            sae=toy_sae,
            layer=1,
            ref_cache_path=path,
        )
    again = ReferenceCache.load(path).tensors["codes_w_values"]
    assert again.shape != first.shape or not torch.equal(again, first)
