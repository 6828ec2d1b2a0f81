"""The numpy recursion behind ``ContinuousDiscreteKF.filter`` (issue 50): taken when nothing
needs a gradient, equal to the torch recursion (``ICML25_CDKF_PLAIN=0``) to round-off, with the
same checks and messages; a model that needs a gradient keeps the torch path."""

import pytest
import torch

import icml25.cdkf.filter as kf_module
from icml25.cdkf import ContinuousDiscreteKF, LinearSDE, NumericalError, Sensor, matern_ssm

D = torch.float64


def _both(kf, *args, monkeypatch):
    calls = []
    real = kf_module._plain_filter
    monkeypatch.setattr(kf_module, "_plain_filter", lambda *a: calls.append(1) or real(*a))
    plain = kf.filter(*args)
    assert calls, "the numpy recursion was not taken"
    monkeypatch.setenv("ICML25_CDKF_PLAIN", "0")
    torch_path = kf.filter(*args)
    monkeypatch.delenv("ICML25_CDKF_PLAIN")
    assert len(calls) == 1
    return plain, torch_path


def _two_sensor_model(dtype=D):
    m = matern_ssm(2.5, 0.4, 1.3)
    m = LinearSDE(
        m.A.to(dtype), m.Qc.to(dtype), m.mu0.to(dtype), m.Sigma0.to(dtype), H=m.H.to(dtype)
    )
    C2 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=dtype)
    R2 = torch.tensor([[0.3, 0.05], [0.05, 0.2]], dtype=dtype)
    return m, [Sensor(m.H, torch.tensor([[0.1]], dtype=dtype)), Sensor(C2, R2)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("observed", [True, False])
def test_plain_equals_torch_on_irregular_events_of_two_sensors(dtype, observed, monkeypatch):
    g = torch.Generator().manual_seed(0)
    m, sensors = _two_sensor_model(dtype)
    kf = ContinuousDiscreteKF(m, sensors)
    times = torch.sort(torch.rand(40, generator=g, dtype=D) * 5).values
    times[7] = times[6]  # a tie, applied in sensor order
    ids = torch.randint(0, 2, (40,), generator=g)
    ys = [torch.randn(1 if int(i) == 0 else 2, generator=g, dtype=dtype) for i in ids]
    grid = torch.cat([torch.linspace(0, 6, 25, dtype=D), times[10:12]]).sort().values
    (m1, S1), (m2, S2) = _both(
        kf, times, ids, ys if observed else None, grid, monkeypatch=monkeypatch
    )
    assert m1.dtype == m2.dtype == S1.dtype == dtype
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(m1, m2, rtol=tol, atol=tol)
    torch.testing.assert_close(S1, S2, rtol=tol, atol=tol)


def test_plain_takes_observations_in_every_form(monkeypatch):
    m, sensors = _two_sensor_model()
    kf = ContinuousDiscreteKF(m, sensors[:1])
    times, ids = torch.tensor([0.5, 1.0, 1.5], dtype=D), torch.zeros(3, dtype=torch.long)
    grid = torch.tensor([2.0], dtype=D)
    ref = kf.filter(times, ids, [torch.tensor([v], dtype=D) for v in (0.1, -0.2, 0.3)], grid)
    for ys in (
        [torch.tensor(v) for v in (0.1, -0.2, 0.3)],
        [0.1, -0.2, 0.3],
        [torch.tensor([0.1], dtype=torch.bfloat16).double(), [-0.2], (0.3,)],
    ):
        got = kf.filter(times, ids, ys, grid)
        torch.testing.assert_close(got[0], ref[0], rtol=1e-2, atol=1e-3)


def test_plain_refuses_as_the_torch_path_does(monkeypatch):
    m, sensors = _two_sensor_model()
    kf = ContinuousDiscreteKF(m, sensors)
    times, ids = torch.tensor([0.5, 1.0], dtype=D), torch.tensor([0, 1])
    grid = torch.tensor([2.0], dtype=D)
    cases = [
        ([torch.tensor([0.1], dtype=D), torch.tensor([0.1], dtype=D)], "sensor 1 gives 2 value"),
        ([torch.tensor([float("nan")], dtype=D), torch.zeros(2, dtype=D)], "is not finite"),
    ]
    for ys, match in cases:
        with pytest.raises(ValueError, match=match) as plain:
            kf.filter(times, ids, ys, grid)
        monkeypatch.setenv("ICML25_CDKF_PLAIN", "0")
        with pytest.raises(ValueError, match=match) as torch_path:
            kf.filter(times, ids, ys, grid)
        monkeypatch.delenv("ICML25_CDKF_PLAIN")
        assert str(plain.value) == str(torch_path.value)


def test_a_model_that_needs_a_gradient_keeps_the_torch_path(monkeypatch):
    m, sensors = _two_sensor_model()
    ell = torch.tensor(0.4, dtype=D, requires_grad=True)
    gp = matern_ssm(2.5, ell, 1.3)
    monkeypatch.setattr(kf_module, "_plain_filter", None)  # would raise if called
    mu, S = ContinuousDiscreteKF(gp, sensors[:1]).filter(
        torch.tensor([0.5], dtype=D),
        torch.tensor([0]),
        [torch.tensor([1.0], dtype=D)],
        torch.tensor([1.0], dtype=D),
    )
    S[0, 0, 0].backward()
    assert ell.grad is not None and torch.isfinite(ell.grad)


def test_plain_names_a_broken_update_as_the_torch_path(monkeypatch):
    # a model whose covariance breaks down (unstable A): the same NumericalError either way
    sde = LinearSDE(
        torch.tensor([[400.0]], dtype=D),
        torch.tensor([[1.0]], dtype=D),
        torch.zeros(1, dtype=D),
        torch.eye(1, dtype=D),
    )
    kf = ContinuousDiscreteKF(sde, [Sensor(torch.eye(1, dtype=D), torch.tensor([[1.0]], dtype=D))])
    args = (
        torch.tensor([3.0], dtype=D),
        torch.tensor([0]),
        [torch.tensor([0.0], dtype=D)],
        torch.tensor([4.0], dtype=D),
    )
    with pytest.raises(NumericalError) as plain:
        kf.filter(*args)
    monkeypatch.setenv("ICML25_CDKF_PLAIN", "0")
    with pytest.raises(NumericalError) as torch_path:
        kf.filter(*args)
    assert str(plain.value) == str(torch_path.value)


def _both_paths(kf, *args, monkeypatch):
    """The result (or the ValueError's message) on the default path and the torch path."""
    out = []
    for plain in ("1", "0"):
        monkeypatch.setenv("ICML25_CDKF_PLAIN", plain)
        try:
            out.append(kf.filter(*args))
        except ValueError as exc:
            out.append(str(exc))
    monkeypatch.delenv("ICML25_CDKF_PLAIN")
    return out


def _scalar_kf(dtype=D, requires_grad=False):
    A = torch.tensor([[-0.5, 1.0], [0.0, -1.0]], dtype=dtype, requires_grad=requires_grad)
    sde = LinearSDE(
        A,
        torch.diag(torch.tensor([0.0, 0.5], dtype=dtype)),
        torch.zeros(2, dtype=dtype),
        torch.eye(2, dtype=dtype),
    )
    return ContinuousDiscreteKF(
        sde, [Sensor(torch.tensor([[1.0, 0.0]], dtype=dtype), torch.tensor([[0.1]], dtype=dtype))]
    )


def test_observations_follow_the_models_dtype_on_both_paths(monkeypatch):
    # before: a float32 model needing gradients crashed on float64 observations (torch path),
    # and Python floats were rounded to float32 in a float64 model (differing by 2e-8)
    import numpy as np

    t, i = torch.tensor([0.2, 0.9], dtype=D), torch.tensor([0, 0])
    kf32 = _scalar_kf(torch.float32, requires_grad=True)
    mu, _ = kf32.filter(t.float(), i, [np.array([0.3]), np.float64(0.1)], t.float())
    assert mu.dtype == torch.float32
    kf = _scalar_kf()
    ref = kf.filter(t, i, [torch.tensor([0.1], dtype=D), torch.tensor([0.7], dtype=D)], t)
    for ys in (
        [0.1, 0.7],
        [[0.1], [0.7]],
        torch.tensor([[0.1], [0.7]], dtype=D),
        torch.tensor([0.1, 0.7], dtype=D),
    ):
        for mu, S in _both_paths(kf, t, i, ys, t, monkeypatch=monkeypatch):
            torch.testing.assert_close(mu, ref[0], rtol=1e-15, atol=1e-15)
            torch.testing.assert_close(S, ref[1], rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize(
    ("ys", "match"),
    [
        ([None, 1.0], r"sensor 0 at t = 0.2 is None; drop the event"),
        (
            [[[0.3]], 1.0],
            r"sensor 0 gives 1 value\(s\) per measurement, got an observation of shape \(1, 1\)",
        ),
        (["a", 1.0], r"sensor 0 at t = 0.2 must be a number or a 1-D array of 1 number"),
        ([torch.tensor([True]), 1.0], r"must be real numbers, got a torch.bool tensor"),
    ],
)
def test_bad_observations_are_named_alike_on_both_paths(ys, match, monkeypatch):
    # before: None was NaN on one path and a covariance-only update on the other; a (1, 1)
    # observation and a string gave raw numpy / torch errors, different on each path
    t, i = torch.tensor([0.2, 0.9], dtype=D), torch.tensor([0, 0])
    plain, torch_path = _both_paths(_scalar_kf(), t, i, ys, t, monkeypatch=monkeypatch)
    assert plain == torch_path and isinstance(plain, str)
    assert __import__("re").search(match, plain), plain


def test_an_in_place_change_of_the_model_is_seen(monkeypatch):
    # before: the memoised Van Loan steps kept the old A (change 0.0, fresh model 0.033)
    kf = _scalar_kf()
    t, i, ys = torch.tensor([0.5, 1.0], dtype=D), torch.tensor([0, 0]), [0.3, 0.1]
    before = kf.filter(t, i, ys, t)[0]
    with torch.no_grad():
        kf.sde.A[0, 0] -= 0.3
    after = kf.filter(t, i, ys, t)[0]
    fresh = ContinuousDiscreteKF(kf.sde, kf.sensors).filter(t, i, ys, t)[0]
    torch.testing.assert_close(after, fresh)
    assert float((after - before).abs().max()) > 1e-3


@pytest.mark.parametrize("off", ["0", "false", "Off", "no"])
def test_the_environment_turns_the_numpy_recursion_off(off, monkeypatch):
    """A new user's review (issue 50): only ``0`` turned it off."""
    m, sensors = _two_sensor_model()
    kf = ContinuousDiscreteKF(m, sensors[:1])
    calls = []
    real = kf_module._plain_filter
    monkeypatch.setattr(kf_module, "_plain_filter", lambda *a: calls.append(1) or real(*a))
    args = (
        torch.tensor([0.5, 1.0], dtype=D),
        torch.zeros(2, dtype=torch.long),
        [0.1, 0.2],
        torch.tensor([2.0], dtype=D),
    )
    kf.filter(*args)
    assert calls == [1]
    monkeypatch.setenv("ICML25_CDKF_PLAIN", off)
    kf.filter(*args)
    assert calls == [1]
