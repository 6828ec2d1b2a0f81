"""Knowledge swapping as real users meet it: BatchNorm backbones, datasets other than
TensorDataset, dict batches, bad labels and inputs, LoRA injected twice, DataLoader settings,
h, whole-model merge/unload/save, class splits and the unlearning metrics."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

from icml25.knowledge_swap import (
    KnowledgeSwapper,
    inject_lora,
    membership_inference,
    relearn_time,
    split_by_class,
)
from icml25.knowledge_swap.metrics import accuracy_on
from icml25.knowledge_swap.swap import frozen_norm_layers
from icml25.lora import (
    LoRALinear,
    load_lora,
    lora_layers,
    lora_state_dict,
    mark_only_lora_trainable,
    merge_lora,
    save_lora,
    unload_lora,
    unmerge_lora,
)


class BNNet(nn.Module):
    """conv-BN-relu x2, pool, linear head: the backbone of a typical image classifier."""

    def __init__(self, n_out=6):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 8)
        self.head = nn.Linear(8, n_out)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(F.relu(self.fc(x.mean((2, 3)))))


class MLP(nn.Module):
    def __init__(self, n_out=6):
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(4, 16), nn.Linear(16, 16), nn.Linear(16, n_out)

    def forward(self, x):
        return self.head(F.relu(self.fc2(F.relu(self.fc1(x)))))


def images(seed=0, n=72):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 6, 6, generator=g)
    y = torch.arange(n) % 6
    x = x + y[:, None, None, None] * 0.5  # classes differ in brightness: BN statistics see it
    return x, y


def vectors(seed=0, n=90):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 6
    x = torch.randn(n, 4, generator=g) + F.one_hot(y % 4, 4).float() * 2
    return x, y


def pick(x, y, classes):
    m = torch.isin(y, torch.tensor(classes))
    return x[m], y[m]


def lora_model(net, names):
    inject_lora(net, names, r=2, alpha=2.0, init_a=math.sqrt(5))
    mark_only_lora_trainable(net)
    return net


def buffers(net):
    return {n: b.detach().clone() for n, b in net.named_buffers()}


@pytest.mark.parametrize("norm_eval", [True, False])
def test_frozen_batchnorm_statistics_do_not_drift_during_fit(norm_eval):
    x, y = images()
    torch.manual_seed(0)
    net = BNNet()
    net.train()
    for _ in range(3):  # pretraining statistics that the swap batches would move
        net(torch.randn(32, 1, 6, 6))
    net.eval()
    lora_model(net, ["conv1", "conv2", "fc"])
    assert len(frozen_norm_layers(net)) == 2
    before = buffers(net)
    sw = KnowledgeSwapper(
        net,
        lr=1e-8,
        min_lr=0.0,
        epochs_per_stage=1,
        steps_per_epoch=4,
        batch_size=16,
        norm_eval=norm_eval,
    )
    sw.fit(pick(x, y, [0, 1, 2]), pick(x, y, [3]), pick(x, y, [4, 5]))
    same = all(torch.equal(b, before[n]) for n, b in net.named_buffers())
    assert same == norm_eval  # switchable: norm_eval=False drifts (train mode), as before
    assert not net.training


class PlainDataset(Dataset):
    """A user's Dataset with no targets attribute."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


class RawLabels(PlainDataset):
    """Items carry the label tensor as stored (a float label stays a float)."""

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class TargetsDataset(PlainDataset):
    """torchvision style: a ``targets`` list and ``class_to_idx``."""

    def __init__(self, x, y, names):
        super().__init__(x, y)
        self.targets = y.tolist()
        self.classes = list(names)
        self.class_to_idx = {c: i for i, c in enumerate(names)}


class DictDataset(PlainDataset):
    """Hugging Face style items."""

    def __getitem__(self, i):
        return {"pixel_values": self.x[i], "labels": int(self.y[i])}


