"""HFChat on tiny Llama models: rendering, seeds, batching, stop strings, logprobs, fast decoder."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from icml25.llm import HFChat  # noqa: E402
from icml25.llm.sampling import FastLlamaDecoder, HFDecoder, fast_llama_supported  # noqa: E402
from icml25.toy import build_tokenizer, tiny_causal_lm  # noqa: E402

USER = [{"role": "user", "content": "reverse red cat sun"}]


def test_trained_tiny_model_answers_greedily(tiny_chat):
    assert tiny_chat.chat(USER, temperature=0) == ["sun cat red"]
    assert tiny_chat.chat(USER, temperature=0, n=3) == ["sun cat red"] * 3


def test_seeds_are_reproducible_and_independent_of_batch(tiny_chat):
    many = [[{"role": "user", "content": f"reverse {w} dog"}] for w in ("red", "sun", "tree")]
    alone = tiny_chat.chat(many[1], n=4, temperature=5.0, seed=3, max_tokens=8)
    again = tiny_chat.chat(many[1], n=4, temperature=5.0, seed=3, max_tokens=8)
    batched = tiny_chat.chat_many(many, n=4, temperature=5.0, seed=3, max_tokens=8)
    assert alone == again == batched[1]
    assert len(set(alone)) > 1  # the n samples differ from each other
    other = tiny_chat.chat(many[1], n=4, temperature=5.0, seed=4, max_tokens=8)
    assert other != alone


def test_max_tokens_and_stop_strings(tiny_chat):
    (text,) = tiny_chat.complete(USER, temperature=0, max_tokens=1)
    assert text.finish_reason == "length" and text.text == "sun"
    assert tiny_chat.chat(USER, temperature=0, stop=[" cat"]) == ["sun"]


def test_logprobs_match_a_manual_forward(tiny_chat):
    lp = tiny_chat.logprobs(USER, "sun cat red")
    tok, model = tiny_chat.tokenizer, tiny_chat.model
    prompt = tiny_chat.encode_prompt(USER)
    cont = tok("sun cat red", add_special_tokens=False)["input_ids"]
    assert lp.shape == (len(cont),) and lp.dtype == torch.float32
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + cont])).logits[0].double()
    ref = sum(logits[len(prompt) - 1 + t].log_softmax(-1)[c] for t, c in enumerate(cont))
    assert float(lp.sum()) == pytest.approx(float(ref), abs=1e-4)
    assert float(lp.sum()) > float(tiny_chat.logprobs(USER, "dog moon tree").sum())
    assert tiny_chat.logprobs(USER, "sun", add_eos=True).shape == (2,)
    with pytest.raises(TypeError, match="continuation must be a string"):
        tiny_chat.logprobs(USER, 3)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(["some words for a tiny tokenizer", "system user assistant"], 300)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"n_kv_heads": 2, "tie_embeddings": False},
        {"d_model": 48, "n_heads": 3, "n_layers": 3},
    ],
)
def test_fast_decoder_equals_hugging_face(tok, kw):
    model = tiny_causal_lm(tok, seed=1, **kw)
    assert fast_llama_supported(model)
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12]]
    from icml25.llm.sampling import _left_pad

    ids, mask = _left_pad(prompts, tok.pad_token_id, torch.device("cpu"))
    fast_dec, hf_dec = FastLlamaDecoder(model), HFDecoder(model)
    with torch.no_grad():
        fast, fs = fast_dec.prefill(ids, mask, max_new_tokens=3)
        slow, ss = hf_dec.prefill(ids, mask)
        torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)
        nxt = torch.tensor([[20], [21], [22]])
        for _ in range(3):
            fast, fs = fast_dec.step(nxt, fs)
            slow, ss = hf_dec.step(nxt, ss)
            torch.testing.assert_close(fast, slow, atol=1e-4, rtol=1e-4)


def test_fast_and_hf_paths_sample_the_same(tiny_chat):
    slow = HFChat(tiny_chat.model, tiny_chat.tokenizer, fast=False)
    kw = {"n": 3, "temperature": 1.0, "seed": 11, "max_tokens": 6}
    assert slow.chat(USER, **kw) == tiny_chat.chat(USER, **kw)


def test_chat_template_rejecting_system_folds_it_into_first_user_turn(tiny_chat):
    tok = tiny_chat.tokenizer
    strict = (
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}" + tok.chat_template
    )
    chat = HFChat(tiny_chat.model, tok)
    old = tok.chat_template
    try:
        tok.chat_template = strict
        text = chat.render([{"role": "system", "content": "be brief"}, *USER])
    finally:
        tok.chat_template = old
    assert text == "<|user|>be brief\n\nreverse red cat sun<|end|><|assistant|>"


def test_plain_rendering_without_template(tiny_chat):
    tok = tiny_chat.tokenizer
    old, tok.chat_template = tok.chat_template, None
    try:
        text = HFChat(tiny_chat.model, tok).render([{"role": "system", "content": "s"}, *USER])
    finally:
        tok.chat_template = old
    assert text == "System: s\nUser: reverse red cat sun\nAssistant:"


def test_images_are_refused_by_text_only_models(tiny_chat):
    msg = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(ValueError, match="image_url"):
        tiny_chat.chat(msg)


def test_bad_constructor_arguments(tiny_chat):
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        HFChat(tiny_chat.model)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        HFChat(tiny_chat.model, tiny_chat.tokenizer, batch_size=0)


def test_gpt2_goes_through_the_generic_decoder():
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = build_tokenizer(["a b c d e f g"], 300)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=len(tok), n_layer=1, n_embd=32, n_head=2, n_positions=64)
    ).eval()
    chat = HFChat(model, tok)
    assert isinstance(chat.decoder, HFDecoder)
    out = chat.chat(USER, n=2, max_tokens=4, seed=0)
    assert len(out) == 2 and all(isinstance(t, str) for t in out)
