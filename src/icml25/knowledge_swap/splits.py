"""The forget / retain / learn split of a labelled dataset by class (paper §4 setup: the forget
and learn classes are named; every other class is retained).

:func:`split_by_class` works on anything indexable with labels: torchvision's ``ImageFolder``,
``CIFAR10``/``CIFAR100`` (their ``targets`` and ``class_to_idx``), a ``TensorDataset``, a
``Subset``, a Hugging Face ``datasets.Dataset`` with a ``label`` column, or any ``Dataset`` whose
items are ``(input, label)`` (read item by item, slower). Classes may be given by index or by name.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Subset, TensorDataset

from icml25._validate import as_int, shown
from icml25.knowledge_swap._inputs import _int_labels, _targets, _unpack

__all__ = ["split_by_class"]


def _class_index(ds: Any, c: Any) -> int:
    if isinstance(c, str):
        mapping = getattr(ds, "class_to_idx", None)
        if mapping is None and isinstance(getattr(ds, "classes", None), (list, tuple)):
            mapping = {name: i for i, name in enumerate(ds.classes)}
        if mapping is None:
            features = getattr(ds, "features", None)  # Hugging Face ClassLabel
            names = getattr(getattr(features, "get", lambda k: None)("label"), "names", None)
            mapping = None if names is None else {name: i for i, name in enumerate(names)}
        if mapping is None:
            raise ValueError(
                f"class {c!r} is a name, but the dataset has no class_to_idx/classes to map it; "
                "pass class indices"
            )
        if c not in mapping:
            names = sorted(mapping, key=lambda k: mapping[k])  # in index order
            raise ValueError(f"unknown class {c!r}; the dataset's classes are {names}")
        return int(mapping[c])
    try:
        return as_int("a class", c, 0)
    except ValueError as exc:  # NotANumberError is a TypeError too: "a class must be ..."
        if isinstance(exc, TypeError):
            raise TypeError(f"a class must be an int index or a name, got {shown(c)}") from None
        raise


def _all_labels(ds: Any) -> torch.Tensor:
    t = _targets(ds)
    if t is not None:
        return _int_labels(t, "dataset")
    warnings.warn(
        f"{type(ds).__name__} exposes no labels (targets/labels attribute or label column): "
        "reading every item to split it, which loads every input once",
        UserWarning,
        stacklevel=3,
    )
    ys = []
    for i in range(len(ds)):
        item = ds[i]
        ys.append(int(_int_labels(torch.as_tensor(_unpack(item, "dataset")[1]), "dataset")))
    return torch.tensor(ys, dtype=torch.long)


def split_by_class(
    dataset: Any,
    forget: Sequence[Any],
    learn: Sequence[Any] = (),
    retain: Sequence[Any] | None = None,
) -> dict[str, Subset]:
    """``{"retain", "forget", "learn"}`` subsets of ``dataset`` by class (index or name).

    ``retain`` defaults to every class that is neither forgotten nor learned. The three class
    sets must be disjoint and every named class must occur in the data. Each subset is a
    ``torch.utils.data.Subset`` (so :class:`~icml25.knowledge_swap.KnowledgeSwapper` reads its
    labels, e.g. for the overlap check, without loading inputs)."""
    if isinstance(forget, (str, int)) or isinstance(learn, (str, int)):
        raise TypeError("forget and learn are lists of classes, e.g. forget=[0, 1]")
    if isinstance(dataset, tuple) and len(dataset) == 2:  # (x, y) tensors, as fit accepts
        x, lab = torch.as_tensor(dataset[0]), torch.as_tensor(dataset[1])
        if len(x) != len(lab):
            raise ValueError(f"inputs and labels differ in length: {len(x)} vs {len(lab)}")
        dataset = TensorDataset(x, _int_labels(lab, "dataset"))
    y = _all_labels(dataset)
    present = set(y.unique().tolist())
    f = {_class_index(dataset, c) for c in forget}
    ln = {_class_index(dataset, c) for c in learn}
    r = (present - f - ln) if retain is None else {_class_index(dataset, c) for c in retain}
    for name, cls in (("forget", f), ("learn", ln), ("retain", r)):
        missing = sorted(cls - present)
        if missing:
            raise ValueError(
                f"{name} class(es) {missing} do not occur in the dataset (classes present: "
                f"{sorted(present)})"
            )
    for a, b, sa, sb in (
        ("forget", "learn", f, ln),
        ("forget", "retain", f, r),
        ("learn", "retain", ln, r),
    ):
        if sa & sb:
            raise ValueError(f"classes {sorted(sa & sb)} are in both the {a} and the {b} set")
    if not f and not ln:
        raise ValueError("name at least one class to forget or to learn")
    out = {}
    for name, cls in (("retain", r), ("forget", f), ("learn", ln)):
        idx = torch.nonzero(torch.isin(y, torch.tensor(sorted(cls), dtype=torch.long))).squeeze(1)
        out[name] = Subset(dataset, idx.tolist())
    return out