def swapper(net=None, **kw):
    net = net or lora_model(MLP(), ["fc1", "fc2"])
    return KnowledgeSwapper(net, epochs_per_stage=1, steps_per_epoch=2, batch_size=8, **kw)


def test_class_overlap_is_caught_on_subsets_and_targets_datasets_and_warned_otherwise():
    x, y = vectors()
    full = TensorDataset(x, y)
    keep = torch.nonzero(y < 3).squeeze(1).tolist()
    overlap = torch.nonzero(y == 2).squeeze(1).tolist()
    with pytest.raises(ValueError, match=r"classes \[2\].*disjoint"):
        swapper().fit(Subset(full, keep), Subset(full, overlap))
    td = TargetsDataset(x, y, "abcdef")
    with pytest.raises(ValueError, match=r"classes \[2\].*disjoint"):
        swapper().fit(Subset(td, keep), Subset(td, overlap))
    with pytest.warns(UserWarning, match="checked for overlap on the labels seen batch by batch"):
        swapper().fit(PlainDataset(*pick(x, y, [0, 1, 2])), PlainDataset(*pick(x, y, [3])))


def test_learn_labels_are_checked_beyond_the_first_batch_and_floats_never_truncated():
    x, y = vectors(n=400)
    xl, yl = pick(x, y, [4, 5])
    yl = yl.clone()
    yl[-1] = 9  # one bad label far past the first 256 samples
    with pytest.raises(ValueError, match="learn label 9 is outside the model's 6 outputs"):
        swapper().fit(pick(x, y, [0, 1, 2]), pick(x, y, [3]), (xl, yl))
    xr, yr = pick(x, y, [0, 1, 2])
    with pytest.raises(ValueError, match=r"integer class indices, got the value 0\.5"):
        swapper().fit((xr, yr.double() + 0.5), pick(x, y, [3]))
    # integral floats are class indices
    swapper().fit((xr, yr.double()), pick(x, y, [3]))
    # a user Dataset whose labels are only seen batch by batch
    bad = PlainDataset(xl, torch.where(yl == 9, 7, yl))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="label 7, outside the model's 6 outputs"):
            KnowledgeSwapper(
                lora_model(MLP(), ["fc1"]), epochs_per_stage=1, batch_size=len(xl)
            ).fit(PlainDataset(xr, yr), None, bad)


def test_dict_batches_train_and_evaluate():
    x, y = vectors()
    sets = [DictDataset(*pick(x, y, c)) for c in ([0, 1, 2], [3], [4, 5])]
    sw = swapper()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no readable targets: the overlap check warns
        sw.fit(*sets)
    res = sw.evaluate(*sets)
    assert all(0 <= res[k] <= 100 for k in ("acc_r", "acc_f", "acc_l"))
    assert math.isfinite(res["h"])


def test_empty_forget_set_falls_back_to_learning_only():
    x, y = vectors()
    xf, yf = pick(x, y, [3])
    sw = swapper()
    with pytest.warns(UserWarning, match="forget data is empty"):
        sw.fit(pick(x, y, [0, 1, 2]), (xf[:0], yf[:0]), pick(x, y, [4, 5]))
    assert [s for s, _ in sw.history.stage_norms] == ["learn"]


def test_nan_inputs_are_named_as_such():
    x, y = vectors()
    xr, yr = pick(x, y, [0, 1, 2])
    xr = xr.clone()
    xr[3, 1] = float("nan")
    with pytest.raises(ValueError, match="retain data holds NaN or inf inputs"):
        KnowledgeSwapper(lora_model(MLP(), ["fc1"]), epochs_per_stage=1, batch_size=len(xr)).fit(
            (xr, yr), pick(x, y, [3])
        )


