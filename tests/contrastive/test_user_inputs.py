"""What a new user's review of the contrastive module found (issue 19): each case now gives the
right answer or a clear error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from icml25.contrastive import ContrastiveLoss, vrns_loss
from icml25.contrastive.losses import nt_xent_loss
from icml25.contrastive.train import train_simclr


def _views(m=6, d=5, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, d, generator=g, dtype=dtype), torch.randn(m, d, generator=g, dtype=dtype)


def test_a_learnable_temperature_is_checked_on_every_call():
    u, v = _views()
    t = nn.Parameter(torch.tensor(0.3))
    crit = ContrastiveLoss("simclr", temperature=t)
    crit(u, v)
    t.data.fill_(-0.3)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0, got -0.3"):
        crit(u, v)
    t.data.fill_(0.0)
    with pytest.raises(ValueError, match="got 0.0"):
        crit(u, v)


@pytest.mark.parametrize("kind", ["siglip", "siglip_within", "spectral"])
def test_index_is_refused_where_it_would_be_ignored(kind):
    u, v = _views()
    with pytest.raises(ValueError, match=f"not '{kind}'.*drop the duplicate rows"):
        ContrastiveLoss(kind)(u, v, torch.tensor([0, 0, 1, 1, 2, 2]))


def test_module_positives_all_equals_the_function():
    u, v = _views(dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1, 2, 3])
    ref = nt_xent_loss(u, v, 0.2, index=labels, positives="all")
    assert ref != nt_xent_loss(u, v, 0.2, index=labels)  # the option changes the loss
    got = ContrastiveLoss("simclr", 0.2, positives="all")(u, v, labels)
    assert torch.allclose(got, ref, atol=1e-14)
    with_vrns = ContrastiveLoss("simclr", 0.2, positives="all", vrns_weight=3.0, n_train=100)
    expected = ref + 3.0 * vrns_loss(u, v, n_train=100, index=labels)
    assert torch.allclose(with_vrns(u, v, labels), expected, atol=1e-12)
    with pytest.raises(ValueError, match="positives='all' is for the InfoNCE family"):
        ContrastiveLoss("siglip", positives="all")
    with pytest.raises(ValueError, match="positives must be 'instance' or 'all'"):
        ContrastiveLoss("simclr", positives="labels")


class _Net(nn.Module):
    def __init__(self, out="pair"):
        super().__init__()
        self.lin, self.out = nn.Linear(4, 3), out

    def forward(self, x):
        z = self.lin(x.flatten(1))
        return z if self.out == "single" else (z, z)


def _noise(x, g):
    return x + 0.1 * torch.randn(x.shape, generator=g).to(x)


def test_trainer_inputs_and_history():
    data = torch.randn(20, 4)
    with pytest.raises(ValueError, match=r"return \(features, projections\).*got Tensor"):
        train_simclr(_Net("single"), data, _noise, loss=ContrastiveLoss(), batch_size=4, steps=1)
    net = _Net().double()  # a float64 model meets float32 data
    hist = train_simclr(net, data, _noise, loss=ContrastiveLoss(log_every=3), batch_size=4, steps=7)
    assert [("neg_var" in h) for h in hist] == [True, False, False, True, False, False, True]
    assert all("loss" in h for h in hist) and not net.training  # left in eval mode (documented)


def test_logged_negatives_exclude_same_id_pairs_and_spectral_has_no_temperature():
    from icml25.contrastive import similarity_stats

    u, v = _views(m=8, dtype=torch.float64)
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    crit = ContrastiveLoss("simclr", 0.2, positives="all")
    crit(u, v, labels)
    st = similarity_stats(u, v, labels)
    assert crit.last_components["neg_mean"] == pytest.approx(st.neg_mean, abs=1e-6)
    assert crit.last_components["neg_var"] == pytest.approx(st.neg_var, abs=1e-6)
    with pytest.raises(ValueError, match="a spectral loss has no temperature"):
        ContrastiveLoss("spectral", temperature=-5.0)
