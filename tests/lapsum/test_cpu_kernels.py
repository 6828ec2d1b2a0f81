"""The compiled CPU kernels (``icml25.lapsum._cpu``, docs/lapsum.md "Backends and precision"):
equal to the torch path to 1e-12 in float64 (values and every gradient), equal to the O(n^2)
definitions where the torch path takes its log-domain scans, their vectorised exp, the threaded
rows, non-finite inputs, torch.compile seeing them as custom operators, and the build fallback."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.lapsum import _cpu, lapsum_inverse, soft_rank, soft_sort, soft_topk
from icml25.lapsum.bench import saved_bytes

pytestmark = pytest.mark.skipif(
    not _cpu.available()[0], reason=f"compiled CPU kernels unavailable: {_cpu.available()[1]}"
)

D = torch.float64


def _close(got: torch.Tensor, ref: torch.Tensor, rtol: float = 1e-12) -> None:
    """Equal to ``rtol`` relative to each tensor's own scale (its largest entry)."""
    scale = max(float(ref.abs().max()), 1e-300) if ref.numel() else 1.0
    torch.testing.assert_close(got, ref, rtol=rtol, atol=rtol * scale)


def _both(fn, x: torch.Tensor, alpha: torch.Tensor, extra: torch.Tensor | None, seed: int):
    """Value and gradients (x, alpha, extra) of ``sum(fn(...) * v)`` on the two paths."""
    out = {}
    for path in ("torch", "cpu"):
        xx = x.clone().requires_grad_()
        aa = alpha.clone().requires_grad_()
        ee = None if extra is None else extra.clone().requires_grad_()
        y = fn(xx, aa, ee, path)
        v = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed), dtype=y.dtype)
        (y * v).sum().backward()
        out[path] = [y.detach(), xx.grad, aa.grad] + ([] if ee is None else [ee.grad])
    return out["cpu"], out["torch"]


OPS = {
    "soft_rank": (lambda x, a, e, p: soft_rank(x, a, backend=p), None),
    "soft_rank_desc": (lambda x, a, e, p: soft_rank(x, a, descending=True, backend=p), None),
    "soft_sort": (lambda x, a, e, p: soft_sort(x, a, backend=p), None),
    "soft_sort_desc": (lambda x, a, e, p: soft_sort(x, a, descending=True, backend=p), None),
    "soft_topk": (lambda x, a, e, p: soft_topk(x, e, a, backend=p), "k"),
    "soft_topk_smallest": (lambda x, a, e, p: soft_topk(x, e, a, largest=False, backend=p), "k"),
    "log_soft_topk": (lambda x, a, e, p: soft_topk(x, e, a, log=True, backend=p), "k"),
    "lapsum_inverse": (lambda x, a, e, p: lapsum_inverse(x, e, a, backend=p), "w"),
}