def test_injecting_lora_twice_never_nests():
    net = MLP()
    inject_lora(net, lambda n, m: n == "fc1", r=2)
    linears = lambda n, m: isinstance(m, nn.Linear) and n != "head"  # noqa: E731
    # fc1's base is an nn.Linear too: only fc2 is new, nothing is wrapped twice
    assert set(inject_lora(net, linears, r=2)) == {"fc2"}
    assert set(lora_layers(net)) == {"fc1", "fc2"}
    assert not any(isinstance(m.base, LoRALinear) for m in lora_layers(net).values())
    with pytest.raises(ValueError, match="already carry LoRA"):
        inject_lora(net, linears, r=2)
    with pytest.raises(ValueError, match="already carry LoRA"):
        inject_lora(net, ["fc1", "fc2"], r=2)


def test_the_users_dataloader_settings_survive_the_merged_forget_stage():
    x, y = vectors()
    seen = []

    def collate(items):
        seen.append(len(items))
        return torch.stack([a for a, _ in items]), torch.tensor([b for _, b in items])

    retain = DataLoader(TensorDataset(*pick(x, y, [0, 1, 2])), batch_size=5, collate_fn=collate)
    events = []
    sw = swapper(callbacks=[events.append])
    sw.fit(retain, pick(x, y, [3]), pick(x, y, [4, 5]))
    forget_stage = [e for e in events if e.get("stage") == "forget" and e["kind"] == "step"]
    assert forget_stage and all(len(e["labels"]["retain"]) == 5 for e in forget_stage)
    learned = torch.cat([e["labels"]["retain"] for e in forget_stage])
    assert len(seen) >= 4 and set(seen) == {5}  # the user's collate_fn ran in both stages
    assert learned.numel() == 10


def test_h_uses_the_forget_accuracy_measured_before_training():
    x, y = vectors()
    torch.manual_seed(1)
    net = lora_model(MLP(), ["fc1", "fc2"])
    forget = pick(x, y, [3])
    before = accuracy_on(net, forget)
    sw = swapper(net)
    sw.fit(pick(x, y, [0, 1, 2]), forget, pick(x, y, [4, 5]))
    assert sw.acc_f_before == before
    res = sw.evaluate(pick(x, y, [0, 1, 2]), forget, pick(x, y, [4, 5]))
    drop = before - res["acc_f"]
    assert res["h"] == pytest.approx(2 * drop * res["acc_r"] / (drop + res["acc_r"]))


def trained_lora_mlp(seed=0):
    torch.manual_seed(seed)
    net = lora_model(MLP(), ["fc1", "fc2"])
    for m in lora_layers(net).values():
        nn.init.normal_(m.lora_B, std=0.5)
    return net


