"""Which weights Antidote prunes (spec "Which layers").

``"lora"`` (paper default): the user's fine-tuning adapter only: every ``nn.Linear`` whose name
contains ``lora_A`` or ``lora_B`` (PEFT: ``...self_attn.q_proj.lora_A.default``) and the ``lora_A`` /
``lora_B`` factors of our own :class:`icml25.lora.LoRALinear`. ``"qkv"`` (official full
fine-tuning mode): the ``q_proj``/``k_proj``/``v_proj`` weights. ``"custom"``: any ``nn.Linear``
accepted by ``target_filter(name, module)``. A target is anything with a ``weight`` of shape
``(d_out, d_in)`` and a way to see its input during a forward pass.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["LoRAFactor", "select_target_layers"]

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


def _merged_adapters(model: nn.Module) -> list[str]:
    out = []
    for name, m in model.named_modules():
        merged = getattr(m, "merged", None)
        if (
            isinstance(merged, bool)
            and merged
            and (hasattr(m, "lora_A") or hasattr(m, "merged_adapters"))
        ):
            out.append(name)
    return out


def select_target_layers(
    model: nn.Module,
    target: str = "lora",
    target_filter: Callable[[str, nn.Module], bool] | None = None,
) -> dict:
    """``{name: layer}`` of the weights to score and prune (spec ``select_target_layers``).

    Raises ``ValueError`` when nothing matches (listing candidate module names), when a LoRA
    adapter has been merged into the base weights (its factors no longer act on the output), and
    for quantised targets (packed weights cannot be zeroed)."""
    if target not in ("lora", "qkv", "custom"):
        raise ValueError(f"target must be 'lora', 'qkv' or 'custom', got {target!r}")
    if target == "custom" and target_filter is None:
        raise ValueError("target='custom' needs target_filter(name, module) -> bool")
    merged = _merged_adapters(model)
    if target == "lora" and merged:
        raise ValueError(
            f"LoRA adapter(s) already merged into the base weights ({', '.join(merged[:4])}"
            f"{' ...' if len(merged) > 4 else ''}): unmerge them (PEFT: model.unmerge_adapter()) "
            "before pruning, or prune the full weights with target='qkv'"
        )
    found: dict = {}
    for name, m in model.named_modules():
        if target == "lora":
            if hasattr(m, "lora_A") and isinstance(m.lora_A, nn.Parameter):
                found[f"{name}.lora_A"] = LoRAFactor(m, "A")
                found[f"{name}.lora_B"] = LoRAFactor(m, "B")
            elif isinstance(m, nn.Linear) and ("lora_A" in name or "lora_B" in name):
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
            + f"; nn.Linear modules in the model: {candidates or 'none'}"
        )
    for name, t in found.items():
        if _is_quantised(t if isinstance(t, nn.Module) else t.wrapper) and target != "lora":
            raise ValueError(
                f"{name} is quantised ({type(t).__name__}); its packed weights cannot be zeroed: "
                "prune the LoRA adapter (target='lora') instead"
            )
    return found
