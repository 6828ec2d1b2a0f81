"""Bends, the sorted reward distribution and the selection / sanitization rules."""

import numpy as np
import pytest

from icml25.rlthf import RewardDistribution, window_accuracy
from icml25.rlthf.distribution import find_bend
from icml25.rlthf.selection import backoff_drop_mask, drop_position, select_targets


def test_find_bend_exact_corner():
    # steep fall for 10 points, then flat: the corner is index 10
    y = np.concatenate([np.linspace(10, 1, 11), np.linspace(0.95, 0.5, 40)])
    assert find_bend(y) == 10


@pytest.mark.parametrize("n", [50, 500, 4000])
def test_find_bend_matches_kneed(n):
    kneed = pytest.importorskip("kneed")
    x = np.linspace(0, 1, n)
    convex = 1 / (x + 0.1)  # decreasing, convex: the upper part of a margin curve
    concave = -1 / (1.1 - x)  # decreasing, concave: the lower part
    for y, curve in ((convex, "convex"), (concave, "concave")):
        ref = kneed.KneeLocator(np.arange(n), y, curve=curve, direction="decreasing").knee
        assert ref is not None
        assert abs(find_bend(y) - ref) <= 0.02 * n


def test_find_bend_small_and_flat():
    with pytest.raises(ValueError, match="non-empty"):  # issue 49: no longer a silent 0
        find_bend([])
    assert find_bend([3.0, 1.0]) == 0
    assert find_bend(np.ones(10)) == 0
    with pytest.raises(ValueError, match="not finite"):
        find_bend([1.0, np.nan, 0.0])
    with pytest.raises(ValueError, match="1-D"):
        find_bend(np.ones((2, 3)))


def test_distribution_hand_built():
    m = np.array([0.5, -2.0, 3.0, 0.0, -0.1, 1.0, 1.0, -5.0])
    d = RewardDistribution(m, np.arange(10, 18))
    assert d.zero_crossing == 4  # 3.0, 1.0, 1.0, 0.5
    # descending, ties (the two 1.0s at indices 15 and 16) by pool index
    assert d.order.tolist() == [12, 15, 16, 10, 13, 14, 11, 17]
    assert d.position(16) == 2 and d.position(17) == 7
    assert d.upper_bend == find_bend(d.sorted[:4])
    assert d.lower_bend == 4 + find_bend(d.sorted[4:])
    with pytest.raises(KeyError, match="99"):
        d.position(99)


@pytest.mark.parametrize(
    "m, k0, ku, kl",
    [
        (np.linspace(5, 1, 20), 20, None, 20),  # all positive: no lower bend
        (np.linspace(-1, -5, 20), 0, 0, None),  # all negative: no upper bend
        (np.zeros(7), 0, 0, None),  # all equal
        (np.array([1.0, -1.0]), 1, 0, 2),  # tiny
    ],
)
def test_distribution_degenerate(m, k0, ku, kl):
    d = RewardDistribution(m)
    assert d.zero_crossing == k0
    if ku is not None:
        assert d.upper_bend == ku
    if kl is not None:
        assert d.lower_bend == kl
    assert 0 <= d.upper_bend <= d.zero_crossing <= d.lower_bend <= len(m)


def test_distribution_nan_is_floating_point_error():
    with pytest.raises(FloatingPointError, match="diverged"):
        RewardDistribution([1.0, np.inf])
    with pytest.raises(ValueError, match="indices"):
        RewardDistribution([1.0, 2.0], [0])


