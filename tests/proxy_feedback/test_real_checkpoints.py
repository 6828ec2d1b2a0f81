"""The simplex-bottleneck LLM path on real Hugging Face architectures (tiny random-init GPT-2,
Llama-3, Qwen2, ... from ``icml25.toy.archs``): keyword calls, TRL's DPO conventions (dropout off,
reference in eval, fp32 master weights, TRL's tokenisation), context errors, and the Trainer path."""

from __future__ import annotations

import copy
import math

import pytest
import torch

pytest.importorskip("transformers")

from icml25.proxy_feedback.llm import (  # noqa: E402
    SimplexBottleneckLM,
    dpo_stage,
    encode_pairs,
    next_token_probs,
    pair_logprobs,
    warmup_bottleneck,
)
from icml25.toy import ARCHITECTURES, tiny_model, tiny_tokenizer  # noqa: E402

LOG2 = math.log(2.0)
FAST = ["gpt2", "llama", "qwen2"]
WIDER = [pytest.param(a, marks=pytest.mark.slow) for a in ("gemma2", "mistral", "opt")]

TEXT_PAIRS = [
    {"prompt": "Is the sky blue? Answer:", "chosen": " yes", "rejected": " no it is not"},
    {"prompt": "Two plus two is", "chosen": " four", "rejected": " five"},
    {"prompt": "The capital of France is the city of", "chosen": " Paris", "rejected": " Rome"},
]


def _chat(prompt: str, reply: str) -> tuple[list[dict], list[dict]]:
    return [{"role": "user", "content": prompt}], [{"role": "assistant", "content": reply}]


CHAT_PAIRS = [
    {
        "prompt": _chat(r["prompt"], "")[0],
        "chosen": _chat("", r["chosen"].strip())[1],
        "rejected": _chat("", r["rejected"].strip())[1],
    }
    for r in TEXT_PAIRS
]


def _fraction_changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    now = dict(model.named_parameters())
    changed = sum(int((now[k].detach().float() != v.float()).sum()) for k, v in before.items())
    return changed / sum(v.numel() for v in before.values())


# -- keyword calls and padding ---------------------------------------------------------------------


@pytest.mark.parametrize("arch", FAST + WIDER)
def test_a_batch_equals_each_row_alone(arch):
    """GPT-2's second positional argument is its cache: every call must be by keyword. A
    right-padded pair batch and a left-padded prompt batch give each row's own values."""
    tok, base = tiny_tokenizer(arch), tiny_model(arch)
    enc = encode_pairs(tok, TEXT_PAIRS)
    c, r = pair_logprobs(base, enc)
    assert c.shape == r.shape == (3,) and torch.isfinite(c).all() and torch.isfinite(r).all()
    for i, row in enumerate(TEXT_PAIRS):
        ci, ri = pair_logprobs(base, encode_pairs(tok, [row]))
        assert torch.allclose(ci, c[i : i + 1], atol=1e-4) and torch.allclose(
            ri, r[i : i + 1], atol=1e-4
        )
    prompts = ["Hi", "The capital of France is the city of", "Two plus two is"]
    lens = [len(tok(p)["input_ids"]) for p in prompts]
    assert len(set(lens)) == 3  # the batch is left-padded
    wrapped = SimplexBottleneckLM(copy.deepcopy(base), bottleneck_dim=8)
    for model in (base, wrapped):
        batch = next_token_probs(model, tok, prompts)
        assert batch.shape == (3, len(tok))
        for i, p in enumerate(prompts):
            alone = next_token_probs(model, tok, [p])[0]
            assert torch.allclose(batch[i], alone, atol=1e-5), (arch, i)


# -- dropout off and the reference in eval ---------------------------------------------------------


