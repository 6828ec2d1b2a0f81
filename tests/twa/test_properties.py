"""Property tests at twa's public boundary (issue 49): random valid batches with overlapping
spans against a float64 brute force over each span's own tokens, float32 / bf16 logits,
numpy / torch / Python scalars for every numeric argument, NaN and inf, empty and degenerate
inputs (no span, zero-length spans, an empty batch, one-token vocabularies)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.twa import ErrorSpan, TWAConfig, twa_loss
from icml25.twa.align import build_token_roles
from icml25.twa.annotations import severity_weight
from icml25.twa.baselines import twa_seq_roles
from icml25.twa.loss import log1mexp, span_unlikelihood

SCALARS = [lambda v: v, np.float64, np.float32, lambda v: torch.tensor(v)]


def brute(logits, labels, roles, mode, eps):
    """Float64 loops: CE on the positives; each span's term over its own tokens."""
    lp = torch.log_softmax(logits.double(), -1)
    total = 0.0
    for b, r in enumerate(roles):
        for t in range(labels.shape[1]):
            if r.positive[t]:
                total -= float(lp[b, t, labels[b, t]])
        for k in range(r.span_mask.shape[0]):
            w = float(r.span_weights[k])
            toks = r.span_mask[k].nonzero().flatten().tolist()
            ls = [lp[b, t, labels[b, t]] for t in toks]
            if mode == "span":
                total -= w * float(torch.log1p(-(1 - eps) * torch.exp(sum(ls))))
            else:
                total -= w * sum(float(torch.log1p(-(1 - eps) * torch.exp(lt))) for lt in ls)
    return total


@st.composite
def batches(draw):
    B, T, V = draw(st.integers(1, 3)), draw(st.integers(1, 7)), draw(st.integers(2, 6))
    roles = []
    for _ in range(B):
        spans = []
        for _ in range(draw(st.integers(0, 3))):
            a = draw(st.integers(0, T - 1))
            e = draw(st.integers(a + 1, T))
            spans.append((a, e, draw(st.sampled_from([0.1, 1.0, 5.0]))))
        roles.append(build_token_roles(T, spans, ignore_off_trajectory=draw(st.booleans())))
    return B, T, V, roles, draw(st.integers(0, 2**16)), draw(st.floats(0.5, 12.0))


def stack(roles, T):
    K = max([r.span_weights.numel() for r in roles] + [0])
    B = len(roles)
    pos = torch.stack([r.positive for r in roles])
    ids = torch.stack([r.span_ids for r in roles])
    w = torch.zeros(B, K, dtype=torch.float64)
    mask = torch.zeros(B, K, T, dtype=torch.bool)
    for b, r in enumerate(roles):
        k = r.span_weights.numel()
        w[b, :k], mask[b, :k] = r.span_weights, r.span_mask
    return pos, ids, w, mask


@settings(max_examples=50, deadline=None)
@given(
    batch=batches(),
    mode=st.sampled_from(["span", "token"]),
    eps=st.sampled_from([0.0, 1e-6, 0.1]),
)
def test_random_overlapping_batches_equal_the_brute_force(batch, mode, eps):
    B, T, V, roles, seed, scale = batch
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64) * scale
    labels = torch.randint(0, V, (B, T), generator=g)
    pos, ids, w, mask = stack(roles, T)
    out = twa_loss(
        logits, labels, pos, ids, w, span_mask=mask, unlikelihood=mode, reduction="sum", eps=eps
    )
    ref = brute(logits, labels, roles, mode, eps)
    assert float(out.loss) == pytest.approx(ref, rel=1e-7, abs=1e-9)
    # float32 and bf16 logits: the same value on the rounded logits, to their precision
    for dt, tol in ((torch.float32, 1e-4), (torch.bfloat16, 1e-4)):
        z = logits.to(dt)
        o = twa_loss(
            z,
            labels,
            pos,
            ids,
            w.float(),
            span_mask=mask,
            unlikelihood=mode,
            reduction="sum",
            eps=eps,
        )
        assert o.loss.dtype == torch.float32
        r = brute(z.double(), labels, roles, mode, eps)
        assert float(o.loss) == pytest.approx(r, rel=tol, abs=tol)


def brute_tensor(logits, labels, roles, mode):
    """``brute`` as a differentiable float64 tensor (eps = 0); None where a term's ``1 - p`` is
    below 1e-9: float64's log-softmax errs by ~1e-14 absolute at logits of size 100, so its
    ``-log(1 - p)`` is off by percent there (the mpmath test below covers near certainty)."""
    lp = torch.log_softmax(logits, -1)
    total = logits.new_zeros(())
    for b, r in enumerate(roles):
        total = total - sum(lp[b, t, labels[b, t]] for t in range(labels.shape[1]) if r.positive[t])
        for k in range(r.span_mask.shape[0]):
            ls = [lp[b, t, labels[b, t]] for t in r.span_mask[k].nonzero().flatten().tolist()]
            terms = [sum(ls)] if mode == "span" else ls
            if any(float(x) > -1e-9 for x in terms):
                return None
            total = total - float(r.span_weights[k]) * sum(
                torch.log1p(-torch.exp(x)) for x in terms
            )
    return total


