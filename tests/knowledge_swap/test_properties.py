"""Property tests at knowledge_swap's public boundary (issue 49): numpy / torch / Python scalars
for every numeric argument, float32 / float64 / bf16 tensors, NaN and inf, empty and degenerate
inputs, and the losses against their closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from icml25.knowledge_swap import KnowledgeSwapper, expand_head, inject_lora, split_by_class
from icml25.knowledge_swap.losses import bounded_forget_loss, group_sparse_loss, swap_losses
from icml25.knowledge_swap.metrics import h_mean
from icml25.lora import mark_only_lora_trainable

SCALARS = [
    lambda v: v,
    lambda v: np.float64(v),
    lambda v: np.float32(v),
    lambda v: torch.tensor(v),
]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 6),
    c=st.integers(1, 5),
    bnd=st.floats(1e-3, 50.0),
    form=st.integers(0, len(SCALARS) - 1),
    dt=st.integers(0, 2),
)
def test_bounded_forget_loss_is_its_closed_form(seed, n, c, bnd, form, dt):
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(n, c, generator=g, dtype=torch.float64) * 4).to(DTYPES[dt])
    y = torch.randint(0, c, (n,), generator=g)
    got = bounded_forget_loss(logits, y, SCALARS[form](bnd))
    ce = -torch.log_softmax(logits.double(), -1)[torch.arange(n), y].mean()
    b = float(np.float32(bnd)) if form == 2 else bnd
    ref = max(b - float(ce), 0.0)
    tol = 5e-2 if logits.dtype == torch.bfloat16 else 1e-4
    assert float(got) == pytest.approx(ref, abs=tol * (1 + abs(b)))


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -1.0, True, "1", np.float32("nan")])
def test_bounded_forget_loss_refuses_bad_bounds(bad):
    with pytest.raises(ValueError, match="bnd must be"):
        bounded_forget_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), bad)


def test_nan_logits_propagate_in_the_pure_loss():
    z = torch.full((2, 3), math.nan)
    assert math.isnan(float(bounded_forget_loss(z, torch.zeros(2, dtype=torch.long), 1.0)))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**16), sizes=st.lists(st.integers(0, 4), min_size=0, max_size=4))
def test_group_sparse_loss_is_the_sum_of_group_norms(seed, sizes):
    g = torch.Generator().manual_seed(seed)
    groups = [[torch.randn(k, 2, generator=g, dtype=torch.float64)] for k in sizes]
    got = float(group_sparse_loss(groups, eps=np.float64(0.0)))
    ref = sum(math.sqrt(float((p**2).sum())) for grp in groups for p in grp)
    assert got == pytest.approx(ref, rel=1e-12, abs=1e-12)


def test_group_sparse_loss_refuses_a_nan_eps():
    with pytest.raises(ValueError, match="eps must be"):
        group_sparse_loss([[torch.ones(2)]], eps=math.nan)


@settings(max_examples=40, deadline=None)
@given(
    a=st.floats(0, 1), b=st.floats(0, 1), r=st.floats(0, 1), form=st.integers(0, len(SCALARS) - 1)
)
def test_h_mean_closed_form_and_scalar_forms(a, b, r, form):
    f = SCALARS[form]
    got = h_mean(f(a), f(b), f(r))
    # np.float32 and torch.tensor (float32 by default) round the inputs: compare with them
    a, b, r = (float(np.float32(v)) if form in (2, 3) else v for v in (a, b, r))
    drop = a - b
    ref = 2 * drop * r / (drop + r) if drop + r else 0.0
    assert got == pytest.approx(ref, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("bad", [math.nan, math.inf, "0.5", None])
def test_h_mean_refuses_non_numbers_naming_the_argument(bad):
    with pytest.raises(ValueError, match="acc_r must be"):
        h_mean(0.9, 0.1, bad)


def test_swap_losses_validate_their_weights():
    z = torch.zeros(2, 3)
    y = torch.zeros(2, dtype=torch.long)
    out = swap_losses(
        "forget",
        retain=(z, y),
        forget=(z, y),
        learn=None,
        l_gs=torch.tensor(1.0),
        bnd=np.float32(2.0),
        alpha=np.float64(0.5),
    )
    ce = math.log(3)
    assert float(out["total"]) == pytest.approx(0.5 + ce + 0.2 * (2.0 - ce), rel=1e-6)
    with pytest.raises(ValueError, match="beta_forget must be"):
        swap_losses(
            "forget",
            retain=(z, y),
            forget=(z, y),
            learn=None,
            l_gs=torch.tensor(1.0),
            beta_forget=math.nan,
        )


class MLP(nn.Module):
    def __init__(self, n_out=6):
        super().__init__()
        self.fc1, self.head = nn.Linear(4, 8), nn.Linear(8, n_out)

    def forward(self, x):
        return self.head(F.relu(self.fc1(x)))


def _model():
    torch.manual_seed(0)
    m = MLP()
    inject_lora(m, ["fc1"], r=2, alpha=2)
    mark_only_lora_trainable(m)
    return m


@pytest.mark.parametrize("form", range(len(SCALARS)))
def test_swapper_takes_numpy_and_torch_scalars(form):
    f = SCALARS[form]
    sw = KnowledgeSwapper(
        _model(),
        lr=f(1e-2),
        min_lr=f(1e-5),
        bnd=f(10.0),
        alpha=f(0.01),
        beta_retain=f(0.2),
        weight_decay=f(0.0),
        epochs_per_stage=np.int64(1),
        batch_size=np.int32(4),
        steps_per_epoch=torch.tensor(1),
    )
    assert isinstance(sw.batch_size, int) and sw.batch_size == 4
    assert isinstance(sw.lr, float) and sw.lr == pytest.approx(1e-2, rel=1e-6)


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(lr=math.nan), "lr"),
        (dict(lr=0.0), "lr"),
        (dict(min_lr=1.0), "min_lr"),
        (dict(bnd=math.inf), "bnd"),
        (dict(alpha=-1.0), "alpha"),
        (dict(epochs_per_stage=1.5), "epochs_per_stage"),
        (dict(epochs_per_stage=True), "epochs_per_stage"),
        (dict(batch_size=0), "batch_size"),
        (dict(steps_per_epoch=np.float32(2.0)), "steps_per_epoch"),
        (dict(grad_clip=math.nan), "grad_clip"),
        (dict(norm_eval=1), "norm_eval"),
    ],
)
def test_swapper_refuses_bad_numbers_naming_them(kw, name):
    with pytest.raises((ValueError, TypeError), match=f"{name} must be"):
        KnowledgeSwapper(_model(), **kw)


def _pair(classes, n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.tensor(classes).repeat(n // len(classes))
    return torch.randn(len(y), 4, generator=g), y


class Items(torch.utils.data.Dataset):
    """Items whose labels come in a chosen form (numpy ints, Python ints, 0-d tensors, whole
    floats), inputs as numpy arrays or tensors."""

    def __init__(self, x, y, label, inp):
        self.x, self.y, self.label, self.inp = x, y, label, inp

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.inp(self.x[i]), self.label(int(self.y[i]))


LABELS = [int, np.int64, lambda v: torch.tensor(v), lambda v: float(v)]
INPUTS = [lambda t: t, lambda t: t.numpy()]


@pytest.mark.parametrize("label", range(len(LABELS)))
@pytest.mark.parametrize("inp", range(len(INPUTS)))
def test_fit_takes_every_item_form_in_every_set(label, inp):
    m = _model()
    sw = KnowledgeSwapper(m, epochs_per_stage=1, batch_size=4, steps_per_epoch=1)
    learn = Items(*_pair([4, 5], seed=2), LABELS[label], INPUTS[inp])
    forget = Items(*_pair([0, 1], seed=1), LABELS[label], INPUTS[inp])
    hist = sw.fit(retain=_pair([2, 3]), forget=forget, learn=learn)
    assert [s["stage"] for s in hist.steps] == ["learn", "forget"]
    assert all(math.isfinite(s["total"]) for s in hist.steps)


@pytest.mark.parametrize(
    "label, match",
    [
        (lambda v: v + 0.5, "integer class indices"),  # a fractional float label
        (lambda v: "cat", "learn"),
        (lambda v: [v, v], "learn"),  # a label of shape (2,)
        (lambda v: math.nan, "integer class indices"),
    ],
)
def test_bad_learn_labels_are_refused_before_training(label, match):
    m = _model()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    sw = KnowledgeSwapper(m, epochs_per_stage=1, batch_size=4, steps_per_epoch=1)
    learn = Items(*_pair([4, 5], seed=2), label, INPUTS[0])
    with pytest.raises((TypeError, ValueError), match=match):
        sw.fit(retain=_pair([2, 3]), forget=_pair([0, 1], seed=1), learn=learn)
    assert sw.history.steps == []
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_inputs_are_refused_before_training(bad):
    x, y = _pair([4, 5], seed=2)
    x[3, 1] = bad
    sw = KnowledgeSwapper(_model(), epochs_per_stage=1, batch_size=4, steps_per_epoch=1)
    with pytest.raises(ValueError, match="NaN or inf"):
        sw.fit(retain=_pair([2, 3]), forget=_pair([0, 1], seed=1), learn=(x, y))
    assert sw.history.steps == []


def test_empty_and_one_class_sets():
    sw = KnowledgeSwapper(_model(), epochs_per_stage=1, batch_size=4, steps_per_epoch=1)
    with pytest.raises(ValueError, match="retain data is required"):
        sw.fit(retain=(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)), forget=_pair([0]))
    with pytest.warns(UserWarning, match="learn data is empty"):
        hist = sw.fit(
            retain=_pair([2]),
            forget=_pair([0]),
            learn=(torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)),
        )
    assert {s["stage"] for s in hist.steps} == {"forget"}


def test_split_and_expand_take_numpy_integers():
    x, y = _pair([0, 1, 2, 3], n=16)
    parts = split_by_class((x, y), forget=[np.int64(0)], learn=[torch.tensor(3)])
    assert sorted({int(y[i]) for i in parts["retain"].indices}) == [1, 2]
    with pytest.raises(ValueError, match="a class must be an integer"):
        split_by_class((x, y), forget=[1.5])
    head = expand_head(nn.Linear(3, 2), np.int64(2))
    assert head.out_features == 4
    with pytest.raises(ValueError, match="n_new must be"):
        expand_head(nn.Linear(3, 2), 0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [1e-12, 0.0])
def test_group_sparse_gradient_at_a_zero_group_is_finite_in_every_dtype(dtype, eps):
    # before: NaN for fp16 (eps = 1e-12 underflowed to 0, sqrt'(0) = inf) and for eps = 0 in
    # every dtype; a zero-initialised LoRA B alone in its group (lora_groups(by="matrix")) hit it
    B = torch.zeros(3, 4, dtype=dtype, requires_grad=True)
    A = torch.full((2, 2), 0.5, dtype=dtype, requires_grad=True)
    loss = group_sparse_loss([[B], [A]], eps=eps)
    loss.backward()
    assert loss.dtype == torch.promote_types(dtype, torch.float32)
    assert float(loss) == pytest.approx(math.sqrt(eps) + math.sqrt(1.0 + eps))
    assert bool((B.grad == 0).all())
    assert A.grad.double() == pytest.approx(torch.full((2, 2), 0.5, dtype=torch.float64), rel=1e-3)
