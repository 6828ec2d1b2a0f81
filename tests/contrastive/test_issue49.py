"""Issue 49: numpy scalars are numbers (no self-contradicting refusal), and a view that is no
tensor gets a TypeError naming it before the autocast guard reads ``u.device``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from icml25.contrastive import ContrastiveLoss, SigmoidLoss, vrns_loss
from icml25.contrastive.losses import infonce_loss, nt_xent_loss, sigmoid_loss


def _views(m=6, d=4):
    g = torch.Generator().manual_seed(0)
    return torch.randn(m, d, generator=g), torch.randn(m, d, generator=g)


@pytest.mark.parametrize("t", [np.float32(0.1), np.float64(0.1), np.int64(1)])
def test_numpy_temperatures_equal_python_ones(t):
    u, v = _views()
    want = nt_xent_loss(u, v, float(t))
    assert torch.allclose(nt_xent_loss(u, v, t), want, rtol=1e-6)
    assert torch.allclose(ContrastiveLoss("simclr", temperature=t)(u, v), want, rtol=1e-6)
    assert torch.isfinite(sigmoid_loss(u, v, t, np.float32(-1.0)))
    assert torch.isfinite(SigmoidLoss(t=t, bias=np.float64(-2.0))(u, v))


def test_numpy_integers_for_counts():
    u, v = _views()
    a = vrns_loss(u, v, n_train=np.int64(50), p=np.int32(4))
    b = vrns_loss(u, v, n_train=50, p=4)
    assert torch.allclose(a, b)
    crit = ContrastiveLoss("simclr", 0.2, vrns_weight=np.float32(30), n_train=np.int64(50))
    assert crit.vrns_weight == 30.0 and torch.isfinite(crit(u, v))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -0.1, np.float32("nan")])
def test_bad_temperature_names_its_value(bad):
    u, v = _views()
    with pytest.raises(ValueError, match=r"temperature must be a finite number > 0, got"):
        infonce_loss(u, v, bad)


@pytest.mark.parametrize(
    "call",
    [
        lambda u, v: infonce_loss(u, v, 0.1),
        lambda u, v: sigmoid_loss(u, v),
        lambda u, v: vrns_loss(u, v, n_train=10),
        lambda u, v: ContrastiveLoss("simclr")(u, v),
        lambda u, v: ContrastiveLoss("siglip")(u, v),
    ],
)
def test_numpy_views_get_a_type_error_not_an_attribute_error(call):
    u, v = _views()
    with pytest.raises(TypeError, match="u must be a torch.Tensor, got ndarray"):
        call(u.numpy(), v.numpy())
