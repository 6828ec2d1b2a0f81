"""Issue 49: mixed input forms (tensors, datasets with plain int labels) are converted before any
stage changes the model, and labels read from a ``targets`` attribute go through
``target_transform`` as the dataset's own items do."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from icml25.knowledge_swap import KnowledgeSwapper, inject_lora
from icml25.knowledge_swap.swap import _labels
from icml25.lora import mark_only_lora_trainable


class MLP(nn.Module):
    def __init__(self, n_out=6):
        super().__init__()
        self.fc1, self.head = nn.Linear(4, 16), nn.Linear(16, n_out)

    def forward(self, x):
        return self.head(F.relu(self.fc1(x)))


class VisionLike(Dataset):
    """What torchvision's datasets return: a tensor input and a plain Python int label, with the
    labels in a ``targets`` list and an optional ``target_transform``."""

    def __init__(self, x, y, target_transform=None):
        self.data, self.targets = x, [int(v) for v in y]
        self.target_transform = target_transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        y = self.targets[i]
        if self.target_transform is not None:
            y = self.target_transform(y)
        return self.data[i], y


def _data(classes, n=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.tensor(classes).repeat(n // len(classes))
    return torch.randn(len(y), 4, generator=g) + y[:, None] * 0.3, y


def _swapper():
    torch.manual_seed(0)
    m = MLP()
    inject_lora(m, ["fc1"], r=2, alpha=2)
    mark_only_lora_trainable(m)
    return m, KnowledgeSwapper(m, epochs_per_stage=1, batch_size=8, lr=1e-2)


def test_tensor_retain_with_int_label_learn_dataset_trains_every_stage():
    m, sw = _swapper()
    hist = sw.fit(
        retain=_data([2, 3]), forget=_data([0, 1], seed=1), learn=VisionLike(*_data([4, 5], 2))
    )
    stages = {s["stage"] for s in hist.steps}
    assert stages == {"learn", "forget"}
    # the forget stage drew merged retain + learn batches: both kinds of labels reached it
    assert all(torch.isfinite(torch.tensor(s["total"])) for s in hist.steps)


def test_unusable_learn_items_are_refused_before_the_model_changes():
    class Bad(VisionLike):
        def __getitem__(self, i):
            return self.data[i], "cat"  # a string label

    m, sw = _swapper()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    try:
        sw.fit(retain=_data([2, 3]), forget=_data([0, 1], seed=1), learn=Bad(*_data([4, 5], 2)))
    except (TypeError, ValueError) as e:
        assert "learn" in str(e)
    else:
        raise AssertionError("a string label was accepted")
    after = m.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert sw.history.steps == []


def test_targets_attribute_goes_through_target_transform():
    x, y = _data([0, 1])
    ds = VisionLike(x, y, target_transform=lambda c: c + 4)
    assert _labels(ds, "learn") == {4, 5}
    assert {int(ds[i][1]) for i in range(len(ds))} == {4, 5}


def test_target_transform_labels_are_the_ones_checked_for_overlap():
    # forget classes {0, 1}; the learn set stores 0, 1 but its transform makes them 4, 5: no overlap
    m, sw = _swapper()
    learn = VisionLike(*_data([0, 1], seed=2), target_transform=lambda c: c + 4)
    hist = sw.fit(retain=_data([2, 3]), forget=_data([0, 1], seed=1), learn=learn)
    assert {s["stage"] for s in hist.steps} == {"learn", "forget"}
