"""Diagnostics of the paper's sufficient conditions on a proxy (arXiv:2412.16475, Sec. 3:
C1 shared level sets, C2 image containment, C3 a low-dimensional encoding, C4 similarity kept up
to a constant ``L``), from two policies evaluated on the same inputs.

The paper states the conditions as exact properties of the two policies; on samples they become
the estimates below (their definitions and tolerances are ours: docs/proxy_feedback.md,
"Decisions"). Distances are total variation ``TV(p, q) = ½ ||p - q||_1``.

* C1: pairs that one policy puts closest (nearest neighbours, ``TV < δ``) should be close under the
  other too. ``levelset_violation`` = share of such pairs that are far (``TV > far·δ``) under the
  other policy, in either direction; the Spearman correlation of the two distances over random
  pairs is reported beside it.
* C2: ``image_gap_q99`` = 0.99-quantile over ``x`` of the TV from ``π†(x)`` to its nearest
  neighbour in ``{π̃(x')}``.
* C3: ``intrinsic_dim`` = TwoNN estimate (Facco et al. 2017, maximum likelihood) of the dimension
  of ``{π̃(x)}`` in centred log-probabilities.
* C4: ``L_hat`` = 0.99-quantile of ``TV(π̃(x), π̃(x')) / TV(π†(x), π†(x'))`` over random pairs
  with denominator > 1e-3; ``L_hat_rev`` the reverse ratio, which bounds the Lipschitz constant of
  the map ``g`` with ``π† = g ∘ π̃`` that stage 2 must learn.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from icml25._validate import as_int, as_real

__all__ = ["ConditionReport", "check_conditions"]

DENOM_FLOOR = 1e-3  # pairs with a smaller denominator are left out of the ratio quantiles


@dataclass
class ConditionReport:
    """The evidence for each sufficient condition and whether it holds at the given tolerances.

    Attributes:
        levelset_violation: C1, share of nearest-neighbour pairs close under one policy
            (``TV < delta``) and far (``TV > far * delta``) under the other.
        levelset_spearman: Spearman correlation of the two policies' pairwise TV distances.
        image_gap_q99: C2, 0.99-quantile of the TV from ``π†(x)`` to the nearest ``π̃(x')``.
        intrinsic_dim: C3, TwoNN dimension of the proxy's outputs (``D̂``).
        L_hat, L_hat_rev: C4, 0.99-quantiles of the forward and reverse distance ratios.
        holds: ``{"C1": bool, ...}`` at the tolerances in ``tolerances``.
        n, n_pairs: inputs and random pairs used.
    """

    levelset_violation: float
    levelset_spearman: float
    image_gap_q99: float
    intrinsic_dim: float
    L_hat: float
    L_hat_rev: float
    holds: dict[str, bool] = field(default_factory=dict)
    tolerances: dict[str, float] = field(default_factory=dict)
    n: int = 0
    n_pairs: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One line per condition: its evidence, its tolerance and whether it holds."""
        t, h = self.tolerances, self.holds
        yes = {True: "holds", False: "VIOLATED"}
        return "\n".join(
            [
                f"C1 shared level sets: violation {self.levelset_violation:.3f} "
                f"(<= {t['levelset_violation']:g}; Spearman {self.levelset_spearman:.2f}): "
                f"{yes[h['C1']]}",
                f"C2 image containment: gap q99 {self.image_gap_q99:.3f} TV "
                f"(<= {t['image_gap']:g}): {yes[h['C2']]}",
                f"C3 low-dimensional encoding: intrinsic dimension {self.intrinsic_dim:.2f} "
                f"(<= {t['max_dim']:g}): {yes[h['C3']]}",
                f"C4 similarity kept: L_hat {self.L_hat:.2f} (<= {t['max_L']:g}; reverse "
                f"{self.L_hat_rev:.2f}): {yes[h['C4']]}",
            ]
        )


def _probs(name: str, policy: Any, x: Any) -> Tensor:
    if callable(policy) and not isinstance(policy, Tensor):
        if x is None:
            raise ValueError(f"{name} is a callable: pass the inputs x to evaluate it on")
        with torch.no_grad():
            out = policy(x)
        if isinstance(out, Tensor) and out.numel() and bool((out <= 0).all()):
            out = (
                out.exp()
            )  # log-probabilities (a SimplexPolicy's); probabilities never are all <= 0
    else:
        out = policy
    if not isinstance(out, Tensor):
        try:
            out = torch.as_tensor(out)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(
                f"{name} must give (n, K) probabilities, got {type(out).__name__}"
            ) from None
    p = out.detach().to(torch.float64)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"{name} must give (n, K >= 2) probabilities, got shape {tuple(p.shape)}")
    if not bool(torch.isfinite(p).all()):
        raise ValueError(f"{name} holds NaN or inf")
    if bool((p <= 0).all()):
        raise ValueError(f"{name} holds only values <= 0: log-probabilities? pass their exp()")
    if bool((p < -1e-9).any()):
        raise ValueError(f"{name} holds negative probabilities (min {float(p.min()):.4g})")
    s = p.sum(-1)
    if not bool(torch.allclose(s, torch.ones_like(s), atol=1e-4)):
        raise ValueError(
            f"{name}'s rows must sum to 1 (probabilities), got sums from {float(s.min()):.4g} to "
            f"{float(s.max()):.4g}; for log-probabilities pass their exp(); a table saved with an "
            "index column needs it dropped (pandas: index=False)"
        )
    return p.clamp_min(0.0)


