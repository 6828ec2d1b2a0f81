"""Which parameters SWAN updates: hidden ``nn.Linear`` matrices; everything else goes to AdamW.

The paper follows the GaLore benchmark split (unverified for SWAN, documented for its follow-up
SinkGD): attention and MLP projections are SWAN matrices; token embeddings, the LM head, norm gains
and biases keep Adam. Tied embeddings are found by identity, so a weight shared by the input
embedding and the head is routed to AdamW once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

__all__ = ["describe_groups", "paper_param_groups", "swan_param_groups"]


def _conv1d_type():
    try:
        from transformers.pytorch_utils import Conv1D
    except Exception:  # noqa: BLE001 - transformers is optional
        return None
    return Conv1D


def _embedding_ids(model: nn.Module) -> set[int]:
    ids = set()
    for getter in ("get_input_embeddings", "get_output_embeddings"):
        fn = getattr(model, getter, None)
        if fn is None:
            continue
        try:
            module = fn()
        except (NotImplementedError, AttributeError):
            continue
        weight = getattr(module, "weight", None)
        if weight is not None:
            ids.add(id(weight))
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            ids.add(id(module.weight))
    return ids


def swan_param_groups(
    model: nn.Module,
    lr: float | None = None,
    *,
    adamw_lr: float | None = None,
    scale: float | None = None,
    weight_decay: float | None = None,
    include: Callable[[str, nn.Module, nn.Parameter], bool] | None = None,
    min_dim: int = 2,
) -> list[dict]:
    """Two parameter groups for :class:`~icml25.swan.SWAN`: SWAN matrices and the AdamW rest.

    A parameter is SWAN iff it is the ``.weight`` of an ``nn.Linear`` (or of an HF ``Conv1D``, which
    stores ``(in, out)``: those get their own group with ``norm_dim=0``), or a projection matrix
    of an ``nn.MultiheadAttention`` (its fused ``in_proj_weight`` gets a group with ``blocks=3``:
    the Q, K and V blocks are whitened separately), with both dimensions
    ``>= min_dim``, it is not an input/output embedding (by identity: tied weights included), and
    ``include(name, module, param)`` (if given) agrees. Frozen parameters are left out. Each group
    carries ``"names"`` for reporting. ``lr``, ``scale`` and ``weight_decay`` are written into the
    SWAN groups only when given (else the optimizer's own values apply: ``SWAN(groups, lr=...)``);
    ``weight_decay`` is the SWAN matrices' decoupled decay (the AdamW groups take the optimizer's
    ``adamw_weight_decay``). ``adamw_lr`` (default ``lr``) is the AdamW groups' lr. GPT-2's fused
    ``c_attn`` (a ``Conv1D`` of shape ``(E, 3E)``) gets ``blocks=3`` like ``in_proj_weight``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    buckets = _route_parameters(model, include=include, min_dim=min_dim)
    return _assemble_groups(
        buckets, lr=lr, adamw_lr=adamw_lr, scale=scale, weight_decay=weight_decay
    )


#: nn.MultiheadAttention keeps Q, K, V in one (3E, E) in_proj_weight (or three q/k/v_proj_weight
#: matrices when kdim/vdim differ); its out_proj is an nn.Linear
_MHA_MATRICES = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight")

#: the SWAN groups in the order they are listed, each with its routing keys: plain matrices
#: (rows along dim -1), HF Conv1D matrices stored (in, out), GPT-2's fused c_attn (column blocks
#: of the (in, out) Conv1D: Q, K, V whitened separately) and nn.MultiheadAttention's fused
#: in_proj_weight (whiten the Q, K and V blocks of the fused matrix separately)
_SWAN_GROUPS = (
    ("swan", {"norm_dim": -1}),
    ("swan_t", {"norm_dim": 0}),
    ("swan_t_qkv", {"norm_dim": 0, "blocks": 3}),
    ("swan_qkv", {"norm_dim": -1, "blocks": 3}),
)


