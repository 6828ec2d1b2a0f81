"""The ecosystem's paths: torch.compile(fullgraph=True), torch.func.vmap and torch.func.grad on
the LapSum operators (autograd Functions with setup_context and generated vmap rules; value
checks without host syncs under tracing)."""

from __future__ import annotations

import pytest
import torch

from icml25.lapsum import soft_rank, soft_sort, soft_topk

# every test here runs on the torch path and on the compiled kernels (conftest.py)
pytestmark = pytest.mark.usefixtures("lapsum_path")

OPS = {
    "soft_rank": lambda x: soft_rank(x, 0.5),
    "soft_topk": lambda x: soft_topk(x, 10.0, alpha=0.5),
    "log_soft_topk": lambda x: soft_topk(x, 10.0, alpha=0.5, log=True),
    "soft_sort": lambda x: soft_sort(x, 0.5),
}


def _x(seed=0):
    return torch.randn(4, 40, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("name", list(OPS))
def test_compile_fullgraph_forward_and_backward(name):
    torch._dynamo.reset()
    f = OPS[name]
    x = _x()
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    assert torch.allclose(compiled(x), f(x), atol=1e-10)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    compiled(a).pow(2).sum().backward()
    f(b).pow(2).sum().backward()
    assert torch.allclose(a.grad, b.grad, atol=1e-10)


@pytest.mark.parametrize("name", list(OPS))
def test_vmap_and_grad(name):
    f = OPS[name]
    x = _x(1)
    assert torch.allclose(torch.func.vmap(f)(x), f(x), atol=1e-10)
    g = torch.func.grad(lambda x: f(x).pow(2).sum())(x)
    xx = x.clone().requires_grad_()
    f(xx).pow(2).sum().backward()
    assert torch.allclose(g, xx.grad, atol=1e-10)
    # per-example gradients: vmap over grad
    per = torch.func.vmap(torch.func.grad(lambda r: f(r[None]).pow(2).sum()))(x)
    assert torch.allclose(per, xx.grad, atol=1e-10)


def test_eager_value_checks_still_raise():
    with pytest.raises(ValueError, match="NaN/inf"):
        soft_rank(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="alpha must be finite and > 0"):
        soft_rank(torch.tensor([1.0, 2.0]), alpha=-1.0)


@pytest.mark.parametrize("name", list(OPS))
def test_jacrev_and_batched_jacobian(name):
    f = OPS[name]
    z = _x(2)[0]
    ref = torch.autograd.functional.jacobian(f, z)
    assert torch.allclose(torch.func.jacrev(f)(z), ref, atol=1e-10)
    assert torch.allclose(torch.autograd.functional.jacobian(f, z, vectorize=True), ref, atol=1e-10)


def test_compiled_bad_constant_names_the_check():
    torch._dynamo.reset()
    bad = torch.compile(lambda z: soft_topk(z, 5.0, 0.3), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=r"k: it must lie strictly inside \(0, n\)"):
        bad(torch.randn(3))


def test_compiled_top_k_and_inverse_take_a_new_row_length():
    """A second call with another n recompiles with a symbolic n (it failed formatting n)."""
    torch._dynamo.reset()
    topk = torch.compile(lambda z: soft_topk(z, 2.0, 0.5), fullgraph=True, backend="eager")
    for n in (5, 9, 12):
        x = torch.randn(3, n, dtype=torch.float64)
        assert torch.allclose(topk(x), soft_topk(x, 2.0, 0.5), atol=1e-10)


def test_topk_loss_refuses_mass_only_at_k_at_least_c():
    from icml25.lapsum.losses import TopKCrossEntropyLoss

    logits, y = torch.randn(4, 10), torch.randint(0, 10, (4,))
    with pytest.raises(ValueError, match="all its mass on k >= C = 10"):
        TopKCrossEntropyLoss(p_k=[0] * 9 + [1])(logits, y)
    with pytest.warns(UserWarning, match="mass 0.5 on k >= C = 10"):
        TopKCrossEntropyLoss(p_k=[0] * 4 + [0.5] + [0] * 4 + [0.5])(logits, y)