@pytest.mark.parametrize("arch", ["gpt2", pytest.param("opt", marks=pytest.mark.slow)])
def test_first_dpo_loss_is_log2_on_a_dropout_model(arch):
    assert ARCHITECTURES[arch].has_dropout
    tok = tiny_tokenizer(arch)
    policy = tiny_model(arch).train()  # dropout 0.1 is live in train mode
    ref = copy.deepcopy(policy)
    modes = {"policy": [], "ref": []}
    policy.register_forward_pre_hook(lambda m, a: modes["policy"].append(m.training))
    ref.register_forward_pre_hook(lambda m, a: modes["ref"].append(m.training))
    h = dpo_stage(policy, ref, TEXT_PAIRS, tokenizer=tok, trainable="all", steps=1, lr=1e-5)
    assert abs(h["loss"][0] - LOG2) < 1e-6
    assert modes["policy"] == [False] and modes["ref"] == [False]
    assert policy.training and ref.training  # each module's own flag comes back
    # the same stage with the wrapper, adapter only
    m = SimplexBottleneckLM(tiny_model(arch).train(), bottleneck_dim=8)
    h = dpo_stage(m, copy.deepcopy(m), TEXT_PAIRS, tokenizer=tok, trainable="adapter", steps=1)
    assert abs(h["loss"][0] - LOG2) < 1e-6
    # with dropout left on, the policy's log-probs are noisy: the test can tell
    noisy = tiny_model(arch).train()
    h = dpo_stage(
        noisy,
        copy.deepcopy(noisy),
        TEXT_PAIRS,
        tokenizer=tok,
        trainable="all",
        steps=1,
        lr=1e-5,
        beta=1.0,
        disable_dropout=False,
    )
    assert abs(h["loss"][0] - LOG2) > 1e-5


def test_warmup_runs_without_dropout():
    tok = tiny_tokenizer("gpt2")
    m = SimplexBottleneckLM(tiny_model("gpt2").train(), bottleneck_dim=8)
    modes = []
    m.model.register_forward_pre_hook(lambda mod, a: modes.append(mod.training))
    texts = [r["prompt"] + r["chosen"] for r in TEXT_PAIRS]
    warmup_bottleneck(m, texts, 2, tokenizer=tok)
    assert modes and not any(modes) and m.model.training


# -- fp32 master weights ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_a_bf16_checkpoint_trains_as_much_as_fp32(arch):
    """At lr 1e-5 a pure-bf16 Adam step rounds almost every update away; fp32 master weights
    keep it. Stage 1 (the whole body), stage 2 (the adapter) and the warm-up (W_τ, Θ)."""
    tok = tiny_tokenizer(arch)
    texts = [r["prompt"] + r["chosen"] for r in TEXT_PAIRS]
    frac = {}
    for dtype in (torch.float32, torch.bfloat16):
        body = tiny_model(arch, dtype=dtype)
        before = {k: v.detach().clone() for k, v in body.named_parameters()}
        dpo_stage(body, None, TEXT_PAIRS, tokenizer=tok, trainable="all", steps=2, lr=1e-5)
        frac["all", dtype] = _fraction_changed(before, body)
        assert all(p.dtype == torch.float32 for p in body.parameters())  # the masters stay fp32

        m = SimplexBottleneckLM(tiny_model(arch), bottleneck_dim=4).to(dtype)
        before = {k: v.detach().clone() for k, v in m.adapter.named_parameters()}
        dpo_stage(m, None, TEXT_PAIRS, tokenizer=tok, trainable="adapter", steps=2, lr=1e-5)
        frac["adapter", dtype] = _fraction_changed(before, m.adapter)
        assert m.model.get_output_embeddings().weight.dtype == dtype  # frozen: not upcast

        m = SimplexBottleneckLM(tiny_model(arch), bottleneck_dim=4).to(dtype)
        before = {"W_tau": m.W_tau.detach().clone(), "Theta": m.Theta.detach().clone()}
        warmup_bottleneck(m, texts, 2, tokenizer=tok, lr=1e-5)
        frac["warmup", dtype] = _fraction_changed(before, m)
    # "all": embedding rows of tokens absent from the batch get no gradient in either dtype
    assert frac["all", torch.float32] > 0.5, frac
    for stage in ("all", "adapter", "warmup"):
        assert frac[stage, torch.bfloat16] > 0.95 * frac[stage, torch.float32], (stage, frac)
    assert frac["adapter", torch.float32] > 0.9 and frac["warmup", torch.float32] > 0.9, frac


