"""The losses as multi-GPU and mixed-precision users run them: two gloo processes must give the
single-process loss and gradients on the concatenated batch; under bf16 autocast the bodies
still run in float32; SigLIP's temperature and bias reach the loss."""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from icml25.contrastive import ContrastiveLoss, gather_with_grad, global_index, vrns_loss
from icml25.contrastive.losses import dcl_loss, dhel_loss, infonce_loss, nt_xent_loss, sigmoid_loss

LOSSES = {
    "infonce": lambda u, v, **kw: infonce_loss(u, v, 0.1, **kw),
    "simclr": lambda u, v, **kw: nt_xent_loss(u, v, 0.2, **kw),
    "dcl": lambda u, v, **kw: dcl_loss(u, v, 0.1, **kw),
    "dhel": lambda u, v, **kw: dhel_loss(u, v, 0.1, **kw),
    "vrns": lambda u, v, **kw: vrns_loss(u, v, n_train=50, **kw),
    "module": lambda u, v, **kw: ContrastiveLoss(
        "simclr", 0.2, vrns_weight=30, n_train=50, gather=kw.pop("gather", None)
    )(u, v, kw.get("index")),
}
WORLD, M, D = 2, 6, 5


def _data():
    g = torch.Generator().manual_seed(0)
    return torch.randn(WORLD * M, D, generator=g, dtype=torch.float64), torch.randn(
        WORLD * M, D, generator=g, dtype=torch.float64
    )


