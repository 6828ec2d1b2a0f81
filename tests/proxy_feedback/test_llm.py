"""The simplex bottleneck on a causal LM (Sec. 5 of arXiv:2412.16475): shapes, warm-up, which
tensors each DPO stage moves, padding, and the DPO loss against TRL's."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")

from icml25.proxy_feedback import SyntheticPreferenceWorld  # noqa: E402
from icml25.proxy_feedback.diagnosis import DiagnosisTask  # noqa: E402
from icml25.proxy_feedback.llm import (  # noqa: E402
    SimplexBottleneckLM,
    dpo_stage,
    encode_pairs,
    pair_logprobs,
    warmup_bottleneck,
)


@pytest.fixture(scope="module")
def toy():
    from icml25.toy import tiny_causal_lm

    task = DiagnosisTask(SyntheticPreferenceWorld())
    tok = task.tokenizer()
    base = tiny_causal_lm(tok, d_model=64, n_layers=2, n_heads=2, max_positions=16, seed=0)
    g = torch.Generator().manual_seed(0)
    texts = task.sft_texts(64, g)
    pairs = task.pairs(12, g, policy="expert", tokenizer=tok)
    return task, tok, base, texts, pairs


def test_logits_shape_and_probabilities(toy):
    _, tok, base, texts, _ = toy
    m = SimplexBottleneckLM(copy.deepcopy(base), bottleneck_dim=8)
    enc = tok(texts[:4], return_tensors="pt", padding=True)
    logits = m(enc["input_ids"], enc["attention_mask"])
    assert logits.shape == (4, enc["input_ids"].shape[1], len(tok))
    assert torch.allclose(
        torch.softmax(logits, -1).sum(-1), torch.ones(logits.shape[:2]), atol=1e-5
    )
    # the identity adapter is exact: with and without it the logits agree
    assert torch.allclose(
        logits, m(enc["input_ids"], enc["attention_mask"], use_adapter=False), atol=1e-5
    )


def test_warmup_reduces_the_kl_to_the_base_model_and_moves_only_the_bottleneck(toy):
    _, tok, base, texts, _ = toy
    m = SimplexBottleneckLM(copy.deepcopy(base), bottleneck_dim=8)
    body = {k: v.clone() for k, v in m.model.state_dict().items()}
    h = warmup_bottleneck(m, texts, 300, tokenizer=tok)
    assert h["kl"][-1] < 0.5 * h["kl"][0]
    assert 0 <= h["heldout_kl"] < h["kl"][0]
    assert all(torch.equal(body[k], v) for k, v in m.model.state_dict().items())
    assert all(p.requires_grad for p in m.parameters())  # flags restored


def test_adapter_stage_moves_only_the_adapter_and_all_stage_keeps_it(toy):
    _, tok, base, _, pairs = toy
    m = SimplexBottleneckLM(copy.deepcopy(base), bottleneck_dim=4)
    ref = copy.deepcopy(m)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    h = dpo_stage(m, ref, pairs, tokenizer=tok, trainable="adapter", steps=1)
    changed = {k for k, v in m.state_dict().items() if not torch.equal(before[k], v)}
    assert changed == {"adapter.M", "adapter.b"} and abs(h["loss"][0] - 0.6931) < 1e-3
    before = {k: v.clone() for k, v in m.state_dict().items()}
    dpo_stage(m, ref, pairs, tokenizer=tok, trainable="all", steps=1, lr=1e-3)
    changed = {k for k, v in m.state_dict().items() if not torch.equal(before[k], v)}
    assert "adapter.M" not in changed and "W_tau" in changed and len(changed) > 5


def test_explicit_parameter_list_trains_exactly_those(toy):
    _, tok, base, _, pairs = toy
    m = SimplexBottleneckLM(copy.deepcopy(base), bottleneck_dim=4)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    dpo_stage(m, None, pairs, tokenizer=tok, trainable=[m.Theta], steps=2)
    changed = {k for k, v in m.state_dict().items() if not torch.equal(before[k], v)}
    assert changed == {"Theta"}
    with pytest.raises(ValueError, match="model's own parameters"):
        dpo_stage(m, None, pairs, tokenizer=tok, trainable=[nn.Parameter(torch.zeros(2))])


def test_padding_and_prompt_tokens_are_excluded(toy):
    _, tok, base, _, pairs = toy
    enc = encode_pairs(tok, pairs)
    n = len(pairs)
    assert enc["input_ids"].shape[0] == 2 * n
    # the response is the disease token and EOS; everything else is masked
    assert bool(((enc["labels"] != -100).sum(-1) == 2).all())
    one = encode_pairs(tok, pairs[:1])
    a = pair_logprobs(base, one)
    b = pair_logprobs(base, {k: v[[0, n]] for k, v in enc.items()})
    assert torch.allclose(a[0], b[0], atol=1e-5) and torch.allclose(a[1], b[1], atol=1e-5)


def test_bad_input(toy):
    _, tok, base, texts, pairs = toy
    with pytest.raises(ValueError, match="bottleneck_dim"):
        SimplexBottleneckLM(base, bottleneck_dim=1)
    with pytest.warns(UserWarning, match="no longer a bottleneck"):
        SimplexBottleneckLM(base, bottleneck_dim=32)  # vocabulary of 30 words
    with pytest.raises(TypeError, match="no output embeddings"):
        SimplexBottleneckLM(nn.Linear(3, 3))
    m = SimplexBottleneckLM(copy.deepcopy(base), bottleneck_dim=4)
    with pytest.raises(ValueError, match="trainable must be one of"):
        dpo_stage(m, None, pairs, tokenizer=tok, trainable="body")
    with pytest.raises(ValueError, match="beta must be a finite number > 0"):
        dpo_stage(m, None, pairs, tokenizer=tok, beta=0)
    with pytest.raises(ValueError, match="lacks"):
        dpo_stage(m, None, [{"prompt": "a", "chosen": "b"}], tokenizer=tok)
    with pytest.raises(TypeError, match="needs a SimplexBottleneckLM"):
        dpo_stage(base, None, pairs, tokenizer=tok, trainable="adapter")
    with pytest.raises(ValueError, match="non-empty list of strings"):
        warmup_bottleneck(m, [], 5, tokenizer=tok)


def test_dpo_stage_loss_equals_trls_sigmoid_dpo(toy, tmp_path):
    """The same batch and reference: our pair log-probs + sigmoid DPO = TRL's DPOTrainer loss."""
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from icml25.preference import dpo_loss

    _, tok, base, _, pairs = toy
    pol = copy.deepcopy(base)
    with torch.no_grad():
        for p in pol.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    ref = copy.deepcopy(base)
    recs = pairs[:4]
    args = trl.DPOConfig(
        str(tmp_path / "out"),
        precompute_ref_log_probs=True,
        bf16=False,
        per_device_train_batch_size=4,
        max_steps=1,
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
        beta=0.1,
    )
    trainer = trl.DPOTrainer(
        pol,
        ref_model=ref,
        args=args,
        train_dataset=datasets.Dataset.from_list(recs),
        processing_class=tok,
    )
    batch = next(iter(trainer.get_train_dataloader()))
    with torch.no_grad():
        theirs = float(trainer.compute_loss(pol, dict(batch)))
        enc = encode_pairs(tok, recs)
        ours = float(dpo_loss(*pair_logprobs(pol, enc), *pair_logprobs(ref, enc), 0.1).loss)
    assert abs(ours - theirs) < 1e-4
    assert abs(theirs - 0.6931) > 1e-3  # the policy differs from the reference: the test can fail


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_the_wrapper_follows_a_dtype_cast(toy, dtype):
    _, tok, base, texts, pairs = toy
    m = SimplexBottleneckLM(copy.deepcopy(base), bottleneck_dim=4).to(dtype)
    enc = tok(texts[:2], return_tensors="pt", padding=True)
    logits = m(enc["input_ids"], enc["attention_mask"])
    assert logits.dtype == dtype and torch.isfinite(logits.float()).all()
    h = dpo_stage(m, None, pairs, tokenizer=tok, steps=1)
    assert h["loss"][0] == pytest.approx(0.6931, abs=2e-2)


def test_pairs_without_a_response_token_or_with_ties_are_errors(toy):
    _, tok, base, _, pairs = toy
    long = [{"prompt": " ".join(["s0_1"] * 40), "chosen": " d0", "rejected": " d1"}]
    with pytest.raises(ValueError, match="no chosen token is left within max_length=16"):
        encode_pairs(tok, long, max_length=16)
    with pytest.raises(ValueError, match="chosen == rejected"):
        encode_pairs(tok, [{"prompt": "s0_1", "chosen": " d0", "rejected": " d0"}])
