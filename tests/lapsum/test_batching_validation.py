"""Shapes, dims, dtypes and bad input (tests 10-12)."""

from __future__ import annotations

import pytest
import torch

from icml25.lapsum import lapsum_inverse, soft_permutation_matrix, soft_rank, soft_sort, soft_topk
from icml25.lapsum.functional import permutation_cross_entropy, topk_cross_entropy

D = torch.float64


def test_batched_equals_per_row_and_dim_equals_movedim():
    x = torch.randn(2, 3, 11, dtype=D)
    whole = soft_topk(x, 4, 0.5)
    for i in range(2):
        for j in range(3):
            torch.testing.assert_close(whole[i, j], soft_topk(x[i, j], 4, 0.5))
    xt = x.transpose(1, 2)  # non-contiguous, n along dim=1
    assert not xt.is_contiguous()
    torch.testing.assert_close(soft_topk(xt, 4, 0.5, dim=1), whole.transpose(1, 2))
    torch.testing.assert_close(soft_rank(xt, 0.5, dim=1), soft_rank(x, 0.5).transpose(1, 2))
    torch.testing.assert_close(soft_sort(xt, 0.5, dim=1), soft_sort(x, 0.5).transpose(1, 2))


def test_multi_k_shapes():
    x = torch.randn(4, 10, dtype=D)
    out = soft_topk(x, torch.tensor([[1.0, 2.0, 3.0]], dtype=D))
    assert out.shape == (4, 3, 10)
    torch.testing.assert_close(out.sum(-1), torch.tensor([[1.0, 2.0, 3.0]], dtype=D).expand(4, 3))
    assert soft_topk(x, torch.tensor([[2.0]], dtype=D)).shape == (4, 1, 10)  # m = 1 keeps its axis
    xt = torch.randn(10, 4, dtype=D)
    assert soft_topk(xt, torch.tensor([[1.0], [2.0]], dtype=D), dim=0).shape == (2, 10, 4)
    small = soft_topk(x, torch.tensor([[1.0, 2.0]], dtype=D), largest=False)
    torch.testing.assert_close(small.sum(-1), torch.tensor([[1.0, 2.0]], dtype=D).expand(4, 2))
    per_row = soft_topk(x, torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=D))
    torch.testing.assert_close(per_row.sum(-1), torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=D))


def test_empty_batch():
    x = torch.randn(0, 5)
    assert soft_topk(x, 2).shape == (0, 5)
    assert soft_rank(x).shape == (0, 5)
    assert soft_sort(x).shape == (0, 5)
    assert soft_permutation_matrix(x).shape == (0, 5, 5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_inputs_keep_their_dtype(dtype):
    x = torch.randn(3, 40).to(dtype)
    ref = soft_topk(x.double(), 5, 0.3)
    out = soft_topk(x, 5, 0.3)
    assert out.dtype == dtype
    torch.testing.assert_close(
        out.double(), ref, atol=1e-2 if dtype != torch.float32 else 1e-6, rtol=0
    )
    assert soft_rank(x).dtype == dtype and soft_sort(x).dtype == dtype


def test_float32_agrees_with_float64():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10_000, generator=g)
    for alpha in (0.01, 1.0, 100.0):
        torch.testing.assert_close(
            soft_topk(x, 2500.5, alpha).double(),
            soft_topk(x.double(), 2500.5, alpha),
            atol=1e-5,
            rtol=0,
        )
        r32, r64 = soft_rank(x, alpha).double(), soft_rank(x.double(), alpha)
        assert ((r32 - r64).abs() / (1 + r64.abs())).max() <= 1e-5


