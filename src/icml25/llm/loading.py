"""One loader for every model the library loads by path or hub id, with ``device`` and ``dtype``.

``load_model(path, kind, device=..., dtype=...)`` is what every command and every class that takes
a path calls, so that an 8B checkpoint loads in its own precision on the GPU when there is one,
rather than in float32 on the CPU (``transformers``' default). Kinds:

=============  ====================================================  ===========================
kind           auto class                                            used by
=============  ====================================================  ===========================
``causal_lm``  ``AutoModelForCausalLM``                              ``HFChat``, training loops
``seq_cls``    ``AutoModelForSequenceClassification``                reward models
``seq2seq``    ``AutoModelForSeq2SeqLM``                             translation (TWA)
``vision_lm``  ``AutoModelForImageTextToText``                       DPS vision-language models
``clip``       ``AutoModel`` (a ``CLIPModel``)                       topo_detect
``encoder``    ``AutoModel``                                         sentence embeddings (RLTHF)
=============  ====================================================  ===========================

``device``: ``"auto"`` (the first CUDA device when there is one, else the CPU), ``"cpu"``,
``"cuda"``, ``"cuda:1"``, ``"mps"`` or a ``torch.device``. ``dtype``: ``"auto"`` (the checkpoint's
own ``torch_dtype``/``dtype``: bf16 for Llama-3, fp32 for GPT-2), ``"bf16"``/``"bfloat16"``,
``"fp16"``/``"float16"``, ``"fp32"``/``"float32"`` or a ``torch.dtype``. ``device_map`` (e.g.
``"auto"``, needs ``accelerate``) spreads a model that does not fit one device; it replaces
``device``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

__all__ = [
    "DTYPES",
    "MODEL_KINDS",
    "add_model_args",
    "check_context_length",
    "context_length",
    "load_model",
    "load_or_place",
    "load_processor",
    "load_tokenizer",
    "model_kwargs",
    "resolve_device",
    "resolve_dtype",
]

#: ``kind`` -> the ``transformers`` auto class that loads it.
MODEL_KINDS = {
    "causal_lm": "AutoModelForCausalLM",
    "seq_cls": "AutoModelForSequenceClassification",
    "seq2seq": "AutoModelForSeq2SeqLM",
    "vision_lm": "AutoModelForImageTextToText",
    "clip": "AutoModel",
    "encoder": "AutoModel",
}

#: the spellings ``dtype`` accepts (besides ``"auto"`` and a ``torch.dtype``).
DTYPES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
}


def resolve_device(device: Any = "auto") -> Any:
    """``"auto"`` / ``None`` -> ``cuda`` when available, else ``cpu``; any other value is checked
    and returned as a ``torch.device`` (``ValueError`` naming it when torch does not know it, or
    when it names a CUDA device on a machine without one)."""
    import torch

    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(
            f"device must be 'auto', 'cpu', 'cuda', 'cuda:N', 'mps' or a torch.device, got {device!r}"
        ) from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but torch sees no CUDA device; use 'cpu' or 'auto'")
    mps = getattr(torch.backends, "mps", None)
    if dev.type == "mps" and not (mps is not None and mps.is_available()):
        raise ValueError(f"device={device!r} but torch has no MPS device here; use 'cpu' or 'auto'")
    return dev


def resolve_dtype(dtype: Any = "auto") -> Any:
    """``"auto"`` / ``None`` -> ``"auto"`` (the checkpoint's own dtype, as ``from_pretrained``
    reads it); a name from :data:`DTYPES` or a floating ``torch.dtype`` -> that ``torch.dtype``."""
    import torch

    if dtype is None or dtype == "auto":
        return "auto"
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating dtype, got {dtype}")
        return dtype
    if isinstance(dtype, str) and dtype.lower().removeprefix("torch.") in DTYPES:
        return getattr(torch, DTYPES[dtype.lower().removeprefix("torch.")])
    raise ValueError(
        f"dtype must be 'auto', one of {sorted(DTYPES)} or a torch.dtype, got {dtype!r}"
    )


def _check_source(name: Any) -> str:
    """A path-like name must exist: otherwise transformers would read it as a hub id and answer
    with a confusing hub error."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name:
        raise TypeError(f"expected a local folder or a hub id (a string), got {name!r:.80}")
    looks_local = os.path.isabs(name) or name.startswith(("./", "../", "~"))
    path = os.path.expanduser(name)
    if looks_local and not os.path.isdir(path):
        raise FileNotFoundError(
            f"no model folder {name!r}: pass an existing local folder (save_pretrained output) "
            "or a hub id such as 'Qwen/Qwen2.5-0.5B-Instruct'"
        )
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "config.json")):
        raise FileNotFoundError(
            f"{name!r} has no config.json: not a save_pretrained folder (a PEFT adapter folder "
            "goes on top of its base model, e.g. with peft.PeftModel.from_pretrained)"
        )
    return path