def test_merge_unload_save_and_load_of_the_whole_model(tmp_path):
    x = torch.randn(7, 4)
    net = trained_lora_mlp()
    want = net(x).detach()
    assert merge_lora(net) == 2
    assert torch.allclose(net(x), want, atol=1e-5)
    assert unmerge_lora(net) == 2 and torch.allclose(net(x), want, atol=1e-5)
    path = tmp_path / "adapter.pt"
    save_lora(net, path)
    # into a fresh copy of the pretrained model: LoRA injected from the file
    torch.manual_seed(0)
    fresh = MLP()
    fresh.load_state_dict(
        {k: v for k, v in net.state_dict().items() if "lora_" not in k}
        | {k.replace(".base", ""): v for k, v in net.state_dict().items() if ".base." in k},
        strict=False,
    )
    load_lora(fresh, path)
    assert torch.allclose(fresh(x), want, atol=1e-5)
    assert set(lora_state_dict(fresh)) == set(lora_state_dict(net))
    plain = unload_lora(net)
    assert isinstance(plain.fc1, nn.Linear) and not lora_layers(plain)
    assert torch.allclose(plain(x), want, atol=1e-5)
    dropped = unload_lora(trained_lora_mlp(), merge=False)
    torch.manual_seed(0)
    assert not torch.allclose(dropped(x), want, atol=1e-3)
    with pytest.raises(ValueError, match="no LoRA layers"):
        unload_lora(MLP())
    torch.save({"x": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not an icml25 LoRA checkpoint"):
        load_lora(MLP(), tmp_path / "other.pt")


def test_peft_models_save_and_unload_through_peft(tmp_path):
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    model = peft.get_peft_model(MLP(), peft.LoraConfig(target_modules=["fc1"], r=2))
    save_lora(model, tmp_path / "peft")
    assert (tmp_path / "peft" / "adapter_config.json").is_file()
    base = unload_lora(model)
    assert isinstance(base.fc1, nn.Linear)


def test_split_by_class_on_a_torchvision_style_dataset():
    x, y = vectors()
    ds = TargetsDataset(x, y, ["cat", "dog", "car", "ship", "frog", "bird"])
    s = split_by_class(ds, forget=["cat", 1], learn=["frog", "bird"])
    assert sorted({int(ds.y[i]) for i in s["retain"].indices}) == [2, 3]
    assert sorted({int(ds.y[i]) for i in s["forget"].indices}) == [0, 1]
    assert len(s["learn"]) == int(((y == 4) | (y == 5)).sum())
    swapper().fit(s["retain"], s["forget"], s["learn"])  # Subsets: labels read, no warning
    with pytest.raises(ValueError, match="unknown class 'horse'"):
        split_by_class(ds, forget=["horse"])
    with pytest.raises(ValueError, match="both the forget and the learn"):
        split_by_class(ds, forget=[0], learn=[0])
    with pytest.raises(ValueError, match=r"class\(es\) \[9\] do not occur"):
        split_by_class(ds, forget=[9])
    with pytest.warns(UserWarning, match="reading every item"):
        s2 = split_by_class(PlainDataset(x, y), forget=[0])
    assert len(s2["forget"]) == int((y == 0).sum())


def test_membership_inference_and_relearn_time():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(240, 4, generator=g)
    y = torch.randint(0, 6, (240,), generator=g)  # random labels: only memorisation fits them
    torch.manual_seed(0)
    net = MLP()
    train = (x[:120], y[:120])
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(600):
        opt.zero_grad()
        F.cross_entropy(net(train[0]), train[1]).backward()
        opt.step()
    members, forget, test = (x[:80], y[:80]), (x[80:120], y[80:120]), (x[120:], y[120:])
    mia = membership_inference(net, forget, members, test)
    assert mia["attack_acc"] > 80  # a memorising model leaks membership
    assert mia["forget_member_rate"] > 80 and mia["mia_efficacy"] < 20
    before = {k: v.clone() for k, v in net.state_dict().items()}
    fast = relearn_time(net, forget, target_acc=90, max_steps=50)
    assert fast["steps"] == 0  # still known: nothing to relearn
    fresh = relearn_time(MLP(), forget, target_acc=90, lr=1e-2, max_steps=400, params="all")
    assert 0 < fresh["steps"] < math.inf and fresh["final_acc"] >= 90
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())
    with pytest.raises(ValueError, match="target_acc"):
        relearn_time(net, forget, target_acc=0)


# -- the second new-user review ------------------------------------------------------------------


def test_batchnorm_stays_frozen_when_only_inject_lora_was_called():
    """The docs' recipe without mark_only_lora_trainable: BN parameters keep requires_grad=True,
    but the swapper never trains them, so their statistics must not drift either."""
    x, y = images()
    torch.manual_seed(0)
    net = BNNet()
    inject_lora(net, ["conv1", "conv2", "fc"], r=2, alpha=2.0)
    assert net.bn1.weight.requires_grad  # not frozen by requires_grad
    before = buffers(net)
    KnowledgeSwapper(
        net, lr=1e-8, min_lr=0.0, epochs_per_stage=1, steps_per_epoch=3, batch_size=16
    ).fit(pick(x, y, [0, 1, 2]), pick(x, y, [3]))
    assert all(torch.equal(b, before[n]) for n, b in net.named_buffers())


def test_the_merged_forget_stage_data_is_shuffled_even_from_an_ordered_loader():
    x, y = vectors(n=240)
    retain = DataLoader(TensorDataset(*pick(x, y, [0, 1, 2])), batch_size=8)  # no shuffle
    events = []
    sw = swapper(callbacks=[events.append])
    sw.steps_per_epoch = 6
    sw.fit(retain, pick(x, y, [3]), pick(x, y, [4, 5]))
    merged = torch.cat(
        [
            e["labels"]["retain"]
            for e in events
            if e.get("stage") == "forget" and e["kind"] == "step"
        ]
    )
    assert bool(torch.isin(merged, torch.tensor([4, 5])).any())  # learned classes are protected
    from torch.utils.data import SubsetRandomSampler

    custom = DataLoader(
        TensorDataset(*pick(x, y, [0, 1, 2])),
        batch_size=8,
        sampler=SubsetRandomSampler(list(range(10))),
    )
    with pytest.warns(UserWarning, match="does not carry over"):
        swapper().fit(custom, pick(x, y, [3]), pick(x, y, [4, 5]))


def test_overlap_in_unreadable_datasets_is_caught_batch_by_batch():
    x, y = vectors()
    learn = PlainDataset(*pick(x, y, [3, 4]))  # 3 is also forgotten
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(
            ValueError, match=r"classes \[3\] occur in both the forget and the learn"
        ):
            KnowledgeSwapper(lora_model(MLP(), ["fc1"]), epochs_per_stage=1, batch_size=64).fit(
                PlainDataset(*pick(x, y, [0, 1, 2])), PlainDataset(*pick(x, y, [3])), learn
            )


def test_review_errors_and_conveniences():
    x, y = vectors()
    sw = swapper()
    sw.fit(pick(x, y, [0, 1, 2]), pick(x, y, [3]))
    xf, yf = pick(x, y, [3])
    with pytest.raises(ValueError, match="forget data holds NaN or inf"):
        accuracy_on(sw.model, (torch.full_like(xf, float("nan")), yf), name="forget")
    with pytest.raises(ValueError, match="NaN or inf"):
        sw.evaluate(pick(x, y, [0, 1, 2]), (torch.full_like(xf, float("nan")), yf), None)
    assert set(inject_lora(MLP(), "fc1")) == {"fc1"}  # one name as a string
    with pytest.raises(TypeError, match="must be a Dataset"):
        swapper().fit([x, y], pick(x, y, [3]))
    with pytest.raises(ValueError, match=r"class indices \(N,\), got shape"):
        swapper().fit((x, F.one_hot(y, 6)), pick(x, y, [3]))
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        KnowledgeSwapper("model")
    with pytest.raises(ValueError, match="alpha must be a finite number >= 0"):
        swapper(alpha=-1)

    class DictOut(MLP):
        def forward(self, x):
            return {"logits": super().forward(x)}

    swapper(lora_model(DictOut(), ["fc1"])).fit(pick(x, y, [0, 1, 2]), pick(x, y, [3]))
    parts = split_by_class((x, y), forget=[0])  # (x, y) tensors, as fit takes them
    assert len(parts["forget"]) == int((y == 0).sum())
    ds = TargetsDataset(x, y, ["zebra", "ant", "cow", "dog", "eel", "fox"])
    with pytest.raises(ValueError, match=r"\['zebra', 'ant', 'cow'"):  # index order
        split_by_class(ds, forget=["horse"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="forget labels must be integer class indices"):
            swapper().fit(PlainDataset(*pick(x, y, [0, 1, 2])), RawLabels(xf, yf.double() + 0.5))


def test_membership_inference_warns_when_the_attack_is_at_chance():
    x = torch.randn(200, 4)
    y = torch.randint(0, 6, (200,))
    net = MLP()  # untrained: members and non-members look alike
    with pytest.warns(UserWarning, match="not informative"):
        membership_inference(net, (x[:40], y[:40]), (x[40:120], y[40:120]), (x[120:], y[120:]))
