"""Contrastive losses against brute-force references of Def. 3.1 / 3.2 / 5.7 (tests 1-4, 6, 8)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from icml25.contrastive import ContrastiveLoss, SigmoidLoss, vrns_loss
from icml25.contrastive.losses import (
    dcl_loss,
    dhel_loss,
    independent_additive_loss,
    info_nce_family,
    infonce_loss,
    nt_xent_loss,
    sigmoid_loss,
    spectral_contrastive_loss,
)
from icml25.contrastive.theory import simplex_etf

D = torch.float64


def views(m, d=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, d, dtype=D, generator=g), torch.randn(m, d, dtype=D, generator=g)


def brute_info(u, v, c1, c2, psi, t, symmetric):
    """Def. 3.1 literally: psi(c1 sum phi((v_j - v_i)^T u_i) + c2 sum phi((u_j - v_i)^T u_i))."""
    u, v = F.normalize(u, dim=-1), F.normalize(v, dim=-1)
    m = len(u)
    psi_fn = (lambda x: math.log1p(x)) if psi == "log1p" else math.log

    def one(a, b):
        total = 0.0
        for i in range(m):
            x = 0.0
            for j in range(m):
                if j != i:
                    x += c1 * math.exp(float((b[j] - b[i]) @ a[i]) / t)
                    x += c2 * math.exp(float((a[j] - b[i]) @ a[i]) / t)
            total += psi_fn(x)
        return total / m

    return 0.5 * (one(u, v) + one(v, u)) if symmetric else one(u, v)


@pytest.mark.parametrize("m", [2, 3, 7])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize(
    ("c1", "c2", "psi"), [(1, 0, "log1p"), (1, 1, "log1p"), (1, 1, "log"), (0, 1, "log")]
)
def test_info_family_equals_the_double_loop(m, symmetric, c1, c2, psi):
    u, v = views(m)
    got = info_nce_family(u, v, c1=c1, c2=c2, psi=psi, temperature=0.3, symmetric=symmetric)
    assert abs(float(got) - brute_info(u, v, c1, c2, psi, 0.3, symmetric)) <= 1e-10


def test_named_wrappers_and_simclr_cross_entropy_form():
    u, v = views(6)
    assert torch.equal(
        infonce_loss(u, v, 0.2), info_nce_family(u, v, c1=1, c2=0, psi="log1p", temperature=0.2)
    )
    assert torch.equal(
        dcl_loss(u, v, 0.2), info_nce_family(u, v, c1=1, c2=1, psi="log", temperature=0.2)
    )
    assert torch.equal(
        dhel_loss(u, v, 0.2), info_nce_family(u, v, c1=0, c2=1, psi="log", temperature=0.2)
    )
    z = F.normalize(torch.cat([u, v]), dim=-1)
    logits = (z @ z.T / 0.5).fill_diagonal_(-math.inf)
    target = torch.cat([torch.arange(6, 12), torch.arange(6)])
    ref = F.cross_entropy(logits, target)
    torch.testing.assert_close(nt_xent_loss(u, v, 0.5), ref, atol=1e-6, rtol=0)


def test_vrns_brute_force_etf_zero_and_gradcheck():
    u, v = views(7)
    un, vn = F.normalize(u, dim=-1), F.normalize(v, dim=-1)
    S = un @ vn.T
    off = ~torch.eye(7, dtype=torch.bool)
    ref = ((S[off] + 1 / 99) ** 2).mean()
    torch.testing.assert_close(vrns_loss(u, v, n_train=100), ref)
    torch.testing.assert_close(vrns_loss(u, v, delta=-1 / 99), ref)
    etf = simplex_etf(8, 10)
    assert float(vrns_loss(etf, etf, n_train=8)) < 1e-28
    ur, vr = u.clone().requires_grad_(True), v.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: vrns_loss(a, b, n_train=50), (ur, vr))
    assert torch.autograd.gradcheck(lambda a, b: sigmoid_loss(a, b, 3.0, -1.0, True), (ur, vr))
    assert torch.autograd.gradcheck(lambda a, b: nt_xent_loss(a, b, 0.3), (ur, vr))
    index = torch.tensor([0, 0, 1, 2, 3, 4, 5])  # a duplicate instance is not a negative
    mask = index[:, None] != index[None, :]
    torch.testing.assert_close(
        vrns_loss(u, v, n_train=100, index=index), ((S[mask] + 1 / 99) ** 2).mean()
    )


def test_sigmoid_and_spectral_match_def_32():
    u, v = views(5)
    un, vn = F.normalize(u, dim=-1), F.normalize(v, dim=-1)
    t, bias = 4.0, -2.0
    phi = lambda x: -F.softplus(-(t * x + bias))  # noqa: E731 - SigLIP: b_paper = -bias
    psi = lambda x: 4 * F.softplus(t * x + bias)  # noqa: E731 - (m - 1) factor
    torch.testing.assert_close(
        sigmoid_loss(u, v, t, bias), independent_additive_loss(u, v, phi, psi, 1, 0)
    )
    torch.testing.assert_close(
        sigmoid_loss(u, v, t, bias, within_view=True),
        independent_additive_loss(u, v, phi, psi, 1, 1),
    )
    S = un @ vn.T
    off = ~torch.eye(5, dtype=torch.bool)
    torch.testing.assert_close(
        spectral_contrastive_loss(u, v), -S.diagonal().mean() + S[off].pow(2).mean()
    )
    mod = SigmoidLoss()
    mod(u.float(), v.float()).backward()
    assert mod.log_t.grad is not None and mod.bias.grad is not None


def test_invariances():
    u, v = views(6, 4)
    Q = torch.linalg.qr(torch.randn(4, 4, dtype=D))[0]
    perm = torch.randperm(6)
    for fn in (
        infonce_loss,
        nt_xent_loss,
        dcl_loss,
        dhel_loss,
        sigmoid_loss,
        spectral_contrastive_loss,
        lambda a, b: vrns_loss(a, b, n_train=40),
    ):
        base = fn(u, v)
        torch.testing.assert_close(fn(u @ Q, v @ Q), base)
        torch.testing.assert_close(fn(u[perm], v[perm]), base)
        torch.testing.assert_close(fn(3.0 * u, 0.5 * v), base)


def test_infonce_gradient_on_negatives_shrinks_with_batch():
    # with v the first m basis vectors, S = u v^T is u's first m columns, so the library loss's
    # gradient with respect to u[0, 1] is its gradient with respect to the negative S_01 (Thm 5.6)
    g = torch.Generator().manual_seed(0)
    grads = {4: [], 16: []}
    for _ in range(200):
        u_all = F.normalize(torch.randn(16, 16, dtype=D, generator=g), dim=-1)
        for m in grads:
            u = u_all[:m].clone().requires_grad_(True)
            v = torch.eye(16, dtype=D)[:m]
            loss = infonce_loss(u, v, 0.5, normalize=False)
            (gu,) = torch.autograd.grad(loss, u)
            assert float(gu[0, 1]) >= 0  # pushing a negative's similarity up raises the loss
            grads[m].append(float(gu[0, 1]))
    assert sum(grads[16]) < sum(grads[4])


def test_contrastive_loss_module_and_components():
    u, v = views(8)
    crit = ContrastiveLoss("simclr", 0.2, vrns_weight=30, n_train=100)
    total = crit(u, v)
    torch.testing.assert_close(total, nt_xent_loss(u, v, 0.2) + 30 * vrns_loss(u, v, n_train=100))
    assert set(crit.last_components) == {"base", "vrns", "pos_mean", "neg_mean", "neg_var"}
    for kind in ("infonce", "dcl", "dhel", "siglip", "siglip_within", "spectral"):
        assert torch.isfinite(ContrastiveLoss(kind)(u, v))
    assert ContrastiveLoss("simclr")(u.half(), v.half()).dtype == torch.float32  # computed in fp32
    ids = torch.arange(u.shape[0])
    gathered = ContrastiveLoss("simclr", 0.2, gather=lambda x: x)(u, v, ids)  # 1 rank
    torch.testing.assert_close(gathered, nt_xent_loss(u, v, 0.2))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda u, v: nt_xent_loss(u, v[:3]), "same shape"),
        (lambda u, v: nt_xent_loss(u[:1], v[:1]), "m >= 2"),
        (lambda u, v: nt_xent_loss(u, v, 0.0), "temperature must be a finite number > 0"),
        (lambda u, v: nt_xent_loss(u, v, float("nan")), "temperature"),
        (lambda u, v: nt_xent_loss(u, v.float()), "share device and dtype"),
        (lambda u, v: nt_xent_loss(u.clone().fill_(float("nan")), v), "NaN/inf"),
        (lambda u, v: dhel_loss(u, v, index=torch.zeros(4, dtype=torch.long)), "no negatives"),
        (lambda u, v: vrns_loss(u, v), "exactly one of n_train"),
        (lambda u, v: vrns_loss(u, v, n_train=10, delta=-0.1), "exactly one"),
        (lambda u, v: vrns_loss(u, v, n_train=1), "n_train must be an integer >= 2"),
        (lambda u, v: vrns_loss(u, v, n_train=10, p=3), "p must be an even integer"),
        (
            lambda u, v: vrns_loss(u, v, n_train=10, index=torch.zeros(4, dtype=torch.long)),
            "no negative pairs",
        ),
        (lambda u, v: ContrastiveLoss("moco"), "kind must be one of"),
        (
            lambda u, v: ContrastiveLoss("simclr", vrns_weight=1.0),
            "exactly one of n_train and delta",
        ),
    ],
)
def test_bad_input(call, match):
    u, v = views(4)
    with pytest.raises(ValueError, match=match):
        call(u, v)


def test_tiny_temperature_and_zero_vectors_stay_finite():
    u, v = views(5)
    assert torch.isfinite(nt_xent_loss(u, v, 1e-3))
    z = torch.zeros(5, 4, dtype=D, requires_grad=True)
    nt_xent_loss(z, views(5, 4)[1], 0.5).backward()
    assert torch.isfinite(z.grad).all()


def test_pytorch_metric_learning_agreement():
    pml_losses = pytest.importorskip("pytorch_metric_learning.losses")
    u, v = views(6)
    ref = pml_losses.NTXentLoss(temperature=0.07)(
        torch.cat([u, v]).float(), torch.arange(6).repeat(2)
    )
    torch.testing.assert_close(nt_xent_loss(u.float(), v.float(), 0.07), ref, atol=1e-6, rtol=1e-6)
