"""Metrics of knowledge swapping and the "knock-on feature hierarchy" measurements (paper §4).

``Acc_r`` (retain, up), ``Acc_f`` (forget, down), ``Acc_l`` (learn, up): top-1 accuracy in % over the
full logits; ``h``: GS-LoRA's harmonic mean of the forgetting drop and the retained accuracy.
``layer_norms``: the LoRA group norms ``sqrt(sum ||P||_F^2)`` per group (official
``get_norm_of_lora``); ``linear_probe_by_layer``: a softmax-regression probe on each layer's frozen
features, to see which layers hold the information of given classes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

__all__ = ["accuracy_on", "h_mean", "layer_norms", "linear_probe_by_layer", "swap_metrics"]


def _loader(data, batch_size: int = 512) -> DataLoader | None:
    if data is None:
        return None
    if isinstance(data, DataLoader):
        return data
    if isinstance(data, tuple):
        data = TensorDataset(torch.as_tensor(data[0]), torch.as_tensor(data[1]).long())
    if isinstance(data, Dataset):
        return DataLoader(data, batch_size=batch_size)
    raise TypeError(
        f"expected a Dataset, a DataLoader or (x, y) tensors, got {type(data).__name__}"
    )


@torch.no_grad()
def accuracy_on(model: nn.Module, data, batch_size: int = 512) -> float:
    """Top-1 accuracy in % of ``model`` on ``data`` over its full logits (NaN for empty data)."""
    loader = _loader(data, batch_size)
    if loader is None:
        return float("nan")
    p = next(model.parameters())
    was = model.training
    model.eval()
    correct = total = 0
    for batch in loader:
        x, y = batch[0].to(p.device), batch[1].to(p.device)
        if x.is_floating_point():
            x = x.to(p.dtype)
        out = model(x)
        out = out.logits if hasattr(out, "logits") else out
        out = out[0] if isinstance(out, (tuple, list)) else out
        correct += int((out.argmax(-1) == y).sum())
        total += int(y.numel())
    model.train(was)
    return 100.0 * correct / total if total else float("nan")


def h_mean(acc_f_before: float, acc_f: float, acc_r: float) -> float:
    """``2 (Acc_f^before - Acc_f) Acc_r / ((Acc_f^before - Acc_f) + Acc_r)`` (GS-LoRA's H)."""
    drop = acc_f_before - acc_f
    den = drop + acc_r
    return 2 * drop * acc_r / den if den else 0.0


def swap_metrics(model, retain_test, forget_test, learn_test, acc_f_before: float | None = None):
    acc_r, acc_f, acc_l = (accuracy_on(model, d) for d in (retain_test, forget_test, learn_test))
    h = h_mean(acc_f_before, acc_f, acc_r) if acc_f_before is not None else float("nan")
    return {"acc_r": acc_r, "acc_f": acc_f, "acc_l": acc_l, "h": h}


def layer_norms(groups: Sequence[Sequence[Tensor]]) -> list[float]:
    """``sqrt(sum_{P in g} ||P||_F^2)`` per group (L2 over the whole group)."""
    return [math.sqrt(sum(float((p.detach().double() ** 2).sum()) for p in g)) for g in groups]


def _features(model: nn.Module, layers: dict[str, nn.Module], x: Tensor) -> dict[str, Tensor]:
    feats: dict[str, Tensor] = {}
    hooks = [
        m.register_forward_hook(
            lambda mod, inp, out, k=k: feats.__setitem__(k, out.detach().flatten(1))
        )
        for k, m in layers.items()
    ]
    try:
        with torch.no_grad():
            model.eval()
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return feats


def linear_probe_by_layer(
    model: nn.Module,
    layers: dict[str, nn.Module] | Sequence[str],
    data: tuple[Tensor, Tensor],
    classes: Sequence[int] | None = None,
    *,
    train_frac: float = 0.5,
    steps: int = 200,
    weight_decay: float = 1e-3,
    seed: int = 0,
) -> dict[str, float]:
    """Held-out accuracy (%) of a softmax-regression probe on each layer's frozen features,
    restricted to ``classes`` (all when None): how much class information each layer carries.
    ``layers``: ``{name: module}`` or module names of ``model``."""
    if isinstance(layers, (list, tuple)):
        layers = {n: model.get_submodule(n) for n in layers}
    x, y = torch.as_tensor(data[0]), torch.as_tensor(data[1]).long()
    if classes is not None:
        keep = torch.isin(y, torch.as_tensor(list(classes)))
        x, y = x[keep], y[keep]
    labels, y_idx = torch.unique(y, return_inverse=True)
    if len(labels) < 2:
        raise ValueError(f"a probe needs at least 2 classes, got {labels.tolist()}")
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(y), generator=g)
    cut = max(1, int(train_frac * len(y)))
    tr, te = perm[:cut], perm[cut:]
    p = next(model.parameters())
    feats = _features(model, layers, x.to(p.device, p.dtype if x.is_floating_point() else x.dtype))
    out = {}
    for name, f in feats.items():
        f = f.double().cpu()
        mu, sd = f[tr].mean(0), f[tr].std(0).clamp_min(1e-6)
        f = (f - mu) / sd
        w = torch.zeros(f.shape[1], len(labels), dtype=torch.float64, requires_grad=True)
        b = torch.zeros(len(labels), dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

        def closure(w=w, b=b, f=f, opt=opt):
            opt.zero_grad()
            loss = F.cross_entropy(f[tr] @ w + b, y_idx[tr]) + weight_decay * (w * w).sum()
            loss.backward()
            return loss

        opt.step(closure)
        with torch.no_grad():
            pred = (f[te] @ w + b).argmax(-1)
        out[name] = 100.0 * float((pred == y_idx[te]).double().mean()) if len(te) else float("nan")
    return out
