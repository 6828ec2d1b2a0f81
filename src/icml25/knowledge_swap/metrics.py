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

from icml25._validate import as_int, as_real
from icml25.knowledge_swap._inputs import _int_labels, _logits_of, _unpack

__all__ = [
    "accuracy_on",
    "h_mean",
    "layer_norms",
    "linear_probe_by_layer",
    "membership_inference",
    "relearn_time",
    "swap_metrics",
]


def _loader(data, batch_size: int = 512) -> DataLoader | None:
    if data is None:
        return None
    if isinstance(data, DataLoader):
        return data
    if isinstance(data, tuple):
        data = TensorDataset(torch.as_tensor(data[0]), _int_labels(data[1], "evaluation"))
    if isinstance(data, Dataset) or hasattr(data, "__getitem__"):
        return DataLoader(data, batch_size=batch_size)
    raise TypeError(
        f"expected a Dataset, a DataLoader or (x, y) tensors, got {type(data).__name__}"
    )


@torch.no_grad()
def accuracy_on(
    model: nn.Module, data, batch_size: int = 512, *, name: str = "evaluation"
) -> float:
    """Top-1 accuracy in % of ``model`` on ``data`` over its full logits (NaN for empty data).
    NaN or inf inputs are an error (argmax of NaN logits would count as class 0), and so is a
    label outside ``[0, number of outputs)`` (it could never be predicted: the accuracy would be
    silently 0)."""
    loader = _loader(data, batch_size)
    if loader is None:
        return float("nan")
    p = next(model.parameters())
    was = model.training
    model.eval()
    correct = total = 0
    for batch in loader:
        x, y = _unpack(batch, name)
        x, y = torch.as_tensor(x).to(p.device), _int_labels(y, name).to(p.device)
        if x.is_floating_point():
            if not bool(torch.isfinite(x).all()):
                model.train(was)
                raise ValueError(f"the {name} data holds NaN or inf inputs")
            x = x.to(p.dtype)
        out = _logits_of(model(x))
        bad = (y < 0) | (y >= out.shape[-1])
        if bool(bad.any()):
            model.train(was)
            raise ValueError(
                f"the {name} data holds label {int(y[bad][0])}, outside the model's "
                f"{out.shape[-1]} outputs (labels must be in [0, {out.shape[-1]}))"
            )
        correct += int((out.argmax(-1) == y).sum())
        total += int(y.numel())
    model.train(was)
    return 100.0 * correct / total if total else float("nan")


def h_mean(acc_f_before: float, acc_f: float, acc_r: float) -> float:
    """``2 (Acc_f^before - Acc_f) Acc_r / ((Acc_f^before - Acc_f) + Acc_r)`` (GS-LoRA's H)."""
    acc_f_before, acc_f, acc_r = (
        as_real(n, v)
        for n, v in (("acc_f_before", acc_f_before), ("acc_f", acc_f), ("acc_r", acc_r))
    )
    drop = acc_f_before - acc_f
    den = drop + acc_r
    return 2 * drop * acc_r / den if den else 0.0


def swap_metrics(model, retain_test, forget_test, learn_test, acc_f_before: float | None = None):
    """The paper's evaluation after a swap: accuracies on the retain, forget and learn test sets
    (``acc_r``, ``acc_f``, ``acc_l``, fractions in [0, 1]) and ``h``, the harmonic mean of
    :func:`h_mean` (needs ``acc_f_before``, the forget-set accuracy before the swap; NaN without
    it). The test sets are anything :func:`accuracy_on` takes."""
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


@torch.no_grad()
def _per_sample_loss(model: nn.Module, data, batch_size: int = 512) -> Tensor:
    loader = _loader(data, batch_size)
    p = next(model.parameters())
    was = model.training
    model.eval()
    out = []
    for batch in loader:
        x, y = _unpack(batch, "membership")
        x, y = torch.as_tensor(x).to(p.device), _int_labels(y, "membership").to(p.device)
        if x.is_floating_point():
            x = x.to(p.dtype)
        z = model(x)
        z = z.logits if hasattr(z, "logits") else z
        z = z[0] if isinstance(z, (tuple, list)) else z
        out.append(F.cross_entropy(z.double(), y, reduction="none").cpu())
    model.train(was)
    if not out:
        raise ValueError("membership inference needs non-empty data")
    return torch.cat(out)


