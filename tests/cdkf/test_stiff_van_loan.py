"""Issue 49: the exact (Van Loan) step of a time-invariant model is stable for any step length
(scaling and squaring, docs/cdkf.md, Stiff models and long gaps)."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.cdkf import ContinuousDiscreteKF, LinearSDE, NumericalError, Sensor, matern_ssm
from icml25.cdkf.ssm import van_loan

D = torch.float64


def _kf(gp, dtype=D):
    return ContinuousDiscreteKF(gp, [Sensor(gp.H, torch.tensor([[0.01]], dtype=dtype))])


def _empty():
    return torch.tensor([], dtype=D), torch.tensor([], dtype=torch.long)


@pytest.mark.parametrize(
    ("nu", "ls", "step", "tol"),
    [
        (0.5, 0.03, 3.0, 1e-13),
        (1.5, 0.3, 3.0, 1e-12),
        (1.5, 0.1, 2.0, 1e-11),
        (2.5, 1.0, 3.0, 1e-12),
        (2.5, 0.3, 3.0, 1e-10),
        (2.5, 0.1, 1.0, 2e-9),
    ],
)
def test_stationary_matern_variance_stays_one(nu, ls, step, tol):
    # before: nu 2.5 ls 0.1 step 1 off by 2.8e-4, ls 0.3 step 3 by 1e-6
    gp = matern_ssm(nu, ls, 1.0)
    _, S = _kf(gp).filter(*_empty(), None, torch.arange(0, 10.001, step, dtype=D))
    var = torch.einsum("ij,gjk,lk->g", gp.H, S, gp.H)
    assert float((var - 1).abs().max()) < tol


def _reference_after_gap(gp, t_meas, r, t_end):
    """Stationary closed form: Sigma(t) = e^{A t}(Sigma_0 - P_inf)e^{A^T t} + P_inf, with P_inf
    from scipy's Lyapunov solver and the Kalman update at t_meas in between."""
    A = gp.A.numpy()
    P_inf = scipy.linalg.solve_continuous_lyapunov(A, -gp.Qc.numpy())
    H = gp.H.numpy()
    S = P_inf.copy()  # stationary start: Sigma(t_meas) = P_inf
    K = S @ H.T / (H @ S @ H.T + r)
    S = (np.eye(len(A)) - K @ H) @ S
    E = scipy.linalg.expm(A * (t_end - t_meas))
    return E @ (S - P_inf) @ E.T + P_inf


@pytest.mark.parametrize(
    ("nu", "ls", "tol"), [(1.5, 0.3, 1e-11), (1.5, 0.1, 1e-10), (2.5, 0.3, 1e-9), (2.5, 0.1, 1e-8)]
)
def test_one_measurement_then_long_gap(nu, ls, tol):
    # before: errors 1.7e-9 .. 3.6e-4, and NumericalError for nu 2.5 ls 0.1
    gp = matern_ssm(nu, ls, 1.0)
    kf = _kf(gp)
    _, S = kf.filter(
        torch.tensor([0.5], dtype=D),
        torch.tensor([0]),
        [torch.tensor([1.0], dtype=D)],
        torch.tensor([10.0], dtype=D),
    )
    ref = _reference_after_gap(gp, 0.5, 0.01, 10.0)
    scale = np.sqrt(np.outer(np.diag(ref), np.diag(ref)))
    assert np.abs((S[-1].numpy() - ref) / scale).max() < tol
    assert abs(float(gp.H @ S[-1] @ gp.H.T) - 1) < tol


@pytest.mark.parametrize("ls", [0.02, 0.01])
def test_short_lengthscale_gap_is_not_called_unstable(ls):
    # before: NumericalError "(an unstable model, ...)" and a raw LinAlgError in log_likelihood
    gp = matern_ssm(1.5, ls, 1.0)
    kf = _kf(gp)
    mu, S = kf.filter(
        torch.tensor([0.5], dtype=D),
        torch.tensor([0]),
        [torch.tensor([1.0], dtype=D)],
        torch.tensor([0.0, 10.0], dtype=D),
    )
    assert abs(float(gp.H @ S[-1] @ gp.H.T) - 1) < 1e-9
    ll = kf.log_likelihood(
        torch.tensor([0.5, 10.0], dtype=D),
        torch.tensor([0, 0]),
        [torch.tensor([1.0], dtype=D), torch.tensor([0.0], dtype=D)],
    )
    # two independent N(0, 1.01) observations (the second is 10 / ls lengthscales later)
    exact = -0.5 * (1 / 1.01) - math.log(2 * math.pi * 1.01)
    assert abs(float(ll) - exact) < 1e-8


@pytest.mark.parametrize("t", [100.0, 1000.0, 1e5])
def test_scalar_decay_at_long_time(t):
    # before: A = -1, Qc = 1 at t = 1000 raised NumericalError ("an unstable model")
    sde = LinearSDE(
        A=-torch.ones(1, 1, dtype=D),
        Qc=torch.ones(1, 1, dtype=D),
        mu0=torch.zeros(1, dtype=D),
        Sigma0=torch.ones(1, 1, dtype=D),
    )
    kf = ContinuousDiscreteKF(
        sde, [Sensor(torch.ones(1, 1, dtype=D), torch.tensor([[0.1]], dtype=D))]
    )
    _, S = kf.filter(*_empty(), None, torch.tensor([t], dtype=D))
    assert abs(float(S[-1, 0, 0]) - 0.5) < 1e-14


