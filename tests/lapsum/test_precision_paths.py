"""The torch path's plain-scan fast path against its log-domain path, the rank backward at small
alpha on both CPU paths (exact off-diagonal sums), the float32 compute path used on CUDA, and the
path choice (compiled kernels by default on CPU, Triton opt-in)."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.lapsum import _stats, soft_rank, soft_sort, soft_topk


@pytest.mark.parametrize("backend", ["torch", "cpu"])
@pytest.mark.parametrize("gap", [5.0, 30.0, 100.0, 300.0])
def test_rank_gradient_at_small_alpha_is_exact(gap, backend):
    """n = 2: d rank_0 / d x_0 = f(gap) / alpha with f(d) = e^{-d} / 2; the old inclusive-scan
    backward lost it against the diagonal (relative error 5e-3 at gap 30)."""
    a = 0.01
    x = torch.tensor([0.0, gap * a], dtype=torch.float64, requires_grad=True)
    v = torch.tensor([1.0, -0.3], dtype=torch.float64)
    (soft_rank(x, a, backend=backend) * v).sum().backward()
    exact = 1.3 * 0.5 * math.exp(-gap) / a
    assert float(x.grad[0]) == pytest.approx(exact, rel=1e-10)
    assert float(x.grad[1]) == pytest.approx(-exact, rel=1e-10)


def test_fast_and_log_domain_scans_agree(monkeypatch):
    monkeypatch.setenv("ICML25_LAPSUM_BACKEND", "torch")
    g = torch.Generator().manual_seed(0)
    # row 0 spreads 5 units, row 1 spreads 2000 units of alpha (log-domain path), mixed batch
    x = torch.stack(
        [
            torch.randn(300, generator=g, dtype=torch.float64) * 0.5,
            torch.randn(300, generator=g, dtype=torch.float64) * 200,
        ]
    )
    v = torch.randn(2, 300, generator=g, dtype=torch.float64)

    def run():
        xx = x.clone().requires_grad_()
        out = [soft_rank(xx, 1.0), soft_topk(xx, 150.0, alpha=1.0), soft_sort(xx, 1.0)]
        sum((o * v).sum() for o in out).backward()
        return [o.detach() for o in out] + [xx.grad]

    mixed = run()
    monkeypatch.setattr(_stats, "_FAST_SPREAD", {})  # every row through logcumsumexp
    slow = run()
    for a, b in zip(mixed, slow):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-10)


def test_float32_compute_path(monkeypatch):
    """What CUDA runs (float32 math for float32 inputs), exercised on CPU."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 500, generator=g)
    monkeypatch.setenv("ICML25_LAPSUM_BACKEND", "torch")
    ref = soft_rank(x.double(), 0.5)
    monkeypatch.setenv("ICML25_LAPSUM_COMPUTE", "float32")
    xx = x.clone().requires_grad_()
    out = soft_rank(xx, 0.5)
    out.sum().backward()
    assert out.dtype == torch.float32
    # ranks up to 500 with float32 sums: absolute error well below one rank
    assert float((out.detach().double() - ref).abs().max()) < 5e-3
    assert torch.isfinite(xx.grad).all()
    topk = soft_topk(x, 100.0, alpha=0.5)
    assert torch.allclose(topk.sum(-1), torch.full((4,), 100.0), atol=1e-3)


def test_compiled_kernels_by_default_and_triton_opt_in(monkeypatch):
    from icml25.lapsum import _cpu
    from icml25.lapsum.functional import _backend

    monkeypatch.delenv("ICML25_LAPSUM_BACKEND", raising=False)
    expected = "cpu" if _cpu.available()[0] else "torch"
    assert _backend("auto", torch.zeros(3)) == expected
    assert _backend("torch", torch.zeros(3)) == "torch"
    monkeypatch.setenv("ICML25_LAPSUM_BACKEND", "torch")
    assert _backend("auto", torch.zeros(3)) == "torch"
    # a process-wide Triton request leaves CPU tensors on the torch path
    monkeypatch.setenv("ICML25_LAPSUM_BACKEND", "triton")
    assert _backend("auto", torch.zeros(3)) == "torch"
    monkeypatch.setenv("ICML25_LAPSUM_BACKEND", "cuda")
    with pytest.raises(ValueError, match="ICML25_LAPSUM_BACKEND must be one of"):
        _backend("auto", torch.zeros(3))


@pytest.mark.gpu
def test_cuda_float32_path_matches_cpu_float64():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(8, 2000, generator=g)
    ref = soft_rank(x.double(), 0.3)
    xc = x.cuda().requires_grad_()
    out = soft_rank(xc, 0.3)
    out.sum().backward()
    assert out.is_cuda and out.dtype == torch.float32 and torch.isfinite(xc.grad).all()
    assert float((out.detach().cpu().double() - ref).abs().max()) < 1e-2
    p = soft_topk(x.cuda(), 100.0, alpha=0.3)
    assert torch.allclose(p.sum(-1).cpu(), torch.full((8,), 100.0), atol=1e-2)


def test_non_integer_dim_is_a_type_error():
    with pytest.raises(TypeError, match="dim must be an int, got 1.0"):
        soft_rank(torch.randn(2, 3), dim=1.0)
