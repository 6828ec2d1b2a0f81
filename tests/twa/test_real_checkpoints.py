"""TWA on the architecture matrix (tiny random-init GPT-2, Llama, Qwen2, Gemma-2, Mistral, OPT and
the seq2seq Marian and T5, with their real configs, tokenizers and chat templates)."""

from __future__ import annotations

import copy
import math
import os

import pytest
import torch

from icml25.toy import tiny_model, tiny_tokenizer
from icml25.twa import (
    AnnotatedTranslation,
    ErrorSpan,
    TWACollator,
    TWAConfig,
    train_twa,
    twa_loss_on_batch,
)
from icml25.twa.collate import chat_prompt_fn

transformers = pytest.importorskip("transformers")


def data(n: int = 6) -> list[AnnotatedTranslation]:
    rows = [
        AnnotatedTranslation("die Katze schläft", "the cat sleeps"),
        AnnotatedTranslation("der Hund bellt", "the dog barks", [ErrorSpan(4, 7, "Major")]),
        AnnotatedTranslation("ein Haus", "a big house", [ErrorSpan(2, 5, "Minor")]),
    ]
    return (rows * n)[:n]


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "gemma2", "mistral"])
def test_chat_targets_are_tokenized_as_trl_sft(arch):
    """With chat_prompt_fn a target ends with the template's own end of turn (Llama-3
    <|eot_id|>, ChatML <|im_end|> and its newline), exactly TRL SFTTrainer's ids and labels."""
    from icml25.llm import tokenize_prompt_completion

    tok = tiny_tokenizer(arch)
    col = TWACollator(tok, prompt_fn=chat_prompt_fn(tok))
    for ex in data(3):
        f = col.features(ex)
        want = tokenize_prompt_completion(
            tok,
            [{"role": "user", "content": ex.source}],
            [{"role": "assistant", "content": ex.target}],
        )
        assert f["input_ids"] == want["input_ids"] and f["labels"] == want["labels"]


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_train_twa_bf16_moves_as_many_weights_as_fp32(arch):
    tok = tiny_tokenizer(arch)
    frac = {}
    for dt in (torch.float32, torch.bfloat16):
        model = tiny_model(arch, dtype=dt)
        before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
        cfg = TWAConfig(lr=1e-5, batch_size=6, max_steps=3)
        hist = train_twa(model, tok, data(), cfg, prompt_fn=chat_prompt_fn(tok), progress=False)
        assert all(math.isfinite(s["loss"]) for s in hist.steps)
        moved = total = 0
        for n, p in model.named_parameters():
            if any(e in n for e in ("wte", "wpe", "embed_tokens")):
                continue  # rows of unseen tokens get no gradient
            moved += int((p.detach().float() != before[n]).sum())
            total += p.numel()
        frac[dt] = moved / total
    assert frac[torch.float32] > 0.9
    assert frac[torch.bfloat16] > 0.9 * frac[torch.float32], frac


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_train_twa_lowers_the_loss_on_causal_archs(arch):
    tok, model = tiny_tokenizer(arch), tiny_model(arch)
    hist = train_twa(
        model,
        tok,
        data(),
        TWAConfig(lr=3e-3, batch_size=6, max_steps=6),
        prompt_fn=chat_prompt_fn(tok),
        progress=False,
    )
    losses = [s["loss"] for s in hist.steps]
    assert losses[-1] < losses[0] and not model.training


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["marian", "t5"])
def test_train_twa_and_the_trainer_on_seq2seq_archs(arch, tmp_path):
    """Marian and T5 (dropout 0.1): the collator's seq2seq batches, the plain loop (model_type
    from the config) in fp32 and bf16, and the Trainer's evaluation by generation."""
    from icml25.twa import TWAHFTrainer

    tok = tiny_tokenizer(arch)
    batch = TWACollator(tok, model_type="seq2seq")(data(3))
    assert (batch["labels"][:, :3] != -100).all() and batch["positive"].any()
    for dt in (None, torch.bfloat16):
        model = tiny_model(arch, dtype=dt)
        hist = train_twa(
            model, tok, data(), TWAConfig(lr=3e-3, batch_size=6, max_steps=6), progress=False
        )
        losses = [s["loss"] for s in hist.steps]
        assert losses[-1] < losses[0]
    seen = []
    args = TWAHFTrainer.default_args(
        str(tmp_path),
        max_steps=1,
        predict_with_generate=True,
        generation_max_length=8,
        per_device_eval_batch_size=6,
        use_cpu=True,
    )
    tr = TWAHFTrainer(
        tiny_model(arch),
        args,
        train_dataset=data(),
        processing_class=tok,
        compute_metrics=lambda p: seen.append(p) or {"n": len(p.predictions)},
    )
    assert tr.model_type == "seq2seq"
    tr.train()
    m = tr.evaluate(data())
    assert math.isfinite(m["eval_loss"]) and m["eval_n"] == 6 and seen


