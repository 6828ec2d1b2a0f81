"""Low-rank adapters (LoRA; Hu et al., arXiv:2106.09685, Eq. 3) for any ``nn.Module``, shared by
the papers that fine-tune through an adapter (knowledge swapping, paper 14; Antidote, paper 17).

``LoRALinear``: ``h = W0 x + b + (alpha / r) B (A x)`` with the base frozen, ``A`` kaiming-uniform
(``a = init_a``) and ``B = 0``, so a freshly wrapped model computes exactly the pretrained function.
``LoRAConv2d``: the same low-rank update of the kernel reshaped to ``[out, in * kh * kw]``.
:func:`inject_lora` places them by PEFT's ``target_modules`` name rule; :func:`lora_parameters`
finds the LoRA matrices of ours and of PEFT's adapters.

The default ``init_a = sqrt(50)`` is the knowledge-swapping code's (768-d ViTs), kept so existing
callers are unchanged; PEFT and ``loralib`` use ``kaiming_uniform_(a=sqrt(5))``: pass
``init_a=math.sqrt(5)`` for their initialisation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25._validate import as_int, as_real

__all__ = [
    "LoRAConv2d",
    "LoRALinear",
    "inject_lora",
    "load_lora",
    "lora_layers",
    "lora_parameters",
    "lora_state_dict",
    "mark_only_lora_trainable",
    "merge_lora",
    "save_lora",
    "unload_lora",
    "unmerge_lora",
]


def _check_rank(r: int, alpha: float, low: int = 0) -> tuple[int, float]:
    """``r`` as an ``int >= low`` and ``alpha`` as a finite ``float > 0`` (numpy and 0-d torch
    numbers accepted): an infinite ``alpha`` would make every output NaN."""
    r = as_int("LoRA rank r", r, low)
    alpha = as_real("LoRA alpha", alpha, low=0.0, low_open=True)
    return r, alpha


class _LoRABase(nn.Module):
    """Shared part of the LoRA layers: a frozen ``base``, ``lora_A (r, fan_in)``, ``lora_B
    (out, r)`` and the scaling ``alpha / r``; subclasses define :meth:`delta_weight` and the
    forward pass."""

    def _setup(
        self, base: nn.Module, fan_in: int, fan_out: int, r: int, alpha: float, init_a: float
    ):
        r, alpha = _check_rank(r, alpha)
        init_a = as_real("init_a", init_a, low=0.0)
        self.base, self.r, self.alpha, self.init_a = base, r, alpha, init_a
        self.scaling = self.alpha / r if r else 0.0
        self.merged = False
        for p in base.parameters():
            p.requires_grad_(False)
        w = base.weight
        if r:
            self.lora_A = nn.Parameter(torch.empty(r, fan_in, dtype=w.dtype, device=w.device))
            self.lora_B = nn.Parameter(torch.empty(fan_out, r, dtype=w.dtype, device=w.device))
            self.reset_lora()

    def reset_lora(self, generator: torch.Generator | None = None) -> None:
        """``A ~ kaiming_uniform(a=init_a)`` (bound ``sqrt(6 / ((1 + a^2) fan_in))``), ``B = 0``."""
        if not self.r:
            return
        bound = math.sqrt(6.0 / ((1 + self.init_a**2) * self.lora_A.shape[1]))
        with torch.no_grad():
            u = torch.rand(self.lora_A.shape, generator=generator, dtype=self.lora_A.dtype)
            self.lora_A.copy_(u * 2 * bound - bound)
            self.lora_B.zero_()

    def delta_weight(self) -> Tensor:  # pragma: no cover - defined by subclasses
        raise NotImplementedError

    @torch.no_grad()
    def merge(self) -> None:
        if self.r and not self.merged:
            self.base.weight += self.delta_weight()
            self.merged = True

    @torch.no_grad()
    def unmerge(self) -> None:
        if self.r and self.merged:
            self.base.weight -= self.delta_weight()
            self.merged = False


class LoRALinear(_LoRABase):
    """A frozen ``nn.Linear`` plus a trainable rank-``r`` update (``r = 0``: plain passthrough)."""

    def __init__(
        self, base: nn.Linear, r: int = 8, alpha: float = 1.0, init_a: float = math.sqrt(50)
    ) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"LoRALinear wraps an nn.Linear, got {type(base).__name__}")
        self._setup(base, base.in_features, base.out_features, r, alpha, init_a)

    def delta_weight(self) -> Tensor:
        return self.scaling * (self.lora_B @ self.lora_A)

    def forward(self, x: Tensor) -> Tensor:
        out = self.base(x)
        if self.r and not self.merged:
            out = out + self.scaling * F.linear(F.linear(x, self.lora_A), self.lora_B)
        return out


class LoRAConv2d(_LoRABase):
    """A frozen ``nn.Conv2d`` (``groups = 1``) plus ``Delta W = (alpha / r) (B A).reshape(kernel)``."""

    def __init__(
        self, base: nn.Conv2d, r: int = 8, alpha: float = 1.0, init_a: float = math.sqrt(50)
    ) -> None:
        super().__init__()
        if not isinstance(base, nn.Conv2d):
            raise TypeError(f"LoRAConv2d wraps an nn.Conv2d, got {type(base).__name__}")
        if base.groups != 1:
            raise ValueError(f"LoRAConv2d supports groups=1 only, got groups={base.groups}")
        w = base.weight
        self._setup(base, w.shape[1] * w.shape[2] * w.shape[3], w.shape[0], r, alpha, init_a)

    def delta_weight(self) -> Tensor:
        return self.scaling * (self.lora_B @ self.lora_A).reshape(self.base.weight.shape)

    def forward(self, x: Tensor) -> Tensor:
        out = self.base(x)
        if self.r and not self.merged:
            b = self.base
            if b.padding_mode != "zeros":
                x = F.pad(x, b._reversed_padding_repeated_twice, mode=b.padding_mode)
                pad = 0
            else:
                pad = b.padding
            out = out + F.conv2d(x, self.delta_weight(), None, b.stride, pad, b.dilation)
        return out


def inject_lora(
    model: nn.Module,
    target: Callable[[str, nn.Module], bool] | Sequence[str],
    r: int = 8,
    alpha: float = 1.0,
    init_a: float = math.sqrt(50),
) -> dict[str, nn.Module]:
    """Replace the matching ``nn.Linear``/``nn.Conv2d`` modules of ``model`` in place.

    ``target``: a predicate ``(name, module) -> bool`` or a list of names; a name matches a module
    whose qualified name equals it or ends with ``"." + name`` (PEFT's ``target_modules`` rule,
    e.g. ``["mlp.fc1", "mlp.fc2"]``). Returns ``{qualified name: LoRA module}``.

    ``r`` must be ``>= 1`` here (an injected adapter with no parameters is a mistake: nothing
    would train); ``LoRALinear(base, r=0)`` alone is the documented passthrough. ``alpha``: a
    finite number ``> 0``."""
    r, alpha = _check_rank(r, alpha, low=1)
    if isinstance(target, str):
        target = [target]  # one name, like PEFT's target_modules="fc1"
    if callable(target):
        pred = target
    else:
        names = list(target)

        def pred(name, module):
            return any(name == t or name.endswith("." + t) for t in names)

    wrapped_bases = {id(m.base) for m in model.modules() if isinstance(m, _LoRABase)}
    found = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, (nn.Linear, nn.Conv2d))
        and id(m) not in wrapped_bases  # injecting twice never nests LoRA in LoRA
        and pred(name, m)
    ]
    if not found:
        already = [
            name
            for name, m in model.named_modules()
            if isinstance(m, _LoRABase) and pred(name, m.base)
        ]
        if already:
            raise ValueError(
                f"the target {target!r} matches only layers that already carry LoRA "
                f"({already[:3]}{'...' if len(already) > 3 else ''}); use them as they are, or "
                "unload_lora(model) first to start again"
            )
        raise ValueError(f"no nn.Linear or nn.Conv2d module matched the target {target!r}")
    out: dict[str, nn.Module] = {}
    for name, m in found:
        wrapped = (
            LoRALinear(m, r, alpha, init_a)
            if isinstance(m, nn.Linear)
            else LoRAConv2d(m, r, alpha, init_a)
        )
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, wrapped)
        out[name] = wrapped
    return out


def lora_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of every LoRA matrix: ours (``lora_A``/``lora_B``) or PEFT's
    (``...lora_A.<adapter>.weight``)."""
    return [(n, p) for n, p in model.named_parameters() if re.search(r"(^|\.)lora_[AB](\.|$)", n)]


