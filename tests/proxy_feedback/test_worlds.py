"""The synthetic worlds and the factorisation that makes the parameterisation correct (Lemmas A
and B of arXiv:2412.16475, Sec. 3): assembled from the world's own parts, (P1) is the expert."""

from __future__ import annotations

import pytest
import torch

from icml25.proxy_feedback import SimplexPolicy, SyntheticPreferenceWorld
from icml25.proxy_feedback.model import LogLinearAdapter


def _x(world, n=2000, seed=0, dtype=torch.float64):
    return world.sample_x(n, torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("perm,gamma", [(None, 0.5), ((2, 0, 1), 0.3), ((0, 2, 1), 2.0)])
def test_loglinear_map_inverts_the_proxy_distortion_exactly(perm, gamma):
    w = SyntheticPreferenceWorld(permutation=perm, temperature_gamma=gamma)
    e = w.true_embedding(_x(w))
    q = w.distortion(e)
    M, b = w.distortion_inverse_loglinear()
    back = torch.softmax(torch.log(q) @ M.T + b, -1)
    assert torch.allclose(back, e, atol=1e-12, rtol=0)
    assert not torch.allclose(q, e, atol=1e-2)  # the distortion is not the identity


@pytest.mark.parametrize("k", [3, 7])
def test_p1_assembled_from_true_components_reproduces_the_expert(k):
    """τ° = h ∘ e†, adapter = h^{-1} as a log-linear map (M = P^{-1}/γ), Θ = Θ*, φ = softmax."""
    w = SyntheticPreferenceWorld(n_outputs=k, seed=3)
    x = _x(w)
    model = SimplexPolicy(w.d_x, k, w.D).double()
    M, b = w.distortion_inverse_loglinear()
    model.adapter.reset_identity(M)
    with torch.no_grad():
        model.adapter.b.copy_(b)
        model.theta.weight.copy_(w.theta_star)
    logp = model.from_simplex(torch.log(w.proxy_embedding(x)))
    assert torch.allclose(logp.exp(), w.true_policy(x), atol=1e-6, rtol=0)
    # with the adapter at the identity the same network is the proxy (P2)
    assert torch.allclose(
        model.from_simplex(torch.log(w.proxy_embedding(x)), use_adapter=False).exp(),
        w.proxy_policy(x),
        atol=1e-6,
    )


def test_the_adapter_on_probabilities_matches_the_log_path():
    w = SyntheticPreferenceWorld()
    q = w.proxy_embedding(_x(w, 50))
    a = LogLinearAdapter(3).double()
    M, _ = w.distortion_inverse_loglinear()
    a.reset_identity(M)
    assert torch.allclose(a(q), a.forward_log(torch.log(q)).exp(), atol=1e-4)
    assert torch.isfinite(a(torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64))).all()


def test_violations_do_what_they_say():
    x = _x(SyntheticPreferenceWorld(), 500)
    v1 = SyntheticPreferenceWorld(scenario="v1_levelsets", masked_dims=2)
    x2 = x.clone()
    x2[:, 3:] = torch.randn(500, 2, dtype=torch.float64)
    assert torch.allclose(v1.proxy_policy(x), v1.proxy_policy(x2))  # masked dims ignored
    assert not torch.allclose(v1.true_policy(x), v1.true_policy(x2), atol=1e-3)
    hold, v2 = SyntheticPreferenceWorld(), SyntheticPreferenceWorld(scenario="v2_image", shrink=0.6)
    assert torch.allclose(v2.proxy_embedding(x), 0.4 * hold.proxy_embedding(x) + 0.2)
    v4 = SyntheticPreferenceWorld(scenario="v4_lipschitz")
    assert v4.gamma == 0.1
    assert v4.proxy_policy(x).std(0).sum() < hold.proxy_policy(x).std(0).sum()


def test_same_seed_same_world_and_expert_shared_across_scenarios():
    x = _x(SyntheticPreferenceWorld(), 100)
    a, b = SyntheticPreferenceWorld(seed=4), SyntheticPreferenceWorld(seed=4, scenario="v2_image")
    assert torch.equal(a.true_policy(x), b.true_policy(x))
    assert not torch.equal(a.true_policy(x), SyntheticPreferenceWorld(seed=5).true_policy(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_outputs_follow_the_input_dtype_and_device(dtype):
    w = SyntheticPreferenceWorld(n_outputs=5)
    x = _x(w, 10, dtype=dtype)
    for f in (w.true_policy, w.proxy_policy):
        p = f(x)
        assert p.dtype == dtype and p.shape == (10, 5)
        assert torch.allclose(p.sum(-1), torch.ones(10, dtype=dtype), atol=1e-5)
    meta = torch.empty(4, 5, device="meta")
    assert w.true_policy(meta).device.type == "meta"  # nothing created on another device


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"D": 0}, "D must be"),
        ({"n_outputs": 1}, "n_outputs must be"),
        ({"scenario": "v3"}, "scenario must be one of"),
        ({"permutation": (0, 1)}, "permutation must be a permutation of 0..2"),
        ({"temperature_gamma": 0}, "temperature_gamma must be a finite number > 0"),
        ({"shrink": 1.0}, r"shrink must be a finite number in \[0, 1\)"),
        ({"scenario": "v1_levelsets", "masked_dims": 5}, "masked_dims must be in 1..4"),
    ],
)
def test_bad_world_arguments_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        SyntheticPreferenceWorld(**kw)


def test_input_dimension_mismatch_names_both():
    w = SyntheticPreferenceWorld()
    with pytest.raises(ValueError, match=r"\(n, 5\), got \(3, 4\)"):
        w.true_policy(torch.zeros(3, 4))
