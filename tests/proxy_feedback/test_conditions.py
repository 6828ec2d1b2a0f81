"""The condition diagnostics on worlds where the answer is known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from icml25.proxy_feedback import SimplexPolicy, SyntheticPreferenceWorld, check_conditions


def _report(scenario, seed=0, n=3000, **kw):
    w = SyntheticPreferenceWorld(scenario=scenario, seed=seed)
    x = w.sample_x(n, torch.Generator().manual_seed(seed), dtype=torch.float64)
    return check_conditions(w.true_policy, w.proxy_policy, x, **kw)


@pytest.mark.parametrize("seed", [0, 1])
def test_hold_passes_every_condition(seed):
    r = _report("hold", seed)
    assert r.holds == {"C1": True, "C2": True, "C3": True, "C4": True}
    assert r.levelset_violation < 0.01 and r.image_gap_q99 < 0.05 and r.levelset_spearman > 0.9
    assert 1.5 < r.intrinsic_dim < 2.5  # D = 2 by construction
    assert "VIOLATED" not in r.summary()


def test_each_violation_is_flagged():
    v1, v2, v4 = _report("v1_levelsets"), _report("v2_image"), _report("v4_lipschitz")
    assert not v1.holds["C1"] and v1.levelset_violation > 0.3
    assert v2.holds["C1"] and not v2.holds["C2"] and v2.image_gap_q99 > 0.2
    assert v4.L_hat > 10 and not v4.holds["C4"]
    assert "C1 shared level sets" in v1.summary() and "VIOLATED" in v1.summary()


def test_k20_world_has_a_two_dimensional_proxy():
    w = SyntheticPreferenceWorld(n_outputs=20, seed=1)
    x = w.sample_x(2000, torch.Generator().manual_seed(0), dtype=torch.float64)
    r = check_conditions(w.true_policy, w.proxy_policy, x, max_dim=3)
    assert 1.5 < r.intrinsic_dim < 2.6 and r.holds["C3"]


def test_arrays_and_fitted_models_are_accepted():
    w = SyntheticPreferenceWorld()
    x = w.sample_x(500, torch.Generator().manual_seed(0), dtype=torch.float64)
    a = check_conditions(w.true_policy(x).numpy(), w.proxy_policy(x).numpy())
    b = check_conditions(w.true_policy, w.proxy_policy, x)
    assert a.to_dict() == b.to_dict()
    m = SimplexPolicy(5, 3, 2).double()  # returns log-probabilities: exponentiated
    r = check_conditions(w.true_policy, m, x)
    assert math.isfinite(r.image_gap_q99)


def test_degenerate_proxy_warns_and_returns_inf_not_an_error():
    w = SyntheticPreferenceWorld()
    x = w.sample_x(300, torch.Generator().manual_seed(0), dtype=torch.float64)
    const = torch.full((300, 3), 1 / 3, dtype=torch.float64)
    with pytest.warns(UserWarning, match="constant"):
        r = check_conditions(w.true_policy(x), const)
    assert math.isinf(r.L_hat_rev) and r.L_hat == 0.0
    assert not r.holds["C2"]


@pytest.mark.parametrize(
    "p,q,match",
    [
        (np.full((5, 3), 1 / 3), np.full((6, 3), 1 / 3), "same inputs"),
        (np.full((5, 3), 0.5), np.full((5, 3), 1 / 3), "rows must sum to 1"),
        (np.full((5, 1), 1.0), np.full((5, 1), 1.0), "K >= 2"),
        (np.full((2, 3), 1 / 3), np.full((2, 3), 1 / 3), "at least 3 inputs"),
    ],
)
def test_bad_inputs_are_named(p, q, match):
    with pytest.raises(ValueError, match=match):
        check_conditions(p, q)


def test_callables_need_x_and_bad_settings():
    w = SyntheticPreferenceWorld()
    with pytest.raises(ValueError, match="pass the inputs x"):
        check_conditions(w.true_policy, w.proxy_policy)
    with pytest.raises(ValueError, match="delta must be"):
        check_conditions(np.full((5, 3), 1 / 3), np.full((5, 3), 1 / 3), delta=0)


def test_c3_compares_with_the_intended_bottleneck():
    """Any table of distributions over K outputs meets the default (K - 1); a full-dimensional
    proxy fails C3 for a smaller intended D."""
    p = np.random.default_rng(0).dirichlet(np.ones(4), 2000)
    full = check_conditions(p, p)
    assert 2.5 < full.intrinsic_dim < 3.6 and full.holds["C3"]
    assert not check_conditions(p, p, max_dim=1).holds["C3"]


def test_label_frequency_tables_warn_about_noise():
    w = SyntheticPreferenceWorld()
    x = w.sample_x(600, torch.Generator().manual_seed(0), dtype=torch.float64)
    g = torch.Generator().manual_seed(1)

    def freq(P, m):
        return (
            torch.nn.functional.one_hot(torch.multinomial(P, m, True, generator=g), 3)
            .double()
            .mean(1)
        )

    with pytest.warns(UserWarning, match="distinct rows"):
        check_conditions(freq(w.true_policy(x), 3), freq(w.proxy_policy(x), 3))
    with pytest.raises(ValueError, match="log-probabilities"):
        check_conditions(np.log(w.true_policy(x).numpy()), np.log(w.proxy_policy(x).numpy()))
    with pytest.raises(ValueError, match="x has 5 rows"):
        check_conditions(w.true_policy(x).numpy(), w.proxy_policy(x).numpy(), x[:5])
