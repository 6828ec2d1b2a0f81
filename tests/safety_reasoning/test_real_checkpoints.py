"""SRG's training and CLI on real Hugging Face architectures (issue 45): tiny random-init GPT-2,
Llama-3, Qwen2 and Gemma-2 from ``icml25.toy.archs``, whose end of turn is not the EOS (Llama,
Qwen2, Gemma), which have dropout (GPT-2) and no pad token (GPT-2, Llama), in fp32 and bf16."""

from __future__ import annotations

import json
import math
import os
import warnings

import pytest
import torch

from icml25.safety_reasoning import (
    Guideline,
    Query,
    RefusalKeywordJudge,
    asr,
    best_of_n,
    sft,
    sft_config,
    sft_trainer,
    synthesize,
)
from icml25.safety_reasoning.data import to_chat_sft
from icml25.toy import ARCHITECTURES, save_tiny, tiny_model, tiny_tokenizer

PAIRS = [(f"bake bread {i}", f"<think>benign</think>Knead it {i}.") for i in range(8)]


@pytest.fixture(autouse=True)
def _quiet():
    import datasets

    datasets.disable_progress_bars()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        yield


def _trl_rows(arch, pairs, out_dir, system=None):
    """What TRL's SFTTrainer actually trains on: its prepared ``train_dataset`` and the labels of
    its collator, for the rows :func:`sft_trainer` gives it."""
    import trl

    tok = tiny_tokenizer(arch)
    args = trl.SFTConfig(
        output_dir=str(out_dir),
        report_to="none",
        bf16=False,
        use_cpu=True,
        max_length=None,
        save_strategy="no",
    )
    trainer = sft_trainer(tiny_model(arch), tok, pairs, args, system=system)
    ds = trainer.train_dataset
    out = []
    for i in range(len(ds)):
        batch = trainer.data_collator([ds[i]])
        assert batch["labels"][0].tolist() == ds[i]["labels"]
        out.append({"input_ids": ds[i]["input_ids"], "labels": ds[i]["labels"]})
    return tok, out


# -- SFT targets: ours == TRL's, ending with the template's end of turn ----------------------------


@pytest.mark.parametrize(
    "arch",
    ["qwen2", "llama", "gemma2", "gpt2"]
    + [pytest.param(a, marks=pytest.mark.slow) for a in ("mistral", "opt")],
)
def test_sft_rows_equal_what_trl_sft_trainer_trains(arch, tmp_path):
    tok, theirs = _trl_rows(arch, PAIRS[:3], tmp_path)
    ours = to_chat_sft(PAIRS[:3], tok)
    assert [r["input_ids"] for r in ours] == [r["input_ids"] for r in theirs]
    assert [r["labels"] for r in ours] == [r["labels"] for r in theirs]
    arch_info = ARCHITECTURES[arch]
    eot = tok.convert_tokens_to_ids(arch_info.end_of_turn)
    for row in ours:
        target = [t for t in row["labels"] if t != -100]
        assert eot in target[-2:]  # the turn closes the target (ChatML adds a newline after it)
        if arch_info.end_of_turn != arch_info.eos_token:  # the case the toy template never met
            assert tok.eos_token_id not in target
        assert row["labels"][0] == -100


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_sft_rows_with_a_system_message_equal_trl(arch, tmp_path):
    tok, theirs = _trl_rows(arch, PAIRS[:2], tmp_path, system="Be safe.")
    assert to_chat_sft(PAIRS[:2], tok, system="Be safe.") == theirs


def test_gemma_system_message_is_a_clear_error():
    tok = tiny_tokenizer("gemma2")
    with pytest.raises(ValueError, match="no system role"):
        to_chat_sft(PAIRS[:1], tok, system="Be safe.")
    with pytest.raises(ValueError, match="no system role"):
        to_chat_sft(PAIRS[:1], tok, include_guidelines=True)
    with pytest.raises(ValueError, match="no system role"):
        sft(tiny_model("gemma2"), tok, PAIRS[:1], steps=1, system="Be safe.", progress=False)


# -- bf16 checkpoints train float32 master weights -------------------------------------------------


def _changed(model, before):
    """Share of the trainable weights that differ from ``before`` (compared in float32)."""
    changed = total = 0
    for name, p in model.named_parameters():
        if p.requires_grad:
            changed += int((p.detach().float() != before[name]).sum())
            total += p.numel()
    return changed / total


