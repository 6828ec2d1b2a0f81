"""The preference losses of paper Table 1, FPO's feature-level constraint (Eq. 10) and its
objective (Eq. 11).

Every method minimises ``-E log σ(u)``:

======== ===========================================================================
DPO      ``u = β[(LP_θ(y_w) - LP_ref(y_w)) - (LP_θ(y_l) - LP_ref(y_l))]``
SimPO    ``u = β A_θ(y_w) - β A_θ(y_l) - γ``
TDPO-1   ``u = DPO term - β(D_seq(y_l) - D_seq(y_w))``
TDPO-2   ``u = DPO term - α(β D_seq(y_l) - sg[β D_seq(y_w)])``
FPO      ``u = β A_θ(y_w) - β A_θ(y_l) - γ_ref-LN - α(β D_FPO(y_l) - sg[β D_FPO(y_w)])``
======== ===========================================================================

with ``γ_ref-LN = β A_ref(y_w) - β A_ref(y_l)`` (paper §3, the length-normalised reference
margin, precomputed offline) and ``D_FPO(y) = (1/k) Σ_{i ∈ I_k} (c̄_θ,i - c̄_ref,i)²`` over the union
``I_k`` of the top-k pooled SAE activations of policy and reference (Eq. 10). ``LP`` are summed
response log-probs, ``A`` their length-normalised means (:func:`~icml25.fpo.logps.response_logps`).
Defaults are the paper's Table 5 (β = 0.1, α = 0.5; SimPO β = 2, γ = 0.5) and the official code's
``k = 50``. All losses are computed in float32 or wider, with ``F.logsigmoid``.
"""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from icml25._validate import as_bool, as_int, as_real
from icml25.preference import dpo_losses

__all__ = [
    "INDEX_MODES",
    "POOL_MODES",
    "FPOOutput",
    "dpo_loss",
    "feature_discrepancy",
    "fpo_loss",
    "pool_codes",
    "pool_divisor",
    "pool_positions",
    "simpo_loss",
    "tdpo_loss",
    "top_k_active",
]

#: ``"union"``: top-k of policy ∪ top-k of reference (paper Eq. 10); ``"policy"``: the policy's
#: top-k only (official code)
INDEX_MODES = ("union", "policy")
#: ``"mean"``: masked mean over response tokens (paper text, "average pooling"); ``"sum"``: the
#: masked sum (Eq. 10 as typeset); ``"padded_mean"``: masked sum / padded length T;
#: ``"official"``: the official code's FeatureAlignment pooling (``fpo_get_batch_logps``): the
#: codes at the positions shifted as the labels are (position t counts when token t + 1 is a
#: response token), summed and divided by T - 1 (docs/fpo.md, "Official code vs paper")
POOL_MODES = ("mean", "sum", "padded_mean", "official")


class FPOOutput(NamedTuple):
    """``loss`` (mean), per-pair ``losses`` and logits ``u``, the discrepancies ``d_w``/``d_l``,
    and the implicit rewards ``β(A_θ - A_ref)`` (detached), all ``(B,)``."""

    loss: Tensor
    losses: Tensor
    u: Tensor
    d_w: Tensor
    d_l: Tensor
    reward_w: Tensor
    reward_l: Tensor


def _beta(beta: Any, name: str = "beta") -> float:
    return as_real(name, beta, low=0.0, low_open=True)


def _alpha(alpha: Any) -> float:
    return as_real("alpha", alpha, low=0.0)


def _vecs(names: tuple[str, ...], xs: tuple[Any, ...]) -> tuple[Tensor, ...]:
    for n, x in zip(names, xs):
        if not isinstance(x, Tensor):
            raise TypeError(f"{n} must be a tensor of shape (B,), got {type(x).__name__}")
    shapes = {tuple(x.shape) for x in xs}
    if len(shapes) != 1 or xs[0].ndim != 1 or xs[0].numel() == 0:
        raise ValueError(
            f"{', '.join(names)} must share one non-empty (B,) shape, got "
            f"{[tuple(x.shape) for x in xs]}"
        )
    dev = xs[0].device
    dt = torch.promote_types(xs[0].dtype, torch.float32)
    out = tuple(x.to(device=dev, dtype=dt) for x in xs)
    for n, x in zip(names, out):
        if not bool(torch.isfinite(x).all()):
            raise FloatingPointError(f"{n} holds NaN or inf")
    return out


