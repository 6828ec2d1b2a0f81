"""Bradley-Terry sampling and the preference NLL of both stages."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from icml25.proxy_feedback import PreferenceBatch, SyntheticPreferenceWorld, sample_preferences
from icml25.proxy_feedback.losses import preference_nll, triple_logprobs


def test_empirical_win_rates_match_the_bradley_terry_probability():
    """On a fixed input, P(a beats b) = σ(log π(a) − log π(b)) within 3 standard errors."""
    w = SyntheticPreferenceWorld(n_outputs=4)
    x0 = w.sample_x(1, torch.Generator().manual_seed(1), dtype=torch.float64)
    n = 20_000
    x = x0.expand(n, -1).clone()
    b = sample_preferences(w.true_policy, n, generator=torch.Generator().manual_seed(2), x=x)
    logp = torch.log(w.true_policy(x0)[0])
    checked = 0
    for a in range(4):
        for c in range(a + 1, 4):
            pair = ((b.y_w == a) & (b.y_l == c)) | ((b.y_w == c) & (b.y_l == a))
            m = int(pair.sum())
            wins = int(((b.y_w == a) & (b.y_l == c)).sum())
            p = float(torch.sigmoid(logp[a] - logp[c]))
            se = (p * (1 - p) / m) ** 0.5
            assert abs(wins / m - p) < 3 * se, (a, c, wins / m, p)
            checked += 1
    assert checked == 6
    assert bool((b.y_w != b.y_l).all())  # two distinct outputs
    counts = torch.bincount(torch.cat([b.y_w, b.y_l]), minlength=4).double()
    assert float((counts / counts.sum() - 0.25).abs().max()) < 0.01  # pairs drawn uniformly


def test_sampling_is_reproducible_and_bound_methods_give_d_x():
    w = SyntheticPreferenceWorld()
    a = sample_preferences(w.proxy_policy, 50, generator=torch.Generator().manual_seed(0))
    b = sample_preferences(w.proxy_policy, 50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.x, b.x) and torch.equal(a.y_w, b.y_w) and a.d_x == 5
    with pytest.raises(ValueError, match="pass d_x"):
        sample_preferences(lambda x: torch.full((len(x), 3), 1 / 3), 5)
    with pytest.raises(ValueError, match="n must be an integer >= 0, got -1"):
        sample_preferences(w.true_policy, -1)


def test_preference_batch_from_user_arrays():
    b = PreferenceBatch.from_arrays(np.zeros((3, 2)), np.array([0, 1, 2]), [1.0, 2.0, 0.0])
    assert b.y_l.dtype == torch.long and len(b) == 3 and len(b[:2]) == 2
    with pytest.raises(ValueError, match=r"y_w == y_l \(first at index 1\)"):
        PreferenceBatch.from_arrays(np.zeros((2, 2)), [0, 1], [1, 1])
    with pytest.warns(UserWarning, match="dropped 1 tied"):
        b = PreferenceBatch.from_arrays(np.zeros((2, 2)), [0, 1], [1, 1], drop_ties=True)
    assert len(b) == 1
    with pytest.raises(ValueError, match=r"shape \(n,\) = \(2,\)"):
        PreferenceBatch(torch.zeros(2, 2), torch.zeros(3, dtype=torch.long), torch.ones(2))
    with pytest.raises(ValueError, match="integer output indices"):
        PreferenceBatch(torch.zeros(1, 2), [0.5], [1])
    with pytest.raises(ValueError, match="NaN"):
        PreferenceBatch(torch.full((1, 2), float("nan")), [0], [1])
    with pytest.raises(ValueError, match="out of range.*n_outputs = 3"):
        PreferenceBatch(torch.zeros(1, 2), [5], [1]).check_outputs(3)


def test_preference_nll_matches_brute_force_and_gradcheck():
    g = torch.Generator().manual_seed(0)
    logp = torch.log_softmax(torch.randn(7, 4, generator=g, dtype=torch.float64), -1)
    yw = torch.tensor([0, 1, 2, 3, 0, 1, 2])
    yl = torch.tensor([1, 2, 3, 0, 2, 3, 1])
    w, lo = triple_logprobs(logp, yw, yl)
    brute = (
        sum(
            -np.log(1 / (1 + np.exp(-(float(logp[i, yw[i]]) - float(logp[i, yl[i]])))))
            for i in range(7)
        )
        / 7
    )
    assert abs(float(preference_nll(w, lo)) - brute) < 1e-12
    x = logp.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: preference_nll(*triple_logprobs(t, yw, yl)), (x,))
    # invariant to a per-x constant added to every log-probability
    shifted = logp + torch.randn(7, 1, generator=g, dtype=torch.float64) * 5
    assert abs(float(preference_nll(*triple_logprobs(shifted, yw, yl))) - brute) < 1e-10


def test_with_a_reference_it_is_the_sigmoid_dpo_loss():
    g = torch.Generator().manual_seed(1)
    pw, pl, rw, rl = (torch.randn(9, generator=g, dtype=torch.float64) for _ in range(4))
    beta = 0.3
    want = -F.logsigmoid(beta * ((pw - rw) - (pl - rl))).mean()
    assert torch.allclose(preference_nll(pw, pl, rw, rl, beta), want, atol=1e-12)
    wts = torch.rand(9, generator=g, dtype=torch.float64)
    want_w = (wts * -F.logsigmoid(pw - pl)).sum() / wts.sum()
    assert torch.allclose(preference_nll(pw, pl, weights=wts), want_w, atol=1e-12)
    with pytest.raises(ValueError, match="beta must be a finite number > 0"):
        preference_nll(pw, pl, beta=0.0)
    with pytest.raises(ValueError, match="both ref_logp_w and ref_logp_l"):
        preference_nll(pw, pl, rw)


def test_batches_from_records_datasets_and_tuples():
    from torch.utils.data import Dataset

    class Rows(Dataset):  # a user's Dataset of dict rows (not a TensorDataset)
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return {"x": np.full(4, float(i)), "y_w": np.int64(i), "y_l": (i + 1) % 3}

    b = PreferenceBatch.from_records(Rows())
    assert b.x.shape == (3, 4) and b.y_w.tolist() == [0, 1, 2] and b.y_l.tolist() == [1, 2, 0]
    t = PreferenceBatch.from_records([(torch.zeros(2), 0, 1), ([1.0, 2.0], 1, 0)])
    assert len(t) == 2
    with pytest.raises(ValueError, match=r"record 0 lacks \['y_l'\]"):
        PreferenceBatch.from_records([{"x": [0.0], "y_w": 0}])
    with pytest.raises(ValueError, match="one length"):
        PreferenceBatch.from_records([([0.0], 0, 1), ([0.0, 1.0], 1, 0)])
