"""Property tests at CD-KF's public boundary (issue 49): the filter against the closed-form scalar
Kalman recursion on random stable models, every scalar form, float32/float64, NaN/inf, empty and
one-event series."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.cdkf import (
    ContinuousDiscreteKF,
    LinearSDE,
    RateSchedule,
    SchedulingProblem,
    Sensor,
    matern_ssm,
)
from icml25.cdkf.solvers import project_budget

D = torch.float64
SCALARS = [float, np.float32, np.float64, lambda v: torch.tensor(v, dtype=D)]


def _scalar_model(a: float, q: float, p0: float, dtype=D):
    def t(v):
        return torch.tensor([[v]], dtype=dtype)

    return LinearSDE(t(a), t(q), torch.zeros(1, dtype=dtype), t(p0))


def _reference(a, q, p0, r, times, ys, grid):
    """The scalar Kalman recursion in closed form: ``Phi = e^{a h}``, ``Qd = q (e^{2ah} - 1) / 2a``
    (``q h`` at ``a = 0``), update ``P+ = P r / (P + r)``; events before the grid point first."""
    mu, P, t = 0.0, p0, 0.0
    out, e = [], 0
    order = sorted(range(len(times)), key=lambda i: times[i])

    def predict(mu, P, h):
        phi = math.exp(a * h)
        qd = q * h if a == 0 else q * math.expm1(2 * a * h) / (2 * a)
        return mu * phi, P * phi * phi + qd

    for g in grid:
        while e < len(order) and times[order[e]] <= g:
            k = order[e]
            mu, P = predict(mu, P, times[k] - t)
            t = times[k]
            gain = P / (P + r)
            mu, P = mu + gain * (ys[k] - mu), P * r / (P + r)
            e += 1
        mu, P = predict(mu, P, g - t)
        t = g
        out.append((mu, P))
    return out


events = st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(-3.0, 3.0)), min_size=0, max_size=6)


@settings(max_examples=40, deadline=None)
@given(
    a=st.floats(-3.0, 0.5),
    q=st.floats(0.01, 2.0),
    p0=st.floats(0.01, 2.0),
    r=st.floats(0.01, 2.0),
    evs=events,
    to_scalar=st.sampled_from(SCALARS),
)
def test_scalar_filter_equals_the_closed_form_recursion(a, q, p0, r, evs, to_scalar):
    times = [t for t, _ in evs]
    ys = [y for _, y in evs]
    grid = sorted({0.0, 1.0, 3.0, *times[:2]})
    kf = ContinuousDiscreteKF(
        _scalar_model(a, q, p0), [Sensor(torch.ones(1, 1, dtype=D), to_scalar(r))]
    )
    mu, Sigma = kf.filter(
        torch.tensor(times, dtype=D),
        torch.zeros(len(times), dtype=torch.long),
        [torch.tensor([y], dtype=D) for y in ys],
        torch.tensor(grid, dtype=D),
    )
    ref = _reference(
        a, q, p0, float(np.float32(r)) if to_scalar is np.float32 else r, times, ys, grid
    )
    for i, (m, P) in enumerate(ref):
        assert float(mu[i, 0]) == pytest.approx(m, rel=1e-9, abs=1e-12)
        assert float(Sigma[i, 0, 0]) == pytest.approx(P, rel=1e-9, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(a=st.floats(-3.0, -0.1), q=st.floats(0.05, 2.0), r=st.floats(0.05, 2.0))
def test_float32_model_follows_its_dtype_and_matches_float64(a, q, r):
    times, ys, grid = [0.3, 0.9], [0.5, -1.0], [0.5, 1.0, 2.0]
    out = {}
    for dt in (torch.float32, D):
        kf = ContinuousDiscreteKF(
            _scalar_model(a, q, 1.0, dt),
            [Sensor(torch.ones(1, 1, dtype=dt), torch.tensor([[r]], dtype=dt))],
        )
        out[dt] = kf.filter(
            torch.tensor(times, dtype=dt),
            torch.zeros(2, dtype=torch.long),
            [torch.tensor([y], dtype=dt) for y in ys],
            torch.tensor(grid, dtype=dt),
        )
    assert out[torch.float32][0].dtype == torch.float32
    assert torch.allclose(out[torch.float32][1].double(), out[D][1], rtol=1e-4, atol=1e-6)
    assert torch.allclose(out[torch.float32][0].double(), out[D][0], rtol=1e-4, atol=1e-5)


def _kf():
    return ContinuousDiscreteKF(
        _scalar_model(-1.0, 0.5, 1.0), [Sensor(torch.ones(1, 1, dtype=D), 0.1)]
    )


def test_empty_and_one_event_series():
    kf = _kf()
    grid = torch.tensor([0.0, 1.0], dtype=D)
    mu, S = kf.filter(torch.zeros(0, dtype=D), torch.zeros(0, dtype=torch.long), [], grid)
    assert mu.shape == (2, 1) and float(S[1, 0, 0]) == pytest.approx(
        _reference(-1, 0.5, 1, 0.1, [], [], [0.0, 1.0])[1][1]
    )
    mu, S = kf.filter([0.5], [0], [0.3], [1.0])  # lists and plain numbers
    m, P = _reference(-1, 0.5, 1, 0.1, [0.5], [0.3], [1.0])[0]
    assert float(mu[0, 0]) == pytest.approx(m) and float(S[0, 0, 0]) == pytest.approx(P)
    with pytest.raises(ValueError, match="t_grid must be a non-empty"):
        kf.filter([], [], [], torch.zeros(0, dtype=D))


@pytest.mark.parametrize("y", [math.nan, math.inf, -math.inf])
def test_non_finite_observation_is_refused(y):
    with pytest.raises(ValueError, match="is not finite"):
        _kf().filter([0.5], [0], [torch.tensor([y], dtype=D)], [1.0])


@pytest.mark.parametrize("ids", [[0.7], torch.tensor([0.5]), [True]])
def test_sensor_ids_that_are_not_integers_are_refused(ids):
    # before: 0.7 and 0.5 were truncated to sensor 0 silently
    with pytest.raises(ValueError, match="sensor ids must be integers"):
        _kf().filter([0.5], ids, [0.3], [1.0])


def test_integer_valued_sensor_ids_in_any_form_are_accepted():
    ref = _kf().filter([0.5], [0], [0.3], [1.0])
    for ids in (
        [np.int64(0)],
        np.array([0]),
        torch.tensor([0.0]),
        torch.tensor([0], dtype=torch.int32),
    ):
        assert torch.equal(_kf().filter([0.5], ids, [0.3], [1.0])[0], ref[0])


@pytest.mark.parametrize("t1", [math.nan, math.inf])
def test_predict_refuses_a_time_that_is_not_finite(t1):
    kf = _kf()
    with pytest.raises(ValueError, match="t1 must be a finite number"):  # before: NaN out
        kf.predict(kf.sde.mu0, kf.sde.Sigma0, 0.0, t1)


def test_predict_and_update_take_numpy_scalars():
    kf = _kf()
    mu, S = kf.predict(kf.sde.mu0, kf.sde.Sigma0, np.float32(0.0), np.float64(1.0))
    assert torch.allclose(mu, kf.predict(kf.sde.mu0, kf.sde.Sigma0, 0.0, 1.0)[0])
    a = kf.update(kf.sde.mu0, kf.sde.Sigma0, 0.3, np.int64(0), np.float32(1.0))
    assert torch.allclose(a[1], kf.update(kf.sde.mu0, kf.sde.Sigma0, 0.3, 0, 1.0)[1])
    with pytest.raises(ValueError, match="sensor_idx must be an integer in \\[0, 0\\], got 0.5"):
        kf.update(kf.sde.mu0, kf.sde.Sigma0, 0.3, 0.5, 1.0)  # before: a raw TypeError


@pytest.mark.parametrize("R", [math.inf, math.nan, 0.0, -1.0])
def test_sensor_noise_must_be_finite_and_positive(R):
    with pytest.raises(ValueError, match="R must be"):  # before: inf was accepted
        Sensor(torch.ones(1, 1, dtype=D), R)


@pytest.mark.parametrize("to_scalar", SCALARS[:3])
def test_scalar_arguments_in_every_numeric_form(to_scalar):
    gp = matern_ssm(to_scalar(1.5), to_scalar(0.8), to_scalar(1.2))
    ref = matern_ssm(1.5, 0.8, 1.2)
    assert torch.allclose(gp.Qc, ref.Qc, rtol=1e-6)
    s = Sensor(gp.H, to_scalar(0.1), cost=to_scalar(2.0))
    assert s.cost == pytest.approx(2.0) and type(s.cost) is float
    sched = RateSchedule(torch.ones(1, 4, dtype=D), to_scalar(2.0))
    assert pytest.approx(2.0) == sched.T
    prob = SchedulingProblem(gp, [s], T=to_scalar(2.0), K=np.int64(4), budget=to_scalar(3.0))
    assert prob.K == 4 and type(prob.K) is int and prob.budget == pytest.approx(3.0)
    x = project_budget(
        torch.full((1, 4), 5.0, dtype=D),
        torch.ones(1, dtype=D),
        to_scalar(2.0),
        to_scalar(3.0),
        to_scalar(0.5),
    )
    assert float(x.sum() * 0.5) == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"T": math.nan}, "T must be a finite number > 0, got nan"),
        ({"K": 2.0}, "K must be an integer >= 1, got 2.0"),
        ({"K": True}, "K must be an integer >= 1, got True"),
        ({"budget": -1}, "budget must be a finite number >= 0, got -1"),
        ({"lam_max": math.inf}, "lam_max must be a finite number > 0, got inf"),
        ({"w_eps": np.float32(-1)}, r"w_eps must be a finite number >= 0, got np.float32\(-1.0\)"),
        ({"n_steps": 30}, "n_steps must be a positive multiple of K=20"),
        ({"n_steps": 40.0}, "n_steps must be an integer >= 20, got 40.0"),
    ],
)
def test_scheduling_problem_refuses_bad_numbers_naming_them(kw, match):
    gp = matern_ssm(1.5, 1.0, 1.0)
    args = {"T": 2.0, "K": 20, **kw}
    with pytest.raises(ValueError, match=match):
        SchedulingProblem(gp, [Sensor(gp.H, 0.1)], **args)


def test_matern_refuses_nan_hyperparameters():
    for bad in ({"lengthscale": math.nan}, {"variance": torch.tensor(math.nan, dtype=D)}):
        kw = {"lengthscale": 1.0, "variance": 1.0, **bad}
        with pytest.raises(ValueError, match="must be a finite number > 0"):  # before: accepted
            matern_ssm(1.5, **kw)