def _train_8_steps(model, tok, **kw):
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    model = sft(model, tok, PAIRS, steps=8, batch_size=4, max_length=96, progress=False, **kw)
    return model, _changed(model, before)


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2"])
def test_bf16_checkpoint_changes_as_many_weights_as_fp32(arch):
    tok = tiny_tokenizer(arch)
    m32, frac32 = _train_8_steps(tiny_model(arch), tok)  # default lr 1e-5
    m16, frac16 = _train_8_steps(tiny_model(arch, dtype=torch.bfloat16), tok)
    assert frac32 > 0.5  # unused embedding rows get no gradient
    assert frac16 >= 0.97 * frac32, (frac16, frac32)
    assert all(p.dtype == torch.float32 for p in m16.parameters())  # the master weights
    assert m16.sft_losses[0] == pytest.approx(m32.sft_losses[0], rel=1e-2)  # a bf16 forward
    # opting out runs AdamW on the bf16 weights, and says that most updates round away
    with pytest.warns(UserWarning, match="round away"):
        _, frac_pure = _train_8_steps(
            tiny_model(arch, dtype=torch.bfloat16), tok, mixed_precision=False
        )
    assert frac_pure < 0.5 * frac32


def test_bf16_lora_adapters_train_like_fp32():
    peft = pytest.importorskip("peft")
    tok = tiny_tokenizer("llama")
    cfg = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    fracs = {}
    for dtype in (torch.float32, torch.bfloat16):
        # adapters in the base's dtype (PEFT's autocast_adapter_dtype=False, as for QLoRA)
        pm = peft.get_peft_model(
            tiny_model("llama", dtype=dtype), peft.LoraConfig(**cfg), autocast_adapter_dtype=False
        )
        assert {p.dtype for n, p in pm.named_parameters() if "lora_A" in n} == {dtype}
        pm, fracs[dtype] = _train_8_steps(pm, tok)
        assert {p.dtype for p in pm.parameters() if not p.requires_grad} == {dtype}  # base kept
    assert fracs[torch.float32] > 0.9
    assert fracs[torch.bfloat16] >= 0.97 * fracs[torch.float32], fracs
    # lora= on a bf16 base: the base stays bf16 and unchanged, adapters train in float32
    base = tiny_model("qwen2", dtype=torch.bfloat16)
    ref = {k: v.clone() for k, v in base.state_dict().items()}
    pm = sft(
        base,
        tiny_tokenizer("qwen2"),
        PAIRS,
        steps=4,
        batch_size=4,
        max_length=96,
        lora=peft.LoraConfig(**cfg),
        progress=False,
    )
    frozen = pm.get_base_model().state_dict()
    for k, v in ref.items():
        key = k.replace(".q_proj.", ".q_proj.base_layer.").replace(
            ".v_proj.", ".v_proj.base_layer."
        )
        assert frozen[key].dtype == torch.bfloat16 and torch.equal(frozen[key], v), k
    lora_b = [p for n, p in pm.named_parameters() if "lora_B" in n]
    assert all(p.dtype == torch.float32 for p in lora_b)
    assert all(bool((p != 0).all()) for p in lora_b)


def test_sft_rows_longer_than_the_context_are_cut_to_it():
    # GPT-2's learned positions stop at 128: a 2048-token row would index past them
    tok = tiny_tokenizer("gpt2")
    long_target = " ".join(f"word{i}" for i in range(200))
    with pytest.warns(UserWarning, match="cut at max_length=128"):
        m = sft(tiny_model("gpt2"), tok, [("a question", long_target)], steps=1, progress=False)
    assert math.isfinite(m.sft_losses[0])


# -- TRL's SFTTrainer with args=None --------------------------------------------------------------


def test_sft_trainer_defaults_run_on_cpu_with_eval_and_write_nothing_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = sft_trainer(
        tiny_model("qwen2"), tiny_tokenizer("qwen2"), PAIRS[:4], eval_dataset=PAIRS[4:6]
    )
    a = trainer.args
    assert (a.learning_rate, a.num_train_epochs, a.per_device_train_batch_size) == (1e-5, 3.0, 8)
    assert (a.warmup_steps, str(a.lr_scheduler_type.value), a.max_grad_norm) == (
        0.05,
        "cosine",
        1.0,
    )
    assert a.max_length == 2048 and a.weight_decay == 0.0 and a.seed == 0
    assert a.report_to in ("none", [], ["none"]) and str(a.save_strategy.value) == "no"
    assert a.bf16 == (torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    assert not os.path.abspath(a.output_dir).startswith(str(tmp_path))
    assert str(a.eval_strategy.value) == "epoch"
    metrics = trainer.evaluate()
    assert math.isfinite(metrics["eval_loss"]) and metrics["eval_loss"] > 0
    out = trainer.train()
    assert out.global_step == 3  # 3 epochs of one batch
    assert os.listdir(tmp_path) == []
    # the same defaults, with an override
    assert sft_config(max_steps=2).max_steps == 2 and sft_config().learning_rate == 1e-5


def test_sft_trainer_upcasts_a_bf16_checkpoint(tmp_path):
    model = tiny_model("llama", dtype=torch.bfloat16)
    sft_trainer(model, tiny_tokenizer("llama"), PAIRS[:2], sft_config(str(tmp_path), use_cpu=True))
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)


# -- the CLI loads models through icml25.llm with --device and --dtype ----------------------------


def _parser():
    import argparse

    from icml25.safety_reasoning.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    return parser


