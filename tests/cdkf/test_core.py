"""CD-KF core: Matern SSMs, Van Loan, Joseph updates, GP equivalence, the bound, the scheduler."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.cdkf import (
    ContinuousDiscreteKF,
    LinearSDE,
    RateSchedule,
    Sensor,
    covariance_bound,
    matern_ssm,
)
from icml25.cdkf.bound import information_lower_bound
from icml25.cdkf.filter import joseph_update
from icml25.cdkf.schedule import deterministic_schedule, sample_poisson_times
from icml25.cdkf.ssm import matern_kernel, sum_ssm, van_loan

D = torch.float64


@pytest.mark.parametrize("nu", [0.5, 1.5, 2.5])
def test_matern_closed_forms_and_kernel(nu):
    ell, var = 0.7, 1.3
    m = matern_ssm(nu, ell, var)
    lam = math.sqrt(2 * nu) / ell
    table = {
        0.5: (torch.tensor([[-lam]], dtype=D), 2 * var * lam, torch.tensor([[var]], dtype=D)),
        1.5: (
            torch.tensor([[0, 1], [-(lam**2), -2 * lam]], dtype=D),
            4 * var * lam**3,
            torch.diag(torch.tensor([var, lam**2 * var], dtype=D)),
        ),
        2.5: (
            torch.tensor([[0, 1, 0], [0, 0, 1], [-(lam**3), -3 * lam**2, -3 * lam]], dtype=D),
            16 * var * lam**5 / 3,
            torch.tensor(
                [
                    [var, 0, -var * lam**2 / 3],
                    [0, var * lam**2 / 3, 0],
                    [-var * lam**2 / 3, 0, var * lam**4],
                ],
                dtype=D,
            ),
        ),
    }
    F, q, P = (torch.tensor(x.tolist(), dtype=D) if torch.is_tensor(x) else x for x in table[nu])
    torch.testing.assert_close(m.A, F)
    assert m.Qc[-1, -1].item() == pytest.approx(q, rel=1e-12)
    torch.testing.assert_close(m.Sigma0, P, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(
        m.A @ m.Sigma0 + m.Sigma0 @ m.A.T + m.Qc, torch.zeros_like(P), atol=1e-9, rtol=0
    )
    for tau in (0.0, 0.1, 0.5, 2.0):
        k_ssm = (m.H @ torch.linalg.matrix_exp(m.A * tau) @ m.Sigma0 @ m.H.T).item()
        assert k_ssm == pytest.approx(
            float(matern_kernel(torch.tensor(tau, dtype=D), nu, ell, var)), abs=1e-8
        )
    with pytest.raises(ValueError, match="p \\+ 1/2"):
        matern_ssm(1.0, 1.0, 1.0)


def test_van_loan_equals_a_fine_lyapunov_integration():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(3, 3, dtype=D, generator=g) - 2 * torch.eye(3, dtype=D)
    B = torch.randn(3, 3, dtype=D, generator=g)
    Qc = B @ B.T
    Phi, Qd = van_loan(A, Qc, 0.4)
    P = torch.zeros(3, 3, dtype=D)
    steps = 4000
    h = 0.4 / steps
    f = lambda X: A @ X + X @ A.T + Qc  # noqa: E731
    for _ in range(steps):
        k1 = f(P)
        k2 = f(P + h / 2 * k1)
        k3 = f(P + h / 2 * k2)
        k4 = f(P + h * k3)
        P = P + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    torch.testing.assert_close(Qd, P, atol=1e-11, rtol=1e-9)
    torch.testing.assert_close(Phi, torch.linalg.matrix_exp(A * 0.4))


def test_joseph_update_is_the_information_form_and_order_free():
    g = torch.Generator().manual_seed(1)
    B = torch.randn(3, 3, dtype=D, generator=g)
    S = B @ B.T + torch.eye(3, dtype=D)
    C1, C2 = torch.randn(1, 3, dtype=D, generator=g), torch.randn(2, 3, dtype=D, generator=g)
    R1, R2 = torch.tensor([[0.3]], dtype=D), torch.diag(torch.tensor([0.5, 0.2], dtype=D))
    _, S1 = joseph_update(torch.zeros(3, dtype=D), S, None, C1, R1)
    torch.testing.assert_close(
        S1, torch.linalg.inv(torch.linalg.inv(S) + C1.T @ torch.linalg.inv(R1) @ C1)
    )
    _, a = joseph_update(torch.zeros(3, dtype=D), S1, None, C2, R2)
    _, b2 = joseph_update(torch.zeros(3, dtype=D), S, None, C2, R2)
    _, b = joseph_update(torch.zeros(3, dtype=D), b2, None, C1, R1)
    torch.testing.assert_close(a, b)


def test_filter_equals_exact_gp_regression():
    nu, ell, var, noise = 1.5, 0.6, 1.2, 0.1
    m = matern_ssm(nu, ell, var)
    kf = ContinuousDiscreteKF(m, [Sensor(m.H, torch.tensor([[noise]], dtype=D))])
    g = torch.Generator().manual_seed(2)
    times = torch.sort(torch.rand(12, generator=g, dtype=D) * 5).values
    ys = [torch.randn(1, generator=g, dtype=D) for _ in times]
    mu, Sigma = kf.filter(times, torch.zeros(12, dtype=torch.long), ys, times[-1:])
    K = matern_kernel(times[:, None] - times[None, :], nu, ell, var)
    Ky = K + noise * torch.eye(12, dtype=D)
    k_star = K[-1]
    y = torch.cat(ys)
    mean = k_star @ torch.linalg.solve(Ky, y)
    variance = var - k_star @ torch.linalg.solve(Ky, k_star)
    assert float((m.H @ mu[-1]).item()) == pytest.approx(float(mean), abs=1e-8)
    assert float((m.H @ Sigma[-1] @ m.H.T).item()) == pytest.approx(float(variance), abs=1e-8)
    # unsorted events are taken in time order: the same result
    mu_r, Sigma_r = kf.filter(
        times.flip(0), torch.zeros(12, dtype=torch.long), ys[::-1], times[-1:]
    )
    torch.testing.assert_close(mu_r, mu)
    torch.testing.assert_close(Sigma_r, Sigma)
    with pytest.raises(ValueError, match="finite"):
        kf.filter(
            torch.tensor([0.5, float("nan")], dtype=D),
            torch.zeros(2, dtype=torch.long),
            None,
            times[-1:],
        )
    with pytest.raises(ValueError, match="sensor ids must be in"):
        kf.filter(times, torch.ones(12, dtype=torch.long), ys, times[-1:])


def _problem():
    m = sum_ssm(matern_ssm(1.5, 1.0, 1.0), matern_ssm(0.5, 2.0, 0.5))
    H = torch.tensor([[1.0, 0.0, 1.0]], dtype=D)
    sensors = [
        Sensor(H, torch.tensor([[0.05]], dtype=D)),
        Sensor(torch.tensor([[0.0, 1.0, 0.0]], dtype=D), torch.tensor([[0.5]], dtype=D)),
    ]
    return m, sensors


def test_bound_zero_rates_monotone_and_sandwich():
    m, sensors = _problem()
    T, K = 4.0, 4
    zero = covariance_bound(m, sensors, RateSchedule(torch.zeros(2, K, dtype=D), T), n_steps=40)
    kf = ContinuousDiscreteKF(m, sensors)
    grid = torch.linspace(0, T, 41, dtype=D)
    lyap = kf.covariance_path([torch.zeros(0, dtype=D)] * 2, grid)
    torch.testing.assert_close(zero, lyap, atol=1e-8, rtol=1e-7)
    lo = covariance_bound(m, sensors, RateSchedule(torch.full((2, K), 1.0, dtype=D), T), n_steps=40)
    hi_rates = torch.full((2, K), 1.0, dtype=D)
    hi_rates[0, 2] = 3.0
    hi = covariance_bound(m, sensors, RateSchedule(hi_rates, T), n_steps=40)
    diff = lo - hi  # more measurements: smaller bound in the Loewner order
    assert float(torch.linalg.eigvalsh(diff).min()) >= -1e-10
    lower = information_lower_bound(
        m, sensors, RateSchedule(torch.full((2, K), 1.0, dtype=D), T), n_steps=40
    )
    assert float(torch.linalg.eigvalsh(lo - lower).min()) >= -1e-10


def test_bound_against_monte_carlo():
    m, sensors = _problem()
    T = 3.0
    rates = RateSchedule(torch.tensor([[0.5, 2.0, 1.0], [1.0, 0.5, 2.0]], dtype=D), T)
    bound = covariance_bound(m, sensors, rates, n_steps=30)
    lower = information_lower_bound(m, sensors, rates, n_steps=30)
    kf = ContinuousDiscreteKF(m, sensors)
    grid = torch.linspace(0, T, 31, dtype=D)
    g = torch.Generator().manual_seed(3)
    traces = torch.stack(
        [
            torch.diagonal(
                kf.covariance_path(sample_poisson_times(rates, g), grid), dim1=-2, dim2=-1
            ).sum(-1)
            for _ in range(400)
        ]
    )
    mean, se = traces.mean(0), traces.std(0) / 20
    b = torch.diagonal(bound, dim1=-2, dim2=-1).sum(-1)
    lo = torch.diagonal(lower, dim1=-2, dim2=-1).sum(-1)
    assert bool((b >= mean - 4 * se - 1e-9).all())
    assert bool((lo <= mean + 4 * se + 1e-9).all())


def test_bound_is_differentiable_in_the_rates():
    m, sensors = _problem()
    vals = torch.tensor([[0.5, 1.0], [1.5, 0.2]], dtype=D, requires_grad=True)

    def objective(v):
        path = covariance_bound(m, sensors, RateSchedule(v, 2.0), n_steps=8)
        return torch.diagonal(path, dim1=-2, dim2=-1).sum(-1).mean()

    assert torch.autograd.gradcheck(objective, (vals,))


def test_deterministic_schedule():
    const = RateSchedule(torch.full((1, 4), 2.0, dtype=D), 5.0)  # 10 measurements
    (t,) = deterministic_schedule(const)
    torch.testing.assert_close(t, (torch.arange(1, 11, dtype=D) - 0.5) * 0.5)
    g = torch.Generator().manual_seed(4)
    vals = torch.rand(1, 6, generator=g, dtype=D) * 3
    vals[0, 2] = 0.0
    rates = RateSchedule(vals, 6.0)
    (t,) = deterministic_schedule(rates)
    n = round(float(rates.expected_counts()[0]))
    assert t.numel() == n and bool((t.diff() > 0).all()) and float(t[0]) > 0 and float(t[-1]) < 6.0
    total = float(rates.expected_counts()[0])
    for i, ti in enumerate(t.tolist()):  # each mean lies inside its equal-intensity cell
        lo_cell, hi_cell = i * total / n, (i + 1) * total / n
        assert lo_cell - 1e-12 <= float(rates.cumulative(ti)[0]) <= hi_cell + 1e-12
    assert (
        deterministic_schedule(RateSchedule(torch.full((1, 2), 0.1, dtype=D), 1.0))[0].numel() == 0
    )
    assert len(deterministic_schedule(rates, count="floor")[0]) == math.floor(total)
    with pytest.raises(ValueError, match="count"):
        deterministic_schedule(rates, count="nearest")


def test_poisson_counts_mean_and_dispersion():
    rates = RateSchedule(torch.tensor([[1.0, 3.0, 0.5]], dtype=D), 3.0)
    g = torch.Generator().manual_seed(5)
    counts = torch.tensor([float(sample_poisson_times(rates, g)[0].numel()) for _ in range(2000)])
    expected = float(rates.expected_counts()[0])  # 4.5
    assert abs(float(counts.mean()) - expected) < 4 * math.sqrt(expected / 2000)
    assert 0.85 < float(counts.var() / counts.mean()) < 1.15


def test_bad_input():
    with pytest.raises(ValueError, match="symmetric positive definite"):
        Sensor(torch.ones(1, 2), torch.tensor([[-1.0]]))
    with pytest.raises(ValueError, match="rates must be finite and >= 0"):
        RateSchedule(torch.tensor([[-1.0]]), 1.0)
    with pytest.raises(ValueError, match="T must be"):
        RateSchedule(torch.ones(1, 2), 0.0)
    with pytest.raises(ValueError, match="Sigma0"):
        LinearSDE(torch.eye(2), torch.eye(2), torch.zeros(2), torch.eye(3))
    m, sensors = _problem()
    with pytest.warns(UserWarning, match="stiff"):
        path = covariance_bound(
            m, sensors, RateSchedule(torch.full((2, 2), 5.0, dtype=D), 2.0), n_steps=4
        )
    assert path.shape[0] == 21  # refined so that h * 5 <= 0.5
    with pytest.raises(ValueError, match="multiple of K"):
        covariance_bound(m, sensors, RateSchedule(torch.ones(2, 3, dtype=D), 2.0), n_steps=4)


def test_time_varying_drift_is_integrated_not_frozen():
    # dx = -(1 + 2t) x dt + dbeta, Var(0) = 1: dP/dt = -2(1 + 2t) P + 1, integrated finely
    sde = LinearSDE(
        lambda xi, t: torch.tensor([[-(1.0 + 2.0 * t)]], dtype=D),
        torch.eye(1, dtype=D),
        torch.zeros(1, dtype=D),
        torch.eye(1, dtype=D),
    )
    kf = ContinuousDiscreteKF(sde, [Sensor(torch.eye(1, dtype=D), torch.eye(1, dtype=D))])
    _, Sigma = kf.predict(torch.zeros(1, dtype=D), torch.eye(1, dtype=D), 0.0, 2.0)
    P, n = 1.0, 200_000
    h = 2.0 / n
    for i in range(n):  # explicit Euler at a tiny step: the reference
        P += h * (-2 * (1 + 2 * i * h) * P + 1)
    assert float(Sigma) == pytest.approx(P, rel=1e-4)
    frozen = ContinuousDiscreteKF(
        LinearSDE(
            -torch.eye(1, dtype=D),
            torch.eye(1, dtype=D),
            torch.zeros(1, dtype=D),
            torch.eye(1, dtype=D),
        ),
        kf.sensors,
    )
    assert (
        abs(float(frozen.predict(torch.zeros(1, dtype=D), torch.eye(1, dtype=D), 0.0, 2.0)[1]) - P)
        > 0.1
    )


def test_joseph_update_is_batched_and_checks_shapes():
    g = torch.Generator().manual_seed(5)
    B, n = 4, 3
    A = torch.randn(B, n, n, generator=g, dtype=D)
    S = A @ A.mT + torch.eye(n, dtype=D)
    mu = torch.randn(B, n, generator=g, dtype=D)
    C = torch.randn(2, n, generator=g, dtype=D)
    R = torch.eye(2, dtype=D) * 0.5
    y = torch.randn(B, 2, generator=g, dtype=D)
    mb, Sb = joseph_update(mu, S, y, C, R)
    for b in range(B):
        m1, S1 = joseph_update(mu[b], S[b], y[b], C, R)
        torch.testing.assert_close(mb[b], m1)
        torch.testing.assert_close(Sb[b], S1)
    with pytest.raises(ValueError, match="C must have 3 columns"):
        joseph_update(mu[0], S[0], y[0], torch.randn(2, 4, dtype=D), R)
    with pytest.raises(ValueError, match="R must be"):
        joseph_update(mu[0], S[0], y[0], C, torch.eye(3, dtype=D))


def test_aux_state_path_float32_promotion_and_bad_models():
    from icml25.cdkf import NumericalError

    # a sensor whose noise depends on an auxiliary state xi(t): R = (1 + xi^2)
    sde = matern_ssm(0.5, 1.0, 1.0)
    sensor = Sensor(sde.H, lambda xi, t: (1.0 + xi**2).reshape(1, 1))
    kf = ContinuousDiscreteKF(sde, [sensor])
    times = torch.tensor([0.5, 1.0], dtype=D)
    near = kf.covariance_path([times], times[-1:], xi_path=lambda t: torch.tensor(0.0, dtype=D))
    far = kf.covariance_path([times], times[-1:], xi_path=lambda t: torch.tensor(3.0, dtype=D))
    assert float(far[-1, 0, 0]) > float(near[-1, 0, 0])  # noisier sensor far away
    # a float32 model with float64 sensors is promoted, not a dtype error
    m32 = LinearSDE(sde.A.float(), sde.Qc.float(), sde.mu0.float(), sde.Sigma0.float())
    out = ContinuousDiscreteKF(m32, [Sensor(sde.H, torch.eye(1, dtype=D))]).covariance_path(
        [times], times[-1:]
    )
    assert out.dtype == torch.float64
    with pytest.raises(ValueError, match="Sigma0 must be symmetric"):
        LinearSDE(
            -torch.eye(2, dtype=D),
            torch.eye(2, dtype=D),
            torch.zeros(2, dtype=D),
            torch.tensor([[1.0, 0.5], [0.0, 1.0]], dtype=D),
        )
    with pytest.raises(ValueError, match="positive semi-definite"):
        LinearSDE(sde.A, sde.Qc, torch.zeros(1, dtype=D), -torch.eye(1, dtype=D))
    bad = Sensor(sde.H, lambda xi, t: -torch.eye(1, dtype=D))
    with pytest.raises(NumericalError, match="not positive definite"):
        ContinuousDiscreteKF(sde, [bad]).covariance_path([times], times[-1:])


def test_log_likelihood_and_rts_smoother_equal_exact_gp_regression():
    nu, ell, var, noise = 1.5, 0.6, 1.2, 0.1
    m = matern_ssm(nu, ell, var)
    kf = ContinuousDiscreteKF(m, [Sensor(m.H, torch.tensor([[noise]], dtype=D))])
    g = torch.Generator().manual_seed(7)
    times = torch.sort(torch.rand(10, generator=g, dtype=D) * 4).values
    ys = [torch.randn(1, generator=g, dtype=D) for _ in times]
    ids = torch.zeros(10, dtype=torch.long)
    y = torch.cat(ys)
    K = matern_kernel(times[:, None] - times[None, :], nu, ell, var)
    Ky = K + noise * torch.eye(10, dtype=D)
    exact = torch.distributions.MultivariateNormal(torch.zeros(10, dtype=D), Ky).log_prob(y)
    assert float(kf.log_likelihood(times, ids, ys)) == pytest.approx(float(exact), abs=1e-8)
    # smoothing at a time inside the data, one between events and one at an event
    grid = torch.tensor([1.234, float(times[4]), 3.9], dtype=D)
    mu_s, S_s = kf.smooth(times, ids, ys, grid)
    k_star = matern_kernel(grid[:, None] - times[None, :], nu, ell, var)
    mean = k_star @ torch.linalg.solve(Ky, y)
    cov = var - (k_star @ torch.linalg.solve(Ky, k_star.T)).diagonal()
    torch.testing.assert_close((mu_s @ m.H.T)[:, 0], mean, atol=1e-8, rtol=0)
    torch.testing.assert_close((m.H @ S_s @ m.H.T)[:, 0, 0], cov, atol=1e-8, rtol=0)
    # the log-likelihood is differentiable in the kernel's hyper-parameters
    ell_t = torch.tensor(0.6, dtype=D, requires_grad=True)
    lam = (2 * nu) ** 0.5 / ell_t
    A = torch.stack(
        [
            torch.stack([torch.zeros((), dtype=D), torch.ones((), dtype=D)]),
            torch.stack([-(lam**2), -2 * lam]),
        ]
    )
    q = var * 4 * lam**3
    Qc = torch.zeros(2, 2, dtype=D) + torch.stack(
        [torch.zeros(2, dtype=D), torch.stack([torch.zeros((), dtype=D), q])]
    )
    P0 = torch.diag(torch.stack([torch.tensor(var, dtype=D), var * lam**2]))
    sde = LinearSDE(A, Qc, torch.zeros(2, dtype=D), P0.detach(), m.H)
    ll = ContinuousDiscreteKF(sde, kf.sensors).log_likelihood(times, ids, ys)
    ll.backward()
    assert ell_t.grad is not None and torch.isfinite(ell_t.grad)
    with pytest.raises(ValueError, match="one observation per event"):
        kf.log_likelihood(times, ids, ys[:3])


@pytest.mark.slow
def test_bound_against_monte_carlo_within_a_one_percent_band():
    # 8,400 paths put 4 standard errors of the Monte-Carlo trace under 1% of it, so a bound 1%
    # too low would fail (the default-suite version above, 400 paths, would let 3% through)
    m, sensors = _problem()
    T = 3.0
    rates = RateSchedule(torch.tensor([[0.5, 2.0, 1.0], [1.0, 0.5, 2.0]], dtype=D), T)
    bound = covariance_bound(m, sensors, rates, n_steps=60)[::2]  # the 31 grid times below
    b = torch.diagonal(bound, dim1=-2, dim2=-1).sum(-1)
    kf = ContinuousDiscreteKF(m, sensors)
    grid = torch.linspace(0, T, 31, dtype=D)
    g = torch.Generator().manual_seed(11)
    n = 8400  # 3,600 left 4 se at up to 1.5% of the trace
    traces = torch.stack(
        [
            torch.diagonal(
                kf.covariance_path(sample_poisson_times(rates, g), grid), dim1=-2, dim2=-1
            ).sum(-1)
            for _ in range(n)
        ]
    )
    mean, se = traces.mean(0), traces.std(0) / n**0.5
    assert bool((4 * se[1:] <= 0.01 * mean[1:]).all()), (4 * se / mean).max()
    assert bool((b >= mean - 4 * se - 1e-9).all())
