"""FPO on the architecture matrix (tiny random-init GPT-2, Llama, Qwen2, OPT with their real
configs, tokenizers and chat templates): TRL's conventions in the plain loop, the TRL trainer's
evaluation and defaults."""

from __future__ import annotations

import copy
import math
import os

import pytest
import torch

from icml25.fpo import PreferenceCollator, PreferenceConfig, SparseAutoencoder, train_preference
from icml25.fpo.forward import preference_pass
from icml25.toy import tiny_model, tiny_tokenizer

WORDS = ["a", "b", "c", "d", "e", "f"]


def _pairs(n: int, *, chat: bool = True, offset: int = 0) -> list[dict]:
    out = []
    for i in range(n):
        w = [WORDS[(i + offset + j) % 6] for j in range(3 + (i % 2))]
        good, bad = " ".join(reversed(w)), " ".join(w[:-1])
        if chat:
            out.append(
                {
                    "prompt": [{"role": "user", "content": "reverse " + " ".join(w)}],
                    "chosen": [{"role": "assistant", "content": good}],
                    "rejected": [{"role": "assistant", "content": bad}],
                }
            )
        else:
            out.append(
                {
                    "prompt": "reverse " + " ".join(w) + ":",
                    "chosen": " " + good,
                    "rejected": " " + bad,
                }
            )
    return out


@pytest.fixture(scope="module")
def sae():
    g = torch.Generator().manual_seed(0)
    s = SparseAutoencoder(32, 64, "topk", k_sae=4)
    with torch.no_grad():
        s.W_enc.copy_(torch.randn(32, 64, generator=g))
        s.W_dec.copy_(torch.randn(64, 32, generator=g) / 6)
    return s.requires_grad_(False)


# -- the plain loop -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["dpo", "fpo", "tdpo2"])
@pytest.mark.parametrize("arch", ["gpt2", "opt"])
def test_first_loss_is_log2_on_dropout_models(arch, method, sae):
    """GPT-2 and OPT train with dropout 0.1 (OPT's is functional, not an nn.Dropout module): with
    the policy equal to the reference, the first DPO-style loss is exactly log 2."""
    torch.manual_seed(0)
    tok, ref = tiny_tokenizer(arch), tiny_model(arch)
    pol = copy.deepcopy(ref)
    cfg = PreferenceConfig(method=method, layer=1, k=8, lr=1e-9, batch_size=8, progress=False)
    h = train_preference(pol, tok, _pairs(8), cfg, sae=sae, ref_model=ref)
    assert h.steps[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert not ref.training  # the reference is left in eval mode


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_bf16_trains_as_many_weights_as_fp32(arch):
    """A bf16 checkpoint trains float32 master weights: at lr 1e-5 nearly every weight moves, as
    in float32 (pure-bf16 Adam rounds most of these updates away)."""
    tok = tiny_tokenizer(arch)
    frac = {}
    for dt in (torch.float32, torch.bfloat16):
        ref = tiny_model(arch, dtype=dt)
        pol = copy.deepcopy(ref)
        before = {n: p.detach().float().clone() for n, p in pol.named_parameters()}
        cfg = PreferenceConfig(
            method="dpo", lr=1e-5, batch_size=8, warmup_steps=0, progress=False, epochs=3
        )
        h = train_preference(pol, tok, _pairs(8), cfg, ref_model=ref)
        assert all(math.isfinite(s["loss"]) for s in h.steps)
        # policy == reference: log 2 (to bf16 precision: the reference ran in pure bf16)
        assert h.steps[0]["loss"] == pytest.approx(
            math.log(2), abs=1e-6 if dt == torch.float32 else 1e-3
        )
        moved = total = 0
        for n, p in pol.named_parameters():
            if "wte" in n or "embed_tokens" in n or "embed_positions" in n or "wpe" in n:
                continue  # rows of unseen tokens get no gradient
            moved += int((p.detach().float() != before[n]).sum())
            total += p.numel()
        frac[dt] = moved / total
    assert frac[torch.float32] > 0.9
    assert frac[torch.bfloat16] > 0.9 * frac[torch.float32], frac


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_left_padded_batch_equals_right_padded(arch, sae):
    tok, model = tiny_tokenizer(arch), tiny_model(arch)
    recs = _pairs(4)
    out = {}
    for side in ("left", "right"):
        b = PreferenceCollator(tok, padding_side=side)(recs)
        with torch.no_grad():
            out[side] = preference_pass(model, b, sae=sae, layer=1)
    assert torch.allclose(out["left"].sum, out["right"].sum, atol=1e-4)
    assert torch.allclose(out["left"].codes, out["right"].codes, atol=1e-4)


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "gemma2", "mistral"])
def test_chat_rows_are_tokenized_as_trl_does(arch):
    """The collator's chat rows equal TRL DPOTrainer's tokenisation (the template's own end of
    turn closes each response, not the EOS)."""
    from icml25.llm import tokenize_preference

    tok = tiny_tokenizer(arch)
    col = PreferenceCollator(tok)
    for r in _pairs(3):
        p, c, rj = col.encode(r)
        want = tokenize_preference(tok, r["prompt"], r["chosen"], r["rejected"])
        assert (p, c, rj) == (want["prompt_ids"], want["chosen_ids"], want["rejected_ids"])


def test_a_row_longer_than_the_context_is_a_clear_error(sae):
    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    long = [{"prompt": "a " * 150, "chosen": " b", "rejected": " c"}]
    b = PreferenceCollator(tok, max_length=400, max_prompt_length=300)(long)
    with pytest.raises(ValueError, match="context of 128 positions"):
        preference_pass(model, b, sae=sae, layer=1)


