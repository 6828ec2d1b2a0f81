"""The TWA loss against a brute-force per-token computation (paper §4; docs/twa.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from icml25.twa import twa_loss
from icml25.twa.loss import log1mexp, span_unlikelihood

D = torch.float64


def test_log1mexp_against_float64_reference():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 50
    s = -np.concatenate([np.logspace(-9, math.log10(60), 2000), [math.log(2.0)]])
    ref = np.array([float(mpmath.log(1 - mpmath.exp(mpmath.mpf(x)))) for x in s])
    got = log1mexp(torch.tensor(s, dtype=D)).numpy()
    rel = np.abs(got - ref) / np.abs(ref)
    assert rel.max() < 1e-6
    naive = np.log(1 - np.exp(s))  # loses everything near 0 and -60: the reason for log1mexp
    assert np.nanmax(np.abs(naive - ref) / np.abs(ref)) > 1e-3
    assert float(log1mexp(torch.tensor(-math.inf, dtype=D))) == 0.0
    with pytest.raises(ValueError, match="s <= 0"):
        log1mexp(torch.tensor([0.5]))


def brute(logits, labels, positive, span_ids, weights, unlikelihood="span", eps=0.0):
    """Per-token loop in float64: sum of CE on positives and weighted UL per span."""
    lp = torch.log_softmax(logits.double(), -1)
    total, n_tok = 0.0, 0
    for b in range(logits.shape[0]):
        spans = {}
        for t in range(logits.shape[1]):
            if labels[b, t] < 0:
                continue
            lt = lp[b, t, labels[b, t]]
            if positive[b, t]:
                total = total - lt
                n_tok += 1
            k = int(span_ids[b, t])
            if k >= 0:
                n_tok += 1
                spans.setdefault(k, []).append(lt)
        for k, lts in spans.items():
            w = float(weights[b, k])
            if unlikelihood == "span":
                S = sum(lts)
                total = total - w * torch.log(1 - (1 - eps) * torch.exp(S))
            else:
                for lt in lts:
                    total = total - w * torch.log(1 - (1 - eps) * torch.exp(lt))
    return total, n_tok


def batch(seed=0, B=2, T=7, V=5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=D)
    labels = torch.randint(0, V, (B, T), generator=g)
    labels[1, -1] = -100  # padding
    positive = torch.zeros(B, T, dtype=torch.bool)
    span_ids = torch.full((B, T), -1)
    positive[0, :2] = True  # row 0: CE on 0-1, span 0 = [2, 4), span 1 = [5, 6), 4 and 6 ignored
    span_ids[0, 2:4] = 0
    span_ids[0, 5] = 1
    positive[1, :5] = True  # row 1: no error: CE everywhere but the padding
    positive[1, 5] = True
    weights = torch.tensor([[5.0, 1.0], [0.0, 0.0]], dtype=D)
    return logits, labels, positive, span_ids, weights


@pytest.mark.parametrize("mode", ["span", "token"])
@pytest.mark.parametrize("reduction", ["token_mean", "sum", "seq_mean"])
def test_twa_loss_equals_the_brute_force_computation(mode, reduction):
    logits, labels, positive, span_ids, w = batch()
    out = twa_loss(logits, labels, positive, span_ids, w, unlikelihood=mode, reduction=reduction)
    total, n_tok = brute(logits, labels, positive, span_ids, w, mode)
    div = {"token_mean": n_tok, "sum": 1, "seq_mean": 2}[reduction]
    assert float(out.loss) == pytest.approx(float(total) / div, rel=1e-5)
    assert out.n_positive == 8 and out.n_span_tokens == 3


@pytest.mark.parametrize("mode", ["span", "token"])
def test_gradcheck(mode):
    logits, labels, positive, span_ids, w = batch(1)
    logits.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda z: twa_loss(z, labels, positive, span_ids, w, unlikelihood=mode).loss, (logits,)
    )


def test_every_token_of_a_span_gets_the_same_pressure():
    """dUL/dl_t = p / (1 - p) for every token of the span (p = the span's probability)."""
    lt = torch.tensor([-0.3, -1.2, -0.05], dtype=D, requires_grad=True)
    S = lt.sum()
    ul = span_unlikelihood(S, eps=1e-12)
    (g,) = torch.autograd.grad(ul, lt)
    p = float(torch.exp(S.detach()))
    assert torch.allclose(g, torch.full_like(g, p / (1 - p)), rtol=1e-6)


def test_no_spans_is_cross_entropy_and_a_one_token_span_is_token_ul():
    logits, labels, _, _, _ = batch(2)
    valid = labels != -100
    out = twa_loss(logits, labels, valid, torch.full_like(labels, -1), torch.zeros(2, 0))
    assert float(out.loss) == pytest.approx(
        float(F.cross_entropy(logits.reshape(-1, 5), labels.reshape(-1), ignore_index=-100)),
        rel=1e-6,
    )
    pos = torch.zeros_like(valid)
    ids = torch.full_like(labels, -1)
    ids[0, 3] = 0
    w = torch.tensor([[2.0], [0.0]])
    a = twa_loss(logits, labels, pos, ids, w, unlikelihood="span").loss
    b = twa_loss(logits, labels, pos, ids, w, unlikelihood="token").loss
    assert float(a) == pytest.approx(float(b), rel=1e-7)


def test_edge_cases_stay_finite():
    logits, labels, positive, span_ids, w = batch(3)
    # a span with probability ~1: finite (about the logit gap) with a gradient of size ~w
    sure = logits.clone()
    sure[0, 2:4, :] = -1e4
    sure[0, 2, labels[0, 2]] = 1e4
    sure[0, 3, labels[0, 3]] = 1e4
    sure.requires_grad_(True)
    out = twa_loss(sure, labels, positive, span_ids, w, reduction="sum")
    assert math.isfinite(float(out.loss.detach())) and float(out.ul_sum.detach()) > 5 * 1.9e4
    out.loss.backward()
    assert torch.isfinite(sure.grad).all()
    assert float(sure.grad[0, 2:4].abs().max()) > 1.0
    # eps > 0: the smoothing bounds the term by -w log(eps)
    out = twa_loss(sure, labels, positive, span_ids, w, eps=1e-6)
    assert float(out.ul_sum.detach()) <= 5 * -math.log(1e-6) + 1.0  # + span 1 (p ~ 0.3)
    # a likely span (p ~ 0.997): the unlikelihood pushes it down hard, with a finite gradient
    likely = logits.clone()
    likely[0, 2:4, :] = 0.0
    likely[0, 2, labels[0, 2]] = 8.0
    likely[0, 3, labels[0, 3]] = 8.0
    likely.requires_grad_(True)
    out = twa_loss(likely, labels, positive, span_ids, w, reduction="sum")
    out.loss.backward()
    g = likely.grad[0, 2, labels[0, 2]]
    assert torch.isfinite(likely.grad).all() and float(g) > 1.0  # raising it would cost
    # a span of probability 0: UL = 0, no NaN
    zero = logits.clone()
    zero[0, 2, labels[0, 2]] = -math.inf
    o = twa_loss(zero, labels, torch.zeros_like(positive), span_ids, w)
    assert math.isfinite(float(o.loss.detach()))
    # nothing receives a loss: a differentiable exact zero
    z = logits.clone().requires_grad_(True)
    o = twa_loss(z, labels, torch.zeros_like(positive), torch.full_like(span_ids, -1), w)
    assert float(o.loss.detach()) == 0.0
    o.loss.backward()
    assert torch.equal(z.grad, torch.zeros_like(z))
    # bf16 logits are scored in float32
    o = twa_loss(logits.to(torch.bfloat16), labels, positive, span_ids, w)
    assert o.loss.dtype == torch.float32


def test_bad_input_names_the_value():
    logits, labels, positive, span_ids, w = batch()
    with pytest.raises(ValueError, match="unlikelihood must be"):
        twa_loss(logits, labels, positive, span_ids, w, unlikelihood="seq")
    with pytest.raises(ValueError, match="reduction must be"):
        twa_loss(logits, labels, positive, span_ids, w, reduction="mean")
    with pytest.raises(ValueError, match="batch is empty"):
        twa_loss(logits[:0], labels[:0], positive[:0], span_ids[:0], w[:0])
    bad = span_ids.clone()
    bad[0, 0] = 7
    with pytest.raises(ValueError, match=r"span_ids must lie in -1..1"):
        twa_loss(logits, labels, torch.zeros_like(positive), bad, w)
    both = positive.clone()
    both[0, 2] = True
    with pytest.raises(ValueError, match="both positive and inside an error span"):
        twa_loss(logits, labels, both, span_ids, w)
    pad = positive.clone()
    pad[1, -1] = True
    with pytest.raises(ValueError, match="label -100 must have positive=False"):
        twa_loss(logits, labels, pad, span_ids, w)
    with pytest.raises(TypeError, match="positive must be a bool tensor"):
        twa_loss(logits, labels, positive.long(), span_ids, w)
    with pytest.raises(ValueError, match="finite and >= 0"):
        twa_loss(logits, labels, positive, span_ids, -w)