def _curve(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return RewardDistribution(
        np.concatenate([rng.exponential(2, 300), -rng.exponential(1, n - 300)])
    )


def test_backoff_drop_rules():
    d = _curve()
    pos = np.array([d.position(i) for i in d.indices])
    assert backoff_drop_mask(d, "bend_backoff", 0.0).tolist() == (pos >= d.lower_bend).tolist()
    assert backoff_drop_mask(d, "bend_backoff", 1.0).tolist() == (pos >= d.upper_bend).tolist()
    assert backoff_drop_mask(d, "upper_bend").tolist() == (pos >= d.upper_bend).tolist()
    assert backoff_drop_mask(d, "zero").tolist() == (pos >= d.zero_crossing).tolist()
    assert not backoff_drop_mask(d, None).any()
    p = drop_position(d, "bend_backoff", 0.5)
    assert p == d.lower_bend - (d.lower_bend - d.upper_bend) // 2
    protected = d.order[-5:]
    drop = backoff_drop_mask(d, "bend_backoff", 0.5, protected=protected)
    assert not drop[np.isin(d.indices, protected)].any()
    with pytest.raises(ValueError, match="ratio"):
        backoff_drop_mask(d, "bend_backoff", 1.5)
    with pytest.raises(ValueError, match="rule"):
        backoff_drop_mask(d, "elbow")


def test_select_targets_strategies():
    d = _curve()
    assert select_targets(d, 10).tolist() == d.order[-10:].tolist()
    unc = select_targets(d, 10, "uncertainty")
    assert set(unc.tolist()) == set(
        d.indices[np.argsort(np.abs(d.margins), kind="stable")[:10]].tolist()
    )
    r1 = select_targets(d, 10, "random", rng=3)
    assert r1.tolist() == select_targets(d, 10, "random", rng=3).tolist() and len(set(r1)) == 10
    win = select_targets(d, 10, "lower_bend_window")
    assert {d.position(i) for i in win} == set(range(d.lower_bend - 5, d.lower_bend + 5))
    oof = -np.arange(len(d), dtype=float)
    assert set(select_targets(d, 4, "self_confidence", oof_margins=oof)) == set(d.indices[-4:])
    assert len(select_targets(d, 10_000)) == len(d)
    assert len(select_targets(d, 0)) == 0
    with pytest.raises(ValueError, match="oof_margins"):
        select_targets(d, 4, "self_confidence")
    with pytest.raises(ValueError, match="strategy"):
        select_targets(d, 4, "knee")
    with pytest.raises(ValueError, match="budget"):
        select_targets(d, 2.5)
    with pytest.raises(TypeError, match="budget"):
        select_targets(d, "2")


def test_uncertainty_equals_modal_margin_sampling():
    modal = pytest.importorskip("modAL.uncertainty")
    d = _curve(seed=4)
    p = 1 / (1 + np.exp(-d.margins))
    proba = np.stack([1 - p, p], 1)

    class Fixed:  # modAL asks the estimator for probabilities
        def predict_proba(self, X):
            return proba[X.astype(int).ravel()]

    ref = modal.margin_sampling(Fixed(), np.arange(len(d))[:, None], n_instances=20)
    ref_idx = ref[0] if isinstance(ref, tuple) else ref
    assert set(d.indices[np.asarray(ref_idx).ravel()].tolist()) == set(
        select_targets(d, 20, "uncertainty").tolist()
    )


def test_window_accuracy():
    d = RewardDistribution(np.array([3.0, 2.0, 1.0, -1.0]), np.array([0, 1, 2, 3]))
    ai = np.array([1, 1, 0, 0])
    hu = np.array([1, 1, 1, 1])
    acc = window_accuracy(d, ai, hu, window_frac=0.25)  # window of 1 position
    assert acc.tolist() == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="window_frac"):
        window_accuracy(d, ai, hu, 0)


def test_find_bend_straight_line_has_no_bend():
    assert find_bend(np.linspace(5, -5, 101)) == 0
    assert find_bend(np.arange(50.0)[::-1] * 1e-3) == 0


def test_distribution_and_drop_mask_refuse_bad_indices():
    with pytest.raises(ValueError, match="more than once"):
        RewardDistribution([1.0, 0.5, -1.0], [4, 4, 2])
    with pytest.raises(TypeError, match="integers"):
        RewardDistribution([1.0, 0.5], [0.5, 1.5])
    with pytest.raises(ValueError, match=">= 0"):
        RewardDistribution([1.0, 0.5], [-1, 3])
    d = RewardDistribution(np.linspace(3, -3, 30))
    with pytest.raises(TypeError, match="boolean mask"):
        backoff_drop_mask(d, "zero", protected=np.zeros(30, dtype=bool))
    with pytest.raises(ValueError, match=r"ai_labels\[1\] = 7"):
        window_accuracy(d, np.r_[0, 7, np.zeros(28)], np.zeros(30))
    with pytest.raises(ValueError, match="human_labels has shape"):
        window_accuracy(d, np.zeros(30), np.zeros(29))


def test_an_empty_or_non_numeric_curve_is_refused_by_name():
    import pytest

    from icml25.rlthf import RewardDistribution
    from icml25.rlthf.distribution import find_bend

    with pytest.raises(ValueError, match="margins is empty"):
        RewardDistribution([])
    with pytest.raises(TypeError, match="margins must be real numbers"):
        RewardDistribution(["a", "b"])
    with pytest.raises(TypeError, match="find_bend takes a curve of real numbers"):
        find_bend("abc")