def _worker(rank: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        u_all, v_all = _data()
        res = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for name, fn in LOSSES.items():
                u = u_all[rank * M : (rank + 1) * M].clone().requires_grad_(True)
                v = v_all[rank * M : (rank + 1) * M].clone().requires_grad_(True)
                loss = fn(u, v, gather=gather_with_grad, index=global_index(M))
                loss.backward()
                res[name] = (loss.detach(), u.grad.clone(), v.grad.clone())
        res["_warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
        torch.save(res, f"{out}.{rank}")
        dist.barrier()  # both ranks done before teardown (a gloo teardown race aborted a rank)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks():
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{os.path.join(tmp, 'rendezvous')}"
        out = os.path.join(tmp, "res")
        mp.spawn(_worker, args=(init, out), nprocs=WORLD, join=True)
        return [torch.load(f"{out}.{r}") for r in range(WORLD)]


@pytest.mark.parametrize("name", list(LOSSES))
def test_two_gloo_ranks_equal_one_process_on_the_concatenated_batch(two_ranks, name):
    u_all, v_all = _data()
    u, v = u_all.clone().requires_grad_(True), v_all.clone().requires_grad_(True)
    loss = LOSSES[name](u, v)
    loss.backward()
    losses = torch.stack([two_ranks[r][name][0] for r in range(WORLD)])
    # DDP averages gradients over ranks: the global loss is the mean of the ranks' losses
    torch.testing.assert_close(losses.mean(), loss.detach())
    for r in range(WORLD):
        rows = slice(r * M, (r + 1) * M)
        torch.testing.assert_close(two_ranks[r][name][1] / WORLD, u.grad[rows])
        torch.testing.assert_close(two_ranks[r][name][2] / WORLD, v.grad[rows])


def test_gather_with_grad_emits_no_deprecation_warning(two_ranks):
    # issue 49: torch.distributed.nn.functional.all_gather warned (FutureWarning) on every call
    for r in range(WORLD):
        assert not [w for w in two_ranks[r]["_warnings"] if "Warning: " in w and "gather" in w]


def test_gathering_without_global_ids_is_refused():
    u, v = _data()
    with pytest.raises(ValueError, match="global instance ids"):
        nt_xent_loss(u, v, gather=lambda x: x)
    with pytest.raises(ValueError, match="global instance ids"):
        vrns_loss(u, v, n_train=10, gather=lambda x: x)
    assert torch.equal(global_index(4), torch.arange(4))  # no process group: rank 0


def test_bf16_autocast_keeps_the_bodies_in_float32():
    g = torch.Generator().manual_seed(1)
    # a shared direction makes the negatives' mean similarity about 0.8, so a delta of -2e-5
    # moves the loss by ~3e-5: visible in float32, lost in bf16's 8-bit mantissa
    u, v = torch.randn(64, 16, generator=g) + 2, torch.randn(64, 16, generator=g) + 2
    with torch.autocast("cpu", dtype=torch.bfloat16):
        a = vrns_loss(u @ torch.eye(16), v @ torch.eye(16), delta=-1 / 49999)
        b = vrns_loss(u @ torch.eye(16), v @ torch.eye(16), delta=0.0)
        nt = nt_xent_loss(u @ torch.eye(16), v @ torch.eye(16), 0.2)
    # the inputs arrive in bf16 (autocast matmul), the loss is float32 and sees the tiny delta
    assert a.dtype == torch.float32 and nt.dtype == torch.float32
    assert a.item() - b.item() == pytest.approx(2 * 2e-5 * 0.8, rel=0.3)
    ub, vb = (u @ torch.eye(16)).bfloat16().float(), (v @ torch.eye(16)).bfloat16().float()
    torch.testing.assert_close(a, vrns_loss(ub, vb, delta=-1 / 49999))
    torch.testing.assert_close(nt, nt_xent_loss(ub, vb, 0.2))


def test_siglip_temperature_and_bias_reach_the_loss_and_can_be_learned():
    g = torch.Generator().manual_seed(2)
    u, v = torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)
    torch.testing.assert_close(
        ContrastiveLoss("siglip", temperature=5.0, bias=-3.0)(u, v), sigmoid_loss(u, v, 5.0, -3.0)
    )
    assert ContrastiveLoss("siglip")(u, v).item() == pytest.approx(sigmoid_loss(u, v).item())
    t = torch.tensor(4.0, requires_grad=True)
    b = torch.tensor(-2.0, requires_grad=True)
    ContrastiveLoss("siglip", temperature=t, bias=b)(u, v).backward()
    assert t.grad is not None and b.grad is not None and t.grad.abs() > 0
    for bad in (-1.0, 0.0, float("nan")):
        with pytest.raises(ValueError, match="temperature"):
            ContrastiveLoss("siglip", temperature=bad)
    with pytest.raises(ValueError, match="bias is SigLIP's"):
        ContrastiveLoss("simclr", bias=-10.0)
    tau = torch.tensor(0.2, requires_grad=True)  # a learnable InfoNCE temperature
    nt_xent_loss(u, v, tau).backward()
    assert tau.grad is not None


def test_numpy_integers_and_logged_components():
    g = torch.Generator().manual_seed(3)
    u, v = torch.randn(10, 6, generator=g), torch.randn(10, 6, generator=g)
    loss = ContrastiveLoss("simclr", 0.2, vrns_weight=30, n_train=np.int64(1000))
    loss(u, v)
    c = loss.last_components
    un, vn = torch.nn.functional.normalize(u, dim=-1), torch.nn.functional.normalize(v, dim=-1)
    S = un @ vn.T
    neg = S[~torch.eye(10, dtype=torch.bool)]
    assert c["pos_mean"] == pytest.approx(S.diagonal().mean().item(), abs=1e-6)
    assert c["neg_mean"] == pytest.approx(neg.mean().item(), abs=1e-6)
    assert c["neg_var"] == pytest.approx(neg.var(unbiased=False).item(), abs=1e-5)
    assert c["vrns"] == pytest.approx(vrns_loss(u, v, n_train=1000).item(), rel=1e-6)
    every3 = ContrastiveLoss("simclr", 0.2, log_every=3)
    every3(u, v)
    first = dict(every3.last_components)
    every3(u * 2 + 1, v)  # not logged
    assert every3.last_components == first
    with pytest.raises(ValueError, match="log_every"):
        ContrastiveLoss(log_every=0)


def _solo_learn_simclr(z1, z2, ids, t):
    """solo-learn's simclr_loss_func (one process): z = cat(views), positives = same index."""
    z = torch.nn.functional.normalize(torch.cat([z1, z2]), dim=-1)
    idx = torch.cat([ids, ids])
    sim = torch.exp(z @ z.T / t)
    pos_mask = (idx[:, None] == idx[None, :]).to(sim.dtype)
    pos_mask.fill_diagonal_(0)
    neg_mask = (idx[:, None] != idx[None, :]).to(sim.dtype)
    pos, neg = (sim * pos_mask).sum(1), (sim * neg_mask).sum(1)
    return -torch.log(pos / (pos + neg)).mean()


def test_positives_all_equals_solo_learn_with_class_labels_and_instance_with_ids():
    g = torch.Generator().manual_seed(4)
    u = torch.randn(12, 5, generator=g, dtype=torch.float64)
    v = torch.randn(12, 5, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 3, 4])
    ours = nt_xent_loss(u, v, 0.3, index=labels, positives="all")
    torch.testing.assert_close(ours, _solo_learn_simclr(u, v, labels, 0.3))
    ids = torch.arange(12)  # instance ids: both readings agree with solo-learn
    torch.testing.assert_close(
        nt_xent_loss(u, v, 0.3, index=ids, positives="all"), _solo_learn_simclr(u, v, ids, 0.3)
    )
    torch.testing.assert_close(nt_xent_loss(u, v, 0.3), _solo_learn_simclr(u, v, ids, 0.3))
    # with class labels the paper's instance reading differs: same-class rows are not positives
    assert not torch.allclose(nt_xent_loss(u, v, 0.3, index=labels), ours)
    with pytest.raises(ValueError, match="positives must be"):
        nt_xent_loss(u, v, 0.3, positives="some")


