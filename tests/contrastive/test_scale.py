"""Issue 49 (review): the losses L2-normalise their inputs, so they must not depend on the
embeddings' scale. Before, float32 rows at 1e20 overflowed and at 1e-30 underflowed in
``F.normalize`` and every loss became that of all-zero embeddings (log(2m - 1) for SimCLR)."""

import math

import pytest
import torch
import torch.nn.functional as F

from icml25.contrastive import ContrastiveLoss, similarity_stats
from icml25.contrastive.losses import _unit_rows

KINDS = ["simclr", "infonce", "dcl", "dhel"]
F32 = [1e-30, 1e-20, 1e-5, 1e5, 1e20, 1e30]
F64 = [1e-300, 1e-150, 1e-30, 1e30, 1e150, 1e300]


def _views(dtype, m=4, d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(m, d, generator=g, dtype=torch.float64).to(dtype),
        torch.randn(m, d, generator=g, dtype=torch.float64).to(dtype),
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "dtype,scales,rel", [(torch.float32, F32, 1e-5), (torch.float64, F64, 1e-12)]
)
def test_loss_is_scale_invariant(kind, dtype, scales, rel):
    a, b = _views(dtype)
    loss = ContrastiveLoss(kind, 0.2)
    ref = float(loss(a, b))
    assert abs(ref - math.log(7)) > 0.1  # not the all-zero value
    for s in scales:
        assert float(loss(a * s, b * s)) == pytest.approx(ref, rel=rel), s


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_scale_one_unchanged_to_the_bit(dtype):
    # power-of-two row scaling is exact: ordinary rows normalise to F.normalize's very bits
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 16, generator=g, dtype=torch.float64).to(dtype) * 3
    assert torch.equal(_unit_rows(x), F.normalize(x, dim=-1, eps=1e-12))
    a, b = _views(dtype)
    before = {  # the values before the scale-safe normalisation, recorded on one machine
        torch.float32: [
            5.823258399963379,
            4.879170894622803,
            5.804518222808838,
            4.0234150886535645,
        ],
        torch.float64: [5.823258319051584, 4.879170521781919, 5.804518853171931, 4.023415189191448],
    }[dtype]
    # equal to the bit there; another CPU's vector kernels (logsumexp, matmul) may round the
    # last bit differently, so the comparison allows 4 units in the last place
    eps = torch.finfo(dtype).eps
    now = [float(ContrastiveLoss(k, 0.2)(a, b)) for k in KINDS]
    assert all(math.isclose(x, y, rel_tol=4 * eps, abs_tol=0.0) for x, y in zip(now, before)), (
        now,
        before,
    )


def test_zero_row_stays_zero_and_gradient_matches():
    x = torch.tensor([[0.0, 0.0, 0.0], [3e-30, -4e-30, 0.0], [1e20, 0.0, 0.0]])
    u = _unit_rows(x)
    assert torch.equal(u[0], torch.zeros(3))
    torch.testing.assert_close(u[1], torch.tensor([0.6, -0.8, 0.0]))
    torch.testing.assert_close(u[2], torch.tensor([1.0, 0.0, 0.0]))
    a, b = _views(torch.float64)
    s = 1e-200
    x1 = a.clone().requires_grad_(True)
    ContrastiveLoss("simclr", 0.2)(x1, b).backward()
    x2 = (a * s).requires_grad_(True)
    ContrastiveLoss("simclr", 0.2)(x2, b * s).backward()
    torch.testing.assert_close(x2.grad * s, x1.grad, rtol=1e-10, atol=0)


@pytest.mark.parametrize("s", [1e-30, 1e30])
def test_similarity_stats_scale_invariant(s):
    a, b = _views(torch.float32, m=6)
    ref, got = similarity_stats(a, b), similarity_stats(a * s, b * s)
    assert got.pos_mean == pytest.approx(ref.pos_mean, rel=1e-5)
    assert got.neg_mean == pytest.approx(ref.neg_mean, rel=1e-5, abs=1e-7)