def test_integer_input_is_cast_and_large_offsets_are_harmless():
    assert soft_rank(torch.tensor([3, 1, 2])).dtype == torch.get_default_dtype()
    x = torch.randn(50, dtype=D)
    torch.testing.assert_close(soft_topk(x + 1e4, 5, 0.3), soft_topk(x, 5, 0.3), atol=1e-9, rtol=0)
    torch.testing.assert_close(soft_rank(x + 1e4, 0.3), soft_rank(x, 0.3), atol=1e-9, rtol=0)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda x: soft_topk(x, 2, 0.0), ValueError, r"alpha must be finite and > 0.*\[0.0\]"),
        (lambda x: soft_topk(x, 2, -1.0), ValueError, "alpha must be finite and > 0"),
        (lambda x: soft_topk(x, 2, float("nan")), ValueError, "alpha"),
        (lambda x: soft_topk(x, 2, torch.tensor([1.0, -2.0])), ValueError, r"\[-2.0\]"),
        (
            lambda x: soft_topk(x, 2, torch.ones(3)),
            ValueError,
            "does not broadcast to the batch shape",
        ),
        (
            lambda x: soft_topk(x, 0),
            ValueError,
            r"k must lie strictly inside \(0, 6\) for n = 6, got \[0.0\]",
        ),
        (lambda x: soft_topk(x, 6), ValueError, "k must lie strictly inside"),
        (lambda x: soft_topk(x, -1), ValueError, "k must lie strictly inside"),
        (lambda x: soft_topk(x, float("nan")), ValueError, "k must lie strictly inside"),
        (
            lambda x: lapsum_inverse(x, torch.tensor([6.0])),
            ValueError,
            "w must lie strictly inside",
        ),
        (lambda x: soft_topk(x, 2, dim=2), ValueError, r"dim=2 is out of range"),
        (lambda x: soft_topk(x.to(torch.complex64), 2), TypeError, "complex"),
        (lambda x: soft_topk(x.tolist(), 2), TypeError, "must be a torch.Tensor"),
        (lambda x: soft_topk(x, "2"), TypeError, "k must be a number or a tensor"),
        (lambda x: soft_rank(torch.randn(2, 0)), ValueError, "n = 0"),
        (lambda x: soft_rank(torch.tensor(1.0)), ValueError, "at least one dimension"),
        (lambda x: soft_topk(torch.tensor([[1.0, float("nan"), 2.0]]), 1), ValueError, "NaN/inf"),
        (lambda x: soft_rank(torch.tensor([1.0, float("inf")])), ValueError, "NaN/inf"),
        (lambda x: soft_topk(x, 2, backend="cuda"), ValueError, "backend must be"),
        (lambda x: soft_topk(x, 2, backend="triton"), RuntimeError, "not available"),
    ],
)
def test_bad_input(call, error, match):
    x = torch.randn(2, 6)
    with pytest.raises(error, match=match):
        call(x)


def test_nan_propagates_when_check_disabled():
    out = soft_rank(torch.tensor([1.0, float("nan"), 2.0]), check_finite=False)
    assert torch.isnan(out).any()


def test_permutation_target_validation():
    x = torch.randn(2, 4)
    good = torch.stack([torch.randperm(4), torch.randperm(4)])
    with pytest.raises(TypeError, match="int64"):
        permutation_cross_entropy(x, good.int())
    with pytest.raises(ValueError, match="shape"):
        permutation_cross_entropy(x, good[:, :3])
    with pytest.raises(ValueError, match="permutation of 0..3"):
        permutation_cross_entropy(x, torch.tensor([[0, 0, 1, 2], [0, 1, 2, 3]]))
    with pytest.raises(ValueError, match="reduction"):
        permutation_cross_entropy(x, good, reduction="avg")


def test_topk_cross_entropy_validation():
    logits = torch.randn(4, 10)
    labels = torch.tensor([0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 10\)"):
        topk_cross_entropy(logits, torch.tensor([0, 1, 2, 10]), [1.0])
    with pytest.raises(ValueError, match="p_k must sum to 1"):
        topk_cross_entropy(logits, labels, [0.5, 0.2])
    with pytest.raises(ValueError, match="finite and >= 0"):
        topk_cross_entropy(logits, labels, [1.5, -0.5])
    with pytest.raises(ValueError, match="must not be empty"):
        topk_cross_entropy(logits, labels, [])
    with pytest.raises(ValueError, match="top1_mode"):
        topk_cross_entropy(logits, labels, [1.0], top1_mode="x")
    with pytest.raises(ValueError, match="int64 tensor of shape"):
        topk_cross_entropy(logits, labels.float(), [1.0])
