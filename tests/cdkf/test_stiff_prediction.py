"""Issue 49: the filter's RK4 prediction for time-varying models on stiff models."""

import math

import pytest
import torch
from scipy.integrate import quad

from icml25.cdkf import ContinuousDiscreteKF, LinearSDE, NumericalError, Sensor

D = torch.float64


def _kf(A, **kw) -> ContinuousDiscreteKF:
    sde = LinearSDE(
        A, torch.ones(1, 1, dtype=D), torch.zeros(1, dtype=D), torch.ones(1, 1, dtype=D)
    )
    return ContinuousDiscreteKF(sde, [Sensor(torch.ones(1, 1, dtype=D), 1.0)], **kw)


def _variance(kf: ContinuousDiscreteKF, t1: float = 1.0) -> float:
    return float(kf.predict(kf.sde.mu0, kf.sde.Sigma0, 0.0, t1)[1])


@pytest.mark.parametrize("a", [140.0, 150.0])
def test_stiff_constant_drift_given_as_callable_matches_closed_form(a):
    # dP/dt = -2a P + 1, P(0) = 1: P(1) = (1 - e^{-2a}) / 2a + e^{-2a}; before: 9.13 and 6.7e13
    exact = (1 - math.exp(-2 * a)) / (2 * a) + math.exp(-2 * a)
    assert _variance(_kf(lambda xi, t: torch.tensor([[-a]], dtype=D))) == pytest.approx(
        exact, rel=1e-9
    )


def test_stiff_time_varying_drift_matches_quadrature():
    # A = -400 (1 + t): P(1) = e^{-Phi(1)} + int_0^1 e^{-(Phi(1) - Phi(s))} ds, Phi = 800 (t + t^2/2)
    Phi = lambda t: 800.0 * (t + t * t / 2)  # noqa: E731
    integral, _ = quad(
        lambda s: math.exp(-(Phi(1.0) - Phi(s))),
        0,
        1,
        points=[0.99, 0.999],
        limit=500,
        epsabs=1e-16,
        epsrel=1e-13,
    )
    exact = integral + math.exp(-Phi(1.0))
    kf = _kf(lambda xi, t: torch.tensor([[-400.0 * (1 + t)]], dtype=D), rtol=1e-6)
    assert _variance(kf) == pytest.approx(exact, rel=1e-6)  # before: 4.6e276


def test_non_stiff_time_varying_prediction_is_plain_rk4_on_the_max_step_grid():
    # no refinement is needed: bit-for-bit the RK4 of the max_step grid
    A = lambda xi, t: torch.tensor([[-(1.0 + 2.0 * t)]], dtype=D)  # noqa: E731
    kf = _kf(A)
    P, h = 1.0, 0.01
    for i in range(200):
        t = i * h
        f = lambda t, P: -2 * (1 + 2 * t) * P + 1  # noqa: E731
        k1 = f(t, P)
        k2 = f(t + h / 2, P + h / 2 * k1)
        k3 = f(t + h / 2, P + h / 2 * k2)
        k4 = f(t + h, P + h * k3)
        P = P + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    assert _variance(kf, 2.0) == pytest.approx(P, rel=1e-12)


def test_a_drift_that_is_not_finite_is_refused_naming_the_step():
    kf = _kf(lambda xi, t: torch.tensor([[-1.0 if t < 0.3 else math.nan]], dtype=D))
    with pytest.raises(NumericalError, match=r"step \[0\.29"):
        _variance(kf)


@pytest.mark.parametrize("bad", [0.0, 1.0, math.nan, "1e-8"])
def test_rtol_is_checked(bad):
    with pytest.raises(ValueError, match="rtol"):
        _kf(lambda xi, t: torch.tensor([[-1.0]], dtype=D), rtol=bad)
