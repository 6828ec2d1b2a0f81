"""Importance scores (official ``prune_wanda_outlier``): Wanda on harmful data, ``S_ij = |W_ij| a_j`` with
``a_j^2 = (1/N) sum_n sum_t X_n[t, j]^2`` over the ``N`` re-alignment sequences (official
``WrappedGPT.add_batch``), collected with forward hooks on every target in one pass (the official
code also scores every layer on the unpruned model, so one pass is exact)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor, nn

from icml25.antidote.targets import hook_module, input_of

__all__ = ["activation_sq_norms", "grad_magnitude_scores", "magnitude_scores", "wanda_scores"]


def _check_finite(name: str, t: Tensor, what: str) -> None:
    if not torch.isfinite(t).all():
        raise FloatingPointError(f"non-finite {what} in target layer {name!r}")


def _model_device(model: nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _check_stat_dtype(stat_dtype: torch.dtype) -> None:
    if stat_dtype not in (torch.float32, torch.float64):
        raise ValueError(f"stat_dtype must be torch.float32 or torch.float64, got {stat_dtype}")


def _check_batches_iterable(batches: Iterable) -> None:
    if isinstance(batches, (str, bytes, Tensor, dict)):
        raise TypeError(
            "batches must be an iterable of batches (dicts with 'input_ids' and "
            "'attention_mask', e.g. from make_realign_batches, or tensors), got "
            f"{type(batches).__name__}"
        )


def _check_batch(batch: Any) -> None:
    if not isinstance(batch, Tensor) and not (
        hasattr(batch, "get") and batch.get("input_ids") is not None
    ):
        raise TypeError(
            "each calibration batch must be a tensor of token ids or a dict with "
            f"'input_ids' (make_realign_batches builds them), got {str(batch)[:80]}"
        )


def _calibration_call(
    batch: Any, dev: torch.device, *, exclude_padding: bool, max_length: int | None
) -> tuple[tuple, dict, Tensor | None, int] | None:
    """One calibration batch as ``(args, kwargs, mask, n)``: the model's call, the padding mask
    the statistics apply (None: every position counts) and ``n``, its number of sequences;
    None when no sequence of it runs (an empty tensor, or only padding)."""
    _check_batch(batch)
    if isinstance(batch, Tensor):
        x = batch.to(dev)
        if x.shape[0] == 0:
            return None
        return (x,), {}, None, x.shape[0]
    ids = batch["input_ids"]
    if max_length is not None and ids.shape[1] > max_length:
        warnings.warn(
            f"calibration sequences of {ids.shape[1]} tokens truncated to max_length={max_length}",
            UserWarning,
            stacklevel=3,  # = stacklevel=2 from activation_sq_norms, as before the split
        )
        ids = ids[:, :max_length]
    am = batch.get("attention_mask")
    if am is not None:
        am = am[:, : ids.shape[1]]
        keep = am.sum(1) > 0  # sequences that are all padding are dropped (not counted in N)
        if not bool(keep.any()):
            return None
        ids, am = ids[keep], am[keep]
    mask = am if (exclude_padding and am is not None) else None
    kwargs = {"input_ids": ids.to(dev)}
    if am is not None:
        kwargs["attention_mask"] = am.to(dev)
    return (), kwargs, mask, ids.shape[0]


class _SquaredInputSums:
    """``sum_n sum_t X_n[t, j]^2`` per target and ``N`` (official ``WrappedGPT.add_batch``),
    filled by one forward pre-hook per hooked module while the calibration batches run."""

    def __init__(self, layers: dict, stat_dtype: torch.dtype) -> None:
        self.layers, self.stat_dtype = layers, stat_dtype
        self.sums: dict[str, Tensor] = {}
        self.mask: Tensor | None = None  # padding mask of the batch now running
        self.n = 0  # sequences seen

    def attach(self) -> list:
        """One pre-hook per module that runs targets (LoRA factors share their wrapper's)."""
        groups: dict[int, list[str]] = {}
        mods: dict[int, nn.Module] = {}
        for name, t in self.layers.items():
            m = hook_module(t)
            groups.setdefault(id(m), []).append(name)
            mods[id(m)] = m
        return [mods[k].register_forward_pre_hook(self._hook(v)) for k, v in groups.items()]

    def _hook(self, names: list[str]):
        def hook(_mod, inp):
            for name in names:
                self._add(name, inp[0])

        return hook

    def _add(self, name: str, x: Tensor) -> None:
        xi = input_of(self.layers[name], x).to(self.stat_dtype)
        _check_finite(name, xi, "activations")
        if self.mask is not None and xi.dim() == 3:
            xi = xi * self.mask.to(xi.device, self.stat_dtype)[..., None]
        sq = xi.pow(2).reshape(-1, xi.shape[-1]).sum(0)
        self.sums[name] = self.sums[name] + sq if name in self.sums else sq

    def averages(self) -> dict[str, Tensor]:
        """``a_j^2 = sums / N`` per target, in ``layers`` order."""
        if self.n == 0 or not self.sums:
            raise ValueError(
                "no calibration statistics: the batch iterator was empty, every sequence was "
                "padding, or the target layers never ran (a LoRA adapter disabled with "
                "model.disable_adapter() does not run)"
            )
        out = {}
        for name in self.layers:
            if name not in self.sums:
                raise ValueError(
                    f"target layer {name!r} was never called during the calibration pass (an "
                    "inactive PEFT adapter, or a module outside the forward path?); select the "
                    "active adapter (AntidoteConfig(adapters=None)) or drop the layer"
                )
            out[name] = self.sums[name] / self.n
        return out


@torch.no_grad()
def activation_sq_norms(
    model: nn.Module,
    layers: dict,
    batches: Iterable,
    *,
    exclude_padding: bool = True,
    stat_dtype: torch.dtype = torch.float32,
    max_length: int | None = None,
) -> dict[str, Tensor]:
    """``a_j^2`` per target (shape ``(d_in,)``, ``stat_dtype``, on the layer's device).

    ``batches`` yields dicts with ``input_ids`` ``(B, T)`` and optionally ``attention_mask``
    (other keys such as ``labels`` are ignored), or plain tensors for models called as
    ``model(x)``. Padding positions (``attention_mask == 0``) are excluded; ``N`` counts
    sequences. The model runs in eval mode (no dropout) and is put back afterwards."""
    _check_stat_dtype(stat_dtype)
    stats = _SquaredInputSums(layers, stat_dtype)
    handles = stats.attach()
    was_training = model.training
    model.eval()
    dev = _model_device(model)
    try:
        _check_batches_iterable(batches)
        for batch in batches:
            call = _calibration_call(
                batch, dev, exclude_padding=exclude_padding, max_length=max_length
            )
            if call is None:
                continue
            args, kwargs, stats.mask, n = call
            model(*args, **kwargs)
            stats.n += n
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return stats.averages()


def wanda_scores(layers: dict, sq_norms: dict[str, Tensor]) -> dict[str, Tensor]:
    """``S = |W| * sqrt(a^2)[None, :]`` per target, in the statistics' dtype."""
    out = {}
    for name, t in layers.items():
        w = t.weight.detach()
        _check_finite(name, w, "weights")
        a = sq_norms[name]
        if a.shape != (w.shape[1],):
            raise ValueError(
                f"{name}: statistics of shape {tuple(a.shape)} for weight {tuple(w.shape)}"
            )
        out[name] = w.to(a.dtype).abs() * a.to(w.device).sqrt()[None, :]
    return out


def magnitude_scores(layers: dict) -> dict[str, Tensor]:
    """``S = |W|`` (the official ``sample_num = 0`` ablation: Wanda with unit activations)."""
    out = {}
    for name, t in layers.items():
        w = t.weight.detach()
        _check_finite(name, w, "weights")
        out[name] = w.float().abs()
    return out


def grad_magnitude_scores(model: nn.Module, layers: dict, batches: Iterable) -> dict[str, Tensor]:
    """``S = |W| * |sum of dL/dW|`` over the calibration batches, shape and keys of ``layers``,
    float32: the official ``prune_with_FI`` score (present in ``utils.py`` but not called by the
    released scripts; an optional ablation here). The official code masks it per tensor
    (``AntidoteConfig(granularity="tensor")``); our default is per row like Wanda. Each batch
    must make ``model(**batch)`` return an object with ``.loss`` (a Hugging Face causal LM with
    ``labels``)."""
    weights = {n: t.weight for n, t in layers.items()}
    grads = {n: torch.zeros_like(w, dtype=torch.float32) for n, w in weights.items()}
    flags = {n: w.requires_grad for n, w in weights.items()}
    was_training = model.training
    model.eval()
    dev = _model_device(model)
    seen = 0
    try:
        for w in weights.values():
            w.requires_grad_(True)
        for batch in batches:
            batch = {k: v.to(dev) for k, v in batch.items()}
            if "labels" not in batch:
                raise ValueError("grad_magnitude scores need batches with 'labels'")
            out = model(**batch)
            loss = getattr(out, "loss", None)
            if loss is None:
                raise ValueError("model(**batch) returned no .loss; grad_magnitude needs a LM loss")
            for w in weights.values():
                w.grad = None
            loss.backward()
            for n, w in weights.items():
                if w.grad is not None:
                    grads[n] += w.grad.float()
            seen += 1
    finally:
        for n, w in weights.items():
            w.requires_grad_(flags[n])
            w.grad = None
        model.train(was_training)
    if not seen:
        raise ValueError("no calibration batches for grad_magnitude scores")
    return {n: weights[n].detach().float().abs() * grads[n].abs() for n in weights}