@settings(max_examples=50, deadline=None)
@given(
    batch=batches(),
    mode=st.sampled_from(["span", "token"]),
    big=st.floats(20.0, 200.0),
    masked=st.floats(0.0, 0.7),
)
def test_gradient_everywhere_is_finite_and_exact(batch, mode, big, masked):
    """float32 logits spread over [-big, big], so span tokens of probability far below float32's
    6e-8 occur: the gradient equals float64 autograd of the brute force on the same logits
    (before: NaN, the span term's other branch had log1p(-1) = -inf; found by the full
    reproduction). A share ``masked`` of the logits is -inf (masked-out tokens, allowed): a
    span label masked out (p = 0) or the only one left (p = 1) gave NaN gradients before."""
    B, T, V, roles, seed, _ = batch
    g = torch.Generator().manual_seed(seed)
    z = (torch.rand(B, T, V, generator=g, dtype=torch.float64) * 2 - 1) * big
    z = z.masked_fill(torch.rand(B, T, V, generator=g) < masked, -math.inf)
    z[..., 0] = z[..., 0].nan_to_num(neginf=0.0)  # every row keeps a finite logit
    labels = torch.randint(0, V, (B, T), generator=g)
    pos, ids, w, mask = stack(roles, T)
    zf = z.float().requires_grad_(True)
    out = twa_loss(
        zf, labels, pos, ids, w.float(), span_mask=mask, unlikelihood=mode, reduction="sum"
    )
    if not bool(torch.isfinite(out.loss)):
        return  # a positive token masked out, or a span of p = 1 with eps = 0: an infinite loss
    out.loss.backward()
    assert bool(torch.isfinite(zf.grad).all()), zf.grad
    zd = zf.detach().double().requires_grad_(True)
    ref = brute_tensor(zd, labels, roles, mode)
    if ref is None or not ref.requires_grad:
        return  # near certainty or no term: past the float64 reference (test below)
    ref.backward()
    assert torch.allclose(zf.grad.double(), zd.grad, rtol=1e-3, atol=1e-4)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), gap=st.floats(5.0, 60.0), dt=st.sampled_from([0, 1]))
def test_gradient_near_certainty_matches_float64(seed, gap, dt):
    """One span of 2 tokens, each of probability ~1 - exp(-gap): float32 / bf16 values and
    gradients equal the exact ones (50 digits) on the same rounded logits: nothing vanishes.
    (A float64 log-softmax is not exact enough here: its ``log p`` errs by ~1e-15 absolute.)"""
    g = torch.Generator().manual_seed(seed)
    V = 4
    z = torch.randn(1, 2, V, generator=g, dtype=torch.float64)
    labels = torch.tensor([[1, 3]])
    z[0, 0, 1] += gap
    z[0, 1, 3] += gap
    dtype = (torch.float32, torch.bfloat16)[dt]
    z = z.to(dtype).double()  # the rounded logits are the reference's input
    args = (
        labels,
        torch.zeros(1, 2, dtype=torch.bool),
        torch.zeros(1, 2, dtype=torch.long),
        torch.ones(1, 1),
    )
    # 50-digit reference: UL = -log(1 - P), dUL/dz_tv = P / (1 - P) (onehot - softmax_t)_v
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 50
    rows = [[mp.mpf(float(v)) for v in z[0, t]] for t in range(2)]
    soft = [[mp.exp(v) / mp.fsum(mp.exp(u) for u in row) for v in row] for row in rows]
    P = soft[0][1] * soft[1][3]
    ref = -mp.log(1 - P)
    grad = torch.tensor(
        [
            [
                [float(P / (1 - P) * ((v == y) - soft[t][v])) for v in range(V)]
                for t, y in enumerate((1, 3))
            ]
        ],
        dtype=torch.float64,
    )
    zl = z.to(dtype).requires_grad_(True)
    out = twa_loss(zl, *args, reduction="sum")
    out.loss.backward()
    assert float(out.loss) == pytest.approx(float(ref), rel=1e-4)
    rtol = 2e-3 if dtype == torch.float32 else 1e-2  # a bf16 leaf's gradient is stored in bf16
    assert torch.allclose(zl.grad.double(), grad, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("form", range(len(SCALARS)))
def test_eps_in_every_scalar_form(form):
    z = torch.randn(1, 3, 4, dtype=torch.float64)
    args = (
        torch.tensor([[0, 1, 2]]),
        torch.zeros(1, 3, dtype=torch.bool),
        torch.tensor([[0, 0, -1]]),
        torch.ones(1, 1),
    )
    a = twa_loss(z, *args, eps=SCALARS[form](0.25)).loss
    b = twa_loss(z, *args, eps=0.25).loss
    assert float(a) == pytest.approx(float(b), rel=1e-12)
    S = torch.tensor([-0.5], dtype=torch.float64)
    assert float(span_unlikelihood(S, SCALARS[form](0.25))) == pytest.approx(
        -math.log(1 - 0.75 * math.exp(-0.5)), rel=1e-12
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1e-3, 1.0, True, "0.1", None])
def test_bad_eps_is_refused_naming_it(bad):
    z = torch.zeros(1, 1, 2)
    args = (
        torch.zeros(1, 1, dtype=torch.long),
        torch.ones(1, 1, dtype=torch.bool),
        torch.full((1, 1), -1),
        torch.zeros(1, 0),
    )
    with pytest.raises(ValueError, match="eps must be"):
        twa_loss(z, *args, eps=bad)
    with pytest.raises(ValueError, match="eps must be"):
        span_unlikelihood(torch.tensor([-1.0]), bad)
    with pytest.raises(ValueError, match="eps must be"):
        TWAConfig(eps=bad)