def mark_only_lora_trainable(model: nn.Module) -> int:
    """Freeze everything except the LoRA matrices; returns the number of trainable tensors."""
    names = {n for n, _ in lora_parameters(model)}
    for n, p in model.named_parameters():
        p.requires_grad_(n in names)
    if not names:
        raise ValueError("the model has no LoRA parameters: call inject_lora first")
    return len(names)


def lora_layers(model: nn.Module) -> dict[str, _LoRABase]:
    """``{qualified name: LoRA layer}`` of every :class:`LoRALinear`/:class:`LoRAConv2d`."""
    return {n: m for n, m in model.named_modules() if isinstance(m, _LoRABase)}


def _is_peft(model: nn.Module) -> bool:
    return callable(getattr(model, "merge_and_unload", None)) and hasattr(model, "peft_config")


def merge_lora(model: nn.Module) -> int:
    """Fold every LoRA update into its base weight (the layers stay, computing the same function
    with no extra matmul; :func:`unmerge_lora` undoes it). Returns the number of layers merged.
    For a PEFT model use ``model.merge_adapter()``."""
    layers = lora_layers(model)
    if not layers:
        raise ValueError("the model has no icml25 LoRA layers (PEFT models: model.merge_adapter())")
    for m in layers.values():
        m.merge()
    return len(layers)