@settings(max_examples=60, deadline=None)
@given(
    op=st.sampled_from(sorted(OPS)),
    rows=st.integers(1, 3),
    n=st.integers(2, 40),
    spread=st.sampled_from([1e-3, 1.0, 30.0, 400.0]),
    ties=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_equals_the_torch_path_in_float64(op, rows, n, spread, ties, seed):
    """Rows whose spread is within the torch path's plain scans (<= 600 alpha): values and the
    gradients to x, alpha and k / w agree to 1e-12 of their scale."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, n, generator=g, dtype=D) * spread
    if ties:
        x = torch.round(x * 4 / spread) * spread / 4
    alpha = 0.5 + torch.rand(rows, generator=g, dtype=D)
    fn, extra_kind = OPS[op]
    extra = None
    if extra_kind == "k":  # multi-k: m values per row in (0, n)
        extra = (torch.rand(rows, 3, generator=g, dtype=D) * 0.98 + 0.01) * n
    elif extra_kind == "w":
        extra = (torch.rand(rows, 5, generator=g, dtype=D) * 0.98 + 0.01) * n
    got, ref = _both(fn, x, alpha, extra, seed)
    for i, (a, b) in enumerate(zip(got, ref)):
        if i == 2:
            # d/d alpha is a difference of sums of terms g_i (x_i - mean) / alpha, which cancel
            # to far below their size when the row is wide: compare at the terms' scale
            # (or to zero when the row is constant: then at the gradients' own scale)
            terms = (x - x.mean(-1, keepdim=True)).abs().amax(-1) * ref[1].abs().sum(-1) / alpha
            scale = max(float(terms.max()), float(ref[1].abs().sum()))
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12 * scale)
        else:
            _close(a, b)


def _brute_rank(x: torch.Tensor, alpha: float) -> torch.Tensor:
    z = (x[:, None] - x[None, :]) / alpha
    lap = torch.where(z <= 0, 0.5 * torch.exp(z.clamp(max=0)), 1 - 0.5 * torch.exp(-z.clamp(min=0)))
    return lap.sum(1) - 0.5  # the j = i term is Lap(0) = 1/2


@pytest.mark.parametrize("spread", [1e3, 1e5])
def test_wide_rows_equal_the_definition(spread):
    """Past 600 alpha the torch path scans in the log domain (round-off about eps * spread); the
    kernels' recurrences only ever exponentiate differences <= 0, so they match the O(n^2)
    definition at any spread, and the top-k row still sums to k."""
    g = torch.Generator().manual_seed(3)
    x = torch.rand(200, generator=g, dtype=D) * spread
    got = soft_rank(x, 1.0, backend="cpu")
    _close(got, _brute_rank(x, 1.0), rtol=1e-13)
    p = soft_topk(x, 37.5, 1.0, backend="cpu")
    assert float(p.sum()) == pytest.approx(37.5, abs=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_inputs_equal_the_torch_path(dtype):
    """Both paths compute in float64 and round once; float16 / bfloat16 run the float32 kernels."""
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(3, 50, generator=g) * 3).to(dtype)
    for fn in (
        lambda z, p: soft_rank(z, 0.7, backend=p),
        lambda z, p: soft_sort(z, 0.7, backend=p),
        lambda z, p: soft_topk(z, 12.5, 0.7, backend=p),
    ):
        outs, grads = [], []
        for p in ("torch", "cpu"):
            xx = x.clone().requires_grad_()
            y = fn(xx, p)
            (y.float() * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
            outs.append(y.detach().double())
            grads.append(xx.grad.double())
            assert y.dtype == dtype and xx.grad.dtype == dtype
        eps = torch.finfo(dtype).eps
        _close(outs[1], outs[0], rtol=2 * eps)
        _close(grads[1], grads[0], rtol=4 * eps)


def test_exp_nonpos_is_within_2_ulp_down_to_the_subnormals():
    g = torch.Generator().manual_seed(5)
    x = torch.cat(
        [
            -torch.rand(200_000, generator=g, dtype=D) * 750,
            -torch.logspace(-20, 0, 5000, dtype=D),
            -torch.linspace(700, 746, 5000, dtype=D),
            torch.tensor([0.0, -0.0, -1e-300, -745.13, -746.0, -800.0, -math.inf], dtype=D),
        ]
    )
    got, ref = _cpu.exp_nonpos(x), torch.exp(x)
    tiny = torch.finfo(D).tiny
    normal = ref >= tiny
    rel = ((got - ref).abs() / ref)[normal]
    assert float(rel.max()) <= 2 * torch.finfo(D).eps
    # subnormal results: within 2 units of the smallest subnormal (5e-324)
    assert float((got - ref).abs()[~normal].max()) <= 2 * 4.95e-324
    assert math.isnan(float(_cpu.exp_nonpos(torch.tensor([math.nan], dtype=D))[0]))


def test_log_pos_is_within_1_ulp_and_keeps_the_special_values():
    g = torch.Generator().manual_seed(8)
    x = torch.cat(
        [
            torch.exp(torch.rand(200_000, generator=g, dtype=D) * 1400 - 700),
            1 + (torch.rand(10_000, generator=g, dtype=D) - 0.5) * 1e-6,
            torch.tensor([1.0, 2.0, 0.5, 1e-310, 5e-324, torch.finfo(D).max], dtype=D),
        ]
    )
    got, ref = _cpu.log_pos(x), torch.log(x)
    # absolute near 1 (where log is near 0), relative elsewhere
    err = (got - ref).abs() / ref.abs().clamp(min=1.0)
    assert float(err.max()) <= torch.finfo(D).eps
    special = torch.tensor([0.0, math.inf, -1.0, math.nan], dtype=D)
    assert _cpu.log_pos(special).tolist()[:2] == [-math.inf, math.inf]
    assert all(math.isnan(v) for v in _cpu.log_pos(special).tolist()[2:])


def test_threaded_rows_equal_one_thread():
    """Rows split over two threads when the work is large (>= 2^17 values a thread)."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(4, 70_000, generator=g, dtype=D).requires_grad_()
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            x.grad = None
            r = soft_rank(x, 0.3, backend="cpu")
            s = soft_sort(x, 0.3, backend="cpu")
            p = soft_topk(x, 1000.5, 0.3, backend="cpu")
            (r.sum() + (s * s).sum() + (p * p).sum()).backward()
            results.append([r.detach(), s.detach(), p.detach(), x.grad.clone()])
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_non_finite_inputs_raise_or_propagate():
    x = torch.tensor([[1.0, math.nan, 2.0], [0.0, 1.0, 2.0]])
    for fn in (soft_rank, soft_sort, lambda z, **kw: soft_topk(z, 1.5, **kw)):
        with pytest.raises(ValueError, match="contains NaN/inf"):
            fn(x, backend="cpu")
        out = fn(x, backend="cpu", check_finite=False)
        assert bool(out[0].isnan().any()) and bool(torch.isfinite(out[1]).all())
    with pytest.raises(ValueError, match="contains NaN/inf"):
        soft_rank(torch.tensor([0.0, math.inf]), backend="cpu")


def test_torch_compile_calls_the_kernels_as_custom_operators():
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm.print_readable(print_output=False))  # with the autograd body graphs
        return gm

    torch._dynamo.reset()
    x = torch.randn(3, 30, dtype=D, requires_grad=True)
    f = torch.compile(lambda z: soft_rank(z, 0.4).pow(2).sum(), fullgraph=True, backend=capture)
    y = f(x)
    y.backward()
    assert any("icml25_lapsum.rank_fwd" in g for g in graphs), graphs
    assert any("icml25_lapsum.rank_bwd" in g for g in graphs), graphs
    xx = x.detach().clone().requires_grad_()
    soft_rank(xx, 0.4, backend="torch").pow(2).sum().backward()
    _close(x.grad, xx.grad)


