"""Tiny tokenizers, models and the training loop."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from icml25.toy import (  # noqa: E402
    CHAT_TEMPLATE,
    build_tokenizer,
    encode_examples,
    tiny_causal_lm,
    train_causal_lm,
)

TEXTS = ["the cat sat on the mat", "hello world, how are you?", "one two three"]


@pytest.mark.parametrize("kind", ["bpe", "word"])
def test_tokenizer_round_trip_special_tokens_and_template(kind):
    tok = build_tokenizer(TEXTS * 10, 300, kind=kind)
    for text in ["the cat sat on the mat", "one two three"]:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    if kind == "bpe":  # byte level: anything round-trips, unseen characters included
        odd = "naïve ∑ 🙂  two  spaces\n"
        assert tok.decode(tok(odd, add_special_tokens=False)["input_ids"]) == odd
    assert tok.pad_token == "<pad>" and tok.eos_token == "<|end|>" and tok.bos_token == "<|bos|>"
    assert tok.chat_template == CHAT_TEMPLATE
    text = tok.apply_chat_template(
        [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text == "<|system|>s<|end|><|user|>u<|end|><|assistant|>"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.convert_tokens_to_ids("<|assistant|>") == ids[-1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"texts": []}, "non-empty list of strings"),
        ({"vocab_size": 100}, "vocab_size=100 is too small for byte-level BPE"),
        ({"kind": "char"}, "kind must be 'bpe' or 'word'"),
        ({"vocab_size": 3, "kind": "word"}, "too small"),
    ],
)
def test_tokenizer_bad_arguments(kwargs, match):
    args = {"texts": TEXTS, "vocab_size": 300, **kwargs}
    with pytest.raises(ValueError, match=match):
        build_tokenizer(args.pop("texts"), **args)


def test_tiny_model_is_seeded_sized_and_leaves_global_rng_alone():
    tok = build_tokenizer(TEXTS, 300)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = tiny_causal_lm(tok, seed=5)
    assert torch.rand(1) == before  # building a model did not consume the global RNG
    b = tiny_causal_lm(tok, seed=5)
    c = tiny_causal_lm(tok, seed=6)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)
    assert 10_000 < pa.numel() < 2_000_000
    assert a.config.vocab_size == len(tok) and a.config.eos_token_id == tok.eos_token_id
    with pytest.raises(ValueError, match="divisible by n_heads"):
        tiny_causal_lm(tok, d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="n_layers must be a positive integer"):
        tiny_causal_lm(tok, n_layers=0)


def test_encode_examples_masks_prompt_tokens_of_pairs():
    tok = build_tokenizer(TEXTS, 300)
    (plain, pair) = encode_examples(tok, ["the cat", ("hello", "one two")], max_length=64)
    ids, mask = plain
    assert (
        ids[0] == tok.bos_token_id
        and ids[-1] == tok.eos_token_id
        and mask == [0] + [1] * (len(ids) - 1)
    )
    ids, mask = pair
    trained = [i for i, m in zip(ids, mask) if m]
    assert tok.decode(trained[:-1]) == "one two" and trained[-1] == tok.eos_token_id
    assert (
        tok.decode([i for i, m in zip(ids, mask) if not m]) == "<|user|>hello<|end|><|assistant|>"
    )
    with pytest.raises(
        ValueError, match=r"data\[0\] must be a text or a \(prompt, response\) pair"
    ):
        encode_examples(tok, [3], 10)
    with pytest.raises(ValueError, match="non-empty list"):
        encode_examples(tok, [], 10)


def test_training_learns_and_is_seeded():
    pairs = [(f"copy {w}", w) for w in ["red", "green", "blue", "cat", "dog", "sun"]] * 5
    tok = build_tokenizer([t for p in pairs for t in p], 300)
    m1, m2 = tiny_causal_lm(tok, seed=0), tiny_causal_lm(tok, seed=0)
    l1 = train_causal_lm(m1, tok, pairs, steps=60, batch_size=16, progress=False)
    l2 = train_causal_lm(m2, tok, pairs, steps=60, batch_size=16, progress=False)
    assert l1 == l2
    assert l1[-1] < 0.25 * l1[0]
    assert not m1.training
    with pytest.raises(ValueError, match="lr must be a positive finite number"):
        train_causal_lm(m1, tok, pairs, steps=1, lr=0)
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        train_causal_lm(m1, tok, pairs, steps=0)


def test_digits_loader_shapes_scaling_and_bad_input():
    pytest.importorskip("sklearn")
    from icml25.toy import digits, digits_split

    x, y = digits()
    assert tuple(x.shape) == (1797, 1, 8, 8) and float(x.min()) == 0.0 and float(x.max()) == 1.0
    assert digits("flat")[0].shape == (1797, 64) and sorted(set(y.tolist())) == list(range(10))
    xtr, ytr, xte, yte = digits_split(0.2, seed=0)
    assert len(xtr) + len(xte) == 1797 and len(xte) == 360
    # stratified: every class keeps its share in the test set
    assert all(
        abs((yte == c).sum().item() / 360 - (y == c).sum().item() / 1797) < 0.01 for c in range(10)
    )
    with pytest.raises(ValueError, match="shape must be one of"):
        digits("square")
    with pytest.raises(ValueError, match="test_size"):
        digits_split(1.5)