def test_augment_follows_the_input_and_trainer_takes_epochs_and_device():
    from icml25.contrastive.augment import digits_augment
    from icml25.contrastive.train import DigitsSimCLR, train_simclr

    x = torch.rand(6, 1, 8, 8)
    a32 = digits_augment(x, torch.Generator().manual_seed(0))
    a64 = digits_augment(x.double(), torch.Generator().manual_seed(0))
    assert a64.dtype == torch.float64 and a32.dtype == torch.float32
    torch.testing.assert_close(a64.float(), a32)
    with pytest.raises(TypeError, match="torch.Generator"):
        digits_augment(x, 0)
    model = DigitsSimCLR()
    hist = train_simclr(
        model,
        torch.rand(20, 1, 8, 8),
        digits_augment,
        loss=ContrastiveLoss("simclr", 0.5),
        batch_size=8,
        epochs=2,
        device="cpu",
        progress=False,
    )
    assert len(hist) == 2 * (20 // 8)
    with pytest.raises(ValueError, match="exactly one of steps and epochs"):
        train_simclr(
            model,
            torch.rand(20, 1, 8, 8),
            digits_augment,
            loss=ContrastiveLoss(),
            batch_size=8,
            steps=2,
            epochs=1,
        )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_inputs_get_the_cpu_generators_augmentations_and_a_cuda_loss():
    from icml25.contrastive.augment import digits_augment

    x = torch.rand(6, 1, 8, 8)
    cpu = digits_augment(x, torch.Generator().manual_seed(0))
    gpu = digits_augment(x.cuda(), torch.Generator().manual_seed(0))
    assert gpu.is_cuda
    torch.testing.assert_close(gpu.cpu(), cpu)
    u, v = torch.randn(8, 4, device="cuda"), torch.randn(8, 4, device="cuda")
    loss = ContrastiveLoss("simclr", 0.2, vrns_weight=30, n_train=100)(u, v)
    assert loss.is_cuda