def test_saved_memory_per_element():
    """Saved for backward per float32 element: soft rank the sorted row, its permutation and
    K 1 (4 + 8 + 8), soft sort the sorted row, permutation and t (4 + 8 + 8), soft top-k the
    input (4) and t (m values a row)."""
    x = torch.randn(1, 100_000)
    assert saved_bytes(lambda z: soft_rank(z, backend="cpu"), x) / x.numel() == pytest.approx(
        20, abs=0.01
    )
    assert saved_bytes(lambda z: soft_sort(z, backend="cpu"), x) / x.numel() == pytest.approx(
        20, abs=0.01
    )
    assert saved_bytes(lambda z: soft_topk(z, 10, backend="cpu"), x) / x.numel() == pytest.approx(
        4, abs=0.01
    )


def test_without_a_compiler_auto_falls_back_and_cpu_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(_cpu, "_state", {})
    monkeypatch.setenv("CXX", "/bin/false")
    monkeypatch.setenv("ICML25_LAPSUM_BUILD_DIR", str(tmp_path))
    monkeypatch.delenv("ICML25_LAPSUM_BACKEND", raising=False)
    with pytest.warns(RuntimeWarning, match="compiled CPU kernels are not available"):
        ok, why = _cpu.available()
    assert not ok and "/bin/false" in why
    x = torch.randn(2, 10)
    torch.testing.assert_close(soft_rank(x, 0.5), soft_rank(x, 0.5, backend="torch"))
    with pytest.raises(RuntimeError, match="backend='cpu' is not available here: .*/bin/false"):
        soft_rank(x, 0.5, backend="cpu")


