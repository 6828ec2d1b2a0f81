"""Which weights Antidote prunes (official ``utils.find_layers``).

``"lora"`` (paper default): the user's fine-tuning adapter only: the ``lora_A``/``lora_B`` linear
layers of the active (or named) PEFT adapter (``...self_attn.q_proj.lora_A.default``), the
``lora_A``/``lora_B`` factors of our own :class:`icml25.lora.LoRALinear`, and any other
``nn.Linear`` whose name contains ``lora_A`` or ``lora_B``. ``"qkv"`` (official
``--full_finetuning True``): the ``q_proj``/``k_proj``/``v_proj`` weights. ``"custom"``: any
``nn.Linear`` accepted by ``target_filter(name, module)``. A target is anything with a ``weight`` of shape
``(d_out, d_in)`` and a way to see its input during a forward pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LoRAFactor", "inactive_adapters", "peft_adapters", "select_target_layers"]

_QKV = re.compile(r"(^|\.)(q_proj|k_proj|v_proj)$")


class LoRAFactor:
    """One factor (``"A"`` or ``"B"``) of an icml25 ``LoRALinear``: its weight is the wrapper's
    ``lora_A`` (``r x d_in``) or ``lora_B`` (``d_out x r``); its input is the wrapper's input ``x``
    (A) or ``x A^T`` (B). The scaling ``alpha / r`` comes after B and never enters a score."""

    def __init__(self, wrapper: nn.Module, which: str) -> None:
        if which not in ("A", "B"):
            raise ValueError(f"which must be 'A' or 'B', got {which!r}")
        self.wrapper, self.which = wrapper, which

    @property
    def weight(self) -> Tensor:
        return self.wrapper.lora_A if self.which == "A" else self.wrapper.lora_B

    @property
    def hook_module(self) -> nn.Module:
        return self.wrapper

    def input_of(self, x: Tensor) -> Tensor:
        return x if self.which == "A" else F.linear(x, self.wrapper.lora_A)

    def __repr__(self) -> str:
        return f"LoRAFactor({self.which}, weight={tuple(self.weight.shape)})"


def hook_module(target) -> nn.Module:
    return target.hook_module if isinstance(target, LoRAFactor) else target


def input_of(target, x: Tensor) -> Tensor:
    return target.input_of(x) if isinstance(target, LoRAFactor) else x


def _is_quantised(m: nn.Module) -> bool:
    w = getattr(m, "weight", None)
    cls = type(m).__name__
    return (w is not None and not w.dtype.is_floating_point) or cls in (
        "Linear8bitLt",
        "Linear4bit",
    )


def _peft_lora_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """PEFT LoRA layers: modules whose ``lora_A`` is a ``ModuleDict`` keyed by adapter name."""
    return [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(getattr(m, "lora_A", None), nn.ModuleDict)
    ]


def peft_adapters(model: nn.Module) -> tuple[list[str], list[str]]:
    """``(loaded, active)`` PEFT LoRA adapter names, in load order; ``([], [])`` for a model
    without PEFT LoRA layers (e.g. one wrapped with :func:`icml25.lora.inject_lora`)."""
    layers = _peft_lora_layers(model)
    loaded: list[str] = []
    for _, m in layers:
        loaded += [a for a in m.lora_A if a not in loaded]
    if not layers:
        return [], []
    try:
        active = getattr(model, "active_adapters", None)
        if callable(active):  # transformers' PEFT integration: a method that may raise
            active = active()
    except Exception:  # noqa: BLE001 - fall back to what the LoRA layers themselves say
        active = None
    if isinstance(active, str):
        active = [active]
    if not isinstance(active, (list, tuple)):
        active = []
        for _, m in layers:
            active += [a for a in getattr(m, "active_adapters", []) if a not in active]
    return loaded, [a for a in active if a in loaded]


def _chosen_adapters(model: nn.Module, adapters) -> list[str] | None:
    """The PEFT adapters to prune: the named ones (checked against the loaded ones) or, by
    default, the active one(s). ``None`` when the model has no PEFT LoRA layers."""
    loaded, active = peft_adapters(model)
    if adapters is not None:
        names = [adapters] if isinstance(adapters, str) else list(adapters)
        if not names or any(not isinstance(a, str) or not a for a in names):
            raise ValueError(
                f"adapters must be an adapter name or a non-empty list of names, got {adapters!r}"
            )
        if not loaded:
            raise ValueError(
                f"adapters={adapters!r} names PEFT adapters, but the model has no PEFT LoRA "
                "layers (icml25.lora.LoRALinear holds a single adapter: leave adapters=None)"
            )
        unknown = [a for a in names if a not in loaded]
        if unknown:
            raise ValueError(
                f"adapter(s) {unknown} not loaded in the model; loaded adapters: {loaded} "
                f"(active: {active})"
            )
        return names
    if not loaded:
        return None
    if not active:
        raise ValueError(
            f"the model's PEFT adapters {loaded} are all inactive; name the one to prune with "
            "adapters=[...] or activate it with model.set_adapter(name)"
        )
    return active


def inactive_adapters(model: nn.Module, adapters) -> list[str]:
    """Those of ``adapters`` (names, or ``None`` = the active ones) that do not run in the
    model's forward pass: data-driven scores have no activations for them."""
    if adapters is None:
        return []
    _, active = peft_adapters(model)
    names = [adapters] if isinstance(adapters, str) else list(adapters)
    return [a for a in names if a not in active]