# -- TRL's tokenisation ----------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("fmt", ["chat", "text"])
def test_encode_pairs_tokenises_as_trls_dpo_trainer(arch, fmt, tmp_path):
    """The same ids and completion as TRL's DPOTrainer; a chat completion ends with the
    template's end of turn (not the eos: Llama-3 <|eot_id|>, Qwen2 <|im_end|>)."""
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    tok, arch_info = tiny_tokenizer(arch), ARCHITECTURES[arch]
    rows = CHAT_PAIRS if fmt == "chat" else TEXT_PAIRS
    args = trl.DPOConfig(
        str(tmp_path / "out"),
        report_to=[],
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = trl.DPOTrainer(
        tiny_model(arch),
        ref_model=tiny_model(arch),
        args=args,
        processing_class=tok,
        train_dataset=datasets.Dataset.from_list(rows),
    )
    enc = encode_pairs(tok, rows)
    n = len(rows)
    eos = tok.convert_tokens_to_ids(arch_info.eos_token)
    eot = tok.convert_tokens_to_ids(arch_info.end_of_turn)
    assert eos != eot
    for i, theirs in enumerate(trainer.train_dataset):
        for j, key in ((i, "chosen_ids"), (i + n, "rejected_ids")):
            want = theirs["prompt_ids"] + theirs[key]
            L = int(enc["attention_mask"][j].sum())
            assert enc["input_ids"][j, :L].tolist() == want
            lab = enc["labels"][j, :L].tolist()
            assert lab == [-100] * len(theirs["prompt_ids"]) + theirs[key]
            completion = [t for t in lab if t != -100]
            if fmt == "chat":
                assert eot in completion and eos not in completion
            else:
                assert completion[-1] == eos


# -- context length --------------------------------------------------------------------------------


def test_a_pair_or_prompt_longer_than_the_context_is_an_error():
    tok, base = tiny_tokenizer("llama"), tiny_model("llama")  # 128 positions
    long = " ".join(["the"] * 200)  # about 200 tokens
    assert len(tok(long)["input_ids"]) > 128
    pairs = [TEXT_PAIRS[0], {"prompt": long, "chosen": " yes", "rejected": " no"}]
    with pytest.raises(ValueError, match=r"pair 1 \(chosen\) has \d+ tokens.*context of 128"):
        dpo_stage(base, None, pairs, tokenizer=tok, trainable="all", max_length=512, steps=1)
    with pytest.raises(ValueError, match=r"prompts\[1\] has \d+ tokens.*context of 128"):
        next_token_probs(base, tok, ["Hi", long])


# -- every entry point on the fast matrix, fp32 and bf16 -------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("arch", FAST + WIDER)
def test_entry_points_on_the_matrix(arch, dtype):
    tok = tiny_tokenizer(arch)
    m = SimplexBottleneckLM(tiny_model(arch, dtype=dtype), bottleneck_dim=8)
    texts = [r["prompt"] + r["chosen"] for r in TEXT_PAIRS]
    wu = warmup_bottleneck(m, texts, 2, tokenizer=tok)
    assert all(math.isfinite(x) for x in wu["kl"])
    for rows in (CHAT_PAIRS, TEXT_PAIRS):
        h = dpo_stage(m, copy.deepcopy(m), rows, tokenizer=tok, trainable="adapter", steps=2)
        tol = 1e-6 if dtype == torch.float32 else 2e-2  # autocast policy vs a pure-bf16 reference
        assert abs(h["loss"][0] - LOG2) < tol and all(math.isfinite(x) for x in h["loss"])
    p = next_token_probs(m, tok, ["Hi", "Two plus two is"])
    assert torch.allclose(p.sum(-1), torch.ones(2), atol=1e-4)


# -- the Trainer path ------------------------------------------------------------------------------


@pytest.fixture
def gpt2_wrapped():
    tok = tiny_tokenizer("gpt2")
    m = SimplexBottleneckLM(tiny_model("gpt2").train(), bottleneck_dim=4)
    ref = copy.deepcopy(m)
    with torch.no_grad():  # a policy away from the reference: the losses are not log 2
        m.adapter.M.add_(
            0.3 * torch.randn(m.adapter.M.shape, generator=torch.Generator().manual_seed(0))
        )
    return tok, m, ref


@pytest.mark.parametrize("reference", [True, False])
def test_simplex_trainer_loss_equals_dpo_stage(gpt2_wrapped, reference):
    from icml25.proxy_feedback.trainer import SimplexDPOTrainer

    tok, m, ref = gpt2_wrapped
    ref = ref if reference else None
    trainer = SimplexDPOTrainer(
        copy.deepcopy(m), ref, processing_class=tok, train_dataset=TEXT_PAIRS
    )
    with torch.no_grad():
        ours = float(trainer.compute_loss(trainer.model, trainer.data_collator(TEXT_PAIRS)))
    h = dpo_stage(copy.deepcopy(m), ref, TEXT_PAIRS, tokenizer=tok, steps=1, batch_size=3)
    assert abs(ours - h["loss"][0]) < 1e-5
    assert abs(ours - LOG2) > 1e-3


def test_simplex_trainer_defaults_train_evaluate_and_save(gpt2_wrapped, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    import safetensors.torch

    from icml25.proxy_feedback.trainer import SimplexDPOTrainer

    monkeypatch.chdir(tmp_path)
    tok, m, ref = gpt2_wrapped
    body = {k: v.clone() for k, v in m.model.state_dict().items()}
    adapter = {k: v.clone() for k, v in m.adapter.state_dict().items()}
    train = datasets.Dataset.from_list(TEXT_PAIRS * 4)
    trainer = SimplexDPOTrainer(
        m, ref, args=None, train_dataset=train, eval_dataset=CHAT_PAIRS, processing_class=tok
    )
    a = trainer.args  # dpo_stage's defaults
    assert (a.learning_rate, a.per_device_train_batch_size, a.max_steps, a.beta) == (
        1e-2,
        16,
        100,
        0.1,
    )
    assert a.max_length == 256 and a.disable_dropout and not a.bf16 and a.max_grad_norm == 0
    assert a.lr_scheduler_type == "constant" and a.seed == 0
    assert not str(a.output_dir).startswith(str(tmp_path))
    a.max_steps, a.disable_tqdm = 3, True
    trainer.train()
    assert any(not torch.equal(adapter[k], v) for k, v in m.adapter.state_dict().items())
    assert all(torch.equal(body[k], v) for k, v in m.model.state_dict().items())
    metrics = trainer.evaluate()
    assert math.isfinite(metrics["eval_loss"]) and "eval_rewards/margins" in metrics
    assert list(tmp_path.iterdir()) == []  # nothing written to the working directory
    out = tmp_path / "saved"
    trainer.save_model(str(out))
    again = SimplexBottleneckLM(tiny_model("gpt2"), bottleneck_dim=4, seed=1)
    safetensors.torch.load_model(again, str(out / "model.safetensors"))
    enc = encode_pairs(tok, TEXT_PAIRS)
    with torch.no_grad():
        want = m.eval()(enc["input_ids"], enc["attention_mask"])
        got = again.eval()(enc["input_ids"], enc["attention_mask"])
    assert torch.equal(want, got)


def test_simplex_trainer_bad_input(gpt2_wrapped):
    from icml25.proxy_feedback.trainer import SimplexDPOConfig, SimplexDPOTrainer

    tok, m, _ = gpt2_wrapped
    with pytest.raises(ValueError, match="processing_class"):
        SimplexDPOTrainer(m, None, train_dataset=TEXT_PAIRS)
    with pytest.raises(ValueError, match="trainable must be one of"):
        SimplexDPOTrainer(m, None, processing_class=tok, trainable="body")
    with pytest.raises(ValueError, match="beta must be a finite number > 0"):
        SimplexDPOConfig(beta=0)
    with pytest.raises(TypeError, match="args must be"):
        SimplexDPOTrainer(m, None, args={"lr": 1}, processing_class=tok)


def test_a_nan_weight_stops_dpo_stage_at_its_first_step():
    """A NaN weight trained on silently (loss [nan, nan]); now the first step names itself."""
    tok, policy = tiny_tokenizer("gpt2"), tiny_model("gpt2")
    ref = copy.deepcopy(policy)
    with torch.no_grad():
        policy.transformer.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="dpo_stage step 0"):
        dpo_stage(policy, ref, TEXT_PAIRS, tokenizer=tok, trainable="all", steps=2, lr=1e-5)
