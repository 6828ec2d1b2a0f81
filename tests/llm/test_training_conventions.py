"""TRL's conventions in ``icml25.llm.training`` on the architecture matrix: targets equal to TRL's
own tokenisation for the same chat template, dropout off for log-probs, float32 master weights."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from icml25.llm import (  # noqa: E402
    MixedPrecision,
    dropout_disabled,
    tokenize_preference,
    tokenize_prompt_completion,
)
from icml25.toy import archs  # noqa: E402

CHAT_ARCHS = ["gpt2", "llama", "qwen2", "gemma2", "mistral"]
ROWS = [
    ("reverse red cat", "cat red"),
    ("Name a colour.", "Blue, as the sky at noon."),
]


def _chat(q, a=None):
    prompt = [{"role": "user", "content": q}]
    return prompt if a is None else [{"role": "assistant", "content": a}]


@pytest.fixture(scope="module")
def trl_sft_rows():
    """TRL's ``SFTTrainer`` tokenisation of ROWS per architecture (its prepared rows: ids, labels)."""
    pytest.importorskip("trl")
    import tempfile

    import datasets
    from trl import SFTConfig, SFTTrainer

    out = {}
    for arch in CHAT_ARCHS:
        tok = archs.tiny_tokenizer(arch)
        data = datasets.Dataset.from_list(
            [{"prompt": _chat(q), "completion": _chat(q, a)} for q, a in ROWS]
        )
        with tempfile.TemporaryDirectory() as tmp:
            args = SFTConfig(output_dir=tmp, report_to=[], use_cpu=True, bf16=False)
            trainer = SFTTrainer(
                model=archs.tiny_model(arch), args=args, train_dataset=data, processing_class=tok
            )
        out[arch] = (tok, list(trainer.train_dataset))
    return out


@pytest.mark.parametrize("arch", CHAT_ARCHS)
def test_sft_targets_equal_trls(trl_sft_rows, arch):
    tok, rows = trl_sft_rows[arch]
    end = archs.ARCHITECTURES[arch].end_of_turn
    for (q, a), trl_row in zip(ROWS, rows):
        ours = tokenize_prompt_completion(tok, _chat(q), _chat(q, a))
        assert ours["input_ids"] == trl_row["input_ids"]
        assert ours["labels"] == trl_row["labels"]
        # the target ends with the template's end of turn, which is not the eos where they differ
        target = [t for t in ours["labels"] if t != -100]
        assert tok.convert_tokens_to_ids(end) in target


def test_text_rows_get_the_eos_string_as_trl_does():
    tok = archs.tiny_tokenizer("llama")
    row = tokenize_prompt_completion(tok, "Q: red?", " A: yes")
    assert row["input_ids"][-1] == tok.eos_token_id
    assert row["input_ids"] == tok("Q: red? A: yes" + tok.eos_token)["input_ids"]
    assert row["labels"][: len(tok("Q: red?")["input_ids"])] == [-100] * len(
        tok("Q: red?")["input_ids"]
    )


def test_max_length_keeps_the_start_and_refuses_an_empty_target():
    tok = archs.tiny_tokenizer("qwen2")
    full = tokenize_prompt_completion(tok, _chat("red cat"), _chat("x", "cat red"))
    cut = tokenize_prompt_completion(
        tok, _chat("red cat"), _chat("x", "cat red"), max_length=len(full["input_ids"]) - 2
    )
    assert cut["input_ids"] == full["input_ids"][:-2]
    n_prompt = full["labels"].count(-100)
    with pytest.raises(ValueError, match="no completion token left"):
        tokenize_prompt_completion(
            tok, _chat("red cat"), _chat("x", "cat red"), max_length=n_prompt
        )
    with pytest.raises(TypeError, match="both be strings or both lists"):
        tokenize_prompt_completion(tok, "red cat", _chat("x", "cat red"))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_preference_rows_equal_trls(arch):
    pytest.importorskip("trl")
    import tempfile

    import datasets
    from trl import DPOConfig, DPOTrainer

    tok = archs.tiny_tokenizer(arch)
    q, good, bad = "Name a colour.", "Blue.", "I will not."
    data = datasets.Dataset.from_list(
        [{"prompt": _chat(q), "chosen": _chat(q, good), "rejected": _chat(q, bad)}]
    )
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, report_to=[], use_cpu=True, bf16=False)
        trainer = DPOTrainer(
            model=archs.tiny_model(arch),
            ref_model=archs.tiny_model(arch),
            args=args,
            train_dataset=data,
            processing_class=tok,
        )
    trl_row = trainer.train_dataset[0]
    ours = tokenize_preference(tok, _chat(q), _chat(q, good), _chat(q, bad))
    for key in ("prompt_ids", "chosen_ids", "rejected_ids"):
        assert ours[key] == trl_row[key], key


