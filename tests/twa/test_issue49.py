"""Issue 49: overlapping and nested spans each scored over their own tokens, the span term's
gradient exact in float32 and bf16 where the span is most likely, prompts truncated without
losing the template's marker, NaN logits refused."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.toy import build_tokenizer
from icml25.twa import AnnotatedTranslation, ErrorSpan, twa_loss
from icml25.twa.align import build_token_roles
from icml25.twa.collate import TWACollator, chat_prompt_fn

D = torch.float64


def brute_own_ranges(logits, labels, positive, spans, eps=0.0):
    """Float64: CE on the positives plus, for every span (b, a, e, w), w * -log(1 - p(span))
    with p(span) the product over the span's OWN tokens [a, e), overlaps counted in each."""
    lp = torch.log_softmax(logits.double(), -1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    total = -(lp * positive).sum()
    for b, a, e, w in spans:
        S = lp[b, a:e].sum()
        total = total - w * torch.log(1 - (1 - eps) * torch.exp(S))
    return total


@pytest.mark.parametrize(
    "token_spans",
    [
        [(1, 6, 5.0), (2, 3, 1.0)],  # a Minor error inside a Major span
        [(1, 4, 5.0), (3, 6, 1.0)],  # partial overlap
        [(0, 3, 1.0), (0, 5, 5.0), (2, 3, 0.1), (4, 7, 1.0)],  # nested, shared start, overlap
    ],
)
def test_overlapping_spans_are_each_scored_over_their_own_tokens(token_spans):
    T, V = 8, 6
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(1, T, V, generator=g, dtype=D)
    labels = torch.randint(0, V, (1, T), generator=g)
    roles = build_token_roles(T, token_spans)
    out = twa_loss(
        logits,
        labels,
        roles.positive[None],
        roles.span_ids[None],
        roles.span_weights[None],
        span_mask=roles.span_mask[None],
        reduction="sum",
    )
    spans = [(0, a, e, w) for a, e, w in sorted(token_spans)]
    ref = brute_own_ranges(logits, labels, roles.positive[None], spans)
    assert float(out.loss) == pytest.approx(float(ref), rel=1e-6, abs=1e-9)
    # every span keeps its own term: S_k is each span's own log-probability
    lp = torch.log_softmax(logits, -1).gather(-1, labels[..., None])[0, :, 0]
    for k, (a, e, _) in enumerate(sorted(token_spans)):
        assert float(out.span_logprob[0, k]) == pytest.approx(float(lp[a:e].sum()), rel=1e-6)


def test_a_nested_minor_error_moves_the_loss_through_the_collator():
    tok = build_tokenizer(["s1 s2 = t1 t2 t3 t4"] * 2, kind="word")
    tgt = "t1 t2 t3 t4"
    major = ErrorSpan(tgt.index("t2"), tgt.index("t4") + 2, "Major")  # t2 t3 t4
    minor = ErrorSpan(tgt.index("t3"), tgt.index("t3") + 2, "Minor")  # t3, inside it
    col = TWACollator(tok)
    b1 = col([AnnotatedTranslation("s1 s2", tgt, [major])])
    b2 = col([AnnotatedTranslation("s1 s2", tgt, [major, minor])])
    assert b2["span_weights"].tolist() == [[5.0, 1.0]]
    assert b2["span_mask"][0, 1].sum() == 1 and b2["span_mask"][0, 0].sum() == 3
    g = torch.Generator().manual_seed(1)
    L = b2["labels"].shape[1]
    logits = torch.randn(1, L - 1, len(tok), generator=g, dtype=D)

    def loss(b):
        return twa_loss(
            logits,
            b["labels"][:, 1:],
            b["positive"][:, 1:],
            b["span_ids"][:, 1:],
            b["span_weights"],
            span_mask=b["span_mask"][:, :, 1:],
            reduction="sum",
        ).loss

    n = b2["labels"].shape[1] - 1 - 5  # prompt: bos s1 s2 = -> target starts at shifted index 3
    assert n >= 0
    extra = loss(b2) - loss(b1)
    p = torch.log_softmax(logits, -1)[0].gather(-1, b2["labels"][0, 1:, None].clamp(min=0))[:, 0]
    t3 = int(torch.nonzero(b2["span_mask"][0, 1, 1:])[0])
    assert float(extra) == pytest.approx(float(-torch.log(1 - torch.exp(p[t3]))), rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("q", [3e-8, 1e-9, 1e-20])
def test_the_gradient_where_a_span_is_most_likely_is_exact(dtype, q):
    """Two-token vocabulary, one-token span of probability p = 1 - q: the gradient of
    -log(1 - p) on the target's logit is exactly p (~1). The old eps = 1e-6 smoothing and a
    float32 log-probability rounded to 0 gave 0 from q < 6e-8 on."""
    z = torch.tensor([[[math.log((1 - q) / q), 0.0]]]).to(dtype).requires_grad_(True)
    labels = torch.zeros(1, 1, dtype=torch.long)
    out = twa_loss(
        z,
        labels,
        torch.zeros(1, 1, dtype=torch.bool),
        torch.zeros(1, 1, dtype=torch.long),
        torch.ones(1, 1),
        reduction="sum",
    )
    out.loss.backward()
    z64 = z.detach().double()
    q64 = float(torch.softmax(z64, -1)[0, 0, 1])  # q of the rounded logits
    assert float(out.loss) == pytest.approx(-math.log(q64), rel=1e-5)
    assert float(z.grad[0, 0, 0]) == pytest.approx(1 - q64, rel=1e-3)
    assert float(z.grad[0, 0, 1]) == pytest.approx(-(1 - q64), rel=1e-3)


def test_multi_token_span_gradient_against_float64():
    g = torch.Generator().manual_seed(2)
    T, V = 3, 7
    z = torch.randn(1, T, V, generator=g, dtype=D)
    labels = torch.tensor([[1, 4, 2]])
    for t in range(T):  # every token of the span nearly sure: p(span) = 1 - ~1e-7
        z[0, t, labels[0, t]] = 20.0
    mask = torch.ones(1, 1, T, dtype=torch.bool)
    args = (
        labels,
        torch.zeros(1, T, dtype=torch.bool),
        torch.zeros(1, T, dtype=torch.long),
        torch.ones(1, 1),
    )
    z64 = z.clone().requires_grad_(True)
    ref = brute_own_ranges(z64, labels, args[1], [(0, 0, T, 1.0)])
    ref.backward()
    z32 = z.float().requires_grad_(True)
    out = twa_loss(z32, *args, span_mask=mask, reduction="sum")
    out.loss.backward()
    assert float(out.loss) == pytest.approx(float(ref), rel=1e-5)
    assert torch.allclose(z32.grad.double(), z64.grad, rtol=1e-3, atol=1e-9)
    assert float(z64.grad.abs().max()) > 0.1  # the pressure is real, not a vanishing one


def test_nan_logits_are_refused():
    z = torch.zeros(1, 2, 3)
    z[0, 1, 2] = math.nan
    args = (
        torch.zeros(1, 2, dtype=torch.long),
        torch.ones(1, 2, dtype=torch.bool),
        torch.full((1, 2), -1),
        torch.zeros(1, 0),
    )
    with pytest.raises(ValueError, match="NaN"):
        twa_loss(z, *args)
    z[0, 1, 2] = math.inf
    with pytest.raises(ValueError, match="inf"):
        twa_loss(z, *args)


@pytest.fixture(scope="module")
def tok():
    words = [f"w{i}" for i in range(40)] + ["=", "t1", "t2"]
    return build_tokenizer([" ".join(words)] * 2, kind="word")


def test_long_causal_prompts_keep_the_template_marker_and_the_target(tok):
    src = " ".join(f"w{i}" for i in range(40))
    col = TWACollator(tok, max_source_len=8)
    b = col([AnnotatedTranslation(src, "t1 t2")])
    ids = b["input_ids"][0].tolist()
    eq = tok(" =", add_special_tokens=False)["input_ids"][-1]
    n_prompt = int((b["labels"][0] == -100).sum())
    assert n_prompt == 8
    assert ids[0] == tok.bos_token_id and ids[n_prompt - 1] == eq  # BOS and "=" survive
    assert ids[n_prompt:] == tok("t1 t2", add_special_tokens=False)["input_ids"] + [
        tok.eos_token_id
    ]


def test_long_chat_prompts_keep_the_generation_prompt(tok):
    fn = chat_prompt_fn(tok)
    src = " ".join(f"w{i}" for i in range(40))
    full = fn(src)
    tail = fn.prompt_end
    assert full[-len(tail) :] == tail
    col = TWACollator(tok, prompt_fn=fn, max_source_len=len(tail) + 6)
    b = col([AnnotatedTranslation(src, "t1 t2")])
    n_prompt = int((b["labels"][0] == -100).sum())
    assert n_prompt == len(tail) + 6
    ids = b["input_ids"][0].tolist()
    assert ids[:6] == full[:6] and ids[6:n_prompt] == tail


def test_a_prompt_fn_without_its_marker_is_refused_when_too_long(tok):
    col = TWACollator(tok, prompt_fn=lambda s: list(range(3, 3 + 20)), max_source_len=8)
    with pytest.raises(ValueError, match=r"20 tokens.*max_source_len = 8"):
        col([AnnotatedTranslation("w1", "t1 t2")])