def test_twa_trainer_eval_dataset_and_evaluate(tmp_path):
    """eval_dataset during training and evaluate(dataset) afterwards report the TWA loss: with one
    evaluation batch it equals twa_loss_on_batch on the same rows."""
    from icml25.twa import TWAHFTrainer

    tok, model = tiny_tokenizer("qwen2"), tiny_model("qwen2")
    col = TWACollator(tok, prompt_fn=chat_prompt_fn(tok))
    args = transformers.Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=3,
        per_device_eval_batch_size=6,
        max_steps=2,
        learning_rate=1e-3,
        remove_unused_columns=False,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        eval_strategy="steps",
        eval_steps=1,
        logging_steps=1,
    )
    tr = TWAHFTrainer(
        model=model, args=args, train_dataset=data(), eval_dataset=data(3), data_collator=col
    )
    tr.train()
    evals = [x["eval_loss"] for x in tr.state.log_history if "eval_loss" in x]
    assert len(evals) == 2 and all(math.isfinite(x) for x in evals)
    held = data(5)[::-1]
    got = tr.evaluate(held)["eval_loss"]
    model.eval()
    with torch.no_grad():
        want = float(twa_loss_on_batch(model, col(held)).loss)
    assert got == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="predict_with_generate=True needs a seq2seq model"):
        TWAHFTrainer(
            model=model,
            args=TWAHFTrainer.default_args(str(tmp_path), predict_with_generate=True),
            train_dataset=data(),
            data_collator=col,
        )


def test_twa_trainer_args_none_uses_the_written_defaults_in_a_temporary_folder(
    tmp_path, monkeypatch
):
    from icml25.twa import TWAHFTrainer

    monkeypatch.chdir(tmp_path)
    tok, model = tiny_tokenizer("llama"), tiny_model("llama")
    before = [p.detach().clone() for p in model.parameters()]
    tr = TWAHFTrainer(model, train_dataset=data(), processing_class=tok)
    a, c = tr.args, TWAConfig()
    assert a.learning_rate == c.lr and a.per_device_train_batch_size == c.batch_size
    assert a.num_train_epochs == c.epochs and a.max_grad_norm == c.max_grad_norm
    assert a.lr_scheduler_type == "constant" and not a.remove_unused_columns
    assert a.bf16 == bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert not os.path.abspath(a.output_dir).startswith(str(tmp_path))
    assert isinstance(tr.data_collator, TWACollator) and tr.model_type == "causal"
    tr.train()  # one epoch of 6 rows at 32 per batch: one step
    assert tr.state.global_step == 1
    assert any(not torch.equal(x, y) for x, y in zip(before, model.parameters()))
    assert os.listdir(tmp_path) == []  # nothing written to the working directory