def membership_inference(
    model: nn.Module,
    forget,
    retain,
    test,
    *,
    seed: int = 0,
    batch_size: int = 512,
) -> dict[str, float]:
    """A loss-threshold membership-inference attack, the standard unlearning check (as in
    SalUn/"l1-sparse" unlearning, Jia et al. 2023, "MIA-efficacy"): a logistic regression on the
    per-sample loss learns members (retain training data) from non-members (held-out ``test``
    data of the retained classes), balanced by subsampling; it is then applied to the forget
    training data. Returns ``attack_acc`` (the attack's held-out accuracy, 50 = it cannot tell),
    ``forget_member_rate`` (% of forget samples called members) and ``mia_efficacy``
    (100 - that: high after good forgetting; an untouched model keeps the forget set "member")."""
    lr_, lt, lf = (_per_sample_loss(model, d, batch_size) for d in (retain, test, forget))
    g = torch.Generator().manual_seed(seed)
    n = min(len(lr_), len(lt))
    if n < 4:
        raise ValueError(f"membership inference needs >= 4 retain and test samples, got {n}")
    a = lr_[torch.randperm(len(lr_), generator=g)[:n]]
    b = lt[torch.randperm(len(lt), generator=g)[:n]]
    feat = lambda v: torch.log(v.clamp_min(1e-12))[:, None]  # noqa: E731
    x = torch.cat([feat(a), feat(b)])
    y = torch.cat([torch.ones(n), torch.zeros(n)]).double()
    perm = torch.randperm(2 * n, generator=g)
    tr, te = perm[:n], perm[n:]
    mu, sd = x[tr].mean(0), x[tr].std(0).clamp_min(1e-6)
    xs = (x - mu) / sd
    w = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    c = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, c], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(xs[tr] @ w + c, y[tr])
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        acc = float(((xs[te] @ w + c > 0).double() == y[te]).double().mean())
    if acc < 0.6:
        import warnings

        warnings.warn(
            f"the membership attack cannot tell retain-training members from test non-members on "
            f"this model (held-out attack accuracy {100 * acc:.1f}%, chance 50%): "
            "forget_member_rate and mia_efficacy are not informative here (more data, or a model "
            "that overfits more, would be needed)",
            UserWarning,
            stacklevel=2,
        )
    with torch.no_grad():
        member = float(((((feat(lf) - mu) / sd) @ w + c) > 0).double().mean())
    return {
        "attack_acc": 100.0 * acc,
        "forget_member_rate": 100.0 * member,
        "mia_efficacy": 100.0 * (1.0 - member),
    }


def relearn_time(
    model: nn.Module,
    forget,
    *,
    target_acc: float = 90.0,
    eval_data=None,
    lr: float = 1e-3,
    batch_size: int = 32,
    max_steps: int = 500,
    eval_every: int = 5,
    params: str = "trainable",
    seed: int = 0,
) -> dict[str, float]:
    """How fast the forgotten classes come back: fine-tune a copy of ``model`` (Adam, ``lr``) on
    the forget data and count the steps until its accuracy on ``eval_data`` (default: the forget
    data) reaches ``target_acc`` %. ``params``: ``"trainable"`` (what trained during the swap,
    e.g. LoRA) or ``"all"``. Returns ``steps`` (``inf`` if never within ``max_steps``) and
    ``final_acc``. Unlearning that only hides the classes relearns in a few steps; compare against
    the same probe on a model that never saw them. The user's model is not modified."""
    import copy

    target_acc = as_real("target_acc", target_acc, low=0, high=100, low_open=True)
    if params not in ("trainable", "all"):
        raise ValueError(f"params must be 'trainable' or 'all', got {params!r}")
    max_steps, eval_every = as_int("max_steps", max_steps, 1), as_int("eval_every", eval_every, 1)
    lr = as_real("lr", lr, low=0, low_open=True)
    batch_size, seed = as_int("batch_size", batch_size, 1), as_int("seed", seed)
    m = copy.deepcopy(model)
    ps = [p for p in m.parameters() if params == "all" or p.requires_grad]
    if params == "all":
        for p in ps:
            p.requires_grad_(True)
    if not ps:
        raise ValueError("the model has no trainable parameters; pass params='all'")
    evald = forget if eval_data is None else eval_data
    acc = accuracy_on(m, evald)
    if acc >= target_acc:
        return {"steps": 0.0, "final_acc": acc}
    g = torch.Generator().manual_seed(seed)
    ds = _loader(forget, batch_size).dataset
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, generator=g)
    opt = torch.optim.Adam(ps, lr=lr)
    dev, dtype = ps[0].device, ps[0].dtype
    step, it = 0, iter(loader)
    while step < max_steps:
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        x, y = _unpack(batch, "forget")
        x, y = torch.as_tensor(x).to(dev), _int_labels(y, "forget").to(dev)
        if x.is_floating_point():
            x = x.to(dtype)
        m.train()
        z = m(x)
        z = z.logits if hasattr(z, "logits") else z
        z = z[0] if isinstance(z, (tuple, list)) else z
        loss = F.cross_entropy(z, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step % eval_every == 0 or step == max_steps:
            acc = accuracy_on(m, evald)
            if acc >= target_acc:
                return {"steps": float(step), "final_acc": acc}
    return {"steps": math.inf, "final_acc": acc}
