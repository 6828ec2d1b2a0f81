"""Issue 49's future-of-work items: log-loss with a validation class unseen in training,
base_idx out of range, payout floors below a cent, and NaN gradient attributions."""

from __future__ import annotations

import re
import warnings
from decimal import Decimal

import numpy as np
import pytest

from icml25.future_of_work import (
    CollectiveLicensingPool,
    Flat,
    GroupUtility,
    Licensee,
    Work,
    gradient_attribution,
)


def _data(val_classes=(0, 1)):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = (X[:, 0] > 0).astype(int)
    groups = np.repeat(np.arange(4), 10)
    Xv = rng.normal(size=(len(val_classes), 2))
    return X, y, groups, Xv, np.array(val_classes)


def test_log_loss_refuses_a_validation_class_missing_from_training():
    from sklearn.linear_model import LogisticRegression

    X, y, g, Xv, yv = _data((0, 1, 2))
    with pytest.raises(ValueError, match=r"y_val has class\(es\) \[2\] that the training labels"):
        GroupUtility(LogisticRegression(), X, y, g, Xv, yv, metric="neg_log_loss")
    # between two training classes, searchsorted used to map it silently to a neighbour
    with pytest.raises(ValueError, match=r"y_val has class\(es\) \[1\]"):
        GroupUtility(LogisticRegression(), X, 2 * y, g, Xv, yv, metric="neg_log_loss")


def test_log_loss_with_labels_scores_the_unseen_class_at_the_clip():
    from sklearn.linear_model import LogisticRegression

    X, y, g, Xv, yv = _data((0, 1, 2))
    u = GroupUtility(LogisticRegression(), X, y, g, Xv, yv, metric="neg_log_loss", labels=[0, 1, 2])
    full = u(frozenset(range(4)))
    assert np.isfinite(full)
    # the row of class 2 costs about log(1e-15) / 3 on its own
    assert full < np.log(1e-15) / 3 + 1
    assert np.isfinite(u(frozenset()))
    with pytest.raises(
        ValueError, match=r"labels must include every training class; missing \[1\]"
    ):
        GroupUtility(LogisticRegression(), X, y, g, Xv, yv, metric="neg_log_loss", labels=[0, 2])


@pytest.mark.parametrize("bad", [[40], [-1], [0, 99]])
def test_base_idx_out_of_range_names_the_index(bad):
    X, y, g, Xv, yv = _data()
    with pytest.raises(
        ValueError, match=rf"base_idx must hold row indices in \[0, 40\).*got {bad[-1]}"
    ):
        GroupUtility(None, X, y, g, Xv, yv, fit_fn=lambda a, b: lambda z: z[:, 0] > 0, base_idx=bad)


def test_base_idx_must_be_integers():
    X, y, g, Xv, yv = _data()
    with pytest.raises(ValueError, match="base_idx must be a 1-D sequence of integer row indices"):
        GroupUtility(None, X, y, g, Xv, yv, fit_fn=lambda a, b: None, base_idx=[1.5])


def _pool():
    works = [Work("a", "x", 1), Work("b", "y", 3)]
    p = CollectiveLicensingPool(works, Flat("10.00"))
    p.collect([Licensee("dev")])
    return p


@pytest.mark.parametrize("floor", [0.004, "0.005", Decimal("0.001")])
def test_a_payout_floor_that_rounds_to_zero_is_refused(floor):
    with pytest.raises(ValueError, match=re.escape(f"min_payout={floor!r} rounds to 0.00")):
        _pool().distribute("volume", min_payout=floor)


def test_a_fractional_cent_floor_warns_with_the_floor_used():
    with pytest.warns(
        UserWarning,
        match=r"min_payout=0.016 is not a whole number of cents; the floor used is 0.02",
    ):
        pay = _pool().distribute("volume", min_payout=0.016)
    assert sum(pay.values()) == Decimal("10.00")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _pool().distribute("volume", min_payout="0.01")


@pytest.mark.parametrize(
    "tg, vg, lr, match",
    [
        (np.array([[np.nan, 0.0], [1, 1]]), np.ones((1, 2)), 1.0, "train_grads must be finite"),
        (np.ones((2, 2)), np.array([[np.inf, 1.0]]), 1.0, "val_grads must be finite"),
        (np.ones((2, 2)), np.ones((1, 2)), float("nan"), "lr must be a finite number"),
        (np.array([[1e200, 1e200], [1, 1]]), np.array([[1e200, -1e200]]), 1.0, "overflowed"),
    ],
)
def test_gradient_attribution_never_returns_nan(tg, vg, lr, match):
    with pytest.raises(ValueError, match=match):
        gradient_attribution(tg, vg, [0, 1], lr=lr)