def _merged(model: nn.Module, chosen: list[str] | None) -> list[str]:
    """Wrapped layers whose selected LoRA update is merged into the base weight."""
    out = []
    for name, m in model.named_modules():
        if isinstance(getattr(m, "lora_A", None), nn.ModuleDict):
            hit = set(getattr(m, "merged_adapters", None) or []) & set(chosen or [])
            out += [f"{name} ({a})" for a in sorted(hit)]
        elif isinstance(getattr(m, "lora_A", None), nn.Parameter) and getattr(m, "merged", False):
            out.append(name)
    return out


def select_target_layers(
    model: nn.Module,
    target: Literal["lora", "qkv", "custom"] = "lora",
    target_filter: Callable[[str, nn.Module], bool] | None = None,
    *,
    adapters: str | Sequence[str] | None = None,
) -> dict:
    """``{parameter name: layer}`` of the weights to score and prune.

    Keys are exactly ``model.named_parameters()`` names of the target weights (PEFT:
    ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight``; our
    :class:`icml25.lora.LoRALinear`: ``...q_proj.lora_A``; plain layers: ``...q_proj.weight``),
    the keys of the official ``bad_mask.pt`` (``prune_wanda_outlier`` prefixes its layer names
    with ``base_model.model.`` so that ``train.py`` can apply the mask by
    ``model.named_parameters()``), so masks interchange with the official code.
    ``target_filter(name, module)`` sees module names (``model.named_modules()``; for our
    wrapper's factors ``<wrapper>.lora_A``/``.lora_B``).

    ``adapters`` (``target="lora"`` only): the PEFT adapter(s) to prune; default the model's
    active adapter(s), which with the official flow (alignment adapter merged, user adapter
    loaded) is the user's fine-tuning adapter. Inactive adapters are never pruned by default.

    Raises ``ValueError`` when nothing matches (listing candidate module names), for an adapter
    name that is not loaded (listing the loaded ones), when a selected LoRA adapter has been
    merged into the base weights (its factors no longer act on the output), and for quantised
    targets (packed weights cannot be zeroed)."""
    if target not in ("lora", "qkv", "custom"):
        raise ValueError(f"target must be 'lora', 'qkv' or 'custom', got {target!r}")
    if target == "custom" and target_filter is None:
        raise ValueError("target='custom' needs target_filter(name, module) -> bool")
    if adapters is not None and target != "lora":
        raise ValueError(
            f"adapters={adapters!r} selects LoRA adapters; it applies to target='lora' only "
            f"(got target={target!r})"
        )
    chosen = _chosen_adapters(model, adapters) if target == "lora" else None
    merged = _merged(model, chosen) if target == "lora" else []
    if merged:
        raise ValueError(
            f"LoRA adapter(s) already merged into the base weights ({', '.join(merged[:4])}"
            f"{' ...' if len(merged) > 4 else ''}): unmerge them (PEFT: model.unmerge_adapter()) "
            "before pruning, or prune the full weights with target='qkv'"
        )
    peft_factor_ids = {
        id(f)
        for _, m in _peft_lora_layers(model)
        for d in (m.lora_A, getattr(m, "lora_B", {}))
        for f in d.values()
    }
    found: dict = {}
    for name, m in model.named_modules():
        if target == "lora":
            if isinstance(getattr(m, "lora_A", None), nn.Parameter):
                found[f"{name}.lora_A"] = LoRAFactor(m, "A")
                found[f"{name}.lora_B"] = LoRAFactor(m, "B")
            elif isinstance(getattr(m, "lora_A", None), nn.ModuleDict):
                for a in chosen or []:
                    for which in ("lora_A", "lora_B"):
                        d = getattr(m, which, None)
                        f = d[a] if d is not None and a in d else None
                        if isinstance(f, nn.Linear):
                            found[f"{name}.{which}.{a}"] = f
            elif (
                isinstance(m, nn.Linear)
                and id(m) not in peft_factor_ids
                and ("lora_A" in name or "lora_B" in name)
            ):
                found[name] = m
        elif target == "qkv":
            if _QKV.search(name):
                inner = getattr(m, "base", None) or getattr(m, "base_layer", None)
                if not isinstance(m, nn.Linear) and isinstance(inner, nn.Linear):
                    m = inner  # a LoRA wrapper (ours or PEFT's): its full base weight
                if not isinstance(m, nn.Linear):
                    raise ValueError(
                        f"{name} is a {type(m).__name__}, not nn.Linear; pass target='custom' "
                        "with a target_filter"
                    )
                found[name] = m
            elif name.endswith("c_attn") and target_filter is None:
                raise ValueError(
                    f"{name} is a GPT-2 style fused c_attn (Conv1D, weight laid out d_in x d_out); "
                    "target='qkv' expects q_proj/k_proj/v_proj. Pass target='custom' with a "
                    "target_filter for nn.Linear layers"
                )
        elif isinstance(m, nn.Linear) and target_filter(name, m):
            found[name] = m
    if target_filter is not None and target != "custom":
        found = {
            k: v
            for k, v in found.items()
            if target_filter(k, v if isinstance(v, nn.Module) else v.wrapper)
        }
    if not found:
        candidates = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)][:12]
        raise ValueError(
            f"no target layers found for target={target!r}"
            + (" (is the LoRA adapter attached and not merged?)" if target == "lora" else "")
            + (f" among adapters {chosen}" if chosen else "")
            + f"; nn.Linear modules in the model: {candidates or 'none'}"
        )
    for name, t in found.items():
        if _is_quantised(t if isinstance(t, nn.Module) else t.wrapper) and target != "lora":
            raise ValueError(
                f"{name} is quantised ({type(t).__name__}); its packed weights cannot be zeroed: "
                "prune the LoRA adapter (target='lora') instead"
            )
    return _by_parameter_name(model, found)


def _by_parameter_name(model: nn.Module, found: dict) -> dict:
    """Re-key ``{module name: target}`` by the target weight's ``named_parameters()`` name."""
    pname = {id(p): n for n, p in model.named_parameters(remove_duplicate=False)}
    out: dict = {}
    for name, t in found.items():
        key = pname.get(id(t.weight))
        if key is None:  # a weight that is not a registered parameter of ``model``
            key = name if isinstance(t, LoRAFactor) else f"{name}.weight"
        out.setdefault(key, t)  # a weight shared by two modules is pruned once
    return out
