"""The losses of knowledge swapping (official ``engine_cl.py``, from GS-LoRA).

* ``bounded_forget_loss = relu(BND - CE(f(x_f), y_f))``: gradient ascent on the forget set's
  cross-entropy until it exceeds ``BND``, then exactly zero.
* ``group_sparse_loss = sum_g sqrt(sum_{P in g} ||P||_F^2 + eps)``: pushes whole LoRA groups to zero.
* Stage losses (classification weights): learning ``CE(D_l) + beta CE(D_r) + alpha L_gs``;
  forgetting ``CE(D_r') + beta relu(BND - CE(D_f)) + alpha L_gs``; simultaneous
  ``CE(D_l) + CE(D_r) + beta relu(BND - CE(D_f)) + alpha L_gs``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from icml25._validate import as_real

__all__ = ["bounded_forget_loss", "group_sparse_loss", "swap_losses"]


def bounded_forget_loss(logits: Tensor, target: Tensor, bnd: float) -> Tensor:
    """``relu(bnd - CE(logits, target))`` (mean cross-entropy over the batch). NaN logits give
    a NaN loss (propagated, as ``F.cross_entropy`` does; :class:`KnowledgeSwapper` refuses
    non-finite inputs and stops on a non-finite loss)."""
    bnd = as_real("bnd", bnd, low=0, low_open=True)  # 0 would make the loss identically 0
    return torch.relu(bnd - F.cross_entropy(logits, target))


def group_sparse_loss(groups: Sequence[Sequence[Tensor]], eps: float = 1e-12) -> Tensor:
    """``sum_g sqrt(sum_{P in g} ||P||_F^2 + eps)``, summed in float32 or wider (fp16 / bf16
    parameters included: 1e-12 underflows in fp16). ``eps`` smooths the norm at an all-zero group
    (the official code has none and relies on ``A != 0`` at init); ``eps = 0`` is the exact group
    norm, whose gradient at an all-zero group is the subgradient 0. No groups: 0."""
    eps = as_real("eps", eps, low=0)
    terms = []
    for g in groups:
        if not len(g):
            continue
        v = sum(
            (q * q).sum() for q in (p.to(torch.promote_types(p.dtype, torch.float32)) for p in g)
        )
        v = v + eps
        pos = v > 0  # sqrt's derivative at 0 is infinite: 0 * inf would be a NaN gradient
        terms.append(torch.where(pos, torch.sqrt(torch.where(pos, v, torch.ones_like(v))), v * 0))
    if not terms:
        return torch.zeros(())
    return torch.stack(terms).sum()


def swap_losses(
    stage: str,
    *,
    retain: tuple[Tensor, Tensor] | None,
    forget: tuple[Tensor, Tensor] | None,
    learn: tuple[Tensor, Tensor] | None,
    l_gs: Tensor,
    beta_retain: float = 0.2,  # official classification
    beta_forget: float = 0.2,  # official classification
    alpha: float = 0.005,  # official classification
    bnd: float = 105.0,  # official classification
    w_learn: float = 1.0,
    cross_entropy: Callable[[Tensor, Tensor], Tensor] = F.cross_entropy,
) -> dict[str, Tensor]:
    """The stage's loss terms from ``(logits, labels)`` pairs; ``"total"`` is what is minimised.

    ``stage``: ``"learn"``, ``"forget"`` or ``"simultaneous"``; ``retain`` is the stage's main batch
    (retained classes, plus learned ones in the forget stage of learn-then-forget).
    ``cross_entropy(logits, labels)``: the mean cross-entropy of a batch; data-parallel training
    passes :func:`icml25.knowledge_swap.parallel.global_cross_entropy` (the global batch's mean,
    which the bounded forget term is then gated on)."""
    # each stage's supervised terms and their weights, in the order they are summed
    weights = {
        "learn": {"learn": w_learn, "retain": beta_retain},
        "forget": {"retain": 1.0, "forget": beta_forget},
        "simultaneous": {"learn": w_learn, "retain": 1.0, "forget": beta_forget},
    }.get(stage)
    if weights is None:
        raise ValueError(f"stage must be 'learn', 'forget' or 'simultaneous', got {stage!r}")
    bnd = as_real("bnd", bnd, low=0, low_open=True)
    alpha = as_real("alpha", alpha, low=0)
    beta_retain, beta_forget, w_learn = (
        as_real(n, v, low=0)
        for n, v in (
            ("beta_retain", beta_retain),
            ("beta_forget", beta_forget),
            ("w_learn", w_learn),
        )
    )
    batches = {"learn": learn, "retain": retain, "forget": forget}
    out: dict[str, Tensor] = {"gs": l_gs}
    total = alpha * l_gs
    for name, weight in weights.items():
        if batches[name] is None:
            continue
        term = out[f"ce_{name}"] = cross_entropy(*batches[name])
        if name == "forget":
            term = out["forget"] = torch.relu(bnd - term)
        total = total + weight * term
    out["total"] = total
    return out