def _route_parameters(
    model: nn.Module,
    *,
    include: Callable[[str, nn.Module, nn.Parameter], bool] | None,
    min_dim: int,
) -> dict[str, tuple[list, list]]:
    """Step 1: every trainable parameter, once (shared ones by identity), into a bucket of
    ``(params, names)``: one per SWAN group of :data:`_SWAN_GROUPS`, and ``"rest"`` for AdamW."""
    conv1d = _conv1d_type()
    embeddings = _embedding_ids(model)
    seen: set[int] = set()
    buckets: dict[str, tuple[list, list]] = {
        key: ([], []) for key in ("swan", "swan_t", "swan_qkv", "swan_t_qkv", "rest")
    }
    for mod_name, module in model.named_modules():
        for p_name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            name = f"{mod_name}.{p_name}" if mod_name else p_name
            key = "rest"
            if _is_swan_matrix(
                module, p_name, p, name, conv1d, embeddings, include=include, min_dim=min_dim
            ):
                key = _swan_bucket(module, mod_name, p_name, p, conv1d)
            buckets[key][0].append(p)
            buckets[key][1].append(name)
    return buckets


def _is_swan_matrix(
    module: nn.Module,
    p_name: str,
    p: nn.Parameter,
    name: str,
    conv1d,
    embeddings: set[int],
    *,
    include: Callable[[str, nn.Module, nn.Parameter], bool] | None,
    min_dim: int,
) -> bool:
    """The SWAN rule: the weight of an ``nn.Linear``/``Conv1D`` or an attention projection
    matrix, 2-D with both sides ``>= min_dim``, not an embedding, and ``include`` agrees."""
    is_linear = isinstance(module, nn.Linear) or (conv1d is not None and isinstance(module, conv1d))
    mha_matrix = isinstance(module, nn.MultiheadAttention) and p_name in _MHA_MATRICES
    return (
        (is_linear and p_name == "weight" or mha_matrix)
        and p.ndim == 2
        and min(p.shape) >= min_dim
        and id(p) not in embeddings
        and (include is None or include(name, module, p))
    )


def _swan_bucket(module: nn.Module, mod_name: str, p_name: str, p: nn.Parameter, conv1d) -> str:
    """Which SWAN group a SWAN matrix joins (its row axis and its fused Q/K/V blocks)."""
    key = "swan_t" if (conv1d is not None and isinstance(module, conv1d)) else "swan"
    if isinstance(module, nn.MultiheadAttention) and p_name == "in_proj_weight":
        return "swan_qkv"
    if key == "swan_t" and mod_name.endswith("c_attn") and p.shape[1] == 3 * p.shape[0]:
        return "swan_t_qkv"  # GPT-2's fused Q/K/V, stored (in, out) = (E, 3E)
    return key


def _assemble_groups(
    buckets: dict[str, tuple[list, list]],
    *,
    lr: float | None,
    adamw_lr: float | None,
    scale: float | None,
    weight_decay: float | None,
) -> list[dict]:
    """Step 2: the non-empty buckets as param groups; ``lr``, ``scale`` and ``weight_decay`` only
    where given (SWAN groups), ``adamw_lr`` (default ``lr``) for the AdamW group."""
    given = {
        k: v
        for k, v in (("lr", lr), ("scale", scale), ("weight_decay", weight_decay))
        if v is not None
    }
    groups = []
    for key, routing in _SWAN_GROUPS:
        params, names = buckets[key]
        if params:
            groups.append({"params": params, "names": names, "use_swan": True, **given, **routing})
    params, names = buckets["rest"]
    if params:
        groups.append(
            {
                "params": params,
                "names": names,
                "use_swan": False,
                **(
                    {"lr": adamw_lr if adamw_lr is not None else lr}
                    if adamw_lr is not None or lr is not None
                    else {}
                ),
            }
        )
    return groups


def paper_param_groups(model: nn.Module, lr: float = 0.02, scale: float = 0.05) -> list[dict]:
    """The recipe third-party ports attribute to the paper (unverified): global lr 0.02, SWAN
    groups scaled by 0.05 (per-entry RMS step 1e-3), AdamW at the global lr for the rest."""
    return swan_param_groups(model, lr, scale=scale, adamw_lr=lr)


def describe_groups(groups: Sequence[dict]) -> str:
    """A Markdown table: parameter name, shape, rule, norm_dim."""
    lines = ["| name | shape | rule | norm_dim |", "|---|---|---|---|"]
    for g in groups:
        names = g.get("names") or [f"param{i}" for i in range(len(g["params"]))]
        rule = "SWAN" if g.get("use_swan") else "AdamW"
        for name, p in zip(names, g["params"]):
            nd = g.get("norm_dim", -1) if g.get("use_swan") else "—"
            lines.append(f"| {name} | {tuple(p.shape)} | {rule} | {nd} |")
    return "\n".join(lines)