def load_model(
    name_or_path: Any,
    kind: str = "causal_lm",
    *,
    device: Any = "auto",
    dtype: Any = "auto",
    device_map: Any = None,
    **kwargs: Any,
) -> Any:
    """Load a ``transformers`` model of ``kind`` (see :data:`MODEL_KINDS`) from a local folder or
    a hub id, in eval mode.

    Args:
        name_or_path: a ``save_pretrained`` folder or a hub id (a hub id downloads only when you
            ask for it; offline, a missing folder is a ``FileNotFoundError``).
        kind: ``"causal_lm"``, ``"seq_cls"``, ``"seq2seq"``, ``"vision_lm"``, ``"clip"``,
            ``"encoder"``.
        device: ``"auto"`` (CUDA when available, else CPU) or an explicit device; ignored when
            ``device_map`` is given.
        dtype: ``"auto"`` (the checkpoint's own dtype), ``"bf16"``, ``"fp16"``, ``"fp32"`` or a
            ``torch.dtype``.
        device_map: passed to ``from_pretrained`` (``"auto"`` shards over the GPUs; needs
            ``accelerate``).
        **kwargs: more ``from_pretrained`` arguments (``num_labels=1``, ``revision=...``).

    Returns:
        The model in eval mode, on ``device`` (or placed by ``device_map``), in ``dtype``.
    """
    import transformers

    if kind not in MODEL_KINDS:
        raise ValueError(f"kind must be one of {sorted(MODEL_KINDS)}, got {kind!r}")
    source = _check_source(name_or_path)
    torch_dtype = resolve_dtype(dtype)
    auto = getattr(transformers, MODEL_KINDS[kind])
    _warn_if_other_head(source, kind)
    if device_map is not None:
        try:
            import accelerate  # noqa: F401
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise ImportError("device_map needs accelerate: pip install accelerate") from exc
        model = auto.from_pretrained(source, dtype=torch_dtype, device_map=device_map, **kwargs)
    else:
        dev = resolve_device(device)
        model = auto.from_pretrained(source, dtype=torch_dtype, **kwargs).to(dev)
    return model.eval()


def load_or_place(
    model: Any,
    kind: str = "causal_lm",
    *,
    device: Any = None,
    dtype: Any = "auto",
    device_map: Any = None,
    **kwargs: Any,
) -> Any:
    """What a class that takes "a model or its path" does with it: a path (``str`` or
    ``os.PathLike``) loads through :func:`load_model` (``device=None`` meaning ``"auto"``); a
    loaded model stays where it is unless ``device`` is given and keeps its dtype unless ``dtype``
    is (``device_map`` applies to a path only: a loaded model was placed by its owner). A bad
    ``dtype`` or ``device`` fails before anything loads."""
    torch_dtype = resolve_dtype(dtype)
    if isinstance(model, (str, os.PathLike)):
        return load_model(
            model,
            kind,
            device="auto" if device is None else device,
            dtype=dtype,
            device_map=device_map,
            **kwargs,
        )
    if device_map is not None:
        raise ValueError(
            "device_map applies when a path is loaded; a loaded model is placed by you"
        )
    if device is not None:
        model = model.to(resolve_device(device))
    if torch_dtype != "auto":
        model = model.to(torch_dtype)
    return model


