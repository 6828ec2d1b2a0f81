"""Contrastive losses in the paper's two families, and the VRNS auxiliary loss (Lee et al., ICML 2025,
arXiv:2506.09781). Def. 3.1: InfoNCE-based (InfoNCE/CLIP, SimCLR/NT-Xent, DCL, DHEL); Def. 3.2:
independently additive (SigLIP, spectral); Def. 5.7: VRNS.

Every loss takes two views ``u, v`` of shape ``(m, d)`` (any encoder: SimCLR views, CLIP towers,
sentence pairs), L2-normalises them, and returns a scalar in float32 (float64 stays float64).
``index`` gives instance ids: rows with the same id are positives, never negatives.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from icml25._validate import as_bool, as_int, as_real

__all__ = [
    "ContrastiveLoss",
    "gather_with_grad",
    "global_index",
    "SigmoidLoss",
    "dcl_loss",
    "dhel_loss",
    "independent_additive_loss",
    "info_nce_family",
    "infonce_loss",
    "nt_xent_loss",
    "sigmoid_loss",
    "spectral_contrastive_loss",
    "vrns_loss",
]

Gather = Callable[[Tensor], Tensor]


class _AllGatherWithGrad(torch.autograd.Function):
    """All ranks' ``x`` (same shape on every rank) stacked in rank order; the gradient of this
    rank's slice is the sum over ranks of their gradients for it (an all-reduce, then the slice),
    as ``torch.distributed.nn.functional.all_gather`` computes it, without its deprecation."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        import torch.distributed as dist

        x = x.contiguous()
        world, rank = dist.get_world_size(), dist.get_rank()
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x)
        ctx.rank, ctx.rows = rank, x.shape[0]
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        import torch.distributed as dist

        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.rank * ctx.rows : (ctx.rank + 1) * ctx.rows]


def gather_with_grad(x: Tensor) -> Tensor:
    """All ranks' rows of ``x`` concatenated in rank order, with gradients flowing back to every
    rank (each rank's slice receives the sum of all ranks' gradients for it): the ``gather=`` of
    a DDP run. Every rank must pass the same shape. Outside an initialised process group,
    ``x`` itself."""
    import torch.distributed as dist

    if not isinstance(x, Tensor):
        raise TypeError(f"gather_with_grad takes a torch.Tensor, got {type(x).__name__}")
    if not (dist.is_available() and dist.is_initialized()):
        return x
    return _AllGatherWithGrad.apply(x)


def global_index(m: int, device: torch.device | str | None = None) -> Tensor:
    """Instance ids ``rank * m + arange(m)``: what ``index=`` must be when gathering (every
    rank's local ``arange(m)`` would mark other ranks' rows as positives)."""
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    return rank * m + torch.arange(m, device=device)


def _unit_rows(x: Tensor) -> Tensor:
    """``F.normalize(x, dim=-1)`` for rows of any magnitude: each row is first divided by a power
    of two at its largest |entry| (exact, so rows of ordinary scale give the same bits as before).
    Without it the squares of a float32 row at 1e20 overflow and those at 1e-30 underflow, and the
    loss became that of all-zero embeddings (log(2m - 1), issue 49). The divisor is detached: the
    normalised row is homogeneous of degree 0, so the gradient is unchanged. An all-zero row stays
    zero, as ``F.normalize`` leaves it."""
    big = x.detach().abs().amax(-1, keepdim=True)
    _, e = torch.frexp(big)
    scale = torch.where(big > 0, torch.ldexp(torch.ones_like(big), e), torch.ones_like(big))
    return F.normalize(x / scale, dim=-1, eps=1e-12)