@pytest.mark.parametrize("off", ["0", "false", "OFF", " no "])
def test_turned_off_by_the_environment(monkeypatch, off):
    """``false``/``off``/``no`` as well as ``0`` (a new user's review, issue 50: only ``0`` did)."""
    from icml25.lapsum.functional import _backend

    monkeypatch.setenv("ICML25_LAPSUM_CPU", off)
    monkeypatch.delenv("ICML25_LAPSUM_BACKEND", raising=False)
    assert _cpu.available() == (False, f"turned off by ICML25_LAPSUM_CPU={off}")
    assert _backend("auto", torch.zeros(3)) == "torch"


def test_cxx_may_name_a_launcher_and_a_c_compiler_is_named_as_the_cause(monkeypatch, tmp_path):
    """A new user's review (issue 50): ``CXX="ccache g++"`` was run as one file name, and
    ``CXX=cc`` built a library that failed to load with an undefined C++ symbol, kept on disk."""
    import shutil

    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++")
    monkeypatch.setattr(_cpu, "_state", {})
    monkeypatch.setenv("ICML25_LAPSUM_BUILD_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("CXX", f"env {gxx}")  # a launcher before the compiler
    assert _cpu.available() == (True, "")
    cc = shutil.which("gcc")
    if cc is None:
        return
    monkeypatch.setattr(_cpu, "_state", {})
    monkeypatch.setenv("ICML25_LAPSUM_BUILD_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("CXX", cc)
    with pytest.warns(RuntimeWarning):
        ok, why = _cpu.available()
    if not ok:  # gcc links C++ code without libstdc++: the symbol is missing at load
        assert "must be a C++ compiler" in why
        assert not list((tmp_path / "b").glob("*.so"))


def test_a_fresh_build(monkeypatch, tmp_path):
    """The library builds from the source into an empty directory, named by the source hash."""
    monkeypatch.setattr(_cpu, "_state", {})
    monkeypatch.setenv("ICML25_LAPSUM_BUILD_DIR", str(tmp_path))
    ok, why = _cpu.available()
    assert ok, why
    built = list(tmp_path.glob("lapsum_cpu_*.so"))
    assert len(built) == 1 and not list(tmp_path.glob("*.tmp"))
    x = torch.randn(2, 10, dtype=D)
    _close(soft_rank(x, 0.5, backend="cpu"), soft_rank(x, 0.5, backend="torch"))


def test_top_k_of_1d_and_3d_inputs_takes_per_row_and_multi_k():
    """k follows x's dims, whatever their number (a 2-D k was read as multi-k for every input)."""
    x3 = torch.randn(2, 6, 5, dtype=D)
    per_row = soft_topk(x3, torch.full((2, 6), 2.0, dtype=D), 0.5)
    _close(per_row, soft_topk(x3, 2.0, 0.5))
    assert soft_topk(x3, torch.full((2, 5), 2.0, dtype=D), 0.5, dim=1).shape == (2, 6, 5)
    multi = soft_topk(x3, torch.tensor([1.0, 2.0, 3.0], dtype=D).reshape(1, 3, 1), 0.5, dim=1)
    assert multi.shape == (2, 3, 6, 5)
    _close(multi[:, 1], soft_topk(x3, 2.0, 0.5, dim=1))
    x1 = torch.randn(10, dtype=D)
    m1 = soft_topk(x1, torch.tensor([1.0, 2.0, 3.0], dtype=D), 0.5)
    assert m1.shape == (3, 10)
    _close(m1.sum(-1), torch.tensor([1.0, 2.0, 3.0], dtype=D))


def test_a_row_with_inf_is_nan_when_not_checked():
    x = torch.randn(3, 5, dtype=D)
    x[0, 0] = math.inf
    for out in (
        soft_rank(x, 0.5, backend="cpu", check_finite=False),
        soft_sort(x, 0.5, backend="cpu", check_finite=False),
        soft_topk(x, 2, 0.5, backend="cpu", check_finite=False),
    ):
        assert bool(out[0].isnan().all()) and bool(torch.isfinite(out[1:]).all())


def test_cpu_backend_refuses_other_devices():
    meta = torch.empty(3, device="meta")
    with pytest.raises(ValueError, match="backend='cpu' needs CPU tensors"):
        soft_rank(meta, backend="cpu")