def test_dropout_disabled_gives_log2_and_restores_the_flags():
    """On GPT-2 (dropout 0.1) two forwards in train mode differ; inside the block they agree,
    so a DPO margin against an identical reference is exactly 0 (first loss = log 2)."""
    model = archs.tiny_model("gpt2").train()
    ids = torch.tensor([[5, 9, 11, 14, 20, 7]])
    a, b = model(input_ids=ids).logits, model(input_ids=ids).logits
    assert not torch.equal(a, b)
    with dropout_disabled(model):
        a, b = model(input_ids=ids).logits, model(input_ids=ids).logits
        assert a.requires_grad
    assert torch.equal(a, b)
    margin = (a - b).sum()
    assert float(-torch.nn.functional.logsigmoid(0.1 * margin.detach())) == pytest.approx(
        math.log(2), abs=1e-7
    )
    assert model.training and all(m.training for m in model.modules())
    model.eval()
    model.transformer.h[0].train()  # a mixed state comes back as it was
    with dropout_disabled(model):
        pass
    assert model.transformer.h[0].training and not model.transformer.h[1].training


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_bf16_with_master_weights_trains_like_fp32(arch):
    """8 AdamW steps at lr 1e-5: fp32 changes nearly every weight; pure bf16 rounds most updates
    away; bf16 with float32 master weights changes as many as fp32."""

    def fraction_changed(dtype, master):
        model = archs.tiny_model(arch, dtype=dtype).train()
        before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
        mp = MixedPrecision.prepare(model, enabled=master)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
        ids = torch.randint(3, 200, (4, 12), generator=torch.Generator().manual_seed(0))
        for _ in range(8):
            with mp.autocast():
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
        changed = sum(
            int((p.detach().float() != before[n]).sum()) for n, p in model.named_parameters()
        )
        return changed / sum(p.numel() for p in model.parameters()), mp

    fp32, _ = fraction_changed(None, True)
    pure, _ = fraction_changed(torch.bfloat16, False)
    mixed, mp = fraction_changed(torch.bfloat16, True)
    assert fp32 > 0.9 and pure < 0.5
    assert mixed > 0.9 and mp.compute_dtype == torch.bfloat16 and mp.upcast > 0


def test_master_weights_leave_frozen_parameters_and_fp32_models_alone():
    model = archs.tiny_model("llama", dtype=torch.bfloat16)
    for name, p in model.named_parameters():
        p.requires_grad_("layers.0" in name)
    mp = MixedPrecision.prepare(model)
    for name, p in model.named_parameters():
        assert p.dtype == (torch.float32 if "layers.0" in name else torch.bfloat16), name
    assert MixedPrecision.prepare(archs.tiny_model("llama")).compute_dtype is None
    with mp.autocast():
        out = model(input_ids=torch.tensor([[4, 5, 6]])).logits
    assert out.dtype == torch.bfloat16


def test_a_second_round_still_computes_in_the_checkpoints_dtype():
    model = archs.tiny_model("llama", dtype=torch.bfloat16)
    first = MixedPrecision.prepare(model)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    again = MixedPrecision.prepare(model)
    assert first.compute_dtype == again.compute_dtype == torch.bfloat16 and again.upcast == 0
    with again.autocast():
        assert model(input_ids=torch.tensor([[4, 5, 6]])).logits.dtype == torch.bfloat16
    assert MixedPrecision.prepare(model, enabled=False).compute_dtype is None


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "gemma2", "mistral", "opt"])
def test_end_of_turn_is_the_templates_not_the_eos(arch):
    from icml25.llm.training import end_of_turn_id

    tok, arch_info = archs.tiny_tokenizer(arch), archs.ARCHITECTURES[arch]
    assert end_of_turn_id(tok) == tok.convert_tokens_to_ids(arch_info.end_of_turn)
    tok.chat_template = None
    assert end_of_turn_id(tok) is None


def test_position_ids_count_attended_tokens():
    from icml25.llm.training import position_ids

    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_a_nan_weight_is_an_error_at_the_first_step_not_a_silent_nan_run():
    """A NaN weight used to train on (sft losses [nan, nan]) and generate ('}}}'); now the loops
    stop with FloatingPointError naming the step, and HFChat returns an error per request."""
    from icml25.llm import HFChat, check_finite_loss
    from icml25.safety_reasoning import sft

    tok, model = archs.tiny_tokenizer("gpt2"), archs.tiny_model("gpt2")
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="sft step 0"):
        sft(model, tok, [("red cat", "cat red")] * 2, steps=2, batch_size=2, progress=False)
    chat = HFChat(model, tok)
    (res,) = chat.complete_many(
        [[{"role": "user", "content": "hi"}]], max_tokens=3, errors="return"
    )
    assert isinstance(res, FloatingPointError) and "NaN or inf" in str(res)
    check_finite_loss(torch.tensor(0.5), "fine")
    with pytest.raises(FloatingPointError, match="step 3: the loss is inf"):
        check_finite_loss(torch.tensor(float("inf")), "step 3")
