"""Issue 49's certificate items: NaN nominal actions, float32 distributions, the caller's RNG,
the DTCBF action count, frame dtypes and safe masks (docs/certificates.md, "Bad input")."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icml25.certificates import (
    DTCBFFilter,
    FrontDoorFQE,
    NeuralFrontDoorFQE,
    OfflineDataset,
    SafetyCertificate,
    TabularConfoundedMDP,
    candidate_filter,
    make_confounded_driving,
)
from icml25.certificates.data import build_auxiliary_dataset
from icml25.certificates.qfunctions import exact_safety_q

D = torch.float64


def _box_fns():
    # certified only near the origin; the corners of the box are uncertified
    return (lambda c: -(c**2).sum(-1)), (lambda c: 0.1 - c.abs().sum(-1))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_candidate_filter_refuses_a_non_finite_nominal(bad):
    q_fn, m_fn = _box_fns()
    with pytest.raises(ValueError, match="u_nominal must be finite"):
        candidate_filter(q_fn, m_fn, torch.tensor([0.0, bad]), -1.0, 1.0)


def test_candidate_filter_outside_the_box_is_projected_and_still_certified():
    q_fn, m_fn = _box_fns()
    u, info = candidate_filter(q_fn, m_fn, torch.tensor([5.0]), -1.0, 1.0, n_candidates=64)
    assert not info["fallback"]
    assert float(m_fn(u[None])[0]) >= 0
    assert -1.0 <= float(u) <= 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_float32_and_float64_distributions_are_accepted(dtype):
    mdp, _ = make_confounded_driving()
    K = mdp.interventional_kernel()
    U, X = mdp.n_actions, mdp.n_states
    pi = torch.ones(U, dtype=dtype) / U
    Q, V = exact_safety_q(K, mdp.safe, 5, pi_risk=pi)
    Q64, V64 = exact_safety_q(K, mdp.safe, 5)
    assert torch.allclose(V, V64, atol=1e-12)
    from icml25.certificates import SafetyQ

    cert = SafetyCertificate(SafetyQ(Q, V, mdp.safe), pi_risk=pi)
    table = cert.table(torch.ones(X, U, dtype=dtype) / U)
    assert torch.allclose(table.sum(-1), torch.ones(5, X, dtype=D))
    # a float32 policy that is really not normalised is still refused
    with pytest.raises(ValueError, match="nominal policy must sum to 1"):
        cert.table(torch.full((U,), 0.3, dtype=torch.float32))


def test_neural_fqe_leaves_the_global_rng_alone():
    mdp, _ = make_confounded_driving()
    X = mdp.n_states
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    a = NeuralFrontDoorFQE(torch.eye(X), mdp.n_actions, mdp.n_mediators, 2, mdp.safe, seed=3)
    assert torch.equal(before, torch.get_rng_state())
    b = NeuralFrontDoorFQE(torch.eye(X), mdp.n_actions, mdp.n_mediators, 2, mdp.safe, seed=3)
    for p, r in zip(a.parameters(), b.parameters()):  # the seed still fixes the weights
        assert torch.equal(p, r)


def _small_dataset(max_action: int) -> OfflineDataset:
    x = torch.tensor([0, 1, 2, 0])
    u = torch.tensor([0, 1, max_action, 0])
    return OfflineDataset(x, u, torch.zeros(4, dtype=torch.long), torch.tensor([1, 2, 0, 0]))


def test_dtcbf_on_a_dataset_needs_the_action_count():
    h = torch.tensor([1.0, 0.5, 0.0])
    ds = _small_dataset(1)  # actions 2 and 3 never taken
    with pytest.raises(ValueError, match="needs the number of actions: pass n_actions"):
        DTCBFFilter(ds, h)
    f = DTCBFFilter(ds, h, n_actions=4)
    assert f.expected_h.shape == (3, 4)
    assert bool(torch.isnan(f.expected_h[:, 2:]).all())  # unseen actions: never certified
    assert f(0, 0, 3)[0] != 3
    with pytest.raises(ValueError, match="dataset has action 5, but n_actions=4"):
        DTCBFFilter(_small_dataset(5), h, n_actions=4)
    with pytest.raises(ValueError, match="action_values has 3 values but n_actions=4"):
        DTCBFFilter(ds, h, action_values=(0, 1, 2), n_actions=4)


def test_from_frame_names_a_string_column_and_its_dtype():
    frame = {
        "x": np.array([0, 1]),
        "u": np.array(["a", "b"]),
        "m": np.array([0, 0]),
        "x_next": np.array([1, 0]),
    }
    with pytest.raises(ValueError, match=r"column 'u' must hold integer indices, got dtype <U1"):
        OfflineDataset.from_frame(frame)
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"x": [0, 1], "u": ["a", "b"], "m": [0, 0], "x_next": [1, 0]})
    with pytest.raises(
        ValueError, match="column 'u' must hold integer indices, got dtype (object|str)"
    ):
        OfflineDataset.from_frame(df)


@pytest.mark.parametrize(
    "mask", [[0.3, 1.0, 0.0], [2, 1, 0], np.array([0.0, 1.0, 1.0]), torch.tensor([0.5, 0.5, 0.5])]
)
def test_non_boolean_safe_masks_are_refused(mask):
    mdp, _ = make_confounded_driving()
    K = torch.full((3, 2, 3), 1 / 3, dtype=D)
    with pytest.raises(ValueError, match="safe must be a boolean mask"):
        exact_safety_q(K, mask, 2)
    with pytest.raises(ValueError, match="safe must be a boolean mask"):
        FrontDoorFQE(horizon=2, safe=mask)
    with pytest.raises(ValueError, match="safe_fn must be a boolean mask"):
        build_auxiliary_dataset(_small_dataset(1), mask, 2)


def test_zero_one_integer_and_bool_masks_agree():
    K = torch.full((3, 2, 3), 1 / 3, dtype=D)
    a = exact_safety_q(K, [1, 1, 0], 3)
    b = exact_safety_q(K, np.array([True, True, False]), 3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    p_w = torch.full((3, 2), 0.5, dtype=D)
    p_m = torch.full((3, 2, 2), 0.5, dtype=D)
    trans = torch.full((3, 2, 2, 3), 1 / 3, dtype=D)
    beh = torch.full((3, 2, 2), 0.5, dtype=D)
    with pytest.raises(ValueError, match="safe must be a boolean mask"):
        TabularConfoundedMDP(p_w, p_m, trans, torch.tensor([0.3, 1.0, 1.0]), beh)