def dpo_loss(
    pol_sum_w: Tensor, pol_sum_l: Tensor, ref_sum_w: Tensor, ref_sum_l: Tensor, beta: float = 0.1
) -> tuple[Tensor, Tensor, Tensor]:
    """DPO (Table 1; β = 0.1, Table 5) on summed log-probs ``(B,)``: ``(loss, losses, u)``,
    the same formula as TRL's ``loss_type="sigmoid"`` (shared with :mod:`icml25.preference`)."""
    _beta(beta)
    _vecs(
        ("pol_sum_w", "pol_sum_l", "ref_sum_w", "ref_sum_l"),
        (pol_sum_w, pol_sum_l, ref_sum_w, ref_sum_l),
    )  # errors in this function's names
    losses, u = dpo_losses(pol_sum_w, pol_sum_l, ref_sum_w, ref_sum_l, beta)
    return losses.mean(), losses, u


def simpo_loss(
    pol_mean_w: Tensor, pol_mean_l: Tensor, beta: float = 2.0, gamma: float = 0.5
) -> tuple[Tensor, Tensor, Tensor]:
    """SimPO (Table 1; β = 2, γ = 0.5, Table 5) on length-normalised log-probs ``(B,)``:
    ``-log σ(β A_w - β A_l - γ)``, as TRL's CPO with ``loss_type="simpo"``, ``cpo_alpha=0``."""
    beta = _beta(beta)
    gamma = as_real("gamma", gamma)
    aw, al = _vecs(("pol_mean_w", "pol_mean_l"), (pol_mean_w, pol_mean_l))
    u = beta * aw - beta * al - float(gamma)
    losses = -F.logsigmoid(u)
    return losses.mean(), losses, u


def tdpo_loss(
    pol_sum_w: Tensor,
    pol_sum_l: Tensor,
    ref_sum_w: Tensor,
    ref_sum_l: Tensor,
    kl_w: Tensor,
    kl_l: Tensor,
    beta: float = 0.1,
    alpha: float = 0.5,
    version: int = 2,
) -> tuple[Tensor, Tensor, Tensor]:
    """TDPO (Zeng et al. 2024; Table 1): the DPO logit minus a sequential-KL term, with
    ``kl_*`` = ``D_seq`` summed over the response (:func:`sequential_kl_from_logits`).
    ``version=1``: ``- β(D_seq(y_l) - D_seq(y_w))``; ``version=2`` (α = 0.5, Table 5):
    ``- α(β D_seq(y_l) - sg[β D_seq(y_w)])``. Returns ``(loss, losses, u)``."""
    beta = _beta(beta)
    alpha = _alpha(alpha)
    version = as_int("version", version, 1, 2)
    pw, pl, rw, rl, kw, kl = _vecs(
        ("pol_sum_w", "pol_sum_l", "ref_sum_w", "ref_sum_l", "kl_w", "kl_l"),
        (pol_sum_w, pol_sum_l, ref_sum_w, ref_sum_l, kl_w, kl_l),
    )
    u = beta * ((pw - rw.detach()) - (pl - rl.detach()))
    u = u - beta * (kl - kw) if version == 1 else u - alpha * (beta * kl - (beta * kw).detach())
    losses = -F.logsigmoid(u)
    return losses.mean(), losses, u


def _mask(mask: Any, shape: tuple[int, int], device: torch.device) -> Tensor:
    if not isinstance(mask, Tensor):
        raise TypeError(f"mask must be a (B, T) tensor, got {type(mask).__name__}")
    if tuple(mask.shape) != shape:
        raise ValueError(
            f"mask must be (B, T) = {shape} to match the codes, got {tuple(mask.shape)}"
        )
    return mask.to(device=device).bool()


def pool_positions(response_mask: Tensor, mode: str = "mean") -> Tensor:
    """``(B, T)`` bool: the positions whose codes :func:`pool_codes` sums under ``mode``, given
    ``response_mask`` ``(B, T)`` (True at response tokens, i.e. ``labels != -100`` with labels
    unshifted). The response tokens themselves, except for ``mode="official"``: the positions
    shifted as the official code shifts its labels (``labels[:, 1:]`` against
    ``hidden[:, :-1]``), i.e. position t when token t + 1 is a response token."""
    if mode not in POOL_MODES:
        raise ValueError(f"pool mode must be one of {POOL_MODES}, got {mode!r}")
    m = response_mask.bool()
    if mode != "official":
        return m
    out = torch.zeros_like(m)
    out[:, :-1] = m[:, 1:]
    return out


