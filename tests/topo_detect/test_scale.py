"""Issue 49 (review): persistence and the TP loss are homogeneous of degree 1 in the cloud's scale.

An absolute floor (distances <= 1e-6 zeroed) merged whole clouds at scale 1e-6, and giotto-ph's
float32 filtration overflowed at 1e39; bf16 clouds returned a float32 loss."""

import numpy as np
import pytest
import torch

from icml25.topo_detect import mk_loss, tp_loss
from icml25.topo_detect.persistence import distance_matrix, vr_diagrams

SCALES = [1e-8, 1e-7, 1e-6, 1e-3, 1e3, 1e12, 1e30, 1e39, 1e100]


def _clouds():
    g = np.random.default_rng(0)
    P = torch.tensor(g.normal(size=(30, 3)))
    Q = torch.tensor(g.normal(size=(30, 3)) + 0.5)
    return P, Q


def test_scale_one_unchanged():
    # the values the code gave before this change (bitwise equal now: the rescaling is by 2^k)
    P, Q = _clouds()
    assert float(tp_loss(P, Q)) == pytest.approx(2.5191575139555957, rel=1e-12)
    assert float(mk_loss(P, Q)) == pytest.approx(2.8334969455404586, rel=1e-12)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(25, 4, generator=g, dtype=torch.float64)
    Y = torch.randn(20, 4, generator=g, dtype=torch.float64)
    assert float(tp_loss(X, Y)) == pytest.approx(7.846324109613943, rel=1e-12)
    assert float(mk_loss(X, Y)) == pytest.approx(5.998179369482346, rel=1e-12)


@pytest.mark.parametrize("s", SCALES)
def test_diagrams_and_tp_loss_scale_exactly(s):
    P, Q = _clouds()
    ref = vr_diagrams(P, max_dim=1)
    got = vr_diagrams(P * s, max_dim=1)
    for a, b in zip(ref, got):
        assert len(a) == len(b) > 0
        torch.testing.assert_close(b.diagram / s, a.diagram, rtol=1e-9, atol=0)
    torch.testing.assert_close(distance_matrix(P * s) / s, distance_matrix(P), rtol=1e-9, atol=0)
    assert float(tp_loss(P * s, Q * s)) / s == pytest.approx(float(tp_loss(P, Q)), rel=1e-9)


@pytest.mark.parametrize("s", [1e-30, 1e-8, 1e20, 1e30])
def test_tp_loss_scales_in_float32(s):
    P, Q = _clouds()
    ref = float(tp_loss(P.float(), Q.float()))
    got = float(tp_loss((P * s).float(), (Q * s).float())) / s
    assert got == pytest.approx(ref, rel=1e-5)


@pytest.mark.parametrize("s", [1e-8, 1.0, 1e20])
def test_gradient_scales(s):
    # tp(s P) = s tp(P), so d/dP tp(s P) = s * grad tp(P): the diagram re-read from the autograd
    # distances at giotto's critical edges must keep the exact gradient at every scale
    P, Q = _clouds()
    a = P.clone().requires_grad_(True)
    tp_loss(a, Q).backward()
    b = P.clone().requires_grad_(True)
    tp_loss(b * s, Q * s).backward()
    torch.testing.assert_close(b.grad / s, a.grad, rtol=1e-9, atol=1e-12)


def test_gradcheck_at_tiny_scale():
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(8, 2, generator=g, dtype=torch.float64) * 1e-7).requires_grad_(True)
    y = torch.randn(7, 2, generator=g, dtype=torch.float64) * 1e-7
    assert torch.autograd.gradcheck(lambda a: tp_loss(a, y) * 1e7, (x,), eps=1e-13, atol=1e-6)


@pytest.mark.parametrize("s", [1e-9, 1.0, 1e25])
def test_duplicates_are_exact_zeros_at_every_scale(s):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 3, generator=g, dtype=torch.float64) * s
    x = torch.cat([x, x[:3]]).requires_grad_(True)  # 6 distinct points, 3 duplicated
    D = distance_matrix(x).detach()
    assert float(D[0, 6]) == 0.0 and float(D[2, 8]) == 0.0
    dg = vr_diagrams(x, max_dim=0)[0]
    assert len(dg) == 5
    tp_loss(x, x.detach()[:5] * 2).backward()
    assert bool(torch.isfinite(x.grad).all())


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_low_precision_input_returns_its_dtype(dt):
    P, Q = _clouds()
    assert tp_loss(P.to(dt), Q.to(dt)).dtype == dt
    assert mk_loss(P.to(dt), Q.to(dt)).dtype == dt
    assert tp_loss(P.to(dt), Q).dtype == torch.float64  # promotion with a float64 cloud