@pytest.mark.parametrize("model_type", ["causal", "seq2seq"])
def test_a_row_longer_than_the_context_is_a_clear_error(model_type):
    arch = "llama" if model_type == "causal" else "marian"
    tok, model = tiny_tokenizer(arch), tiny_model(arch)
    long = [AnnotatedTranslation("a " * 150, "b " * 150)]
    batch = TWACollator(tok, model_type=model_type, max_source_len=400, max_target_len=400)(long)
    with pytest.raises(ValueError, match="context of 128 positions"):
        twa_loss_on_batch(model, batch, model_type=model_type)


def test_dropout_stays_on_in_the_plain_loop():
    """TWA is an SFT-style loss without a reference: like TRL's SFTTrainer it trains with the
    model's dropout (GPT-2: 0.1), so two identical runs differ only through the dropout RNG."""
    tok = tiny_tokenizer("gpt2")
    losses = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = tiny_model("gpt2")
        h = train_twa(
            copy.deepcopy(model),
            tok,
            data(),
            TWAConfig(lr=1e-9, batch_size=6, max_steps=1),
            prompt_fn=chat_prompt_fn(tok),
            progress=False,
        )
        losses.append(h.steps[0]["loss"])
    assert losses[0] != losses[1]


def _dpo_pairs():
    """Two translations per source with different penalties: one pair per source."""
    from icml25.twa import build_dpo_pairs

    rows = []
    for src in ("die Katze schläft", "der Hund bellt", "ein Haus"):
        rows.append(AnnotatedTranslation(src, "the cat sleeps"))
        rows.append(AnnotatedTranslation(src, "a dog barks", [ErrorSpan(2, 5, "Major")]))
    return build_dpo_pairs(rows, max_pairs_per_source=2, rng=0)


def test_dpo_baseline_first_loss_is_log2_on_gpt2_with_dropout():
    """The offline DPO baseline scores the policy without dropout, as TRL's DPOTrainer: at
    policy == reference on GPT-2 (dropout 0.1) the first loss is log 2, not log 2 + noise."""
    from icml25.twa.baselines import train_dpo

    tok, model = tiny_tokenizer("gpt2"), tiny_model("gpt2")
    ref = copy.deepcopy(model)
    losses = train_dpo(model, ref, tok, _dpo_pairs(), lr=1e-5, batch_size=4, epochs=1)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-6)


def test_dpo_baseline_bf16_moves_as_many_weights_as_fp32():
    from icml25.twa.baselines import train_dpo

    def moved(dtype):
        tok, model = tiny_tokenizer("llama"), tiny_model("llama", dtype=dtype)
        ref = copy.deepcopy(model)
        before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
        train_dpo(model, ref, tok, _dpo_pairs() * 4, lr=1e-5, batch_size=2, epochs=1)
        hit = sum(int((p.detach().float() != before[n]).sum()) for n, p in model.named_parameters())
        return hit / sum(p.numel() for p in model.parameters())

    fp32, bf16 = moved(None), moved(torch.bfloat16)
    assert fp32 > 0.5 and bf16 >= 0.95 * fp32, (fp32, bf16)


def test_twa_trainer_trains_a_bf16_checkpoint_with_float32_master_weights(tmp_path):
    """The Trainer's AdamW on bf16 weights moved 12% of them where fp32 moved 76%: the trainer
    upcasts the trainable parameters first, so bf16 moves as many as fp32."""
    from icml25.twa import TWAHFTrainer

    def moved(dtype):
        tok, model = tiny_tokenizer("llama"), tiny_model("llama", dtype=dtype)
        before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
        args = TWAHFTrainer.default_args(str(tmp_path), max_steps=4, learning_rate=1e-5)
        TWAHFTrainer(model=model, args=args, train_dataset=data(12), processing_class=tok).train()
        assert {p.dtype for p in model.parameters()} == {torch.float32}
        hit = sum(int((p.detach().float() != before[n]).sum()) for n, p in model.named_parameters())
        return hit / sum(p.numel() for p in model.parameters())

    fp32, bf16 = moved(None), moved(torch.bfloat16)
    assert fp32 > 0.5 and bf16 >= 0.95 * fp32, (fp32, bf16)