def _tv(a: Tensor, b: Tensor) -> Tensor:
    return 0.5 * (a - b).abs().sum(-1)


def _tv_matrix_nn(
    a: Tensor, b: Tensor, exclude_self: bool, chunk: int = 1024
) -> tuple[Tensor, Tensor]:
    """Nearest neighbour in ``b`` of each row of ``a`` under TV: (distance, index)."""
    dist, idx = [], []
    for i in range(0, a.shape[0], chunk):
        d = 0.5 * torch.cdist(a[i : i + chunk], b, p=1)
        if exclude_self:
            r = torch.arange(i, min(i + chunk, a.shape[0]))
            d[r - i, r] = float("inf")
        v, j = d.min(-1)
        dist.append(v)
        idx.append(j)
    return torch.cat(dist), torch.cat(idx)


def _spearman(a: Tensor, b: Tensor) -> float:
    if a.numel() < 3 or float(a.std()) == 0 or float(b.std()) == 0:
        return float("nan")
    ra = a.argsort().argsort().double()
    rb = b.argsort().argsort().double()
    return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])


def _twonn(points: Tensor) -> float:
    """TwoNN maximum-likelihood dimension ``(N - 1) / Σ log(r2 / r1)``; NaN if degenerate."""
    n = points.shape[0]
    if n < 3:
        return float("nan")
    rs = []
    for i in range(0, n, 1024):
        d = torch.cdist(points[i : i + 1024], points)
        r = torch.arange(i, min(i + 1024, n))
        d[r - i, r] = float("inf")
        rs.append(d.topk(2, largest=False).values)
    r = torch.cat(rs)
    ok = (r[:, 0] > 1e-12) & torch.isfinite(r[:, 1])
    mu = (r[ok, 1] / r[ok, 0]).log()
    if ok.sum() < 3 or float(mu.sum()) <= 0:
        return float("nan")
    return float((ok.sum() - 1) / mu.sum())


def _ratio_q99(num: Tensor, den: Tensor) -> float:
    keep = den > DENOM_FLOOR
    if not bool(keep.any()):
        return float("inf")
    return float(torch.quantile(num[keep] / den[keep], 0.99))


@dataclass(frozen=True)
class _Settings:
    """``check_conditions``' estimator settings and tolerances, checked."""

    delta: float
    far: float
    n_pairs: int
    seed: int
    max_violation: float
    max_image_gap: float
    max_L: float
    max_dim: float | None

    @classmethod
    def checked(
        cls,
        delta: Any,
        far: Any,
        n_pairs: Any,
        seed: Any,
        max_violation: Any,
        max_image_gap: Any,
        max_L: Any,
        max_dim: Any,
    ) -> _Settings:
        return cls(
            delta=as_real("delta", delta, low=0, low_open=True),
            far=as_real("far", far, low=0, low_open=True),
            n_pairs=as_int("n_pairs", n_pairs, 1),
            seed=as_int("seed", seed, 0),
            max_violation=as_real("max_violation", max_violation, low=0),
            max_image_gap=as_real("max_image_gap", max_image_gap, low=0),
            max_L=as_real("max_L", max_L, low=0, finite=False),
            max_dim=None if max_dim is None else as_real("max_dim", max_dim, low=0),
        )

    def dim_bound(self, k: int) -> float:
        """C3's bound: ``max_dim`` (``K - 1`` when not given: the outputs are not
        full-dimensional), with half a dimension of slack for the estimator's bias."""
        return (float(k - 1) if self.max_dim is None else float(self.max_dim)) + 0.5