def pool_divisor(positions: Tensor, mode: str) -> Tensor:
    """``(B, 1)`` what the summed codes at ``positions`` (:func:`pool_positions`) are divided
    by: the number of positions (``"mean"``), 1 (``"sum"``), T (``"padded_mean"``) or T - 1
    (``"official"``). Raises ``ValueError`` for a row with no position to pool."""
    n = positions.sum(-1)
    if bool((n == 0).any()):
        bad = int((n == 0).nonzero()[0, 0])
        what = (
            "no response token after its first position"
            if mode == "official"
            else ("no response token to pool (|y| = 0)")
        )
        raise ValueError(f"example {bad} has {what}")
    T = positions.shape[1]
    if mode == "mean":
        return n.unsqueeze(-1)
    if mode == "sum":
        return torch.ones_like(n).unsqueeze(-1)
    return torch.full_like(n, T if mode == "padded_mean" else T - 1).unsqueeze(-1)


def pool_codes(codes: Tensor, mask: Tensor, mode: str = "mean") -> Tensor:
    """``(B, m)`` pooled SAE codes over the response tokens (``mask`` ``(B, T)`` True there) of
    ``codes`` ``(B, T, m)``; see :data:`POOL_MODES` (``"official"`` reads the codes at the
    positions :func:`pool_positions` gives). Output in float32 or wider."""
    if mode not in POOL_MODES:
        raise ValueError(f"pool mode must be one of {POOL_MODES}, got {mode!r}")
    if not isinstance(codes, Tensor):
        raise TypeError(f"codes must be a torch tensor (B, T, m), got {type(codes).__name__}")
    if codes.ndim != 3:
        raise ValueError(f"codes must be (B, T, m), got shape {tuple(codes.shape)}")
    pos = pool_positions(_mask(mask, tuple(codes.shape[:2]), codes.device), mode)
    div = pool_divisor(pos, mode)
    dt = torch.promote_types(codes.dtype, torch.float32)
    s = (codes.to(dt) * pos.unsqueeze(-1).to(dt)).sum(1)
    return s / div.to(dt)


def _k(k: Any, m: int, stacklevel: int = 3) -> int:
    k = as_int("k", k, 1)
    if k > m:
        warnings.warn(
            f"k={k} exceeds the number of SAE features m={m}; using k={m}", stacklevel=stacklevel
        )
        return m
    return k


def top_k_active(x: Tensor, k: int) -> Tensor:
    """``(B, m)`` bool: the features of ``x`` ``(B, m)`` among its ``k`` largest values, counting
    only non-zero (active) ones, with every feature tied with the k-th largest value included.
    The set depends on the values alone, never on the order of the features (an SAE's feature
    numbering): where a row has fewer than ``k`` active features, ``torch.topk`` would fill the
    set with zeros chosen by index order (docs/fpo.md, "Index set").

    "Largest" is by magnitude ``|x|``: the codes of ReLU/JumpReLU/TopK SAEs are ``>= 0``, where
    this is the same ranking; a negative code (another activation) is active too and is ranked
    by its size, never skipped for the zeros."""
    a = x.abs()
    kth = a.topk(k, dim=-1).values[..., -1:]
    return (a >= kth) & (x != 0)


