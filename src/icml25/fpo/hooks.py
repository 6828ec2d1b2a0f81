"""The residual stream of decoder block ℓ, captured with its autograd graph (paper §3, Eq. 10).

FPO reads the SAE features of the residual-stream output of one decoder block. Gemma Scope SAEs
were trained on that pre-final-norm state, so the default site is a forward hook on block ℓ: for
ℓ < L - 1 it equals ``hidden_states[ℓ + 1]``, but for the last block most architectures (GPT-2,
Llama, Gemma-2) return the *normed* state in ``hidden_states[-1]``. The official code feeds
``hidden_states[-1]`` to the SAE; ``site="hf_hidden_states"`` reproduces that (docs/fpo.md,
"Decisions").
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from icml25._validate import as_int

__all__ = ["SITES", "ResidualCapture", "get_decoder_layers", "residual_stream", "resolve_layer"]

#: where the SAE reads the model: a hook on block ℓ's residual output (paper), HF's
#: ``hidden_states[ℓ + 1]`` (for the last block: ``hidden_states[-1]``, post final norm, as the
#: official code does), or the output of block ℓ's MLP (the "MLP" rows of paper Table 3)
SITES = ("hook", "hf_hidden_states", "mlp")

# attribute paths of the decoder-block list, by architecture family
_LAYER_PATHS = (
    "model.layers",  # Llama, Gemma, Gemma-2, Qwen, Mistral, Phi-3 (ForCausalLM wrappers)
    "layers",  # the bare *Model classes of the same families
    "transformer.h",  # GPT-2, GPT-J, Bloom (GPT2LMHeadModel)
    "h",  # GPT2Model
    "gpt_neox.layers",  # GPT-NeoX, Pythia
    "model.decoder.layers",  # OPT
    "model.language_model.layers",  # multimodal wrappers (Gemma-3, Llava)
)


def _unwrap(model: nn.Module) -> nn.Module:
    # PEFT (PeftModel -> LoraModel -> the base model) and DDP/FSDP wrappers
    for _ in range(4):
        inner = getattr(model, "base_model", None)
        if isinstance(inner, nn.Module) and inner is not model and hasattr(model, "peft_config"):
            model = getattr(inner, "model", inner)
            continue
        inner = getattr(model, "module", None)
        if isinstance(inner, nn.Module) and type(model).__name__ in (
            "DistributedDataParallel",
            "DataParallel",
            "FullyShardedDataParallel",
        ):
            model = inner
            continue
        break
    return model


def get_decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The ``nn.ModuleList`` of decoder blocks of a Hugging Face causal LM (GPT-2, Llama, Gemma,
    Qwen, Mistral, GPT-NeoX, OPT; PEFT- and DDP-wrapped models too).

    Raises ``ValueError`` for an unknown layout: pass ``module=`` to :class:`ResidualCapture`.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch nn.Module, got {type(model).__name__}")
    base = _unwrap(model)
    for path in _LAYER_PATHS:
        obj: Any = base
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj) > 0:
            return obj
    raise ValueError(
        f"cannot find the decoder blocks of {type(base).__name__} (looked for "
        f"{', '.join(_LAYER_PATHS)}); pass the block itself as ResidualCapture(model, layer, "
        "module=model.<path>[layer])"
    )


def resolve_layer(model: nn.Module, layer: int) -> int:
    """``layer`` as a non-negative block index (negative counts from the end), checked against
    the model's depth."""
    layer = as_int("layer", layer)
    n = len(get_decoder_layers(model))
    if not -n <= layer < n:
        raise ValueError(
            f"layer {layer} is out of range for a model with {n} decoder blocks "
            f"(valid: 0..{n - 1}, or -{n}..-1 from the end)"
        )
    return layer % n


class ResidualCapture:
    """Context manager: a forward hook on decoder block ``layer`` that keeps its output.

    ``with ResidualCapture(model, layer) as cap: out = model(...); h = cap.output`` gives the
    ``(B, T, d)`` residual stream after block ``layer`` (0-based), still attached to the graph,
    so a loss on ``h`` back-propagates into block ``layer`` and every block below it.

    With activation checkpointing the block runs twice (forward, then recompute in backward);
    the first output is kept (``keep="first"``), the one the loss is computed from. ``reset()``
    clears it between forwards inside one ``with``. ``module=`` hooks any module instead (an
    architecture this module does not know, or an MLP output for the paper's Table 3 sites).
    """

    def __init__(
        self, model: nn.Module, layer: int | None = None, *, module: nn.Module | None = None
    ) -> None:
        if module is None:
            if layer is None:
                raise ValueError("give a block index layer=... or a module=... to hook")
            self.layer = resolve_layer(model, layer)
            module = get_decoder_layers(model)[self.layer]
        elif not isinstance(module, nn.Module):
            raise TypeError(f"module must be an nn.Module, got {type(module).__name__}")
        else:
            self.layer = layer
        self.module = module
        self.output: Tensor | None = None
        self.calls = 0
        self._handle = None

    def _hook(self, _mod: nn.Module, _inp: Any, out: Any) -> None:
        self.calls += 1
        if self.output is not None:
            return  # recompute under activation checkpointing: keep the first capture
        h = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(h, Tensor) and hasattr(h, "last_hidden_state"):
            h = h.last_hidden_state
        if not isinstance(h, Tensor):
            raise TypeError(f"the hooked module returned {type(out).__name__}, not a tensor")
        self.output = h

    def reset(self) -> None:
        self.output, self.calls = None, 0

    def __enter__(self) -> ResidualCapture:
        self.reset()
        self._handle = self.module.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def residual_stream(
    model: nn.Module,
    layer: int,
    input_ids: Tensor,
    attention_mask: Tensor,
    *,
    site: str = "hook",
    **forward_kwargs: Any,
) -> tuple[Any, Tensor]:
    """Run ``model`` once; return ``(outputs, h)`` with ``h`` the ``(B, T, d)`` residual stream
    after block ``layer`` read at ``site`` (see :data:`SITES`)."""
    if site not in SITES:
        raise ValueError(f"site must be one of {SITES}, got {site!r}")
    layer = resolve_layer(model, layer)
    if site in ("hook", "mlp"):
        block = get_decoder_layers(model)[layer]
        mlp = getattr(block, "mlp", None)
        if site == "mlp" and not isinstance(mlp, nn.Module):
            raise ValueError(f"block {layer} of {type(model).__name__} has no .mlp module")
        with ResidualCapture(model, layer, module=mlp if site == "mlp" else None) as cap:
            out = model(input_ids=input_ids, attention_mask=attention_mask, **forward_kwargs)
        if cap.output is None:
            raise RuntimeError(f"decoder block {layer} did not run in the forward pass")
        return out, cap.output
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        output_hidden_states=True,
        **forward_kwargs,
    )
    return out, out.hidden_states[layer + 1]