def unmerge_lora(model: nn.Module) -> int:
    """Undo :func:`merge_lora` on every layer; returns the number of layers."""
    layers = lora_layers(model)
    for m in layers.values():
        m.unmerge()
    return len(layers)


def unload_lora(model: nn.Module, merge: bool = True) -> nn.Module:
    """Replace every LoRA layer by its plain base module, in place: with ``merge=True`` the
    update is folded in first (the model keeps computing what it computed, now as plain
    ``nn.Linear``/``nn.Conv2d``); ``merge=False`` drops the update (the pretrained model back).
    The base weights keep their ``requires_grad=False``. A PEFT model goes through its own
    ``merge_and_unload()``/``unload()``; returns the model (PEFT: the unwrapped base model)."""
    if _is_peft(model):
        return model.merge_and_unload() if merge else model.unload()
    layers = lora_layers(model)
    if not layers:
        raise ValueError("the model has no LoRA layers to unload")
    for name, m in sorted(layers.items(), key=lambda kv: -kv[0].count(".")):
        if merge:
            m.merge()
        elif m.merged:
            m.unmerge()
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, m.base)
    return model


def lora_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The LoRA matrices only (ours or PEFT's), detached copies keyed by parameter name: what an
    adapter checkpoint holds."""
    return {n: p.detach().clone() for n, p in lora_parameters(model)}


def save_lora(model: nn.Module, path) -> None:
    """Save the adapter: a PEFT model through ``save_pretrained(path)`` (a folder PEFT loads),
    otherwise :func:`lora_state_dict` plus each layer's ``r``/``alpha``/merged state in one
    ``torch.save`` file."""
    if _is_peft(model) and callable(getattr(model, "save_pretrained", None)):
        model.save_pretrained(str(path))
        return
    layers = lora_layers(model)
    if not layers:
        raise ValueError("the model has no LoRA layers to save")
    meta = {n: {"r": m.r, "alpha": m.alpha, "merged": m.merged} for n, m in layers.items()}
    torch.save({"format": "icml25.lora/1", "layers": meta, "state": lora_state_dict(model)}, path)


def load_lora(model: nn.Module, path, *, inject: bool = True) -> nn.Module:
    """Load a :func:`save_lora` file into ``model``: LoRA layers missing from the model are
    injected first (with the saved ``r``/``alpha``, when ``inject``); every saved matrix must
    find its parameter with the same shape. Returns the model."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ckpt, dict) or ckpt.get("format") != "icml25.lora/1":
        raise ValueError(f"{path} is not an icml25 LoRA checkpoint (written by save_lora)")
    have = lora_layers(model)
    for name, meta in ckpt["layers"].items():
        if name not in have:
            if not inject:
                raise ValueError(f"the model has no LoRA layer {name!r} (load with inject=True)")
            inject_lora(model, [name], r=int(meta["r"]), alpha=float(meta["alpha"]))
    params = dict(model.named_parameters())
    layers = lora_layers(model)
    with torch.no_grad():
        for name in ckpt["layers"]:
            if layers[name].merged:
                layers[name].unmerge()
        for n, t in ckpt["state"].items():
            if n not in params or params[n].shape != t.shape:
                got = None if n not in params else tuple(params[n].shape)
                raise ValueError(
                    f"LoRA matrix {n!r} {tuple(t.shape)} does not fit the model (found {got})"
                )
            params[n].copy_(t.to(params[n].device, params[n].dtype))
        for name, meta in ckpt["layers"].items():
            if meta.get("merged"):
                layers[name].merge()
    return model