def _scored_policies(true_policy: Any, proxy_policy: Any, x: Any) -> tuple[Tensor, Tensor]:
    """Both policies as ``(n, K)`` float64 probability tables on the same inputs, ``n >= 3``."""
    p = _probs("true_policy", true_policy, x)
    q = _probs("proxy_policy", proxy_policy, x)
    if p.shape != q.shape:
        raise ValueError(
            f"the two policies must be scored on the same inputs and outputs, got {tuple(p.shape)} "
            f"and {tuple(q.shape)}"
        )
    n = p.shape[0]
    if n < 3:
        raise ValueError(f"need at least 3 inputs, got {n}")
    return p, q


def _check_x_matches_tables(x: Any, true_policy: Any, proxy_policy: Any, n: int) -> None:
    if x is not None and not callable(true_policy) and not callable(proxy_policy):
        nx = len(x)
        if nx != n:
            raise ValueError(
                f"x has {nx} rows but the probability tables have {n}; the tables "
                "are used as they are (x is only needed for callables)"
            )


def _random_pair_distances(p: Tensor, q: Tensor, n_pairs: int, seed: int) -> tuple[Tensor, Tensor]:
    """``(TV under π†, TV under π̃)`` of ``n_pairs`` seeded random pairs of distinct inputs."""
    n = p.shape[0]
    gen = torch.Generator().manual_seed(seed)
    i = torch.randint(0, n, (n_pairs,), generator=gen)
    j = (i + torch.randint(1, n, (n_pairs,), generator=gen)) % n
    return _tv(p[i], p[j]), _tv(q[i], q[j])


def _levelset_violation(p: Tensor, q: Tensor, delta: float, far: float) -> float:
    """C1: nearest neighbours under each policy (closer than ``delta``), checked under the other
    (farther than ``far * delta``); NaN when no pair is close."""
    dq_nn, jq = _tv_matrix_nn(q, q, exclude_self=True)
    dp_nn, jp = _tv_matrix_nn(p, p, exclude_self=True)
    close_q, close_p = dq_nn < delta, dp_nn < delta
    far_q = _tv(p, p[jq]) > far * delta  # proxy says same, expert says different
    far_p = _tv(q, q[jp]) > far * delta  # expert says same, proxy says different
    n_close = int(close_q.sum() + close_p.sum())
    return (
        float((far_q & close_q).sum() + (far_p & close_p).sum()) / n_close
        if n_close
        else float("nan")
    )


def _image_gap_q99(p: Tensor, q: Tensor) -> float:
    """C2: 0.99-quantile of the TV from each ``π†(x)`` to its nearest ``π̃(x')``."""
    gap, _ = _tv_matrix_nn(p, q, exclude_self=False)
    return float(torch.quantile(gap, 0.99))


def _proxy_intrinsic_dim(q: Tensor) -> float:
    """C3: TwoNN dimension of the proxy's centred log-probabilities."""
    clr = torch.log(q.clamp_min(1e-12))
    clr = clr - clr.mean(-1, keepdim=True)
    return _twonn(clr)


def _degenerate_notes(
    p: Tensor, q: Tensor, dp: Tensor, dq: Tensor, violation: float, dim: float, delta: float
) -> list[str]:
    """Why some diagnostics are ``inf`` or ``nan`` (or noisy), in the order they are warned."""
    notes = []
    if float(dq.max()) <= DENOM_FLOOR:
        notes.append("the proxy's outputs are (nearly) constant")
    if float(dp.max()) <= DENOM_FLOOR:
        notes.append("the expert's outputs are (nearly) constant")
    if math.isnan(violation):
        notes.append(f"no nearest-neighbour pair is closer than delta = {delta}")
    if math.isnan(dim):
        notes.append("too few distinct proxy outputs for the intrinsic dimension")
    n = p.shape[0]
    distinct = min(torch.unique(p, dim=0).shape[0], torch.unique(q, dim=0).shape[0])
    if distinct < n / 2:
        notes.append(
            f"only {distinct} distinct rows in {n}: sampled label frequencies make the distances "
            "noisy (use many labels per input, or policies fitted to each pool)"
        )
    return notes


