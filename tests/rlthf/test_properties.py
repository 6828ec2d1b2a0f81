"""Property tests at rlthf's public boundary (issue 49): numbers as Python, numpy and 0-d torch
scalars; float32/float64/bf16 rewards; NaN/inf, empty and degenerate inputs; the weighted BT loss
against its formula in float64, the bend against a brute-force chord distance, the selection
rules against a sort."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.rlthf import (
    HumanOracle,
    RewardDistribution,
    RLTHFConfig,
    make_textworld,
    window_accuracy,
)
from icml25.rlthf.distribution import find_bend
from icml25.rlthf.labelers import SyntheticLabeler
from icml25.rlthf.losses import weighted_bt_loss
from icml25.rlthf.selection import backoff_drop_mask, drop_position, select_targets

REALS = [float, np.float64, np.float32, torch.tensor]
INTS = [int, np.int64, np.int32, torch.tensor]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    dtype=st.sampled_from(DTYPES),
    weighted=st.booleans(),
    margin=st.sampled_from([None, 0.0, 0.5, "vector"]),
    reduction=st.sampled_from(["mean", "sum"]),
    seed=st.integers(0, 2**16),
)
def test_weighted_bt_loss_is_its_formula_in_float64(n, dtype, weighted, margin, reduction, seed):
    g = torch.Generator().manual_seed(seed)
    rc, rr = (
        (3 * torch.randn(n, generator=g)).to(dtype),
        (3 * torch.randn(n, generator=g)).to(dtype),
    )
    w = torch.randint(0, 4, (n,), generator=g).double() if weighted else None
    if w is not None and reduction == "mean" and w.sum() == 0:
        w[0] = 1.0
    m = torch.randn(n, generator=g) if margin == "vector" else margin
    got = weighted_bt_loss(rc, rr, w, m, reduction=reduction)
    assert got.dtype == dtype and got.ndim == 0
    d = rc.double() - rr.double() - (0.0 if m is None else torch.as_tensor(m, dtype=torch.float64))
    ww = torch.ones(n, dtype=torch.float64) if w is None else w
    num = -(ww * torch.nn.functional.logsigmoid(d)).sum()
    ref = num if reduction == "sum" else num / ww.sum()
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    assert math.isclose(float(got), float(ref), rel_tol=tol, abs_tol=tol)


def test_weighted_bt_loss_degenerate_inputs():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match="no pairs"):
        weighted_bt_loss(torch.empty(0), torch.empty(0))
    for w in (
        torch.tensor([1.0, float("nan"), 1.0]),
        torch.tensor([1.0, float("inf"), 1.0]),
        torch.tensor([1.0, -1.0, 1.0]),
    ):
        with pytest.raises(ValueError, match=r"weights\[1\]"):
            weighted_bt_loss(x, x, w)
    with pytest.raises(ValueError, match="sum to 0"):
        weighted_bt_loss(x, x, torch.zeros(3))
    with pytest.raises(ValueError, match="margin"):
        weighted_bt_loss(x, x, margin=float("nan"))
    with pytest.raises(TypeError, match="floating-point"):
        weighted_bt_loss(torch.zeros(3, dtype=torch.long), x)
    # documented: NaN rewards propagate (caught where the margins are read)
    assert math.isnan(float(weighted_bt_loss(torch.tensor([float("nan")]), torch.zeros(1))))
    with pytest.raises(FloatingPointError, match="diverged"):
        RewardDistribution([1.0, float("nan")])
    # one pair, equal rewards: log 2
    assert float(weighted_bt_loss(torch.zeros(1), torch.zeros(1))) == pytest.approx(math.log(2))


def _brute_bend(y):
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if n < 3 or y.max() == y.min():
        return 0
    best, arg = -1.0, 0
    for i in range(n):
        yn = (y[i] - y.min()) / (y.max() - y.min())
        y0 = (y[0] - y.min()) / (y.max() - y.min())
        y1 = (y[-1] - y.min()) / (y.max() - y.min())
        dist = abs(yn - (y0 + (y1 - y0) * i / (n - 1)))
        if dist > best:
            best, arg = dist, i
    return arg if best > 1e-9 else 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-20, 20), max_size=12), st.sampled_from([list, np.array, torch.tensor]))
def test_find_bend_is_the_farthest_point_from_the_chord(ys, box):
    y = sorted(ys, reverse=True)
    arg = box([float(v) for v in y]) if y else box([])
    if not y:  # issue 49: an empty curve is refused, no longer a silent 0
        with pytest.raises(ValueError, match="non-empty"):
            find_bend(arg)
        return
    assert find_bend(arg) == _brute_bend(y)


def test_find_bend_refuses_nan_and_2d():
    with pytest.raises(ValueError, match=r"y\[1\]"):
        find_bend([1.0, float("nan"), 0.0])
    with pytest.raises(ValueError, match="1-D"):
        find_bend(np.zeros((2, 2)))


@settings(max_examples=40, deadline=None)
@given(
    margins=st.lists(st.integers(-5, 5).map(float), min_size=1, max_size=12),
    budget=st.integers(0, 14),
    kind=st.sampled_from(range(len(INTS))),
    ratio=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
)
def test_selection_and_sanitization_against_a_sort(margins, budget, kind, ratio):
    d = RewardDistribution(margins)
    b = min(budget, len(margins))
    # descending by margin, ties by pool index: "bottom" takes the last b of that order
    order = sorted(range(len(margins)), key=lambda i: (-margins[i], i))
    assert sorted(select_targets(d, INTS[kind](budget))) == sorted(order[len(order) - b :])
    by_abs = sorted(range(len(margins)), key=lambda i: (abs(margins[i]), i))
    assert list(select_targets(d, INTS[kind](budget), "uncertainty")) == by_abs[:b]
    r = REALS[kind](ratio)
    p = drop_position(d, "bend_backoff", r)
    k_l, k_u = d.lower_bend, d.upper_bend
    assert p == k_l - math.floor(float(r) * (k_l - k_u))
    mask = backoff_drop_mask(d, "bend_backoff", r)
    pos = {i: j for j, i in enumerate(order)}
    assert [bool(mask[i]) for i in range(len(margins))] == [
        pos[i] >= p for i in range(len(margins))
    ]
    assert drop_position(d, "zero") == sum(m > 0 for m in margins)


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3", None, float("nan")])
def test_select_targets_refuses_a_bad_budget_naming_it(bad):
    with pytest.raises(ValueError, match="budget"):
        select_targets(RewardDistribution([1.0, 0.0]), bad)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.5", None])
def test_drop_position_refuses_a_bad_ratio_naming_it(bad):
    with pytest.raises(ValueError, match="ratio"):
        drop_position(RewardDistribution([1.0, 0.0, -1.0]), "bend_backoff", bad)


@settings(max_examples=25, deadline=None)
@given(
    iterations=st.integers(1, 4),
    f=st.sampled_from([0.01, 0.02, 0.5]),
    ratio=st.sampled_from([0.0, 0.5, 1.0]),
    alpha=st.sampled_from([1.0, 5.0]),
    kind=st.sampled_from(range(len(REALS))),
)
def test_config_accepts_every_scalar_type_as_python_numbers(iterations, f, ratio, alpha, kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = RLTHFConfig(
            iterations=INTS[kind](iterations),
            budget_per_iter=REALS[kind](f),
            backoff_ratio=REALS[kind](ratio),
            amplification=REALS[kind](alpha),
            cv_folds=INTS[kind](3),
            seed=INTS[kind](0),
            smoothing_window=INTS[kind](2),
            self_improvement=np.bool_(False),
        )
    for name in ("iterations", "cv_folds", "seed", "smoothing_window"):
        assert type(getattr(cfg, name)) is int
    for name in ("budget_per_iter", "backoff_ratio", "amplification"):
        assert type(getattr(cfg, name)) is float
    assert cfg.budget_per_iter == float(REALS[kind](f)) and type(cfg.self_improvement) is bool


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"iterations": 0}, "iterations"),
        ({"iterations": 2.0}, "iterations"),
        ({"cv_folds": 1}, "cv_folds"),
        ({"seed": True}, "seed"),
        ({"seed": "0"}, "seed"),
        ({"budget_per_iter": float("nan")}, "budget_per_iter"),
        ({"budget_per_iter": "0.02"}, "budget_per_iter"),
        ({"budget_per_iter": 0.0}, "budget_per_iter"),
        ({"backoff_ratio": 1.5}, "backoff_ratio"),
        ({"backoff_ratio": True}, "backoff_ratio"),
        ({"amplification": float("inf")}, "amplification"),
        ({"amplification": 0.5}, "amplification"),
        ({"schedule": ("0.5", "0.5", "0.5")}, r"schedule\[0\]"),
        ({"schedule": (0.5, float("nan"), 0.5)}, r"schedule\[1\]"),
        ({"schedule": (0.5, 0.5)}, "schedule"),
        ({"smoothing_window": 0}, "smoothing_window"),
    ],
)
def test_config_refuses_bad_numbers_naming_them(kw, name):
    # fail-before: schedule=("0.5", ...) was read as numbers; the rest say the same name
    with pytest.raises(ValueError, match=name):
        RLTHFConfig(**kw)


def test_config_refuses_a_non_bool_flag():
    for bad in ("yes", 1, 0):
        with pytest.raises(TypeError, match="self_improvement"):
            RLTHFConfig(self_improvement=bad)


def test_labelers_worlds_and_window_accuracy_numbers():
    lab = SyntheticLabeler(lambda p, r: float(len(r)), beta=np.float32(2.0))
    assert lab.beta == 2.0 and type(lab.beta) is float
    assert SyntheticLabeler(lambda p, r: 0.0, beta=float("inf")).beta == math.inf
    for bad in (0.0, float("nan"), True, "3"):
        with pytest.raises(ValueError, match="beta"):
            SyntheticLabeler(lambda p, r: 0.0, beta=bad)
    assert HumanOracle([0, 1, 1], budget=np.int64(2)).budget == 2
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="budget"):
            HumanOracle([0, 1], budget=bad)
    w = make_textworld(n_train=np.int64(12), n_test=np.int32(4), seed=np.int64(0))
    assert len(w.train) == 12 and len(w.test) == 4
    for kw, name in (
        ({"n_train": 2.0}, "n_train"),
        ({"seed": 1.5}, "seed"),
        ({"ai_beta": float("nan")}, "ai_beta"),
    ):
        with pytest.raises(ValueError, match=name):  # fail-before: seed=1.5 a raw TypeError
            make_textworld(**kw)
    d = RewardDistribution(np.linspace(2, -2, 12))
    ai = np.zeros(12, dtype=int)
    acc = window_accuracy(d, ai, ai, window_frac=np.float32(0.5))
    assert np.array_equal(acc, window_accuracy(d, ai, ai, window_frac=0.5)) and (acc == 1).all()
    for bad in (0.0, 1.5, float("nan"), "0.5"):
        with pytest.raises(ValueError, match="window_frac"):
            window_accuracy(d, ai, ai, window_frac=bad)
