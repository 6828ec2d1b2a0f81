"""The LoRA re-exports, the swap losses and their wiring (paper 14)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from icml25.knowledge_swap import KnowledgeSwapper, expand_head, inject_lora
from icml25.knowledge_swap.lora import lora_groups
from icml25.knowledge_swap.losses import bounded_forget_loss, group_sparse_loss, swap_losses
from icml25.lora import mark_only_lora_trainable

D = torch.float64


def test_the_lora_layers_are_icml25_lora_re_exported():
    """The README's ``icml25.knowledge_swap.inject_lora`` is the shared module's own function;
    ``icml25.knowledge_swap.lora`` re-exports every name of the shared module."""
    import icml25.knowledge_swap as ks
    import icml25.knowledge_swap.lora as ks_lora
    import icml25.lora as shared

    for name in shared.__all__:
        assert getattr(ks_lora, name) is getattr(shared, name), name
    assert ks.inject_lora is shared.inject_lora
    net = nn.Sequential()
    net.fc1, net.fc2 = nn.Linear(4, 4), nn.Linear(4, 2)
    assert set(ks.inject_lora(net, ["fc1", "fc2"])) == {"fc1", "fc2"}


def test_bounded_forget_loss_below_and_above_the_bound():
    torch.manual_seed(2)
    logits = torch.randn(4, 5, dtype=D, requires_grad=True)
    target = torch.tensor([0, 1, 2, 3])
    ce = F.cross_entropy(logits, target).detach()
    below = bounded_forget_loss(logits, target, float(ce) + 1.0)
    assert float(below) == pytest.approx(1.0, abs=1e-12)
    (g,) = torch.autograd.grad(below, logits)
    # descending the loss raises the cross-entropy (gradient ascent on the forget set)
    step = logits.detach() - 1e-3 * g
    assert float(F.cross_entropy(step, target)) > float(ce)
    above = bounded_forget_loss(logits, target, float(ce) - 0.5)
    assert float(above) == 0.0
    (g0,) = torch.autograd.grad(above, logits)
    assert torch.equal(g0, torch.zeros_like(g0))
    # finite differences of bnd - CE
    assert torch.autograd.gradcheck(
        lambda z: bounded_forget_loss(z, target, 50.0),
        (logits.detach().clone().requires_grad_(True),),
    )
    with pytest.raises(ValueError, match="bnd"):
        bounded_forget_loss(logits, target, 0.0)


def test_group_sparse_loss_formula_and_zero_gradient():
    g1 = [torch.tensor([[3.0, 0.0]], dtype=D, requires_grad=True), torch.tensor([4.0], dtype=D)]
    g2 = [torch.zeros(2, 2, dtype=D, requires_grad=True)]
    val = group_sparse_loss([g1, g2])
    assert float(val) == pytest.approx(5.0 + math.sqrt(1e-12), abs=1e-12)
    val.backward()
    assert torch.isfinite(g2[0].grad).all() and torch.equal(g2[0].grad, torch.zeros(2, 2, dtype=D))
    assert float(group_sparse_loss([])) == 0.0


def test_forget_stage_is_gs_lora_loss():
    torch.manual_seed(3)
    lr_, lf = torch.randn(6, 5), torch.randn(6, 5)
    yr, yf = torch.randint(0, 5, (6,)), torch.randint(0, 5, (6,))
    l_gs = torch.tensor(2.5)
    got = swap_losses("forget", retain=(lr_, yr), forget=(lf, yf), learn=None, l_gs=l_gs)["total"]
    want = F.cross_entropy(lr_, yr) + 0.2 * torch.relu(105 - F.cross_entropy(lf, yf)) + 0.005 * 2.5
    assert float(got) == pytest.approx(float(want), rel=1e-6)
    learn = swap_losses("learn", retain=(lr_, yr), forget=None, learn=(lf, yf), l_gs=l_gs)["total"]
    want_l = F.cross_entropy(lf, yf) + 0.2 * F.cross_entropy(lr_, yr) + 0.005 * 2.5
    assert float(learn) == pytest.approx(float(want_l), rel=1e-6)


class TinyNet(nn.Module):
    def __init__(self, n_out=6):
        super().__init__()
        self.blocks = nn.ModuleList(
            [nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4)) for _ in range(2)]
        )
        self.head = nn.Linear(4, n_out)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def tiny_data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(60, 4, generator=g)
    y = torch.arange(60) % 6
    pick = lambda cls: (x[torch.isin(y, torch.tensor(cls))], y[torch.isin(y, torch.tensor(cls))])  # noqa: E731
    return pick([0, 1, 2]), pick([3]), pick([4, 5])


def test_strategy_wiring_with_a_recording_callback():
    retain, forget, learn = tiny_data()
    for strategy in ("learn_then_forget", "forget_then_learn"):
        torch.manual_seed(0)
        net = TinyNet()
        inject_lora(net, lambda n, m: n.startswith("blocks"), r=2, alpha=2.0, init_a=math.sqrt(5))
        mark_only_lora_trainable(net)
        events = []
        sw = KnowledgeSwapper(
            net,
            strategy=strategy,
            epochs_per_stage=2,
            steps_per_epoch=3,
            batch_size=8,
            callbacks=[events.append],
        )
        assert len(sw.groups) == 2  # one group per block
        base = {n: p.detach().clone() for n, p in net.named_parameters() if "lora_" not in n}
        sw.fit(retain, forget, learn)
        # LoRA leaves every base weight (and the head) untouched
        assert all(torch.equal(p, base[n]) for n, p in net.named_parameters() if "lora_" not in n)
        steps = [e for e in events if e["kind"] == "step"]
        stages = [e["stage"] for e in steps]
        first, second = (
            ("learn", "forget") if strategy == "learn_then_forget" else ("forget", "learn")
        )
        assert stages == [first] * 6 + [second] * 6
        forget_retain = torch.cat([e["labels"]["retain"] for e in steps if e["stage"] == "forget"])
        has_learn_classes = bool(torch.isin(forget_retain, torch.tensor([4, 5])).any())
        assert has_learn_classes == (strategy == "learn_then_forget")
        assert all(e["optimizer"] is sw.optimizer for e in steps)  # one optimiser throughout
        assert len(sw.optimizer.state) > 0
        lrs = [e["lr"] for e in steps]
        assert lrs[0] == lrs[6] == pytest.approx(1e-2)  # the cosine restarts per stage
        assert lrs[5] < lrs[0]
        assert [s for s, _ in sw.history.stage_norms] == [first, second]


def test_head_expansion_and_frozen_head():
    torch.manual_seed(4)
    head = nn.Linear(4, 3)
    new = expand_head(head, 2)
    x = torch.randn(5, 4)
    assert torch.equal(new.weight[:3], head.weight) and torch.equal(new.bias[:3], head.bias)
    assert torch.allclose(
        new(x)[:, :3], head(x), atol=1e-6, rtol=0
    )  # same rows: float rounding only
    assert torch.equal(new.bias[3:], torch.zeros(2))
    assert float(new.weight[3:].abs().max()) <= math.sqrt(6 / (4 + 2))
    net = TinyNet(n_out=4)
    net.head = expand_head(net.head, 2)
    inject_lora(net, lambda n, m: n.startswith("blocks"), r=2)
    mark_only_lora_trainable(net)
    before = net.head.weight.detach().clone()
    KnowledgeSwapper(net, epochs_per_stage=1, steps_per_epoch=2, batch_size=8).fit(*tiny_data())
    assert torch.equal(net.head.weight, before)  # train_head=False: the head never moves
    # train_head=True: only the new rows move
    net2 = TinyNet(n_out=6)
    inject_lora(net2, lambda n, m: n.startswith("blocks"), r=2)
    mark_only_lora_trainable(net2)
    old = net2.head.weight.detach().clone()
    KnowledgeSwapper(
        net2,
        epochs_per_stage=1,
        steps_per_epoch=3,
        batch_size=8,
        train_head=True,
        head=net2.head,
        n_old=4,
    ).fit(*tiny_data())
    assert torch.equal(net2.head.weight[:4], old[:4]) and not torch.equal(
        net2.head.weight[4:], old[4:]
    )


def test_bad_inputs():
    retain, forget, learn = tiny_data()
    net = TinyNet()
    with pytest.raises(ValueError, match="no trainable LoRA"):
        KnowledgeSwapper(net)
    inject_lora(net, lambda n, m: n.startswith("blocks"), r=2)
    with pytest.raises(ValueError, match="strategy"):
        KnowledgeSwapper(net, strategy="forget_only")
    with pytest.raises(ValueError, match="bnd"):
        KnowledgeSwapper(net, bnd=0.0)
    sw = KnowledgeSwapper(net, epochs_per_stage=1, steps_per_epoch=1, batch_size=8)
    with pytest.raises(ValueError, match="disjoint"):
        sw.fit(retain, (retain[0][:3], retain[1][:3]), learn)
    with pytest.raises(ValueError, match="nothing to swap"):
        sw.fit(retain)
    with pytest.raises(ValueError, match="expand_head"):
        sw.fit(retain, forget, (learn[0], learn[1] + 10))
    with pytest.raises(ValueError, match="no nn.Linear"):
        inject_lora(TinyNet(), ["does.not.exist"])
    with pytest.raises(ValueError, match="by must"):
        lora_groups(net, by="layerwise")
    boom = KnowledgeSwapper(
        net, lr=1e30, optimizer="sgd", epochs_per_stage=3, steps_per_epoch=5, batch_size=8
    )
    with pytest.raises(FloatingPointError, match="step"):
        boom.fit(retain, forget, learn)


def test_forgetting_only_and_learning_only_runs():
    retain, forget, learn = tiny_data()
    for f, lrn, stages in ((forget, None, ["forget"]), (None, learn, ["learn"])):
        net = TinyNet()
        inject_lora(net, lambda n, m: n.startswith("blocks"), r=2)
        sw = KnowledgeSwapper(net, epochs_per_stage=1, steps_per_epoch=2, batch_size=8)
        sw.fit(retain, f, lrn)
        assert [s for s, _ in sw.history.stage_norms] == stages


def test_peft_lora_on_a_tiny_vit_is_grouped_by_block_and_trains():
    pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    from peft import LoraConfig, get_peft_model

    cfg = transformers.ViTConfig(
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        image_size=8,
        patch_size=4,
        num_channels=1,
        num_labels=6,
    )
    torch.manual_seed(0)
    vit = transformers.ViTForImageClassification(cfg)
    model = get_peft_model(
        vit, LoraConfig(target_modules=["mlp.fc1", "mlp.fc2"], r=2, lora_alpha=1)
    )
    groups = lora_groups(model)
    assert len(groups) == 2 and all(len(g) == 4 for g in groups)  # fc1, fc2 (A, B) per block
    g = torch.Generator().manual_seed(0)
    x = torch.randn(36, 1, 8, 8, generator=g)
    y = torch.arange(36) % 6
    sel = lambda c: (x[torch.isin(y, torch.tensor(c))], y[torch.isin(y, torch.tensor(c))])  # noqa: E731
    before = [p.detach().clone() for grp in groups for p in grp]
    sw = KnowledgeSwapper(model, epochs_per_stage=1, steps_per_epoch=2, batch_size=6)
    sw.fit(sel([0, 1, 2]), sel([3]), sel([4, 5]))
    after = [p.detach() for grp in groups for p in grp]
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
    assert set(sw.evaluate(sel([0, 1, 2]), sel([3]), sel([4, 5]))) == {
        "acc_r",
        "acc_f",
        "acc_l",
        "h",
    }