def check_conditions(
    true_policy: Callable[[Tensor], Tensor] | Tensor,
    proxy_policy: Callable[[Tensor], Tensor] | Tensor,
    x: Tensor | None = None,
    delta: float = 0.02,
    *,
    far: float = 5.0,
    n_pairs: int = 20000,
    max_violation: float = 0.05,
    max_image_gap: float = 0.1,
    max_dim: float | None = None,
    max_L: float = 30.0,
    seed: int = 0,
) -> ConditionReport:
    """Estimate the four sufficient conditions from the expert's and the proxy's policies.

    Args:
        true_policy, proxy_policy: callables ``x -> (n, K)`` probabilities (a world's
            ``true_policy``, a fitted :class:`SimplexPolicy` or :class:`MLPPolicy`, whose
            log-probabilities are exponentiated), or ``(n, K)`` probability arrays scored on the
            same inputs (e.g. label frequencies of the two labeller pools on a held-out set).
        x: ``(n, d_x)`` inputs (needed for callables); a few thousand is enough.
        delta: TV below which two outputs count as "the same" (C1; 0.02).
        far: C1's "far" is ``TV > far * delta``.
        n_pairs: random pairs for the Spearman correlation and the ratio quantiles (C4).
        max_violation, max_image_gap, max_dim, max_L: tolerances of the ``holds`` verdicts
            (ours, calibrated on the synthetic worlds: docs/proxy_feedback.md, "Condition
            diagnostics"). C3 holds when the intrinsic dimension is at most ``max_dim + 0.5``;
            ``max_dim=None`` is ``K - 1``, which every table of distributions over ``K`` outputs
            meets up to estimation noise, so pass the bottleneck ``D`` you intend to use for
            the condition that matters (``D`` much smaller than ``K``). C4 compares ``L_hat``,
            the paper's direction, with ``max_L``.
        seed: seeds the random pairs.

    Degenerate inputs (a constant proxy, or too few distinct outputs) give ``inf``/``nan`` with a
    warning, never an exception.
    """
    p, q = _scored_policies(true_policy, proxy_policy, x)
    n, k = p.shape
    s = _Settings.checked(
        delta, far, n_pairs, seed, max_violation, max_image_gap, max_L=max_L, max_dim=max_dim
    )
    _check_x_matches_tables(x, true_policy, proxy_policy, n)
    dp, dq = _random_pair_distances(p, q, s.n_pairs, s.seed)
    violation = _levelset_violation(p, q, s.delta, s.far)  # C1
    spearman = _spearman(dp, dq)  # reported beside C1
    gap_q99 = _image_gap_q99(p, q)  # C2
    dim = _proxy_intrinsic_dim(q)  # C3
    L_hat, L_rev = _ratio_q99(dq, dp), _ratio_q99(dp, dq)  # C4 and its reverse
    degenerate = _degenerate_notes(p, q, dp, dq, violation, dim, s.delta)
    if degenerate:
        warnings.warn(
            "check_conditions: " + "; ".join(degenerate) + " — some diagnostics are inf or nan",
            stacklevel=2,
        )
    max_dim = s.dim_bound(k)
    return ConditionReport(
        levelset_violation=violation,
        levelset_spearman=spearman,
        image_gap_q99=gap_q99,
        intrinsic_dim=dim,
        L_hat=L_hat,
        L_hat_rev=L_rev,
        holds={
            "C1": bool(violation <= s.max_violation),
            "C2": bool(gap_q99 <= s.max_image_gap),
            "C3": bool(dim <= max_dim),
            "C4": bool(L_hat <= s.max_L),
        },
        tolerances={
            "levelset_violation": s.max_violation,
            "image_gap": s.max_image_gap,
            "max_dim": max_dim,
            "max_L": s.max_L,
            "delta": float(s.delta),
            "far": float(s.far),
        },
        n=n,
        n_pairs=s.n_pairs,
    )
