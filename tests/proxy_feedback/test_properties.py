"""Property tests at proxy_feedback's public boundary (issue 49): numbers as Python, numpy and
0-d torch scalars; float32/float64/bf16 log-probabilities; NaN/inf, empty and degenerate inputs;
the preference NLL against its formula in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.proxy_feedback import (
    PreferenceBatch,
    SimplexPolicy,
    SyntheticPreferenceWorld,
    check_conditions,
    evaluate,
    fit_true_stage,
    sample_preferences,
)
from icml25.proxy_feedback.losses import preference_nll, triple_logprobs
from icml25.proxy_feedback.model import MLPAdapter

REALS = [float, np.float64, np.float32, torch.tensor]
INTS = [int, np.int64, np.int32, torch.tensor]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    k=st.integers(2, 5),
    beta=st.sampled_from([0.1, 1.0, 3.0]),
    kind=st.sampled_from(range(len(REALS))),
    dtype=st.sampled_from(DTYPES),
    weighted=st.booleans(),
    with_ref=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_preference_nll_is_its_formula_in_float64(
    n, k, beta, kind, dtype, weighted, with_ref, seed
):
    g = torch.Generator().manual_seed(seed)
    logp = torch.log_softmax(torch.randn(n, k, generator=g), -1).to(dtype)
    y_w = torch.randint(0, k, (n,), generator=g)
    y_l = (y_w + torch.randint(1, k, (n,), generator=g)) % k
    lw, ll = triple_logprobs(logp, y_w, y_l)
    assert torch.equal(lw, logp[torch.arange(n), y_w]) and torch.equal(
        ll, logp[torch.arange(n), y_l]
    )
    ref_w = ref_l = None
    if with_ref:
        ref_w, ref_l = (
            (-torch.rand(n, generator=g)).to(dtype),
            (-torch.rand(n, generator=g)).to(dtype),
        )
    w = torch.rand(n, generator=g, dtype=torch.float64) + 0.1 if weighted else None
    got = preference_nll(lw, ll, ref_w, ref_l, REALS[kind](beta), weights=w)
    b = float(REALS[kind](beta))
    h = lw.double() - ll.double()
    if with_ref:
        h = h - (ref_w.double() - ref_l.double())
    per = -torch.nn.functional.logsigmoid(b * h)
    ref = per.mean() if w is None else (w * per).sum() / w.sum()
    assert math.isclose(float(got), float(ref), rel_tol=1e-5, abs_tol=1e-6)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), True, "1.0", None])
def test_preference_nll_refuses_a_bad_beta_naming_it(bad):
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="beta"):
        preference_nll(x, x, beta=bad)


def test_preference_nll_nan_refused_and_zero_probability_loser_is_its_limit():
    x = torch.zeros(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="logp_w holds NaN"):
        preference_nll(torch.tensor([0.0, float("nan"), 0.0]), x)
    # fail-before: a loser of probability 0 gave NaN (0 * log sigma(-inf)); the limit is 0
    assert float(preference_nll(x, torch.full((3,), -math.inf, dtype=torch.float64))) == 0.0
    for w, what in (
        (torch.tensor([1.0, float("inf"), 1.0]), "finite"),
        (torch.tensor([1.0, float("nan"), 1.0]), "finite"),
        (torch.tensor([0.0, 0.0, 0.0]), "positive sum"),
        (torch.tensor([1.0, -1.0, 1.0]), "non-negative"),
    ):
        with pytest.raises(ValueError, match=what):
            preference_nll(x, x, weights=w)
    with pytest.raises(ValueError, match="non-empty"):
        preference_nll(torch.empty(0), torch.empty(0))


def test_triple_logprobs_refuses_out_of_range_and_float_indices():
    logp = torch.log_softmax(torch.randn(2, 3), -1)
    # fail-before: a raw RuntimeError from gather
    with pytest.raises(ValueError, match=r"y_w holds indices outside 0..2"):
        triple_logprobs(logp, torch.tensor([0, 3]), torch.tensor([1, 1]))
    with pytest.raises(ValueError, match=r"y_l holds indices outside"):
        triple_logprobs(logp, torch.tensor([0, 1]), torch.tensor([-1, 0]))
    with pytest.raises(TypeError, match="y_w must hold integer"):
        triple_logprobs(logp, torch.tensor([0.0, 1.0]), torch.tensor([1, 0]))
    w, l_ = triple_logprobs(
        torch.empty(0, 3), torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long)
    )
    assert w.shape == l_.shape == (0,)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 6), i=st.integers(-8, 8), kind=st.sampled_from(range(len(INTS))))
def test_batch_integer_index_is_one_triple_or_an_index_error(n, i, kind):
    b = PreferenceBatch.from_arrays(
        np.arange(2 * n, dtype=np.float32).reshape(n, 2),
        np.zeros(n, dtype=np.int64),
        np.ones(n, dtype=np.int64),
    )
    if -n <= i < n:
        one = b[INTS[kind](i)]
        assert len(one) == 1 and one.x.shape == (1, 2)
        assert torch.equal(one.x[0], b.x[i])
    else:
        # fail-before: an out-of-range int gave an empty batch, a numpy int a 1-D x
        with pytest.raises(IndexError, match="out of range"):
            b[INTS[kind](i)]


@settings(max_examples=25, deadline=None)
@given(
    gamma=st.sampled_from([0.1, 0.5, 2.0]),
    shrink=st.sampled_from([0.0, 0.3, 0.9]),
    kind=st.sampled_from(range(len(REALS))),
    n=st.integers(0, 5),
)
def test_world_accepts_every_scalar_type_and_samples_valid_triples(gamma, shrink, kind, n):
    w = SyntheticPreferenceWorld(
        d_x=INTS[kind](3),
        n_outputs=INTS[kind](4),
        D=INTS[kind](2),
        temperature_gamma=REALS[kind](gamma),
        shrink=REALS[kind](shrink),
        seed=INTS[kind](1),
    )
    ref = SyntheticPreferenceWorld(
        d_x=3,
        n_outputs=4,
        D=2,
        temperature_gamma=float(REALS[kind](gamma)),
        shrink=float(REALS[kind](shrink)),
        seed=1,
    )
    x = torch.randn(4, 3, dtype=torch.float64)
    assert torch.equal(w.true_policy(x), ref.true_policy(x))
    t = sample_preferences(w.true_policy, INTS[kind](n), generator=torch.Generator().manual_seed(0))
    assert len(t) == n and (t.y_w != t.y_l).all()
    assert ((t.y_w >= 0) & (t.y_w < 4)).all() and ((t.y_l >= 0) & (t.y_l < 4)).all()


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"temperature_gamma": float("nan")}, "temperature_gamma"),
        ({"temperature_gamma": "0.5"}, "temperature_gamma"),
        ({"temperature_gamma": None}, "temperature_gamma"),
        ({"shrink": 1.0}, "shrink"),
        ({"shrink": "0.5"}, "shrink"),
        ({"shrink": True}, "shrink"),
        ({"permutation": (1.0, 2.0, 0.0)}, r"permutation\[0\]"),
        ({"permutation": (0, 0, 1)}, "permutation"),
        ({"D": True}, "D"),
    ],
)
def test_world_refuses_bad_numbers_naming_them(kw, name):
    # fail-before: shrink="0.5" was accepted, temperature_gamma="0.5"/None gave raw errors
    with pytest.raises(ValueError, match=name):
        SyntheticPreferenceWorld(**kw)


def test_world_accepts_a_numpy_permutation():
    w = SyntheticPreferenceWorld(D=2, permutation=np.array([2, 0, 1]))
    assert w.permutation == (2, 0, 1) and all(type(i) is int for i in w.permutation)


def test_check_conditions_numbers_and_degenerate_tables():
    w = SyntheticPreferenceWorld(seed=0)
    x = w.sample_x(60, torch.Generator().manual_seed(0))
    a = check_conditions(
        w.true_policy,
        w.proxy_policy,
        x,
        np.float32(0.02),
        far=np.int64(5),
        n_pairs=np.int64(200),
        seed=np.int64(0),
    )
    b = check_conditions(
        w.true_policy, w.proxy_policy, x, float(np.float32(0.02)), far=5, n_pairs=200, seed=0
    )
    assert a.to_dict() == b.to_dict()
    for kw, name in (
        ({"delta": float("nan")}, "delta"),
        ({"far": 0}, "far"),
        ({"seed": 1.5}, "seed"),
        ({"max_violation": float("nan")}, "max_violation"),
        ({"max_dim": -1}, "max_dim"),
        ({"max_L": float("nan")}, "max_L"),
        ({"n_pairs": True}, "n_pairs"),
    ):
        with pytest.raises(ValueError, match=name):
            check_conditions(w.true_policy, w.proxy_policy, x, **kw)
    p = torch.full((5, 3), 1 / 3)  # constant tables: warned, never silently a verdict of "holds"
    with pytest.warns(UserWarning):
        rep = check_conditions(p, p)
    assert math.isnan(rep.intrinsic_dim) and rep.L_hat == math.inf
    assert not rep.holds["C3"] and not rep.holds["C4"]


def test_adapter_flags_and_a_few_training_steps_with_numpy_numbers():
    with pytest.raises(TypeError, match="spectral_norm"):
        MLPAdapter(3, spectral_norm="false")  # fail-before: "false" switched it on
    w = SyntheticPreferenceWorld(d_x=3, n_outputs=4, D=2, seed=0)
    gen = torch.Generator().manual_seed(0)
    batch = sample_preferences(w.true_policy, 32, generator=gen)
    torch.manual_seed(0)
    m = SimplexPolicy(3, 4, 2, encoder_hidden=8)
    fit_true_stage(m, batch, steps=np.int64(3), lr=np.float32(1e-2), reg=np.float64(0.0))
    for kw, name in (
        ({"lr": float("nan")}, "lr"),
        ({"reg": -1.0}, "reg"),
        ({"steps": 0}, "steps"),
        ({"lr": True}, "lr"),
    ):
        with pytest.raises(ValueError, match=name):
            fit_true_stage(m, batch, **kw)
    out = evaluate(m, w, n_test=np.int64(16))
    assert all(math.isfinite(v) for v in out.values()) and 0 <= out["tv"] <= 1