def test_van_loan_equals_composed_small_steps():
    A = torch.tensor([[-30.0, 5.0], [0.0, -0.2]], dtype=D)
    Qc = torch.tensor([[2.0, 0.3], [0.3, 1.0]], dtype=D)
    h, m = 7.0, 4096
    M = np.zeros((4, 4))
    M[:2, :2], M[:2, 2:], M[2:, 2:] = A.numpy(), Qc.numpy(), -A.numpy().T
    E = scipy.linalg.expm(M * h / m)
    Phi_d, Q_d = E[:2, :2], E[:2, 2:] @ E[:2, :2].T
    Phi, Q = np.eye(2), np.zeros((2, 2))
    for _ in range(m):
        Phi, Q = Phi_d @ Phi, Phi_d @ Q @ Phi_d.T + Q_d
    P, Qd = van_loan(A, Qc, h)
    assert np.abs(P.numpy() - Phi).max() < 1e-12
    assert np.abs(Qd.numpy() - Q).max() / np.abs(Q).max() < 1e-11


def test_van_loan_gradient_through_squaring():
    a = torch.tensor(-3.0, dtype=D, requires_grad=True)
    h = 20.0  # ||A|| h = 60: several doublings
    _, Q = van_loan(a.reshape(1, 1), torch.ones(1, 1, dtype=D), h)
    (g,) = torch.autograd.grad(Q[0, 0], a)
    # Q = (e^{2 a h} - 1) / (2 a); dQ/da = h e^{2ah}/a - (e^{2ah} - 1)/(2 a^2)
    av = -3.0
    exact = h * math.exp(2 * av * h) / av - (math.exp(2 * av * h) - 1) / (2 * av * av)
    assert abs(float(g) - exact) < 1e-14


@pytest.mark.parametrize(("nu", "ls", "step"), [(1.5, 0.3, 2.0), (2.5, 0.3, 1.0), (1.5, 0.05, 0.1)])
def test_float32_within_documented_tolerance(nu, ls, step):
    # before: nu 1.5 ls 0.3 step 2 off by 1.1%, nu 2.5 ls 0.3 step 1 raised NumericalError
    out = []
    for dtype in (torch.float32, torch.float64):
        gp = matern_ssm(nu, ls, 1.0, dtype=dtype)
        _, S = _kf(gp, dtype).filter(
            torch.tensor([0.5, 3.0]),
            torch.tensor([0, 0]),
            [torch.tensor([1.0], dtype=dtype)] * 2,
            torch.arange(0, 10.0001, step, dtype=dtype),
        )
        assert S.dtype == dtype
        out.append((gp.H.double() @ S.double() @ gp.H.double().T).squeeze())
    assert float((out[0] - out[1]).abs().max()) < 1e-4


def test_unstable_message_only_for_an_unstable_model():
    sde = LinearSDE(
        A=torch.tensor([[20.0]], dtype=D),
        Qc=torch.ones(1, 1, dtype=D),
        mu0=torch.zeros(1, dtype=D),
        Sigma0=torch.ones(1, 1, dtype=D),
    )
    kf = ContinuousDiscreteKF(
        sde, [Sensor(torch.ones(1, 1, dtype=D), torch.tensor([[0.1]], dtype=D))]
    )
    with pytest.raises(NumericalError, match=r"unstable \(A has an eigenvalue with real part 20"):
        kf.filter(*_empty(), None, torch.tensor([100.0], dtype=D))
    with pytest.raises(NumericalError, match=r"log_likelihood: event 0 \(sensor 0 at t = 100.0"):
        kf.log_likelihood(
            torch.tensor([100.0], dtype=D), torch.tensor([0]), [torch.tensor([0.0], dtype=D)]
        )


@settings(max_examples=40, deadline=None)
@given(
    a=st.floats(-1e4, -1e-3),
    h=st.floats(1e-3, 1e4),
    q=st.floats(1e-3, 1e3),
)
def test_scalar_van_loan_matches_closed_form(a, h, q):
    """Any stable rate and step: ``Phi = e^{a h}``, ``Qd = q (1 - e^{2 a h}) / (-2 a)`` (the old
    single exponential gave inf/NaN past ``|a| h`` ~ 350)."""
    P, Qd = van_loan(torch.tensor([[a]], dtype=D), torch.tensor([[q]], dtype=D), h)
    # e^{a h} has condition number |a h|: relative error up to |a h| times some eps (measured:
    # at most 2.7e-15 |a h| over 3000 random draws). Before the block was balanced, a large q
    # cost Phi digits: 4.1e-12 at a = -0.03125, h = 113, q = 80 (found by CI's draw)
    tol = 1e-13 * max(1.0, abs(a * h))
    assert math.isclose(float(P), math.exp(a * h), rel_tol=tol, abs_tol=1e-300)
    assert math.isclose(float(Qd), q * -math.expm1(2 * a * h) / (-2 * a), rel_tol=1e-12)


def test_large_noise_does_not_cost_the_transition_digits():
    # before: relative error 4.1e-12 (the block exponential's norm was q's, not a's)
    P, Qd = van_loan(torch.tensor([[-0.03125]], dtype=D), torch.tensor([[80.0]], dtype=D), 113.0)
    assert math.isclose(float(P), math.exp(-0.03125 * 113.0), rel_tol=1e-14)
    assert math.isclose(float(Qd), 80.0 * -math.expm1(-0.0625 * 113.0) / 0.0625, rel_tol=1e-14)
