"""``HFChat`` on the architecture matrix (:mod:`icml25.toy.archs`): tiny random-init GPT-2, Llama-3,
Qwen2, Gemma-2 and Mistral with their families' real tokens and chat templates, 128 positions.

What the toy Llama never tested: loading by path with ``device``/``dtype``, prompts longer than
the context, dropout configs, models without a pad token, a turn end that is not the EOS, a
template without a system role, bf16 weights, and the fast Llama decoder staying on Llama only.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from icml25.llm import HFChat  # noqa: E402
from icml25.llm.sampling import FastLlamaDecoder, HFDecoder  # noqa: E402
from icml25.toy import ARCHITECTURES, save_tiny, tiny_model, tiny_tokenizer  # noqa: E402

CAUSAL = ["gpt2", "llama", "qwen2", "gemma2", "mistral"]
PROMPTS = [
    "hello",
    "the cat sat on the mat and looked at the dog",
    "what is the capital of france, and why is it that city",
]


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def long_text(words: int) -> str:
    return " ".join(["apple", "river", "stone", "cloud"] * (words // 4))


@pytest.fixture(scope="module", params=CAUSAL)
def arch(request):
    return request.param


def chat_for(arch: str, **kw) -> HFChat:
    return HFChat(tiny_model(arch), tiny_tokenizer(arch), **kw)


# -- loading -------------------------------------------------------------------------------------


def test_a_path_loads_through_load_model_with_device_and_dtype(tmp_path, monkeypatch):
    import icml25.llm.loading as loading

    path = save_tiny("llama", tmp_path / "llama")
    seen = {}
    real = loading.load_model

    def spy(*args, **kwargs):
        seen.update(kwargs, args=args)
        return real(*args, **kwargs)

    monkeypatch.setattr(loading, "load_model", spy)
    chat = HFChat(str(path), dtype="bf16", device="cpu")
    assert seen["args"] == (str(path), "causal_lm")
    assert seen["device"] == "cpu" and seen["dtype"] == "bf16"
    assert next(chat.model.parameters()).dtype == torch.bfloat16
    assert not chat.model.training
    HFChat(str(path))  # default: GPU when there is one, the checkpoint's own dtype
    assert seen["device"] == "auto" and seen["dtype"] == "auto"
    assert chat.name == f"hf:{path}"
    assert chat.chat(user("hello"), max_tokens=3, temperature=0.0)[0] is not None


def test_a_bf16_checkpoint_keeps_its_dtype_and_a_loaded_model_its_place(tmp_path):
    path = save_tiny("qwen2", tmp_path / "qwen2", dtype=torch.bfloat16)
    chat = HFChat(str(path))
    assert next(chat.model.parameters()).dtype == torch.bfloat16  # "auto": the checkpoint's
    assert HFChat(str(path), dtype="fp32").model.dtype == torch.float32
    model = tiny_model("gpt2")
    same = HFChat(model, tiny_tokenizer("gpt2"))
    assert same.model is model and same.device == torch.device("cpu")
    with pytest.raises(ValueError, match="dtype must be"):
        HFChat(model, tiny_tokenizer("gpt2"), dtype="int8")


# -- context length ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_prompt_past_the_context_is_an_error_for_that_request_only(name):
    chat = chat_for(name, batch_size=4)
    limit = 128
    long = user(long_text(200))
    assert len(chat.encode_prompt(long)) > limit
    out = chat.complete_many(
        [user("hello"), long, user("the cat")], max_tokens=4, temperature=0.0, errors="return"
    )
    assert isinstance(out[1], ValueError)
    assert "context of 128" in str(out[1]) and "tokens" in str(out[1])
    for i in (0, 2):  # the others still ran, in the same batch
        assert not isinstance(out[i], BaseException) and isinstance(out[i][0].text, str)
    with pytest.raises(ValueError, match="context of 128"):
        chat.chat(long, max_tokens=4)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_prompt_plus_max_tokens_past_the_context_is_refused_and_unset_max_tokens_is_cut(name):
    chat = chat_for(name)
    words = 4
    while len(chat.encode_prompt(user(long_text(words)))) < 70:
        words += 4
    msgs = user(long_text(words))
    n = len(chat.encode_prompt(msgs))
    assert 70 <= n < 120
    with pytest.raises(ValueError, match=rf"{n} tokens \+ 100 new tokens"):
        chat.chat(msgs, max_tokens=100, temperature=0.0)
    # Without max_tokens the reply stops where the context ends (as vLLM does), never past it.
    suppress = torch.full((len(chat.tokenizer),), 0.0)
    suppress[chat.eos_ids] = -1e4  # no early stop: the cut is the context's

    handle = _bias_logits(chat.model, suppress)
    try:
        (c,) = chat.complete(msgs, temperature=0.0, logprobs=True, top_logprobs=0)
    finally:
        handle.remove()
    assert c.finish_reason == "length" and len(c.logprobs) == 128 - n


def test_logprobs_past_the_context_are_refused():
    chat = chat_for("gpt2")
    with pytest.raises(ValueError, match="context of 128"):
        chat.logprobs(user("hi"), long_text(200))
    with pytest.raises(ValueError, match="context of 128"):
        chat.text_logprobs(long_text(200))


# -- generation on each architecture -------------------------------------------------------------


def _bias_logits(model, bias):
    """A forward hook adding ``bias`` (V,) to the LM head's output."""

    def hook(_module, _inputs, output):
        return output + bias.to(output)

    return model.get_output_embeddings().register_forward_hook(hook)


