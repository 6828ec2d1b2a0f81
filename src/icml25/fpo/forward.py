"""One policy pass over a preference batch (paper §3, "Phase 2"): response log-probs and, for
FPO, the pooled SAE codes of the residual stream at layer ℓ, from the same forward.

The batch is the ``2B``-row layout of :class:`~icml25.fpo.data.PreferenceCollator` (chosen rows,
then rejected rows). Position ids follow the attention mask, so left- and right-padded batches
give the same numbers; the model is called by keyword. Under ``torch.autocast`` (a bf16
checkpoint trained with float32 master weights) the SAE still encodes in its own dtype (float32).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from icml25.fpo.hooks import SITES, residual_stream
from icml25.fpo.logps import response_logps
from icml25.fpo.losses import POOL_MODES, pool_divisor, pool_positions
from icml25.fpo.sae import SparseAutoencoder
from icml25.llm.training import position_ids

__all__ = ["PassOutput", "pool_response_codes", "position_ids", "preference_pass"]


@dataclass
class PassOutput:
    """Per row ``(2B,)``: summed and mean response log-probs and lengths; ``codes`` ``(2B, m)``
    pooled SAE codes (None without an SAE); ``logits`` ``(2B, T, V)`` when asked for."""

    sum: Tensor
    mean: Tensor
    length: Tensor
    codes: Tensor | None = None
    logits: Tensor | None = None

    def halves(self, name: str) -> tuple[Tensor, Tensor]:
        x = getattr(self, name)
        n = x.shape[0] // 2
        return x[:n], x[n:]


def pool_response_codes(codes: Tensor, mask: Tensor, mode: str = "mean") -> Tensor:
    """:func:`~icml25.fpo.losses.pool_codes` for the codes of the pooled positions only:
    ``codes`` ``(N, m)`` are the rows of ``mask`` ``(B, T)`` that are True, in row-major order,
    where ``mask`` is :func:`~icml25.fpo.losses.pool_positions` of the response mask (the
    response tokens themselves for every mode but ``"official"``). Same result, without
    encoding the other positions."""
    if mode not in POOL_MODES:
        raise ValueError(f"pool mode must be one of {POOL_MODES}, got {mode!r}")
    rows = mask.nonzero()[:, 0]
    if codes.shape[0] != rows.shape[0]:
        raise ValueError(f"{codes.shape[0]} code rows for {rows.shape[0]} masked tokens")
    div = pool_divisor(mask.bool(), mode)
    dt = torch.promote_types(codes.dtype, torch.float32)
    s = torch.zeros(mask.shape[0], codes.shape[1], dtype=dt, device=codes.device)
    s = s.index_add(0, rows, codes.to(dt))
    return s / div.to(dt)


def _autocast_off(device_type: str) -> Any:
    """Leave an enclosing ``torch.autocast`` for the block (a no-op outside one)."""
    import contextlib

    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def preference_pass(
    model: nn.Module,
    batch: dict[str, Any],
    *,
    sae: SparseAutoencoder | None = None,
    layer: int | None = None,
    pool: str = "mean",
    site: str = "hook",
    keep_logits: bool = False,
    sae_dtype: torch.dtype | None = None,
    role: str = "model",
) -> PassOutput:
    """Run ``model`` once on ``batch`` (moved to the model's device).

    With ``sae`` and ``layer``: capture the residual stream after block ``layer`` at ``site``,
    encode the response tokens with the SAE (in ``sae_dtype``, default the SAE's own, float32
    recommended) and pool them (:func:`~icml25.fpo.losses.pool_codes`). Gradients flow from the
    codes into block ``layer`` and below. Raises ``FloatingPointError`` on NaN/inf logits or
    codes.
    """
    if (
        isinstance(batch, dict)
        and "input_ids" in batch
        and not isinstance(batch["input_ids"], Tensor)
    ):
        raise TypeError(
            f"batch['input_ids'] must be a tensor, got {type(batch['input_ids']).__name__}"
        )
    if not isinstance(batch, dict) or "input_ids" not in batch or "labels" not in batch:
        raise TypeError(
            "batch must be a dict with input_ids, attention_mask and labels (from "
            "PreferenceCollator)"
        )
    if site not in SITES:
        raise ValueError(f"site must be one of {SITES}, got {site!r}")
    from icml25.llm import check_context_length

    dev = next(model.parameters()).device
    ids = batch["input_ids"].to(dev)
    att = batch.get("attention_mask", torch.ones_like(ids)).to(dev)
    labels = batch["labels"].to(dev)
    # the longest row, not the padded width: a left-padded row starts at position 0
    check_context_length(model, int(att.sum(-1).max()), what="a preference row (prompt + response)")
    kw = {"position_ids": position_ids(att), "use_cache": False}
    if sae is not None:
        if layer is None:
            raise ValueError("an SAE needs the layer it reads (layer=...)")
        hidden = getattr(getattr(model, "config", None), "hidden_size", None)
        if hidden is not None and hidden != sae.d_in:
            raise ValueError(
                f"the SAE expects d_in={sae.d_in} but the model's hidden size is {hidden}"
            )
        out, h = residual_stream(model, layer, ids, att, site=site, **kw)
    else:
        out = model(input_ids=ids, attention_mask=att, **kw)
        h = None
    logits = out.logits
    if not bool(torch.isfinite(logits).all()):
        raise FloatingPointError(f"NaN or inf in the {role}'s logits")
    s, m, n = response_logps(logits, labels)
    codes = None
    if h is not None:
        # encode only the pooled positions (the response tokens, labels[t] = token t there;
        # for pool="official" the positions shifted as the official code shifts its labels)
        mask = pool_positions(labels != -100, pool)
        dt = sae_dtype or sae.W_enc.dtype
        if sae.W_enc.device != h.device:
            raise ValueError(
                f"the SAE is on {sae.W_enc.device} but the model's activations are on "
                f"{h.device}: move it with sae.to(device)"
            )
        with _autocast_off(h.device.type):  # a bf16 autocast forward still encodes in ``dt``
            codes = pool_response_codes(sae.encode(h[mask].to(dt)), mask, pool)
        if not bool(torch.isfinite(codes).all()):
            raise FloatingPointError(f"NaN or inf in the {role}'s pooled SAE codes")
    return PassOutput(s, m, n, codes, logits if keep_logits else None)