def feature_discrepancy(
    pol: Tensor,
    ref: Tensor,
    k: int = 50,
    index_mode: str = "union",
    feature_weights: Tensor | None = None,
) -> Tensor:
    """``D_FPO`` ``(B,)`` of paper Eq. 10: ``(1/k) Σ_{i ∈ I_k} w_i (pol_i - ref_i)²`` between
    pooled codes ``(B, m)``, ``I_k`` = top-k(pol) ∪ top-k(ref) (``index_mode="union"``) or
    top-k(pol) (``"policy"``), each top-k over the active (non-zero) features only, ties at the
    k-th value all included (:func:`top_k_active`): the value does not depend on the feature
    numbering. Divides by ``k`` even when ``|I_k| != k``, as Eq. 10 is written. The index set is
    a constant for autograd. ``feature_weights`` ``(m,)`` (default 1) weights the squared
    differences (our form of the per-feature control of paper §5.3: docs/fpo.md).
    """
    if index_mode not in INDEX_MODES:
        raise ValueError(f"index_mode must be one of {INDEX_MODES}, got {index_mode!r}")
    for n, x in (("pol", pol), ("ref", ref)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{n} codes must be a torch tensor (B, m), got {type(x).__name__}")
        if x.ndim != 2:
            raise ValueError(f"{n} codes must be (B, m), got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{n} codes must be a floating tensor, got {x.dtype}")
    if pol.shape != ref.shape:
        raise ValueError(
            f"policy codes {tuple(pol.shape)} and reference codes "
            f"{tuple(ref.shape)} differ in shape (same SAE? same batch?)"
        )
    if pol.shape[1] == 0:
        raise ValueError("codes have no feature (m = 0)")
    k = _k(k, pol.shape[1])
    dt = torch.promote_types(pol.dtype, torch.float32)
    p = pol.to(dt)
    r = ref.to(device=p.device, dtype=dt)
    if not (bool(torch.isfinite(p).all()) and bool(torch.isfinite(r).all())):
        raise FloatingPointError("NaN or inf in the pooled SAE codes")
    sel = top_k_active(p.detach(), k)
    if index_mode == "union":
        sel = sel | top_k_active(r.detach(), k)
    sq = (p - r) ** 2
    if feature_weights is not None:
        if not isinstance(feature_weights, Tensor) or feature_weights.shape != (p.shape[1],):
            raise ValueError(
                f"feature_weights must be a ({p.shape[1]},) tensor, got "
                f"{tuple(getattr(feature_weights, 'shape', ()))}"
            )
        w = feature_weights.to(device=p.device, dtype=dt)
        if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
            raise ValueError("feature_weights must be finite and non-negative")
        sq = sq * w
    return torch.where(sel, sq, torch.zeros_like(sq)).sum(1) / k


def fpo_loss(
    pol_mean_w: Tensor,
    pol_mean_l: Tensor,
    ref_mean_w: Tensor,
    ref_mean_l: Tensor,
    pol_codes_w: Tensor,
    pol_codes_l: Tensor,
    ref_codes_w: Tensor,
    ref_codes_l: Tensor,
    *,
    beta: float = 0.1,
    alpha: float = 0.5,
    k: int = 50,
    index_mode: str = "union",
    stop_grad_chosen: bool = True,
    feature_weights: Tensor | None = None,
) -> FPOOutput:
    """The FPO objective, paper Eq. 11.

    Args:
        pol_mean_w, pol_mean_l: ``(B,)`` length-normalised policy log-probs ``A_θ`` of the
            chosen / rejected responses (differentiable).
        ref_mean_w, ref_mean_l: ``(B,)`` the reference's ``A_ref`` (offline cache; detached).
        pol_codes_w, pol_codes_l: ``(B, m)`` pooled policy SAE codes (:func:`pool_codes`).
        ref_codes_w, ref_codes_l: ``(B, m)`` pooled reference codes (offline cache).
        beta: 0.1 (Table 5). alpha: 0.5 (Table 5; 0 gives length-normalised DPO).
        k: top-k of Eq. 10 (50, official code). index_mode: see :data:`INDEX_MODES`.
        stop_grad_chosen: the chosen-side discrepancy is a constant (TDPO-2 form; Table 3 shows
            it helps). feature_weights: see :func:`feature_discrepancy`.

    Returns:
        :class:`FPOOutput`; ``u = β(A_θw - A_refw) - β(A_θl - A_refl) - αβ D_l + αβ sg[D_w]``.
    """
    beta, alpha = _beta(beta), _alpha(alpha)
    stop_grad_chosen = as_bool("stop_grad_chosen", stop_grad_chosen)
    if index_mode not in INDEX_MODES:
        raise ValueError(f"index_mode must be one of {INDEX_MODES}, got {index_mode!r}")
    aw, al, rw, rl = _vecs(
        ("pol_mean_w", "pol_mean_l", "ref_mean_w", "ref_mean_l"),
        (pol_mean_w, pol_mean_l, ref_mean_w, ref_mean_l),
    )
    rw, rl = rw.detach(), rl.detach()
    B = aw.shape[0]
    for n, c in (
        ("pol_codes_w", pol_codes_w),
        ("pol_codes_l", pol_codes_l),
        ("ref_codes_w", ref_codes_w),
        ("ref_codes_l", ref_codes_l),
    ):
        if not isinstance(c, Tensor) or c.ndim != 2 or c.shape[0] != B:
            raise ValueError(f"{n} must be (B={B}, m), got {tuple(getattr(c, 'shape', ()))}")
    k = _k(k, pol_codes_w.shape[1], stacklevel=3)  # warn once, not per side
    d_w = feature_discrepancy(pol_codes_w, ref_codes_w.detach(), k, index_mode, feature_weights)
    d_l = feature_discrepancy(pol_codes_l, ref_codes_l.detach(), k, index_mode, feature_weights)
    d_w, d_l = d_w.to(aw.device), d_l.to(aw.device)
    d_w_term = d_w.detach() if stop_grad_chosen else d_w
    reward_w, reward_l = beta * (aw - rw), beta * (al - rl)
    u = reward_w - reward_l - alpha * (beta * d_l - beta * d_w_term)
    losses = -F.logsigmoid(u)
    return FPOOutput(losses.mean(), losses, u, d_w, d_l, reward_w.detach(), reward_l.detach())
