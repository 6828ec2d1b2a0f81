"""Query selection (docs/distinguishability.md): PEBBLE's schemes for pairwise queries and DistQ for
distinguishability queries (informativeness filtered, then the easiest kept).

DistQ is reconstructed from the abstract (the paper's text was not available): draw ``M * B``
candidate DQs, score each by ensemble disagreement on the answers the labeler will give
(informativeness ``I``) and by the predicted strength of the pair it will answer on (easiness
``E``), keep the ``keep_frac`` most informative and return the ``B`` easiest of those. Ties go to the
lowest candidate index. All scores are computed without gradients.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.distinguishability.queries import DistinguishabilityQuery, PairwiseQuery
from icml25.distinguishability.reward_model import RewardEnsemble, smooth_abs
from icml25.distinguishability.segments import SegmentBuffer

__all__ = [
    "dq_scores",
    "easiness",
    "informativeness",
    "select_dq",
    "select_pcq",
]

PCQ_METHODS = (
    "uniform",
    "disagreement",
    "entropy",
    "kcenter",
    "kcenter_disagree",
    "kcenter_entropy",
)
DQ_METHODS = ("distq", "uniform", "informative", "easy")


def _rng(rng) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _check(n: int, large_batch: int, buf: SegmentBuffer, need: int, ensemble) -> tuple[int, int]:
    n = as_int("n (queries to select)", n, 0)
    large_batch = as_int("large_batch", large_batch, 1)
    if len(buf) < need:
        raise ValueError(f"the buffer holds {len(buf)} segments; at least {need} are needed")
    if ensemble.K < 2 and not getattr(ensemble, "_warned_k1", False):
        warnings.warn(
            "a 1-member ensemble has no disagreement: disagreement/DistQ scores are all 0 and "
            "the selection falls back to easiness or index order; use n_members >= 2",
            UserWarning,
            stacklevel=3,
        )
        ensemble._warned_k1 = True
    return n, large_batch


def _top(scores: Tensor, n: int) -> list[int]:
    """Indices of the ``n`` largest scores, ties to the lowest index (stable sort)."""
    order = torch.sort(-scores.double(), stable=True).indices
    return order[:n].tolist()


SCORE_DTYPES = (None, "bfloat16")


@torch.no_grad()
def _returns(
    ensemble: RewardEnsemble,
    buf: SegmentBuffer,
    idx: np.ndarray,
    returns: Tensor | None = None,
    score_dtype: str | None = None,
    chunk: int = 64,
) -> Tensor:
    """``(K, len(idx))`` predicted returns of the segments at rows ``idx``: taken from
    ``returns (K, len(buf))`` when the caller has them, else computed once per distinct segment,
    ``chunk`` segments at a time (activations stay in cache), under bfloat16 autocast when
    ``score_dtype="bfloat16"`` (sums in float32)."""
    if returns is not None:
        r = torch.as_tensor(returns)
        if r.ndim != 2 or r.shape != (ensemble.K, len(buf)):
            raise ValueError(
                f"returns must be (K, len(buf)) = ({ensemble.K}, {len(buf)}), got {tuple(r.shape)}"
            )
        if not bool(torch.isfinite(r).all()):
            raise ValueError("returns holds NaN or inf values")
        return r[:, torch.from_numpy(np.asarray(idx).reshape(-1))]
    if score_dtype not in SCORE_DTYPES:
        raise ValueError(f"score_dtype must be one of {SCORE_DTYPES}, got {score_dtype!r}")
    uniq, inv = np.unique(idx, return_inverse=True)
    t = torch.from_numpy(uniq)
    obs, act = buf.obs, buf.act
    dev = next(ensemble.parameters()).device
    parts = []
    for s in range(0, len(t), chunk):
        tt = t[s : s + chunk]
        if score_dtype == "bfloat16":
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                parts.append(ensemble.segment_returns(obs[tt], act[tt]).float())
        else:
            parts.append(ensemble.segment_returns(obs[tt], act[tt]))
    ret = torch.cat(parts, 1)
    return ret[:, torch.from_numpy(inv.reshape(-1)).to(ret.device)]


def _binary_entropy(p: Tensor) -> Tensor:
    p = p.clamp(1e-12, 1 - 1e-12)
    return -(p * p.log() + (1 - p) * (1 - p).log())


def _kcenter(features: Tensor, labelled: Tensor | None, n: int) -> list[int]:
    """Greedy k-center: repeatedly take the candidate farthest from the chosen and labelled set."""
    if labelled is not None and labelled.numel():
        dist = torch.cdist(features, labelled).min(1).values
    else:
        dist = torch.full((features.shape[0],), math.inf, dtype=features.dtype)
    chosen: list[int] = []
    for _ in range(min(n, features.shape[0])):
        if chosen:
            dist = torch.minimum(dist, torch.cdist(features, features[chosen[-1]][None]).squeeze(1))
        dist_masked = dist.clone()
        if chosen:
            dist_masked[chosen] = -math.inf
        chosen.append(_top(dist_masked, 1)[0])
    return chosen


def select_pcq(
    ensemble: RewardEnsemble,
    buf: SegmentBuffer,
    n: int,
    method: str = "disagreement",
    large_batch: int = 10,  # PEBBLE large_batch
    rng=None,
    labelled: list[PairwiseQuery] | None = None,
    *,
    returns: Tensor | None = None,
    score_dtype: str | None = None,
) -> list[PairwiseQuery]:
    """PEBBLE/B-Pref selection of ``n`` pairwise queries from ``large_batch * n`` random candidates
    (segments drawn with replacement): ``uniform``, ``disagreement`` (member std of
    ``sigma(Delta)``), ``entropy`` (member mean of the binary entropy), ``kcenter`` (greedy k-center
    on the two segments' flattened observations, against ``labelled``), ``kcenter_disagree`` /
    ``kcenter_entropy`` (k-center among the more uncertain half). ``returns``: the ensemble's
    per-member returns of every held segment ``(K, len(buf))`` when the caller already has them
    (no forward pass); ``score_dtype="bfloat16"``: score under bfloat16 autocast (faster on CPUs
    with bf16 units, but not float32's picks: measured, the returned list matched float32's in
    0 of 20 rounds with B-Pref's network and the unordered set in 14 of 20, about 1 pick in 20
    replaced; docs/distinguishability.md, "Benchmark")."""
    if method not in PCQ_METHODS:
        raise ValueError(f"method must be one of {PCQ_METHODS}, got {method!r}")
    n, large_batch = _check(n, large_batch, buf, 2, ensemble)
    if n == 0:
        return []
    g = _rng(rng)
    o = buf.first_id  # queries carry stable segment ids (= rows + first_id)
    if method == "uniform":
        idx = g.integers(0, len(buf), size=(n, 2))
        return [PairwiseQuery(int(a) + o, int(b) + o) for a, b in idx]
    m = large_batch * n
    idx = g.integers(0, len(buf), size=(m, 2))
    cand = list(range(m))
    if method != "kcenter":
        ret = _returns(ensemble, buf, idx.reshape(-1), returns, score_dtype)
        ret = ret.reshape(ensemble.K, m, 2)
        p = torch.sigmoid(ret[..., 0] - ret[..., 1])
        score = (
            p.std(0, unbiased=False)
            if method in ("disagreement", "kcenter_disagree")
            else _binary_entropy(p).mean(0)
        )
        if method in ("disagreement", "entropy"):
            return [PairwiseQuery(int(idx[i, 0]) + o, int(idx[i, 1]) + o) for i in _top(score, n)]
        cand = _top(score, max(n, m // 2))
    flat = buf.obs.reshape(len(buf), -1).double()
    feats = torch.cat([flat[idx[cand, 0]], flat[idx[cand, 1]]], 1)
    lab = None
    if labelled:
        li = np.array([[q.i0, q.i1] for q in labelled]) - o
        li = li[(li >= 0).all(1) & (li < len(buf)).all(1)]  # evicted ones no longer count
        if len(li):
            lab = torch.cat([flat[li[:, 0]], flat[li[:, 1]]], 1)
    return [
        PairwiseQuery(int(idx[cand[i], 0]) + o, int(idx[cand[i], 1]) + o)
        for i in _kcenter(feats, lab, n)
    ]


def dq_scores(
    ret: Tensor,
    *,
    informativeness_kind: Literal["disagreement", "entropy"] = "disagreement",
    eps: float = 1e-3,
) -> tuple[Tensor, Tensor]:
    """Informativeness ``I`` and easiness ``E`` (docs/distinguishability.md) of candidate DQs from the
    ensemble's returns ``ret (K, C, 4)`` (segments 1a, 1b, 2a, 2b). Returns two ``(C,)`` tensors
    in ``ret``'s dtype. NaN/inf returns and ``eps <= 0`` are refused (``ValueError``)."""
    if ret.ndim != 3 or ret.shape[-1] != 4:
        raise ValueError(f"ret must be (K, C, 4), got {tuple(ret.shape)}")
    if ret.shape[0] == 0:
        raise ValueError("ret must hold at least one ensemble member (K >= 1), got K = 0")
    if not bool(torch.isfinite(ret).all()):
        raise ValueError("ret (the members' returns) holds NaN or inf values")
    eps = as_real("eps", eps, low=0.0, low_open=True)
    if informativeness_kind not in ("disagreement", "entropy"):
        raise ValueError(
            f"informativeness must be 'disagreement' or 'entropy', got {informativeness_kind!r}"
        )
    if ret.shape[1] == 0:  # no candidates: no scores (and no std over nothing)
        return ret.new_zeros(0), ret.new_zeros(0)
    d1, d2 = ret[..., 0] - ret[..., 1], ret[..., 2] - ret[..., 3]
    p_d = torch.sigmoid(smooth_abs(d1, eps) - smooth_abs(d2, eps))
    p_y1, p_y2 = torch.sigmoid(d1), torch.sigmoid(d2)
    pi1 = p_d.mean(0)
    if informativeness_kind == "disagreement":
        info = (
            p_d.std(0, unbiased=False)
            + pi1 * p_y1.std(0, unbiased=False)
            + (1 - pi1) * p_y2.std(0, unbiased=False)
        )
    else:
        probs = torch.stack(
            [p_d * p_y1, p_d * (1 - p_y1), (1 - p_d) * p_y2, (1 - p_d) * (1 - p_y2)], -1
        ).mean(0)
        info = -(probs.clamp_min(1e-12).log() * probs).sum(-1)
    mean_ret = ret.mean(0)  # (C, 4)
    s_r = mean_ret.reshape(-1).std() + 1e-8
    ease = (
        torch.maximum(
            (mean_ret[:, 0] - mean_ret[:, 1]).abs(), (mean_ret[:, 2] - mean_ret[:, 3]).abs()
        )
        / s_r
    )
    return info, ease


def informativeness(ret: Tensor, kind: str = "disagreement") -> Tensor:
    """The informativeness ``I`` of :func:`dq_scores` alone, ``(C,)``."""
    return dq_scores(ret, informativeness_kind=kind)[0]


def easiness(ret: Tensor) -> Tensor:
    """The easiness ``E`` of :func:`dq_scores` alone, ``(C,)``."""
    return dq_scores(ret)[1]


def _z(x: Tensor) -> Tensor:
    return (x - x.mean()) / (x.std(unbiased=False) + 1e-12)


def select_dq(
    ensemble: RewardEnsemble,
    buf: SegmentBuffer,
    n: int,
    method: str = "distq",
    large_batch: int = 10,  # PEBBLE large_batch (M in docs/distinguishability.md)
    keep_frac: float = 0.5,  # docs/distinguishability.md (unverified)
    rule: Literal["filter", "weighted"] = "filter",
    lambda_e: float = 1.0,  # docs/distinguishability.md, weighted rule only (unverified)
    rng=None,
    informativeness: Literal["disagreement", "entropy"] = "disagreement",
    *,
    returns: Tensor | None = None,
    score_dtype: str | None = None,
) -> list[DistinguishabilityQuery]:
    """Select ``n`` distinguishability queries from ``large_batch * n`` random candidates
    (4 segments each, drawn with replacement).

    ``method``: ``distq`` (``rule="filter"``: the ``ceil(keep_frac * M * n)`` most informative, then
    the ``n`` easiest of those, returned easiest first; ``rule="weighted"``: top ``n`` by
    ``zscore(I) + lambda_e * zscore(E)``), ``uniform``, ``informative`` (top ``n`` by ``I``),
    ``easy`` (top ``n`` by ``E``). ``returns`` and ``score_dtype``: as in :func:`select_pcq`."""
    if method not in DQ_METHODS:
        raise ValueError(f"method must be one of {DQ_METHODS}, got {method!r}")
    keep_frac = as_real("keep_frac", keep_frac, low=0.0, high=1.0, low_open=True)
    lambda_e = as_real("lambda_e", lambda_e)
    if rule not in ("filter", "weighted"):
        raise ValueError(f"rule must be 'filter' or 'weighted', got {rule!r}")
    n, large_batch = _check(n, large_batch, buf, 4, ensemble)
    if n == 0:
        return []
    g = _rng(rng)
    o = buf.first_id  # queries carry stable segment ids (= rows + first_id)

    def make(rows) -> list[DistinguishabilityQuery]:
        return [
            DistinguishabilityQuery(
                PairwiseQuery(int(r[0]) + o, int(r[1]) + o),
                PairwiseQuery(int(r[2]) + o, int(r[3]) + o),
            )
            for r in rows
        ]

    if method == "uniform":
        return make(g.integers(0, len(buf), size=(n, 4)))
    m = large_batch * n
    idx = g.integers(0, len(buf), size=(m, 4))
    ret = _returns(ensemble, buf, idx.reshape(-1), returns, score_dtype)
    ret = ret.reshape(ensemble.K, m, 4)
    info, ease = dq_scores(ret, informativeness_kind=informativeness)
    if method == "informative":
        pick = _top(info, n)
    elif method == "easy":
        pick = _top(ease, n)
    elif rule == "weighted":
        pick = _top(_z(info) + lambda_e * _z(ease), n)
    else:
        keep = math.ceil(keep_frac * m)
        if keep < n:
            warnings.warn(
                f"keep_frac={keep_frac} keeps {keep} < n={n} candidates; returning {keep}",
                UserWarning,
                stacklevel=2,
            )
        kept = _top(info, keep)
        order = _top(ease[kept], len(kept))
        pick = [kept[i] for i in order[:n]]
    return make(idx[pick])