# -- the TRL trainer ------------------------------------------------------------------------------

trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")


def _ds(rows):
    return datasets.Dataset.from_list(rows)


def _args(tmp_path, **kw):
    base = dict(
        precompute_ref_log_probs=True,
        bf16=False,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=2,
        report_to=[],
        logging_steps=1,
        learning_rate=1e-3,
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
        gradient_checkpointing=False,
    )
    return trl.DPOConfig(str(tmp_path / "out"), **{**base, **kw})


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_fpo_trainer_evaluates_eval_rows_with_their_own_features(arch, sae, tmp_path):
    """Before training the policy is the reference, so on any evaluated pair the feature
    discrepancies are 0 and the loss is log 2, which holds only if each eval row reads ITS OWN
    cached reference features (rows keyed by content, not by their row number)."""
    from icml25.fpo import FPOTrainer

    tok, model = tiny_tokenizer(arch), tiny_model(arch)
    train, held = _ds(_pairs(8)), _ds(_pairs(6, offset=3)[::-1])
    tr = FPOTrainer(
        copy.deepcopy(model),
        args=_args(tmp_path),
        train_dataset=train,
        eval_dataset=held,
        processing_class=tok,
        sae=sae,
        layer=1,
        k=8,
    )
    for m in (
        tr.evaluate(),
        tr.evaluate(_ds(_pairs(5, offset=1))),
        tr.evaluate(_pairs(2, chat=False)),
    ):
        assert m["eval_loss"] == pytest.approx(math.log(2), abs=1e-5)
        assert m["eval_fpo/d_rejected"] < 1e-8 and m["eval_fpo/d_chosen"] < 1e-8


def test_fpo_trainer_evaluates_during_and_after_training(sae, tmp_path):
    from icml25.fpo import FPOTrainer

    tok, model = tiny_tokenizer("qwen2"), tiny_model("qwen2")
    train, held = _ds(_pairs(8)), _ds(_pairs(4, offset=2))
    args = _args(tmp_path, eval_strategy="steps", eval_steps=1, max_steps=3)
    tr = FPOTrainer(
        copy.deepcopy(model),
        ref_model=copy.deepcopy(model),
        args=args,
        train_dataset=train,
        eval_dataset=held,
        processing_class=tok,
        sae=sae,
        layer=1,
        k=8,
    )
    tr.train()
    evals = [x for x in tr.state.log_history if "eval_loss" in x]
    assert len(evals) == 3 and all(math.isfinite(x["eval_loss"]) for x in evals)
    after = tr.evaluate(_ds(_pairs(3, offset=5)))  # new content after training: ref_model given
    assert math.isfinite(after["eval_loss"]) and after["eval_fpo/d_rejected"] > 0
    # full fine-tuning without ref_model: the reference is gone once training has started
    tr2 = FPOTrainer(
        copy.deepcopy(model),
        args=_args(tmp_path, max_steps=1),
        train_dataset=train,
        processing_class=tok,
        sae=sae,
        layer=1,
        k=8,
    )
    tr2.train()
    with pytest.raises(ValueError, match="after training has started"):
        tr2.evaluate(_ds(_pairs(3, offset=5)))


def test_fpo_trainer_args_none_is_table5_in_a_temporary_folder(sae, tmp_path, monkeypatch):
    from icml25.fpo import FPOTrainer

    monkeypatch.chdir(tmp_path)
    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    tr = FPOTrainer(
        model, train_dataset=_ds(_pairs(8)), processing_class=tok, sae=sae, layer=1, k=8
    )
    a = tr.args
    assert a.learning_rate == 5e-7 and a.beta == 0.1 and a.num_train_epochs == 1
    assert a.per_device_train_batch_size == 32 and a.warmup_steps == 150
    assert a.lr_scheduler_type == "constant_with_warmup" and a.weight_decay == 0.0
    assert a.max_length == 1024 and a.precompute_ref_log_probs
    assert a.bf16 == bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert not os.path.abspath(a.output_dir).startswith(str(tmp_path))
    tr.train()  # one epoch of 8 pairs: one step
    assert tr.state.global_step == 1
    assert os.listdir(tmp_path) == []  # nothing written to the working directory
    over = FPOTrainer.paper_args(max_steps=5)
    assert over.max_steps == 5 and over.learning_rate == 5e-7
    with pytest.raises(TypeError, match="args must be a trl.DPOConfig"):
        FPOTrainer(
            model,
            args={"learning_rate": 1e-6},
            train_dataset=_ds(_pairs(2)),
            processing_class=tok,
            sae=sae,
            layer=1,
        )


def test_fpo_trainer_trains_a_bf16_checkpoint_with_float32_master_weights(sae, tmp_path):
    """FPOTrainer on a bf16 policy moved 12% of the weights where fp32 moved 76%: the trainable
    parameters are upcast before TRL builds the optimizer."""
    from icml25.fpo import FPOTrainer

    def moved(dtype):
        tok, model = tiny_tokenizer("llama"), tiny_model("llama", dtype=dtype)
        before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
        args = _args(tmp_path, max_steps=3, learning_rate=1e-5)
        FPOTrainer(
            model,
            args=args,
            train_dataset=_ds(_pairs(8)),
            processing_class=tok,
            sae=sae,
            layer=1,
            k=8,
        ).train()
        assert {p.dtype for p in model.parameters()} == {torch.float32}
        hit = sum(int((p.detach().float() != before[n]).sum()) for n, p in model.named_parameters())
        return hit / sum(p.numel() for p in model.parameters())

    fp32, bf16 = moved(None), moved(torch.bfloat16)
    assert fp32 > 0.3 and bf16 >= 0.95 * fp32, (fp32, bf16)