@pytest.mark.parametrize("dt", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_and_inf_logits_are_refused_and_minus_inf_is_a_masked_token(dt, bad):
    z = torch.zeros(1, 2, 3, dtype=dt)
    args = (
        torch.tensor([[0, 1]]),
        torch.tensor([[True, False]]),
        torch.tensor([[-1, 0]]),
        torch.ones(1, 1),
    )
    z[0, 1, 2] = bad
    with pytest.raises(ValueError, match="logits hold"):
        twa_loss(z, *args)
    z[0, 1, 2] = -math.inf  # a masked-out token: p = 1/2 for the span's token
    out = twa_loss(z, *args, reduction="sum")
    assert float(out.loss) == pytest.approx(math.log(3) + math.log(2), rel=1e-2)


def test_degenerate_batches():
    # T = 0: nothing receives a loss, an exact zero in the graph
    z = torch.zeros(1, 0, 3, requires_grad=True)
    empty = (
        torch.zeros(1, 0, dtype=torch.long),
        torch.zeros(1, 0, dtype=torch.bool),
        torch.zeros(1, 0, dtype=torch.long),
        torch.zeros(1, 0),
    )
    assert float(twa_loss(z, *empty).loss) == 0.0
    with pytest.raises(ValueError, match="batch is empty"):
        twa_loss(
            torch.zeros(0, 2, 3),
            torch.zeros(0, 2, dtype=torch.long),
            torch.zeros(0, 2, dtype=torch.bool),
            torch.zeros(0, 2, dtype=torch.long),
            torch.zeros(0, 0),
        )
    # a one-token vocabulary: the span is certain, its unlikelihood infinite unless smoothed
    one = (
        torch.zeros(1, 1, dtype=torch.long),
        torch.zeros(1, 1, dtype=torch.bool),
        torch.zeros(1, 1, dtype=torch.long),
        torch.ones(1, 1),
    )
    assert math.isinf(float(twa_loss(torch.zeros(1, 1, 1), *one).loss))
    smooth = twa_loss(torch.zeros(1, 1, 1), *one, eps=1e-3, reduction="sum").loss
    assert float(smooth) == pytest.approx(-math.log(1e-3), rel=1e-5)
    # a span_mask that disagrees with span_ids is refused
    with pytest.raises(ValueError, match="span_mask and span_ids disagree"):
        twa_loss(
            torch.zeros(1, 2, 3),
            torch.zeros(1, 2, dtype=torch.long),
            torch.zeros(1, 2, dtype=torch.bool),
            torch.tensor([[0, -1]]),
            torch.ones(1, 1),
            span_mask=torch.tensor([[[True, True]]]),
        )
    with pytest.raises(ValueError, match=r"span_mask must be \(B, K, T\)"):
        twa_loss(
            torch.zeros(1, 2, 3),
            torch.zeros(1, 2, dtype=torch.long),
            torch.zeros(1, 2, dtype=torch.bool),
            torch.tensor([[0, -1]]),
            torch.ones(1, 1),
            span_mask=torch.tensor([[True, False]]),
        )


def test_log1mexp_propagates_nan_and_refuses_positive():
    assert math.isnan(float(log1mexp(torch.tensor(math.nan))))
    with pytest.raises(ValueError, match="s <= 0"):
        log1mexp(torch.tensor([0.1, math.nan]))


@settings(max_examples=40, deadline=None)
@given(
    T=st.integers(1, 9),
    raw=st.lists(st.tuples(st.integers(0, 8), st.integers(1, 9), st.floats(0, 5)), max_size=4),
    form=st.integers(0, 2),
)
def test_token_roles_on_random_spans(T, raw, form):
    ints = [int, np.int64, lambda v: torch.tensor(v)][form]
    spans = [(ints(a), ints(min(a + d, T)), w) for a, d, w in raw if a < T]
    roles = build_token_roles(ints(T), spans)
    kept = sorted((int(a), int(b), w) for a, b, w in spans if w > 0)
    assert roles.span_mask.shape == (len(kept), T)
    for k, (a, b, w) in enumerate(kept):
        assert roles.span_mask[k].nonzero().flatten().tolist() == list(range(a, b))
        assert float(roles.span_weights[k]) == pytest.approx(w, rel=1e-6)
    assert torch.equal(roles.span_mask.any(0), roles.span_ids >= 0) if kept else True
    assert not bool((roles.positive & (roles.span_ids >= 0)).any())


@pytest.mark.parametrize(
    "spans, match",
    [
        ([(2, 2, 1.0)], "0 <= start < end"),  # zero-length
        ([(2.5, 3, 1.0)], "start must be an integer"),
        ([(0, 1, math.nan)], "weight must be"),
        ([(0, 1, -1.0)], "weight must be"),
    ],
)
def test_token_roles_refuse_bad_spans(spans, match):
    with pytest.raises(ValueError, match=match):
        build_token_roles(4, spans)
    with pytest.raises(ValueError, match="T must be an integer"):
        build_token_roles(2.0, [])


def test_error_spans_severities_and_seq_roles_take_numpy_scalars():
    s = ErrorSpan(np.int64(1), torch.tensor(3), "Major", weight=np.float32(5.0))
    assert type(s.start) is int and type(s.end) is int and s.weight == 5.0
    with pytest.raises(ValueError, match="ErrorSpan.start must be an integer"):
        ErrorSpan(1.5, 3, "Major")
    with pytest.raises(ValueError, match="ErrorSpan.weight must be"):
        ErrorSpan(1, 3, "Major", weight=math.nan)
    assert severity_weight("Minor", weights={"Minor": np.float32(2.0)}) == 2.0
    with pytest.raises(ValueError, match="severity weight 'Minor' must be"):
        severity_weight("Minor", weights={"Minor": math.nan})
    r = twa_seq_roles(np.int64(4), np.float64(30.0))
    assert r.span_weights.tolist() == [25.0] and r.span_mask.all()
    with pytest.raises(ValueError, match="total_weight must be"):
        twa_seq_roles(4, math.nan)


@pytest.mark.parametrize("form", range(len(SCALARS)))
def test_config_takes_scalars_in_every_form(form):
    f = SCALARS[form]
    c = TWAConfig(
        lr=f(1e-3),
        batch_size=np.int64(4),
        epochs=torch.tensor(2),
        eps=f(0.0),
        max_grad_norm=f(1.0),
        weight_decay=f(0.0),
    )
    assert isinstance(c.lr, float) and isinstance(c.batch_size, int) and c.epochs == 2
    with pytest.raises(ValueError, match="batch_size must be an integer"):
        TWAConfig(batch_size=f(4.0))


@pytest.mark.parametrize("mode", ["span", "token"])
def test_masked_out_logits_give_exact_values_and_zero_gradients(mode):
    # before: NaN gradients in every case (a -inf label logit made u infinite; a label that is
    # the only finite logit made a log-sum-exp over nothing but -inf)
    ninf = -math.inf

    def run(row, eps):
        z = torch.tensor([[row]], requires_grad=True)
        out = twa_loss(
            z,
            torch.tensor([[0]]),
            torch.tensor([[False]]),
            torch.tensor([[0]]),
            torch.ones(1, 1),
            eps=eps,
            unlikelihood=mode,
        )
        out.loss.backward()
        return float(out.loss), z.grad[0, 0].tolist()

    for eps in (0.0, 1e-6):
        assert run([ninf, 5.0, 1.0], eps) == (0.0, [0.0, 0.0, 0.0])  # p = 0: no unlikelihood
    loss, grad = run([5.0, ninf, ninf], 1e-6)  # p = 1: -log(eps), nothing to move
    assert loss == pytest.approx(-math.log(1e-6), rel=1e-6) and grad == [0.0, 0.0, 0.0]
    assert run([5.0, ninf, ninf], 0.0)[0] == math.inf  # eps = 0: the loss is infinite, loudly
    loss, grad = run([5.0, ninf, 1.0], 1e-6)  # one finite competitor: as without the mask
    ref, ref_grad = run([5.0, -1e30, 1.0], 1e-6)
    assert loss == pytest.approx(ref) and grad == pytest.approx(ref_grad) and grad[1] == 0.0
