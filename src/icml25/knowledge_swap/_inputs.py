"""How the knowledge-swap code reads a user's data: labels as class indices, inputs and labels
from tuple or dict batches, every label of a dataset without loading its inputs, and logits from
a model's output. Shared by ``swap.py``, ``metrics.py`` and ``splits.py``."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor
from torch.utils.data import ConcatDataset, Subset, TensorDataset


def _int_labels(y, name: str) -> Tensor:
    """Class indices as int64; float labels must hold whole numbers (never truncated)."""
    y = torch.as_tensor(y)
    if y.ndim > 1:
        raise ValueError(
            f"the {name} labels must be class indices (N,), got shape {tuple(y.shape)} "
            "(one-hot or soft labels: pass y.argmax(-1))"
        )
    if y.is_floating_point():
        bad = y[~torch.isfinite(y) | (y != y.round())]
        if bad.numel():
            raise ValueError(
                f"the {name} labels must be integer class indices, got the value "
                f"{float(bad[0])!r} (float labels are never truncated)"
            )
    elif y.dtype == torch.bool or y.is_complex():
        raise ValueError(f"the {name} labels must be integer class indices, got dtype {y.dtype}")
    return y.long()


_LABEL_KEYS = ("labels", "label", "targets", "target", "y")


_INPUT_KEYS = ("pixel_values", "inputs", "input", "images", "image", "img", "x")


def _targets(ds) -> Tensor | None:
    """Every label of ``ds`` when it can be read without loading the inputs: tensor datasets,
    ``targets``/``labels`` attributes (torchvision, ImageFolder), ``Subset`` and
    ``ConcatDataset`` of those, and Hugging Face datasets with a label column; else None."""
    if isinstance(ds, TensorDataset):
        return ds.tensors[1] if len(ds.tensors) > 1 else None
    if isinstance(ds, ConcatDataset):
        parts = [_targets(d) for d in ds.datasets]
        return None if any(p is None for p in parts) else torch.cat([p.long() for p in parts])
    if isinstance(ds, Subset):
        parent = _targets(ds.dataset)
        return (
            None if parent is None else parent[torch.as_tensor(list(ds.indices), dtype=torch.long)]
        )
    cols = getattr(ds, "column_names", None)  # a Hugging Face datasets.Dataset
    if isinstance(cols, (list, tuple)):
        key = next((k for k in _LABEL_KEYS if k in cols), None)
        return None if key is None else torch.as_tensor(list(ds[key]))
    transform = getattr(ds, "target_transform", None)
    for attr in ("targets", "labels"):
        t = getattr(ds, attr, None)
        if t is not None and not callable(t):
            try:
                if callable(transform):  # torchvision applies it to each label in __getitem__
                    t = [transform(v) for v in (t.tolist() if hasattr(t, "tolist") else list(t))]
                t = torch.as_tensor(t if not isinstance(t, list) else list(t))
            except (TypeError, ValueError, RuntimeError):
                continue
            if t.ndim == 1 and len(t) == len(ds):
                return t
    return None


def _unpack(batch, name: str) -> tuple[Tensor, Tensor]:
    """``(inputs, labels)`` from a tuple/list batch or a dict batch (Hugging Face)."""
    if isinstance(batch, Mapping):
        xk = next((k for k in _INPUT_KEYS if k in batch), None)
        yk = next((k for k in _LABEL_KEYS if k in batch), None)
        if xk is None or yk is None:
            raise KeyError(
                f"a dict batch of the {name} data needs an input key (one of {_INPUT_KEYS}) and a "
                f"label key (one of {_LABEL_KEYS}); got keys {sorted(batch)}"
            )
        return batch[xk], batch[yk]
    if isinstance(batch, (tuple, list)) and len(batch) >= 2:
        return batch[0], batch[1]
    raise TypeError(
        f"a batch of the {name} data must be (inputs, labels) or a dict with inputs and labels, "
        f"got {type(batch).__name__}"
    )


def _logits_of(out) -> Tensor:
    """Logits from a model output: a tensor, a tuple/list (first element) or an object with
    ``.logits`` (Hugging Face)."""
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, Mapping):
        if "logits" not in out:
            raise TypeError(f"the model returned a dict without 'logits' (keys {sorted(out)})")
        return out["logits"]
    return out[0] if isinstance(out, (tuple, list)) else out
