"""Character spans to token spans, and TWA's token roles (paper §3; docs/twa.md)."""

from __future__ import annotations

import random

import pytest
import torch

from icml25.toy import build_tokenizer
from icml25.twa.align import build_token_roles, char_spans_to_token_spans
from icml25.twa.annotations import ErrorSpan

WORDS = [
    "t3",
    "-n0",
    "t7",
    "-a1",
    "t12",
    "-v0",
    "t5",
    "-n1",
    "grüße",
    "naïve",
    "東京",
    "emoji🙂",
    "x",
]


@pytest.fixture(scope="module")
def word_tok():
    return build_tokenizer([" ".join(WORDS)] * 3, kind="word")


@pytest.fixture(scope="module")
def bpe_tok():
    text = ["unbelievable translations of grüße and naïve 東京 emoji🙂 strings"] * 20
    return build_tokenizer(text, vocab_size=300, kind="bpe")


def roles_ref(T, spans, ignore_off, has_unloc, policy):
    """The rules of paper §3 as a plain loop."""
    spans = sorted((a, b, w) for a, b, w in spans if w > 0)
    ids = [-1] * T
    for k, (a, b, _) in enumerate(spans):
        for t in range(a, b):
            if ids[t] < 0:
                ids[t] = k
    if has_unloc and policy == "drop_example":
        return [False] * T, ids, True
    if has_unloc and policy == "no_positive":
        pos = [False] * T
    elif ignore_off:
        t_star = spans[0][0] if spans else T
        pos = [t < t_star for t in range(T)]
    else:
        pos = [i < 0 for i in ids]
    return [p and i < 0 for p, i in zip(pos, ids)], ids, False


def test_roles_match_the_loop_on_random_configurations():
    rng = random.Random(0)
    for _ in range(500):
        T = rng.randint(1, 12)
        spans = []
        for _ in range(rng.randint(0, 3)):
            a = rng.randrange(T)
            spans.append((a, rng.randint(a + 1, T), rng.choice([0.0, 0.1, 1.0, 5.0])))
        for ignore_off in (True, False):
            for policy in ("no_positive", "ignore", "drop_example"):
                has = rng.random() < 0.3
                r = build_token_roles(
                    T,
                    spans,
                    ignore_off_trajectory=ignore_off,
                    has_unlocalized=has,
                    unlocalized=policy,
                )
                pos, ids, drop = roles_ref(T, spans, ignore_off, has, policy)
                assert r.positive.tolist() == pos and r.span_ids.tolist() == ids
                assert r.drop == drop
                assert len(r.span_weights) == sum(w > 0 for *_, w in spans)


def test_trajectory_rule_by_hand():
    r = build_token_roles(6, [(2, 4, 5.0)])  # tokens 0-1 positive, 2-3 error, 4-5 (EOS) ignored
    assert r.positive.tolist() == [True, True, False, False, False, False]
    assert r.span_ids.tolist() == [-1, -1, 0, 0, -1, -1]
    allpos = build_token_roles(6, [(2, 4, 5.0)], ignore_off_trajectory=False)
    assert allpos.positive.tolist() == [True, True, False, False, True, True]
    clean = build_token_roles(4, [])
    assert clean.positive.all() and clean.span_weights.numel() == 0  # EOS included
    first = build_token_roles(3, [(0, 1, 1.0)])
    assert not first.positive.any()
    with pytest.raises(ValueError, match="0 <= start < end <= T = 3"):
        build_token_roles(3, [(2, 5, 1.0)])
    with pytest.raises(ValueError, match="unlocalized must be one of"):
        build_token_roles(3, [], unlocalized="skip")


def test_word_level_offsets_include_the_space_before_a_word(word_tok):
    text = "t3 -n0 t7 -a1 t12 -v0"
    # the span of "-a1" (MQM often includes a trailing space: trimmed on load, tolerated here)
    s = text.index("-a1")
    spans, unloc = char_spans_to_token_spans(text, [ErrorSpan(s, s + 4, "Minor")], word_tok)
    toks = word_tok(text, add_special_tokens=False)["input_ids"]
    assert len(toks) == 6 and spans == [(3, 4, 1.0)] and unloc == []
    # a span over "t7 -a1" covers two tokens; one character of a word is enough
    spans, _ = char_spans_to_token_spans(
        text, [ErrorSpan(text.index("t7"), s + 1, "Major")], word_tok
    )
    assert spans == [(2, 4, 5.0)]


def test_unicode_bpe_mid_word_and_truncation(bpe_tok):
    text = "unbelievable grüße naïve 東京 emoji🙂"
    enc = bpe_tok(text, add_special_tokens=False, return_offsets_mapping=True)
    offs = enc["offset_mapping"]
    for word in ("grüße", "naïve", "東京", "🙂"):
        a = text.index(word)
        b = a + len(word)
        a += 1 if len(word) > 1 else 0  # starting mid-word where there is a middle
        (span,), unloc = char_spans_to_token_spans(text, [ErrorSpan(a, b, "Major")], bpe_tok)
        # byte-level pieces of one character share its offsets: all of them are in the span
        want = [i for i, (x, y) in enumerate(offs) if x < b and a < y and text[x:y].strip()]
        assert (span[0], span[1]) == (want[0], want[-1] + 1), word
    # truncation: a span cut by max_length is clipped, one beyond it is dropped
    n = len(offs)
    last = ErrorSpan(text.index("emoji"), len(text), "Minor")
    full, _ = char_spans_to_token_spans(text, [last], bpe_tok)
    cut, unloc = char_spans_to_token_spans(text, [last], bpe_tok, max_length=full[0][0] + 1)
    assert cut == [(full[0][0], full[0][0] + 1, 1.0)] and unloc == []
    gone, unloc = char_spans_to_token_spans(text, [last], bpe_tok, max_length=2)
    assert gone == [] and unloc == [] and n > 2


def test_unlocalizable_spans_and_bad_input(word_tok):
    text = "t3 -n0"
    spans, unloc = char_spans_to_token_spans(
        text,
        [
            ErrorSpan(0, 0, "Major"),
            ErrorSpan(0, 2, "Major", side="source"),
            ErrorSpan(0, 2, "Neutral"),
            ErrorSpan(0, 2, "Minor"),
            ErrorSpan(0, 2, "Major"),
        ],
        word_tok,
    )
    assert spans == [(0, 1, 5.0)]  # identical spans merged with the max weight; Neutral skipped
    assert [(s.start, s.end, s.side) for s in unloc] == [(0, 0, "target"), (0, 2, "source")]

    class Slow:
        is_fast = False

    with pytest.raises(TypeError, match="not a fast tokenizer"):
        char_spans_to_token_spans(text, [], Slow())
    with pytest.raises(ValueError, match="outside the text"):
        char_spans_to_token_spans(text, [ErrorSpan(0, 9, "Major")], word_tok)
    with pytest.raises(ValueError, match="max_length"):
        char_spans_to_token_spans(text, [], word_tok, max_length=-1)
    assert torch.is_tensor(build_token_roles(2, []).positive)