def _prepare(u: Tensor, v: Tensor, index: Tensor | None, normalize: bool, validate: bool):
    for name, x in (("u", u), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if u.ndim != 2 or v.ndim != 2 or u.shape != v.shape:
        raise ValueError(
            f"u and v must both be (m, d) with the same shape, got {tuple(u.shape)} and {tuple(v.shape)}"
        )
    if u.shape[0] < 2:
        raise ValueError(f"a contrastive loss needs m >= 2 rows (negatives), got m = {u.shape[0]}")
    if u.device != v.device or u.dtype != v.dtype:
        raise ValueError(
            f"u and v must share device and dtype, got {u.device}/{u.dtype} and {v.device}/{v.dtype}"
        )
    if not u.is_floating_point():
        raise TypeError(f"u and v must be floating tensors, got {u.dtype}")
    if validate and not (bool(torch.isfinite(u).all()) and bool(torch.isfinite(v).all())):
        raise ValueError("u or v contains NaN/inf")
    # the bodies run in float32 whatever the autocast context: in bf16 a VRNS delta of
    # -1/(n - 1) vanishes and the log-sum-exp loses the small negatives
    dtype = torch.float64 if u.dtype == torch.float64 else torch.float32
    u, v = u.to(dtype), v.to(dtype)
    if normalize:
        u, v = _unit_rows(u), _unit_rows(v)
    m = u.shape[0]
    if index is None:
        index = torch.arange(m, device=u.device)
    elif (
        not isinstance(index, Tensor)
        or index.shape != (m,)
        or index.dtype not in (torch.int64, torch.int32)
    ):
        raise ValueError(f"index must be an integer tensor of shape ({m},), got {index!r:.60}")
    return u, v, index.to(u.device)


def _check_temperature(t: float | Tensor, name: str = "temperature") -> float | Tensor:
    """A finite number > 0: Python's or numpy's (returned as a ``float``), or a 0-d float
    tensor (returned as is: a learnable temperature, as CLIP trains it)."""
    if isinstance(t, Tensor):
        if t.ndim != 0 or not t.is_floating_point():
            raise ValueError(f"a tensor {name} must be a 0-d float tensor, got {t!r:.60}")
        as_real(name, float(t.detach()), low=0.0, low_open=True)
        return t
    return as_real(name, t, low=0.0, low_open=True)


def _views(u: object, v: object) -> None:
    """The two views must be tensors: checked before anything reads ``u.device``."""
    for name, x in (("u", u), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


def _no_autocast(device: torch.device):
    return torch.autocast(device_type=device.type, enabled=False)


def _no_autocast_for(u: object, v: object):
    """The views' types checked first, then autocast off on their device."""
    _views(u, v)
    return _no_autocast(u.device)


def _one_direction(
    a: Tensor,
    partner: Tensor,
    b: Tensor,
    ia: Tensor,
    ib: Tensor,
    c1: int,
    c2: int,
    psi: str,
    t: float | Tensor,
    aw: Tensor | None = None,
    iw: Tensor | None = None,
    all_positives: bool = False,
    cross: Tensor | None = None,
    within: Tensor | None = None,
    check: bool = True,
) -> Tensor:
    """Per-anchor losses (Def 3.1) for anchors ``a`` whose positive is the same row of ``partner``;
    cross-view negatives come from ``b`` (``partner``, or all ranks' rows when gathered) and
    within-view negatives from ``aw`` (``a``, or all ranks' rows of ``a``'s view; ids ``iw``);
    entries sharing the anchor's id are never negatives. ``cross`` / ``within``: the similarity
    matrices ``a b^T`` / ``a aw^T`` when the caller already has them (not gathered: the partner
    is ``b``, so the positives are ``cross``'s diagonal)."""
    aw, iw = (a, ia) if aw is None else (aw, iw)
    if all_positives:
        return _all_positives(a, b, aw, ia, ib, iw, c1, c2, psi, t)
    cross = a @ b.T if cross is None else cross
    pos = (cross.diagonal() if b is partner else (a * partner).sum(-1)) / t
    terms = []
    if c1:
        terms.append((cross / t).masked_fill(ia[:, None] == ib[None, :], -math.inf))
    if c2:
        within = a @ aw.T if within is None else within
        terms.append((within / t).masked_fill(ia[:, None] == iw[None, :], -math.inf))
    logits = torch.cat(terms, dim=-1) if len(terms) > 1 else terms[0]
    if check and bool(torch.isneginf(logits).all(-1).any()):
        raise ValueError("an anchor has no negatives enabled (check c1/c2 and index duplicates)")
    if psi == "log1p":  # psi(x) = log(1 + x): the positive joins the log-sum-exp
        logits = torch.cat([pos[:, None], logits], dim=-1)
    return torch.logsumexp(logits, dim=-1) - pos


def _all_positives(a, b, aw, ia, ib, iw, c1, c2, psi, t) -> Tensor:
    """Every entry sharing the anchor's id is a positive (class labels as ids, solo-learn's
    ``simclr_loss_func``): ``-log(sum_P e^s / (sum_P e^s + sum_N e^s))`` for ``psi="log1p"``,
    ``-log sum_P e^s + log sum_N e^s`` for ``psi="log"``. Cross-view entries with the anchor's id
    are always positives (the partner among them); within-view ones (but the anchor itself) when
    ``c2``; negatives come from the enabled terms."""
    cross = a @ b.T / t
    same_c = ia[:, None] == ib[None, :]
    pos_parts = [cross.masked_fill(~same_c, -math.inf)]
    neg_parts = [cross.masked_fill(same_c, -math.inf)] if c1 else []
    if c2:
        within = a @ aw.T / t
        same_w = ia[:, None] == iw[None, :]
        neg_parts.append(within.masked_fill(same_w, -math.inf))
        # within-view positives without the anchor itself: log(sum e^s - e^{s_self}) = lse +
        # log(1 - e^{-d}), d = lse - s_self > 0; none (-inf) when the anchor is its id's only row.
        # The branch not taken gets d = 1: log(1 - e^0) there gave a NaN gradient (float32).
        lse = torch.logsumexp(within.masked_fill(~same_w, -math.inf), dim=-1)
        d = lse - (a * a).sum(-1) / t
        has = d > 1e-9
        rest = lse + torch.log(-torch.expm1(-torch.where(has, d, torch.ones_like(d))))
        pos_parts.append(torch.where(has, rest, torch.full_like(lse, -math.inf))[:, None])
    pos = torch.logsumexp(torch.cat(pos_parts, dim=-1), dim=-1)
    neg = torch.cat(neg_parts, dim=-1)
    if bool(torch.isneginf(neg).all(-1).any()):
        raise ValueError("an anchor has no negatives (every entry shares its id)")
    if psi == "log1p":
        return torch.logsumexp(torch.cat([pos[:, None], neg], dim=-1), dim=-1) - pos
    return torch.logsumexp(neg, dim=-1) - pos


def info_nce_family(
    u: Tensor,
    v: Tensor,
    *,
    c1: int,
    c2: int,
    psi: str,
    temperature: float,
    index: Tensor | None = None,
    symmetric: bool = True,
    reduction: str = "mean",
    normalize: bool = True,
    validate: bool = True,
    gather: Gather | None = None,
    positives: str = "instance",
) -> Tensor:
    """Def. 3.1 with phi = exp(x / t), computed stably through log-sum-exp.

    ``positives="instance"`` (the paper's): the positive of an anchor is its partner row; other
    rows with the same ``index`` are neither positives nor negatives. ``positives="all"``: every
    row with the same ``index`` is a positive, as solo-learn's ``simclr_loss_func`` counts them
    (supervised-contrastive style, ``index`` = class labels); with instance ids both agree.

    ``c1`` switches on cross-view negatives, ``c2`` within-view negatives; ``psi="log1p"``
    (InfoNCE, SimCLR) keeps the positive in the denominator, ``psi="log"`` (DCL, DHEL) removes it.
    ``symmetric`` averages both directions (2m anchors). ``gather`` (DDP, e.g.
    :func:`gather_with_grad`) all-gathers both views and their ids, as solo-learn does: each
    rank's anchors meet every rank's rows as cross- and within-view negatives. Gathering needs
    global instance ids (:func:`global_index`); the loss is the mean over the local anchors, so
    DDP's gradient averaging gives the single-process gradient on the concatenated batch.
    ``temperature`` may be a 0-d tensor (learnable). The body runs in float32 (float64 stays
    float64) under any autocast context.
    """
    temperature = _check_temperature(temperature)
    c1, c2 = as_int("c1", c1, 0, 1), as_int("c2", c2, 0, 1)
    if (c1, c2) not in ((1, 0), (0, 1), (1, 1)):
        raise ValueError(f"(c1, c2) must be (1, 0), (0, 1) or (1, 1), got {(c1, c2)}")
    if psi not in ("log1p", "log"):
        raise ValueError(f"psi must be 'log1p' or 'log', got {psi!r}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if positives not in ("instance", "all"):
        raise ValueError(f"positives must be 'instance' or 'all', got {positives!r}")
    _require_global_ids(gather, index)
    with _no_autocast_for(u, v):
        u, v, index = _prepare(u, v, index, normalize, validate)
        losses, _ = _info_nce(
            u, v, index, c1, c2, psi, temperature, symmetric, gather, positives == "all", validate
        )
    if reduction == "none":
        return losses
    return losses.mean() if reduction == "mean" else losses.sum()


def _info_nce(u, v, index, c1, c2, psi, temperature, symmetric, gather, ap, check):
    """Per-anchor losses of prepared views, and the local similarity matrix ``u v^T`` when it
    was formed (not gathered), for a caller that needs it too (VRNS in ``ContrastiveLoss``)."""
    t = temperature.to(u.dtype) if isinstance(temperature, Tensor) else temperature
    if gather is None and not ap:
        S = u @ v.T  # one matmul for both directions (the reverse one reads S^T)
        wu, wv = (u @ u.T, v @ v.T) if c2 else (None, None)
        losses = _one_direction(
            u, v, v, index, index, c1, c2, psi, t, cross=S, within=wu, check=check
        )
        if symmetric:
            back = _one_direction(
                v, u, u, index, index, c1, c2, psi, t, cross=S.T, within=wv, check=check
            )
            losses = torch.cat([losses, back])
        return losses, S
    if gather is None:
        ug = vg = ig = None
        losses = _one_direction(u, v, v, index, index, c1, c2, psi, t, all_positives=ap)
    else:
        ug, vg, ig = gather(u), gather(v), gather(index)
        losses = _one_direction(u, v, vg, index, ig, c1, c2, psi, t, ug, ig, ap)
    if symmetric:
        if gather is None:
            back = _one_direction(v, u, u, index, index, c1, c2, psi, t, all_positives=ap)
        else:
            back = _one_direction(v, u, ug, index, ig, c1, c2, psi, t, vg, ig, ap)
        losses = torch.cat([losses, back])
    return losses, None


def _require_global_ids(gather: Gather | None, index: Tensor | None) -> None:
    if gather is not None and index is None:
        raise ValueError(
            "gather= needs index= with global instance ids (e.g. icml25.contrastive."
            "global_index(m)): the default arange(m) repeats on every rank, so other ranks' rows "
            "with the same local position would be taken for positives"
        )


def infonce_loss(u: Tensor, v: Tensor, temperature: float = 0.07, **kw) -> Tensor:
    """InfoNCE / CLIP: cross-view negatives, positive in the denominator (c = (1, 0))."""
    return info_nce_family(u, v, c1=1, c2=0, psi="log1p", temperature=temperature, **kw)


def nt_xent_loss(u: Tensor, v: Tensor, temperature: float = 0.5, **kw) -> Tensor:
    """SimCLR / NT-Xent: cross- and within-view negatives (c = (1, 1)), averaged over 2m anchors."""
    return info_nce_family(u, v, c1=1, c2=1, psi="log1p", temperature=temperature, **kw)


def dcl_loss(u: Tensor, v: Tensor, temperature: float = 0.1, **kw) -> Tensor:
    """Decoupled contrastive loss (Yeh et al. 2022): the positive leaves the denominator."""
    return info_nce_family(u, v, c1=1, c2=1, psi="log", temperature=temperature, **kw)


def dhel_loss(u: Tensor, v: Tensor, temperature: float = 0.1, **kw) -> Tensor:
    """DHEL (Koromilas et al. 2024): within-view negatives only, positive removed."""
    return info_nce_family(u, v, c1=0, c2=1, psi="log", temperature=temperature, **kw)


def independent_additive_loss(
    u: Tensor,
    v: Tensor,
    phi: Callable[[Tensor], Tensor],
    psi: Callable[[Tensor], Tensor],
    c1: int = 1,
    c2: int = 0,
    *,
    normalize: bool = True,
    validate: bool = True,
) -> Tensor:
    """Def. 3.2: ``-(1/m) sum phi(s_ii) + c1/(m(m-1)) sum psi(s_ij) + c2/(2m(m-1)) sum within``."""
    c1, c2 = as_int("c1", c1, 0, 1), as_int("c2", c2, 0, 1)
    with _no_autocast_for(u, v):
        u, v, index = _prepare(u, v, None, normalize, validate)
        m = u.shape[0]
        off = ~torch.eye(m, dtype=torch.bool, device=u.device)
        S = u @ v.T
        loss = -phi(S.diagonal()).mean()
        if c1:
            loss = loss + psi(S[off]).sum() / (m * (m - 1))
        if c2:
            within = psi((u @ u.T)[off]).sum() + psi((v @ v.T)[off]).sum()
            loss = loss + within / (2 * m * (m - 1))
        return loss


def sigmoid_loss(
    u: Tensor,
    v: Tensor,
    t: float | Tensor = 10.0,
    bias: float | Tensor = -10.0,
    within_view: bool = False,
    *,
    normalize: bool = True,
    validate: bool = True,
) -> Tensor:
    """SigLIP (Zhai et al. 2023) in SigLIP's own convention: logit ``t s + bias`` (init 10, -10).

    ``(1/m) sum_i softplus(-(t s_ii + b)) + (1/m) sum_{i != j} softplus(t s_ij + b)``;
    ``within_view=True`` adds the paper's within-view negatives (c2 = 1). The paper's ``b`` is
    ``-bias``.
    """
    t = _check_temperature(t)
    if isinstance(bias, Tensor) and bias.ndim == 0 and bias.is_floating_point():
        as_real("bias", float(bias.detach()))
    elif isinstance(bias, Tensor):
        raise ValueError(f"bias must be a finite 0-d float tensor or number, got {bias!r:.60}")
    else:
        bias = as_real("bias", bias)
    within_view = as_bool("within_view", within_view)
    with _no_autocast_for(u, v):
        u, v, _ = _prepare(u, v, None, normalize, validate)
        t = t.to(u.dtype) if isinstance(t, Tensor) else t
        bias = bias.to(u.dtype) if isinstance(bias, Tensor) else bias
        m = u.shape[0]
        off = ~torch.eye(m, dtype=torch.bool, device=u.device)
        S = t * (u @ v.T) + bias
        loss = F.softplus(-S.diagonal()).sum() / m + F.softplus(S[off]).sum() / m
        if within_view:
            loss = loss + (
                F.softplus(t * (u @ u.T) + bias)[off].sum()
                + F.softplus(t * (v @ v.T) + bias)[off].sum()
            ) / (2 * m)
        return loss


def spectral_contrastive_loss(
    u: Tensor, v: Tensor, *, normalize: bool = True, validate: bool = True
) -> Tensor:
    """Spectral contrastive loss (HaoChen et al. 2021): phi(x) = x, psi(x) = x^2, c = (1, 0)."""
    return independent_additive_loss(
        u, v, lambda x: x, lambda x: x * x, 1, 0, normalize=normalize, validate=validate
    )


def vrns_loss(
    u: Tensor,
    v: Tensor,
    *,
    n_train: int | None = None,
    delta: float | None = None,
    p: int = 2,
    index: Tensor | None = None,
    normalize: bool = True,
    validate: bool = True,
    gather: Gather | None = None,
) -> Tensor:
    """VRNS (Def. 5.7): ``mean over cross-view negatives of (u_i^T v_j - delta)^p``.

    ``delta = -1/(n_train - 1)`` (the full-batch optimum of negative similarities, Thm 5.1) or
    given directly; exactly one of the two. Pairs with equal ``index`` are excluded; both (i, j)
    and (j, i) count. ``gather`` all-gathers ``v`` and the ids (DDP), as the official code.
    """
    if (n_train is None) == (delta is None):
        raise ValueError("give exactly one of n_train (delta = -1/(n_train-1)) and delta")
    if n_train is not None:
        n_train = as_int("n_train", n_train, 2)
        delta = -1.0 / (n_train - 1)
    else:
        delta = as_real("delta", delta)
    p = _even_p(p)
    _require_global_ids(gather, index)
    with _no_autocast_for(u, v):
        u, v, index = _prepare(u, v, index, normalize, validate)
        vb, ib = (v, index) if gather is None else (gather(v), gather(index))
        return _vrns_from_similarity(u @ vb.T, index, ib, delta, p, validate)


def _even_p(p: object) -> int:
    out = as_int("p", p, 2)
    if out % 2:
        raise ValueError(f"p must be an even integer >= 2, got {p!r}")
    return out


def _vrns_from_similarity(
    S: Tensor, ia: Tensor, ib: Tensor, delta: float, p: int, check: bool
) -> Tensor:
    mask = ia[:, None] != ib[None, :]
    if check and not bool(mask.any()):
        raise ValueError("no negative pairs in this batch (every index is the same)")
    # mean over the masked entries without boolean indexing (no host sync, no copy)
    w = mask.to(S.dtype)
    return ((S - delta).pow(p) * w).sum() / w.sum()


_KINDS = ("infonce", "simclr", "dcl", "dhel", "siglip", "siglip_within", "spectral")
_DEFAULT_T = {"infonce": 0.07, "simclr": 0.5, "dcl": 0.1, "dhel": 0.1}
_FAMILY = {
    "infonce": (1, 0, "log1p"),
    "simclr": (1, 1, "log1p"),
    "dcl": (1, 1, "log"),
    "dhel": (0, 1, "log"),
}


class ContrastiveLoss(nn.Module):
    """A base contrastive loss plus ``vrns_weight * VRNS`` (``vrns_weight=0`` gives the base loss).

    ``forward(u, v, index=None)`` takes the two views in the order lightly's ``NTXentLoss(out0,
    out1)`` does, returns a scalar, and every ``log_every`` calls records detached
    ``last_components`` (base, vrns, positive mean, negative mean and variance; one host sync).
    The paper uses ``vrns_weight=30`` with ``n_train`` the number of training instances (Table 1,
    official default).

    ``temperature`` is the divisor of the InfoNCE family (defaults: InfoNCE 0.07, SimCLR 0.5,
    DCL/DHEL 0.1) and SigLIP's logit scale ``t`` (default 10, multiplying), with ``bias`` SigLIP's
    bias (default -10); both may be 0-d tensors, e.g. learnable parameters (a tensor temperature
    is checked to be > 0 on every call; other inputs are checked on the first call only).
    ``positives="all"`` (InfoNCE family) counts every row with the same ``index`` as a positive
    (class labels, solo-learn's convention); the default ``"instance"`` counts only the partner.
    ``index`` is supported by the InfoNCE family and VRNS; SigLIP and spectral losses refuse it.
    With ``gather`` (DDP, :func:`gather_with_grad`) pass global ids as ``index``
    (:func:`global_index`).
    """

    def __init__(
        self,
        kind: str = "simclr",
        temperature: float | Tensor | None = None,
        vrns_weight: float = 0.0,
        n_train: int | None = None,
        delta: float | None = None,
        p: int = 2,
        gather: Gather | None = None,
        *,
        bias: float | Tensor | None = None,
        log_every: int = 1,
        positives: str = "instance",
    ) -> None:
        super().__init__()
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        if positives not in ("instance", "all"):
            raise ValueError(f"positives must be 'instance' or 'all', got {positives!r}")
        if positives == "all" and kind not in _DEFAULT_T:
            raise ValueError(
                f"positives='all' is for the InfoNCE family {tuple(_DEFAULT_T)}, not {kind!r}"
            )
        self.positives = positives
        vrns_weight = as_real("vrns_weight", vrns_weight, low=0.0)
        if vrns_weight > 0 and (n_train is None) == (delta is None):
            raise ValueError("vrns_weight > 0 needs exactly one of n_train and delta")
        if n_train is not None:
            n_train = as_int("n_train", n_train, 2)
        if delta is not None:
            delta = as_real("delta", delta)
        p = _even_p(p)
        if bias is not None and kind not in ("siglip", "siglip_within"):
            raise ValueError(f"bias is SigLIP's; kind {kind!r} has none")
        if temperature is not None and kind == "spectral":
            raise ValueError("a spectral loss has no temperature; leave temperature out")
        self.log_every = as_int("log_every", log_every, 1)
        self.kind, self.vrns_weight = kind, float(vrns_weight)
        self.temperature = _DEFAULT_T.get(kind, 10.0) if temperature is None else temperature
        self.bias = -10.0 if bias is None else bias
        if kind != "spectral":
            self.temperature = _check_temperature(self.temperature)
        if kind in ("siglip", "siglip_within") and not isinstance(self.bias, Tensor):
            self.bias = as_real("bias", self.bias)
        self.n_train, self.delta, self.p, self.gather = n_train, delta, p, gather
        self.last_components: dict[str, float] = {}
        self._validated = False
        self._calls = 0

    def _base(self, u, v, index, validate):
        kw = {
            "index": index,
            "validate": validate,
            "gather": self.gather,
            "positives": self.positives,
        }
        if self.kind == "infonce":
            return infonce_loss(u, v, self.temperature, **kw)
        if self.kind == "simclr":
            return nt_xent_loss(u, v, self.temperature, **kw)
        if self.kind == "dcl":
            return dcl_loss(u, v, self.temperature, **kw)
        if self.kind == "dhel":
            return dhel_loss(u, v, self.temperature, **kw)
        if self.gather is not None:
            raise ValueError(
                f"gather= is supported by the InfoNCE family and VRNS, not {self.kind!r}"
            )
        if index is not None:
            raise ValueError(
                f"index (instance ids) is supported by the InfoNCE family and VRNS, not "
                f"{self.kind!r}, which counts every off-diagonal pair as a negative: drop the "
                "duplicate rows before the call"
            )
        if self.kind in ("siglip", "siglip_within"):
            return sigmoid_loss(
                u,
                v,
                self.temperature,
                self.bias,
                within_view=self.kind == "siglip_within",
                validate=validate,
            )
        return spectral_contrastive_loss(u, v, validate=validate)

    def forward(self, u: Tensor, v: Tensor, index: Tensor | None = None) -> Tensor:
        _views(u, v)  # types first: the autocast guards below read u.device
        validate = not self._validated  # check inputs once, then trust the training loop
        if not validate and isinstance(self.temperature, Tensor) and self.kind != "spectral":
            _check_temperature(self.temperature)  # a learnable one can drift to <= 0
        S = None
        if self.kind in _DEFAULT_T and self.gather is None:
            # one normalisation and one u v^T for the base loss, VRNS and the logged statistics
            c1, c2, psi = _FAMILY[self.kind]
            with _no_autocast(u.device):
                un, vn, idx = _prepare(u, v, index, True, validate)
                losses, S = _info_nce(
                    un,
                    vn,
                    idx,
                    c1,
                    c2,
                    psi,
                    self.temperature,
                    True,
                    None,
                    self.positives == "all",
                    validate,
                )
                base = losses.mean()
                vr = None
                if self.vrns_weight > 0:
                    delta = -1.0 / (self.n_train - 1) if self.n_train is not None else self.delta
                    if S is None:  # positives="all" takes another path; VRNS needs u v^T
                        S = un @ vn.T
                    vr = _vrns_from_similarity(S, idx, idx, delta, self.p, validate)
        else:
            base = self._base(u, v, index, validate)
            vr = None
            if self.vrns_weight > 0:
                vr = vrns_loss(
                    u,
                    v,
                    n_train=self.n_train,
                    delta=self.delta,
                    p=self.p,
                    index=index,
                    validate=validate,
                    gather=self.gather,
                )
        total = base if vr is None else base + self.vrns_weight * vr
        self._validated = True
        if self._calls % self.log_every == 0:
            self.last_components = self._components(u, v, S, base, vr, index)
        self._calls += 1
        return total

    @torch.no_grad()
    def _components(self, u, v, S, base, vr, index=None):
        """Base and VRNS values and the similarity statistics; the negatives are the pairs of
        different ids (all off-diagonal pairs without ``index``), as VRNS and similarity_stats
        count them."""
        with _no_autocast(u.device):
            if S is None:
                un, vn = _unit_rows(u.float()), _unit_rows(v.float())
                S = un @ vn.T
            S = S.detach().float()
            m = S.shape[0]
            diag = S.diagonal()
            if index is None:
                k = m * (m - 1)
                neg_mean = (S.sum() - diag.sum()) / k
                neg_var = ((S * S).sum() - (diag * diag).sum()) / k - neg_mean**2
            else:
                idx = torch.as_tensor(index, device=S.device).reshape(-1)
                neg = S[idx[:, None] != idx[None, :]]
                if neg.numel() == 0:
                    neg = S.new_full((1,), float("nan"))
                neg_mean = neg.mean()
                neg_var = (neg * neg).mean() - neg_mean**2
            zero = base.new_zeros(())
            stats = torch.stack(
                [
                    base.detach().float(),
                    (vr.detach() if vr is not None else zero).float(),
                    diag.mean(),
                    neg_mean,
                    neg_var,
                ]
            ).tolist()
        return dict(zip(("base", "vrns", "pos_mean", "neg_mean", "neg_var"), stats))


class SigmoidLoss(nn.Module):
    """SigLIP with learnable ``log_t`` (init log 10) and ``bias`` (init -10), as in SigLIP."""

    def __init__(self, t: float = 10.0, bias: float = -10.0, within_view: bool = False) -> None:
        super().__init__()
        self.log_t = nn.Parameter(torch.tensor(math.log(_check_temperature(t, "t"))))
        self.bias = nn.Parameter(torch.tensor(as_real("bias", bias)))
        self.within_view = as_bool("within_view", within_view)

    def forward(self, u: Tensor, v: Tensor) -> Tensor:
        return sigmoid_loss(u, v, self.log_t.exp(), self.bias, self.within_view)