def test_left_padded_batch_equals_each_prompt_alone(arch):
    model = tiny_model(arch)
    if ARCHITECTURES[arch].has_dropout:
        model.train()  # a policy mid-training: sampling must not run its dropout
    chat = HFChat(model, tiny_tokenizer(arch), batch_size=8)
    kw = {"max_tokens": 8, "temperature": 0.0, "logprobs": True, "top_logprobs": 0}
    batched = chat.complete_many([user(p) for p in PROMPTS], **kw)
    for prompt, got in zip(PROMPTS, batched):
        (alone,) = chat.complete(user(prompt), **kw)
        assert [t.token for t in got[0].logprobs] == [t.token for t in alone.logprobs]
        assert got[0].text == alone.text
        for a, b in zip(got[0].logprobs, alone.logprobs):
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
    assert model.training == ARCHITECTURES[arch].has_dropout  # the caller's mode is restored


def test_sampling_is_seeded_per_row_and_independent_of_the_batch(arch):
    chat = chat_for(arch, batch_size=8)
    kw = {"n": 2, "temperature": 1.0, "max_tokens": 6, "seed": 3}
    batched = chat.chat_many([user(p) for p in PROMPTS], **kw)
    assert batched == [chat.chat(user(p), **kw) for p in PROMPTS]


def test_generation_stops_at_the_templates_end_of_turn(arch):
    arch_info = ARCHITECTURES[arch]
    chat = chat_for(arch)
    tok = chat.tokenizer
    eot = tok.convert_tokens_to_ids(arch_info.end_of_turn)
    assert eot in chat.eos_ids and tok.eos_token_id in chat.eos_ids
    bias = torch.zeros(len(tok))
    bias[eot] = 1e4  # the model ends its turn at once
    handle = _bias_logits(chat.model, bias)
    try:
        (c,) = chat.complete(user("hi"), max_tokens=5, temperature=0.0, logprobs=True)
    finally:
        handle.remove()
    assert c.finish_reason == "stop" and c.logprobs == [] and c.text == ""


def test_llama3_eot_ends_a_reply_even_when_the_generation_config_lists_only_the_eos():
    model = tiny_model("llama")
    tok = tiny_tokenizer("llama")
    model.generation_config.eos_token_id = tok.eos_token_id  # an early Llama-3 release
    chat = HFChat(model, tok)
    assert tok.convert_tokens_to_ids("<|eot_id|>") in chat.eos_ids


def test_gemma2_template_without_system_role_gets_the_system_text_in_the_first_user_turn():
    chat = chat_for("gemma2")
    msgs = [{"role": "system", "content": "be brief"}, *user("hello")]
    with pytest.raises(Exception, match="System role"):
        chat.tokenizer.apply_chat_template(msgs, tokenize=False)
    text = chat.render(msgs)
    assert (
        text == "<bos><start_of_turn>user\nbe brief\n\nhello<end_of_turn>\n<start_of_turn>model\n"
    )
    assert isinstance(chat.chat(msgs, max_tokens=3, temperature=0.0)[0], str)


def test_the_fast_llama_decoder_runs_only_llama_and_matches_the_generic_one(arch):
    chat = chat_for(arch)
    if arch == "llama":
        assert isinstance(chat.decoder, FastLlamaDecoder)
        slow = HFChat(chat.model, chat.tokenizer, fast=False)
        kw = {"max_tokens": 8, "temperature": 0.0}
        assert slow.chat_many([user(p) for p in PROMPTS], **kw) == chat.chat_many(
            [user(p) for p in PROMPTS], **kw
        )
    else:
        assert isinstance(chat.decoder, HFDecoder)


@pytest.mark.parametrize("name", ["gpt2", "llama", "qwen2"])
def test_bf16_models_generate_and_score(name):
    chat = HFChat(tiny_model(name, dtype=torch.bfloat16), tiny_tokenizer(name))
    out = chat.complete_many([user(p) for p in PROMPTS], max_tokens=6, temperature=0.0)
    assert all(isinstance(c[0].text, str) for c in out)
    assert all(c[0].finish_reason in ("stop", "length") for c in out)
    lp = chat.logprobs(user("hello"), " the cat")
    assert lp.dtype == torch.float32 and torch.isfinite(lp).all() and (lp <= 0).all()


def test_logprobs_run_without_dropout_and_equal_a_manual_eval_forward():
    model = tiny_model("gpt2").train()
    tok = tiny_tokenizer("gpt2")
    chat = HFChat(model, tok)
    a = chat.logprobs(user("hello"), " the cat sat")
    b = chat.logprobs(user("hello"), " the cat sat")
    assert torch.equal(a, b) and model.training
    prompt = chat.encode_prompt(user("hello"))
    cont = tok(" the cat sat", add_special_tokens=False)["input_ids"]
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + cont])).logits[0].float()
    ref = torch.log_softmax(logits[len(prompt) - 1 : -1], -1)
    ref = ref.gather(-1, torch.tensor(cont)[:, None]).squeeze(-1)
    torch.testing.assert_close(a, ref, atol=1e-5, rtol=1e-5)
    assert math.isclose(float(a.sum()), float(ref.sum()), abs_tol=1e-4)