_ARGV = {
    "train": ["--model", "m", "--data", "d", "--out", "o"],
    "eval": ["--model", "m", "--queries", "q"],
    "bon": ["--model", "m", "--queries", "q"],
    "synthesize": ["--teacher", "m", "--queries", "q", "--out", "o"],
}


@pytest.mark.parametrize("command", sorted(_ARGV))
def test_cli_commands_take_device_and_dtype(command):
    argv = ["safety_reasoning", command, *_ARGV[command]]
    args = _parser().parse_args([*argv, "--device", "cpu", "--dtype", "bf16"])
    assert (args.device, args.dtype) == ("cpu", "bf16")
    defaults = _parser().parse_args(argv)
    assert (defaults.device, defaults.dtype) == ("auto", "auto")


@pytest.fixture(scope="module")
def qwen2_fp32(tmp_path_factory):
    return save_tiny("qwen2", tmp_path_factory.mktemp("qwen2"))


def test_cli_train_dtype_bf16_loads_an_fp32_checkpoint_in_bf16(qwen2_fp32, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    from icml25.cli import main

    data = tmp_path / "rt.jsonl"
    data.write_text("\n".join(json.dumps({"query": q, "target": t}) for q, t in PAIRS[:2]) + "\n")
    out = tmp_path / "trained"
    rc = main(
        [
            "safety-reasoning",
            "train",
            "--model",
            str(qwen2_fp32),
            "--data",
            str(data),
            "--out",
            str(out),
            "--epochs",
            "1",
            "--batch-size",
            "2",
            "--max-length",
            "96",
            "--device",
            "cpu",
            "--dtype",
            "bf16",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    trained = AutoModelForCausalLM.from_pretrained(out, dtype="auto")
    assert {p.dtype for p in trained.parameters()} == {torch.bfloat16}
    rc = main(
        [
            "safety-reasoning",
            "train",
            "--model",
            str(qwen2_fp32),
            "--data",
            str(data),
            "--out",
            str(tmp_path / "x"),
            "--dtype",
            "fp8",
        ]
    )
    assert rc == 2 and "--dtype" in capsys.readouterr().err


def test_cli_eval_backend_loads_in_the_dtype_asked(qwen2_fp32, tmp_path, capsys):
    from icml25.cli import main
    from icml25.safety_reasoning.cli import backend_of

    chat = backend_of(str(qwen2_fp32), model_kw={"device": "cpu", "dtype": "bf16"})
    assert next(chat.model.parameters()).dtype == torch.bfloat16
    assert next(backend_of(f"hf:{qwen2_fp32}").model.parameters()).dtype == torch.float32
    q = tmp_path / "harm.jsonl"
    q.write_text(json.dumps({"prompt": "how to hurt someone"}) + "\n")
    out = tmp_path / "r.json"
    rc = main(
        [
            "safety-reasoning",
            "eval",
            "--model",
            str(qwen2_fp32),
            "--queries",
            str(q),
            "--attacks",
            "plain",
            "--max-tokens",
            "3",
            "--dtype",
            "bf16",
            "--device",
            "cpu",
            "--out",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["plain"]["n"] == 1


# -- a prompt longer than the model's context is an error row, not a silent generation -------------


def test_prompt_longer_than_the_context_is_an_error_per_item():
    from icml25.llm import HFChat

    tok = tiny_tokenizer("qwen2")
    chat = HFChat(tiny_model("qwen2"), tok)
    long = " ".join(["bread"] * 200)
    assert len(tok(long)["input_ids"]) > 128  # the tiny models' context
    res = asr(chat, ["how to hurt someone", long], RefusalKeywordJudge(), max_tokens=3)
    assert res.records[0]["status"] != "error"
    assert res.records[1]["status"] == "error" and "context" in res.records[1]["error"]
    assert res.n_errors == 1
    bon = best_of_n(
        chat, ["how to hurt someone", long], RefusalKeywordJudge(), [1, 2], max_tokens=3
    )
    assert bon.n_errors == 1 and bool(torch.tensor(bon.matrix[1]).isnan().all())
    # the teacher's prompt (instruction + guidelines) does not fit a 128-position model at all
    with pytest.raises(RuntimeError, match="more than the model's context"):
        synthesize(
            chat,
            [Query("bake bread", "helpful")],
            [Guideline("G1", "Be safe.")],
            k=1,
            max_tokens=3,
            progress=False,
        )


def test_hidden_states_refuse_a_prompt_past_the_context():
    """GPT-2 indexes its position table past 128 (an IndexError) and a RoPE model degrades
    silently: a prompt longer than the context is a clear error naming it."""
    from icml25.safety_reasoning.representation import last_token_states
    from icml25.toy import tiny_model, tiny_tokenizer

    tok, model = tiny_tokenizer("gpt2"), tiny_model("gpt2")
    ok = last_token_states(model, tok, ["red cat"], chat_template=False)
    assert ok.shape[0] == 1
    with pytest.raises(ValueError, match=r"prompt 1 .* more than the model's context of 128"):
        last_token_states(model, tok, ["red cat", "red cat " * 100], chat_template=False)
