"""Exact VJPs: gradcheck in float64 on every op and argument (test 7), Jacobian structure (test 8)."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck

from icml25.lapsum import (
    lapsum,
    lapsum_inverse,
    log_soft_topk,
    soft_permutation_matrix,
    soft_rank,
    soft_sort,
    soft_topk,
)
from icml25.lapsum.functional import permutation_cross_entropy

# every test here runs on the torch path and on the compiled kernels (conftest.py)
pytestmark = pytest.mark.usefixtures("lapsum_path")

D = torch.float64


def leaf(*shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, dtype=D, generator=g)).requires_grad_(True)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("log", [False, True])
def test_topk_gradcheck_x_k_alpha_multik(largest, log):
    x = leaf(3, 7)
    k = torch.tensor([[1.5, 3.0, 6.2]], dtype=D, requires_grad=True)  # multi-k, m = 3
    a = torch.tensor([0.4, 1.0, 2.5], dtype=D, requires_grad=True)  # per-row alpha
    assert gradcheck(lambda x, k, a: soft_topk(x, k, a, largest=largest, log=log), (x, k, a))
    kr = torch.tensor([1.0, 2.5, 5.5], dtype=D, requires_grad=True)  # per-row k
    assert gradcheck(lambda x, k: soft_topk(x, k, 0.7, largest=largest, log=log), (x, kr))


def test_3d_input_with_dim_1():
    x = leaf(2, 5, 3, seed=1)
    a = torch.tensor(0.8, dtype=D, requires_grad=True)
    assert gradcheck(lambda x, a: soft_topk(x, 2.5, a, dim=1), (x, a))
    assert gradcheck(lambda x, a: soft_rank(x, a, dim=1), (x, a))
    assert gradcheck(lambda x, a: soft_sort(x, a, dim=1, descending=True), (x, a))


def test_rank_sort_inverse_lapsum_gradcheck():
    x = leaf(2, 6, seed=2)
    a = torch.tensor([0.5, 1.7], dtype=D, requires_grad=True)
    assert gradcheck(lambda x, a: soft_rank(x, a), (x, a))
    assert gradcheck(lambda x, a: soft_rank(x, a, descending=True), (x, a))
    assert gradcheck(lambda x, a: soft_sort(x, a), (x, a))
    w = torch.tensor([[0.2, 2.5, 5.9]], dtype=D, requires_grad=True)
    assert gradcheck(lambda x, w, a: lapsum_inverse(x, w.expand(2, 3), a), (x, w, a))
    t = leaf(2, 4, seed=3)
    assert gradcheck(lambda x, t, a: lapsum(x, t, a), (x, t, a))


def test_permutation_gradcheck():
    x = leaf(3, 6, seed=4)
    a = torch.tensor([0.3, 1.0, 3.0], dtype=D, requires_grad=True)
    g = torch.Generator().manual_seed(0)
    target = torch.stack([torch.randperm(6, generator=g) for _ in range(3)])
    assert gradcheck(lambda x, a: permutation_cross_entropy(x, target, a, reduction="none"), (x, a))
    assert gradcheck(lambda x, a: permutation_cross_entropy(x, target, a, descending=True), (x, a))
    assert gradcheck(lambda x, a: soft_permutation_matrix(x, a), (x, a))


def test_tiny_and_huge_alpha_give_finite_gradients():
    for alpha in (1e-4, 1e4):
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(50, dtype=dtype).requires_grad_(True)
            out = (
                soft_topk(x, 7, alpha).sum()
                + log_soft_topk(x, 7, alpha).clamp(min=-1e4).sum()
                + soft_rank(x, alpha).pow(2).sum()
                + soft_sort(x, alpha).pow(2).sum()
            )
            out.backward()
            assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("op", ["topk", "rank"])
def test_jacobian_symmetric_with_zero_row_sums(op):
    x = torch.randn(20, dtype=D)
    fn = (lambda z: soft_topk(z, 6.5, 0.7)) if op == "topk" else (lambda z: soft_rank(z, 0.7))
    jac = torch.autograd.functional.jacobian(fn, x)
    torch.testing.assert_close(jac, jac.T, atol=1e-12, rtol=0)
    torch.testing.assert_close(jac.sum(-1), torch.zeros(20, dtype=D), atol=1e-12, rtol=0)


def test_backward_does_not_mutate_inputs():
    x = leaf(2, 9, seed=5)
    before = x.detach().clone()
    soft_topk(x, 3, 0.5).sum().backward()
    soft_rank(x, 0.5).sum().backward()
    assert torch.equal(x.detach(), before)
