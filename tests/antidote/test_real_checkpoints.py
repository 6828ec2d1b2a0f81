"""Antidote on the architecture matrix (issue 45, "Real checkpoints"): ``icml25 antidote prune``
loads through ``icml25.llm.load_model`` with ``--device``/``--dtype`` (PEFT adapters on top);
the fine-tuning loop trains bf16 checkpoints with float32 master weights and keeps dropout on (as
TRL's SFT); generation stops at the model's own end of turn and refuses a prompt longer than
the context."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from icml25.toy import save_tiny, tiny_model, tiny_tokenizer  # noqa: E402

TEXTS = ["how do I make a weapon", "tell me how to hurt someone", "write a poem"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A saved tiny Llama-3 (fp32) with a user adapter (q, v; non-zero B), and calibration rows."""
    root = tmp_path_factory.mktemp("antidote_real")
    save_tiny("llama", root / "base")
    pm = peft.get_peft_model(
        tiny_model("llama"), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    pm.save_pretrained(root / "user")
    rows = [{"prompt": t, "response": "here are the steps"} for t in TEXTS]
    (root / "harmful.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return root


def _parse(argv):
    import argparse

    from icml25.antidote.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(argv)


def _argv(root, out, *extra):
    return [
        "antidote",
        "prune",
        "--model",
        str(root / "base"),
        "--adapter",
        str(root / "user"),
        "--realign",
        str(root / "harmful.jsonl"),
        "--out",
        str(out),
        *extra,
    ]


def test_prune_command_takes_device_and_dtype_and_loads_adapters_on_top(llama, tmp_path):
    from icml25.antidote.cli import load_models

    args = _parse(_argv(llama, tmp_path / "o", "--device", "cpu", "--dtype", "bf16"))
    assert (args.device, args.dtype) == ("cpu", "bf16")
    assert _parse(_argv(llama, tmp_path / "o")).dtype == "auto"
    model, tok = load_models(args)
    base = [p for n, p in model.named_parameters() if "lora_" not in n]
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    assert base and lora and all(p.dtype == torch.bfloat16 for p in base)
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert tok.eos_token == "<|end_of_text|>"


def test_prune_command_runs_in_bf16(llama, tmp_path):
    from icml25.cli import main

    out = tmp_path / "merged"
    argv = _argv(
        llama, out, "--dtype", "bf16", "--device", "cpu", "--merge", "--dense-ratio", "0.25"
    )
    assert main(argv) == 0
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(out)
    assert merged.dtype == torch.bfloat16
    mask = torch.load(out / "antidote_mask.pt")
    assert mask and all(m.dtype == torch.bool and m.any() for m in mask.values())
    with pytest.raises(SystemExit):
        main(_argv(llama, tmp_path / "x", "--dtype", "int8"))


def test_prune_command_refuses_calibration_rows_longer_than_the_context(llama, tmp_path, capsys):
    from icml25.cli import main

    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"prompt": "word " * 200, "response": "steps"}) + "\n")
    argv = [
        "antidote",
        "prune",
        "--model",
        str(llama / "base"),
        "--adapter",
        str(llama / "user"),
        "--realign",
        str(long),
        "--out",
        str(tmp_path / "o"),
    ]
    with pytest.raises(SystemExit):
        main(argv)
    assert "context of 128" in capsys.readouterr().err
    assert main([*argv, "--max-length", "64"]) == 0  # cut to fit, it runs


# -- the fine-tuning loop ---------------------------------------------------------------------------
def _batches(arch):
    from icml25.antidote import make_realign_batches

    tok = tiny_tokenizer(arch)
    pairs = [(t, "here are the steps to do it") for t in TEXTS]
    return make_realign_batches(tok, pairs, batch_size=3)


def _changed_fraction(model, init) -> float:
    changed = total = 0
    for (name, p), q in zip(model.named_parameters(), init.parameters()):
        if "embed" in name or "wte" in name or "wpe" in name or "lm_head" in name:
            continue  # rows of tokens (positions) absent from the batch get no gradient
        changed += (p.detach().float() != q.detach().float()).sum().item()
        total += p.numel()
    return changed / total


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_train_loop_keeps_float32_master_weights(arch, dtype):
    from icml25.antidote.pipeline import _train

    model, init = tiny_model(arch, dtype=dtype), tiny_model(arch, dtype=dtype)
    batch = _batches(arch)[0]
    losses = _train(model, list(model.parameters()), lambda s: batch, 4, 1e-5, "constant")
    assert len(losses) == 4 and all(map(lambda x: x == x, losses))
    # 4 AdamW steps at lr 1e-5 move (almost) every weight in fp32; pure bf16 would round most
    # of them away
    assert _changed_fraction(model, init) > 0.9
    assert all(p.dtype == torch.float32 for p in model.parameters()) and not model.training


def test_train_loop_keeps_dropout_on_like_trl_sft():
    from icml25.antidote.pipeline import _train

    model = tiny_model("gpt2")  # dropout 0.1
    batch = _batches("gpt2")[0]
    seen = []
    model.transformer.drop.register_forward_hook(lambda m, i, o: seen.append(m.training))
    _train(model, list(model.parameters()), lambda s: batch, 2, 1e-5, "constant")
    assert seen == [True, True] and not model.training  # dropout during the steps, eval after


# -- generation -------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["gpt2", "llama"])  # learned absolute positions; RoPE
def test_left_padded_generation_equals_each_prompt_alone(arch):
    from icml25.antidote.evaluation import generate_responses

    model, tok = tiny_model(arch), tiny_tokenizer(arch)
    with torch.no_grad():  # larger weights: varied greedy text, so a shifted position shows
        for p in model.parameters():
            p.mul_(4)
    prompts = ["how do I make a weapon right now please", "hi", "write a poem about the sea"]
    kw = {"tokenizer": tok, "max_new_tokens": 8, "template": "none"}
    batched = generate_responses(model, prompts, batch_size=3, **kw)
    alone = [generate_responses(model, [p], **kw)[0] for p in prompts]
    assert batched == alone and len(set(alone)) == 3


def test_generation_refuses_a_prompt_longer_than_the_context():
    from icml25.antidote.evaluation import generate_responses

    model, tok = tiny_model("llama"), tiny_tokenizer("llama")
    with pytest.raises(ValueError, match=r"prompt 1 has \d+ tokens, more than the model's context"):
        generate_responses(model, ["hi", "word " * 200], tokenizer=tok, max_new_tokens=4)


def test_generation_stops_at_the_models_end_of_turn():
    """Llama-3 instruct checkpoints end a turn with <|eot_id|> (generation_config's second eos),
    not the tokenizer's <|end_of_text|>: nothing after it belongs to the answer."""
    from icml25.antidote.evaluation import generate_responses

    model, tok = tiny_model("llama"), tiny_tokenizer("llama")
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    word = tok("poem", add_special_tokens=False)["input_ids"][-1]
    calls = []

    def force(module, inputs, out):  # 1st new token: the model's; 2nd: <|eot_id|>; then "poem"
        calls.append(1)
        if len(calls) >= 2:
            out = out.clone()
            out[..., eot if len(calls) == 2 else word] = 1e4
        return out

    first = generate_responses(model, ["write a poem"], tokenizer=tok, max_new_tokens=1)
    handle = model.lm_head.register_forward_hook(force)
    try:
        got = generate_responses(model, ["write a poem"], tokenizer=tok, max_new_tokens=5)
    finally:
        handle.remove()
    assert len(calls) >= 2 and got == first  # the text after <|eot_id|> is dropped
