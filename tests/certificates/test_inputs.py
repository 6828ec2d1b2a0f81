"""Bad input and edge cases (docs/certificates.md), and the user's data layouts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icml25.certificates import (
    FrontDoorFQE,
    NaiveFQE,
    OfflineDataset,
    SafetyCertificate,
    SafetyQ,
    TabularConfoundedMDP,
    candidate_filter,
    make_confounded_driving,
)
from icml25.certificates.qfunctions import exact_safety_q

D = torch.float64


def _tiny():
    X, U, W, M = 3, 2, 2, 2
    p_w = torch.full((X, W), 0.5, dtype=D)
    p_m = torch.full((X, U, M), 0.5, dtype=D)
    trans = torch.full((X, M, W, X), 1 / 3, dtype=D)
    beh = torch.full((X, W, U), 0.5, dtype=D)
    return p_w, p_m, trans, torch.tensor([True, True, False]), beh


def test_distributions_and_shapes_are_checked():
    p_w, p_m, trans, safe, beh = _tiny()
    TabularConfoundedMDP(p_w, p_m, trans, safe, beh)
    bad = p_w.clone()
    bad[1, 0] = 0.7
    with pytest.raises(ValueError, match=r"p_w must sum to 1.*at \(1,\) it sums to 1.2"):
        TabularConfoundedMDP(bad, p_m, trans, safe, beh)
    neg = p_m.clone()
    neg[0, 0] = torch.tensor([1.5, -0.5])
    with pytest.raises(ValueError, match="p_m has negative probabilities"):
        TabularConfoundedMDP(p_w, neg, trans, safe, beh)
    with pytest.raises(ValueError, match=r"trans must be \(X, M, W, X'\)"):
        TabularConfoundedMDP(p_w, p_m, trans[:, :, :, :2] * 1.5, safe, beh)
    with pytest.raises(ValueError, match="safe must be"):
        TabularConfoundedMDP(p_w, p_m, trans, safe[:2], beh)


def test_horizon_eps_alpha_and_t_are_checked():
    mdp, codec = make_confounded_driving()
    K = mdp.interventional_kernel()
    with pytest.raises(ValueError, match="horizon must be an integer >= 1, got 0"):
        exact_safety_q(K, mdp.safe, 0)
    Q, V = exact_safety_q(K, mdp.safe, 10)
    q = SafetyQ(Q, V, mdp.safe)
    with pytest.raises(ValueError, match=r"eps must be a finite number in \(0, 1\), got 1.0"):
        SafetyCertificate(q, eps=1.0)
    with pytest.raises(ValueError, match=r"alpha must be a finite number in \[0, 1\], got 2"):
        SafetyCertificate(q, alpha=2)
    cert = SafetyCertificate(q)
    with pytest.raises(IndexError, match=r"t must be in \[0, H\) = \[0, 10\), got 10"):
        cert.filter(0, 10, 3)
    with pytest.raises(ValueError, match="u_nominal must be an action"):
        cert.filter(0, 0, 9)
    with pytest.raises(ValueError, match="state must be in"):
        cert.filter(700, 0, 1)
    with pytest.raises(ValueError, match="distance must be"):
        cert.filter(0, 0, 1, distance="l3")


def test_unsafe_state_returns_the_nominal_and_low_guarantee_warns():
    mdp, codec = make_confounded_driving()
    Q, V = exact_safety_q(mdp.interventional_kernel(), mdp.safe, 10)
    cert = SafetyCertificate(SafetyQ(Q, V, mdp.safe))
    unsafe = codec.encode(7, 6)
    u, info = cert.filter(unsafe, 0, 4)
    assert u == 4 and info["unsafe_state"]
    with pytest.warns(UserWarning, match="premise fails"):
        assert cert.guarantee(codec.encode(9, 3)) < 0.8
    assert SafetyCertificate(SafetyQ(Q, V, mdp.safe), eps=0.2).guarantee(0) == pytest.approx(
        0.8212, abs=1e-4
    )


def test_datasets_empty_without_mediator_and_user_layouts():
    with pytest.raises(ValueError, match="the dataset is empty"):
        OfflineDataset([], [], [], [])
    with pytest.raises(ValueError, match="same length"):
        OfflineDataset([0, 1], [0], [0, 1], [1, 0])
    with pytest.raises(ValueError, match="indices >= 0"):
        OfflineDataset([0, -1], [0, 0], [0, 1], [1, 0])
    mdp, _ = make_confounded_driving()
    ds = mdp.sample_offline(200, 10, generator=torch.Generator().manual_seed(0))
    no_m = OfflineDataset(ds.x, ds.u, None, ds.x_next)
    with pytest.raises(ValueError, match="needs the mediator column m"):
        FrontDoorFQE(10, mdp.safe).fit(no_m)
    NaiveFQE(10, mdp.safe, n_actions=5).fit(no_m)  # the naive estimator needs no mediator
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {"x": ds.x.numpy(), "u": ds.u.numpy(), "m": ds.m.numpy(), "x_next": ds.x_next.numpy()}
    )
    a = FrontDoorFQE(10, mdp.safe, n_actions=5, n_mediators=5).fit(OfflineDataset.from_frame(frame))
    b = FrontDoorFQE(10, mdp.safe, n_actions=5, n_mediators=5).fit(ds)
    assert torch.equal(torch.nan_to_num(a.Q), torch.nan_to_num(b.Q))
    arrays = {
        "x": np.asarray(ds.x),
        "u": np.asarray(ds.u),
        "m": np.asarray(ds.m),
        "x_next": np.asarray(ds.x_next),
    }
    OfflineDataset.from_frame(arrays)  # an OPE library's dict of arrays plus a mediator column
    with pytest.raises(ValueError, match="dataset x_next has state 69, but safe has 10 states"):
        FrontDoorFQE(10, mdp.safe[:10]).fit(OfflineDataset(ds.x % 10, ds.u, ds.m, ds.x_next))


def test_unseen_states_and_untaken_actions():
    """An unseen safe state gets Q = 0 (pessimistic); an action never taken at a visited state is
    unidentified (NaN), excluded from the certificate, with a warning."""
    mdp, codec = make_confounded_driving()
    ds = mdp.sample_offline(2_000, 10, generator=torch.Generator().manual_seed(0))
    x_star = codec.encode(3, 2)
    keep = ds.x != x_star
    no_x = OfflineDataset(ds.x[keep], ds.u[keep], ds.m[keep], ds.x_next[keep])
    q = FrontDoorFQE(10, mdp.safe, n_actions=5, n_mediators=5).fit(no_x)
    assert q.fit_info["unseen_states"] >= 1 and float(q.Q[5, x_star].abs().max()) == 0.0
    keep = ~((ds.x == x_star) & (ds.u == 0))
    no_u = OfflineDataset(ds.x[keep], ds.u[keep], ds.m[keep], ds.x_next[keep])
    with pytest.warns(UserWarning, match="never taken in the data"):
        q = FrontDoorFQE(10, mdp.safe, n_actions=5, n_mediators=5).fit(no_u)
    assert bool(torch.isnan(q.Q[5, x_star, 0]))
    cert = SafetyCertificate(q)
    assert not bool(cert.feasible(x_star, 5)[0])
    u, info = cert.filter(x_star, 5, 0)
    assert u != 0


def test_candidate_filter_for_continuous_actions():
    """A 1-D action on [-1, 1] with Q(u) = 1 - u^2 and V = 0.5: certified iff |u| <= 0.707;
    a nominal of 0.9 is pulled back to the boundary."""
    q_fn = lambda u: 1 - u[:, 0] ** 2  # noqa: E731
    u, info = candidate_filter(
        q_fn,
        lambda u: q_fn(u) - 0.5,
        torch.tensor([0.9]),
        -1.0,
        1.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert not info["fallback"] and abs(float(u)) <= 0.5**0.5 + 1e-9 and float(u) > 0.6
    u, info = candidate_filter(q_fn, lambda u: q_fn(u) - 2.0, torch.tensor([0.9]), -1.0, 1.0)
    assert info["fallback"] and abs(float(u)) < 0.05  # best Q
    with pytest.raises(ValueError, match="low < high"):
        candidate_filter(q_fn, q_fn, torch.tensor([0.0]), 1.0, -1.0)


def test_batched_filter_equals_the_single_filter():
    mdp, codec = make_confounded_driving()
    ds = mdp.sample_offline(3_000, 10, generator=torch.Generator().manual_seed(0))
    q = FrontDoorFQE(10, mdp.safe, n_actions=5, n_mediators=5).fit(ds)
    for alpha in (0.0, 1.0):
        cert = SafetyCertificate(q, alpha=alpha, action_values=(-3, -2, -1, 0, 1))
        g = torch.Generator().manual_seed(1)
        x = torch.randint(70, (300,), generator=g)
        t = torch.randint(10, (300,), generator=g)
        un = torch.randint(5, (300,), generator=g)
        u, info = cert.filter_batch(x, t, un)
        for i in range(300):
            ui, inf = cert.filter(int(x[i]), int(t[i]), int(un[i]))
            assert ui == int(u[i]) and inf["unsafe_state"] == bool(info["unsafe_state"][i])
            assert inf["fallback"] == bool(info["fallback"][i])
    with pytest.raises(IndexError):
        cert.filter_batch(x, 10, un)


def test_review_findings_float32_numpy_scalars_and_validation():
    import math

    from icml25.certificates import DTCBFFilter
    from icml25.certificates.envs import ConfoundedDrivingConfig
    from icml25.certificates.evaluate import exact_closed_loop_safety, monte_carlo_safety, progress

    p_w, p_m, trans, safe, beh = _tiny()
    mdp = TabularConfoundedMDP(
        p_w.float(), p_m.float(), trans.float(), safe, beh.float()
    )  # float32
    assert mdp.trans.dtype == D and float((mdp.trans.sum(-1) - 1).abs().max()) < 1e-15
    with pytest.raises(ValueError, match=r"tolerance 1e-09"):
        TabularConfoundedMDP(p_w * (1 + 1e-7), p_m, trans, safe, beh)
    with pytest.raises(ValueError, match="p_w must be"):
        TabularConfoundedMDP(p_w[0], p_m, trans, safe, beh)
    ds = mdp.sample_offline(np.int64(20), np.int64(3), generator=torch.Generator().manual_seed(0))
    assert len(ds) == 60
    with pytest.raises(ValueError, match="one start state or n_traj = 5"):
        mdp.sample_offline(5, 2, init=torch.tensor([1, 2]))
    q = FrontDoorFQE(np.int64(3), safe, pi_risk=np.array([0.5, 0.5], np.float32)).fit(ds)
    cert = SafetyCertificate(q, alpha=np.float32(0.5))
    with pytest.raises(ValueError, match="pi_risk is not the policy this Q was evaluated for"):
        SafetyCertificate(q, pi_risk=[1.0, 0.0])
    with pytest.raises(ValueError, match=r"pi_risk must be \(U,\)"):
        FrontDoorFQE(3, safe, pi_risk=torch.tensor([0.2, 0.3, 0.5])).fit(ds)
    with pytest.raises(ValueError, match="x must be an integer"):
        cert.filter(1.5, 0, 0)
    with pytest.raises(ValueError, match="t must be one time or one per state"):
        cert.filter_batch(torch.tensor([0, 1]), torch.tensor([0, 1, 2]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"got range \[0, 7\]"):
        cert.filter_batch(torch.tensor([0, 1]), 0, torch.tensor([0, 7]))
    table = cert.table([0.5, 0.5])
    with pytest.raises(ValueError, match="x0 must be a state in"):
        exact_closed_loop_safety(mdp, table, -1)
    with pytest.raises(ValueError, match="action probabilities"):
        exact_closed_loop_safety(mdp, table * 2, 0)
    with pytest.raises(ValueError, match="one number per state"):
        progress(mdp, table, 0, torch.ones(4))
    with pytest.raises(ValueError, match="needs horizon="):
        monte_carlo_safety(mdp, lambda x, t, u, g: (u, {}), 2, 2, 0, nominal=[0.5, 0.5])
    with pytest.raises(ValueError, match="exceeds the controller's table"):
        monte_carlo_safety(mdp, cert.as_controller(), 2, 2, 0, nominal=[0.5, 0.5], horizon=9)
    K = mdp.interventional_kernel()
    with pytest.raises(ValueError, match="h must have one value per state of the kernel"):
        DTCBFFilter(K, torch.ones(2))
    with pytest.raises(ValueError, match="u_nominal in"):
        DTCBFFilter(K, torch.ones(3))(0, 0, 5)
    with pytest.raises(ValueError, match="p_latent must be a probability vector"):
        ConfoundedDrivingConfig(p_latent=(0.5, 0.6, 0.0, 0.0))
    with pytest.raises(ValueError, match="eps must be in"):
        ConfoundedDrivingConfig(eps=2.0)
    with pytest.raises(ValueError, match="action_values must be finite"):
        SafetyCertificate(q, action_values=[0.0, math.nan])
    with pytest.raises(ValueError, match="1-D column"):
        OfflineDataset(np.zeros((3, 2), int), [0, 1, 2], [0, 1, 0], [1, 2, 0])
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"x": [0], "u": [0], "x_next": [1]})
    with pytest.raises(ValueError, match="no column 'm'.*m=None"):
        OfflineDataset.from_frame(frame)


def test_unseen_state_is_flagged_uninformative():
    mdp, codec = make_confounded_driving()
    ds = mdp.sample_offline(2_000, 10, generator=torch.Generator().manual_seed(0))
    x_star = codec.encode(3, 2)
    keep = ds.x != x_star
    q = FrontDoorFQE(10, mdp.safe, n_actions=5, n_mediators=5).fit(
        OfflineDataset(ds.x[keep], ds.u[keep], ds.m[keep], ds.x_next[keep])
    )
    u, info = SafetyCertificate(q).filter(x_star, 0, 2)
    assert info["uninformative"] and u == 2
    assert not SafetyCertificate(q).filter(0, 0, 2)[1]["uninformative"]


@pytest.mark.gpu
def test_cuda_inputs_to_the_batched_filter_come_back_on_cuda():
    mdp, _ = make_confounded_driving()
    ds = mdp.sample_offline(1_000, 10, generator=torch.Generator().manual_seed(0))
    cert = SafetyCertificate(FrontDoorFQE(10, mdp.safe, n_actions=5, n_mediators=5).fit(ds))
    x = torch.arange(70, device="cuda")
    u, info = cert.filter_batch(x, 3, torch.full_like(x, 4))
    assert u.device.type == "cuda" and info["fallback"].device.type == "cuda"
    ref, _ = cert.filter_batch(x.cpu(), 3, torch.full((70,), 4))
    assert torch.equal(u.cpu(), ref)