def _warn_if_other_head(source: str, kind: str) -> None:
    """Warn when a local checkpoint saved with another head is loaded as ``causal_lm``: a reward
    model's folder then gets a randomly initialised LM head, which transformers reports only in
    its load log. (The other way round is deliberate: a reward model starts from a causal LM, its
    score head new.)"""
    import json
    import warnings

    config = os.path.join(source, "config.json")
    if kind != "causal_lm" or not os.path.isfile(config):
        return
    with open(config, encoding="utf-8") as f:
        archs = json.load(f).get("architectures") or []
    if archs and not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        warnings.warn(
            f"{source!r} was saved as {archs[0]}; kind='causal_lm' gives it a language-model head "
            f"that is not in the checkpoint (randomly initialised). Pass the kind that matches "
            f"(one of {sorted(MODEL_KINDS)})",
            UserWarning,
            stacklevel=3,
        )


def load_tokenizer(name_or_path: Any, **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained`` with the same path check as :func:`load_model`."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(_check_source(name_or_path), **kwargs)


def load_processor(name_or_path: Any, **kwargs: Any) -> Any:
    """``AutoProcessor.from_pretrained`` (vision-language models, CLIP), with the path check of
    :func:`load_model`; an ``ImportError`` naming the ``vision`` extra when the processor needs
    ``torchvision`` or Pillow and they are missing."""
    from transformers import AutoProcessor

    source = _check_source(name_or_path)
    try:
        return AutoProcessor.from_pretrained(source, **kwargs)
    except ImportError as exc:
        raise ImportError(
            f"the processor of {source!r} needs a package that is not installed ({exc}); "
            "pip install 'icml25[vision]'"
        ) from exc


# -- context length ------------------------------------------------------------------------------


def context_length(model: Any) -> int | None:
    """The longest sequence ``model`` was built for (``max_position_embeddings``, ``n_positions``
    or ``max_sequence_length`` of its (text) config), or ``None`` when the config states none
    (T5's relative positions)."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        n = getattr(text, attr, None)
        if isinstance(n, int) and n > 0:
            return n
    return None


def check_context_length(
    model: Any, n_prompt: int, n_new: int = 0, *, what: str = "prompt"
) -> None:
    """``ValueError`` when ``n_prompt`` (+ ``n_new`` generated) tokens exceed the model's context
    (:func:`context_length`): a prompt the model cannot see whole gives a reply that means
    nothing, so it is refused, never generated."""
    limit = context_length(model)
    if limit is not None and n_prompt + n_new > limit:
        room = f" + {n_new} new tokens" if n_new else ""
        raise ValueError(
            f"{what} has {n_prompt} tokens{room}, more than the model's context of {limit} "
            "positions; shorten it (or lower max_tokens)"
        )


# -- command-line flags --------------------------------------------------------------------------


def add_model_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``--device`` and ``--dtype`` (and ``--device-map``) to a command that loads a model."""
    parser.add_argument(
        "--device",
        default="auto",
        help="where to load the model: auto (GPU when there is one), cpu, cuda, cuda:N, mps",
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        help="model precision: auto (the checkpoint's own), bf16, fp16 or fp32",
    )
    parser.add_argument(
        "--device-map",
        default=None,
        help="shard the model over devices (e.g. auto; needs accelerate); replaces --device",
    )
    return parser


def model_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """``device``/``dtype``/``device_map`` for :func:`load_model` from the flags of
    :func:`add_model_args`, validated (``ValueError`` naming the flag)."""
    device = getattr(args, "device", "auto")
    dtype = getattr(args, "dtype", "auto")
    try:
        resolve_dtype(dtype)
    except ValueError as exc:
        raise ValueError(f"--dtype: {exc}") from None
    if getattr(args, "device_map", None) is None:
        try:
            resolve_device(device)
        except ValueError as exc:
            raise ValueError(f"--device: {exc}") from None
    return {"device": device, "dtype": dtype, "device_map": getattr(args, "device_map", None)}
