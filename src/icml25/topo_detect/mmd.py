"""MMD two-sample tests for adversarial detection (§7): the unbiased statistic of Liu et al. (2020),
Gaussian kernels with the median heuristic, permutation nulls, and the topological variant whose
per-sample features are computed on the pooled, label-independently chunked sample."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "GaussianMMD",
    "TestResult",
    "TopologicalMMD",
    "gaussian_gram",
    "mmd2_unbiased",
    "mmd_h1_variance",
    "permutation_test",
]


def _gram(K: Tensor, n: int) -> Tensor:
    K = torch.as_tensor(K)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"K must be a square Gram matrix, got shape {tuple(K.shape)}")
    if not bool(torch.isfinite(K).all()):
        raise ValueError("K has non-finite entries")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2 or K.shape[0] != 2 * n:
        raise ValueError(
            f"n must be an integer >= 2 with K of size 2n; got n={n!r}, K {tuple(K.shape)}"
        )
    return K


def mmd2_unbiased(K: Tensor, n: int) -> Tensor:
    """``MMD^2_u`` of the merged Gram matrix ``(2n, 2n)`` (the first n rows are S_P), with Liu et
    al.'s one-sample U cross term (equal sizes)."""
    K = _gram(K, n)
    Kxx, Kyy, Kxy = K[:n, :n], K[n:, n:], K[:n, n:]
    c = n * (n - 1)
    return (
        (Kxx.sum() - Kxx.trace()) + (Kyy.sum() - Kyy.trace()) - 2 * (Kxy.sum() - Kxy.trace())
    ) / c


def mmd_h1_variance(K: Tensor, n: int) -> Tensor:
    """``4 (V1 - V2^2)`` with ``H = Kxx + Kyy - Kxy - Kxy^T``, ``V1 = |H 1/n|^2 / n``, ``V2 =
    sum H / n^2`` (the variance used to train deep kernels)."""
    K = _gram(K, n)
    H = K[:n, :n] + K[n:, n:] - K[:n, n:] - K[:n, n:].T
    V1 = ((H.sum(1) / n) ** 2).sum() / n
    V2 = H.sum() / n**2
    return 4 * (V1 - V2**2)


def median_bandwidth(F: Tensor) -> float:
    """Median of the non-zero pairwise squared distances (falls back to 1.0, with a warning,
    when every point is the same)."""
    sq = torch.cdist(F, F).pow(2)
    vals = sq[~torch.eye(len(F), dtype=torch.bool, device=F.device)]
    vals = vals[vals > 0]
    if vals.numel() == 0:
        warnings.warn("all pooled points are identical: bandwidth 1.0", UserWarning, stacklevel=2)
        return 1.0
    return float(vals.median())


def gaussian_gram(F: Tensor, bandwidth: float | None = None) -> Tensor:
    """``exp(-|a - b|^2 / h)`` on rows of ``F`` (flattened), ``h`` by the median heuristic when
    None."""
    F = torch.as_tensor(F).reshape(len(F), -1).double()
    if not bool(torch.isfinite(F).all()):
        raise ValueError("features must be finite")
    h = median_bandwidth(F) if bandwidth is None else float(bandwidth)
    if not h > 0:
        raise ValueError(f"bandwidth must be > 0, got {h}")
    return torch.exp(-torch.cdist(F, F).pow(2) / h)


def permutation_test(K: Tensor, n: int, n_perm: int = 100, generator=None) -> tuple[float, float]:
    """``(MMD^2_u, p)`` with ``p = (1 + #{T_b >= T_obs}) / (B + 1)`` over ``B = n_perm``
    permutations of the pooled indices."""
    K = _gram(K, n)
    if isinstance(n_perm, bool) or not isinstance(n_perm, int) or n_perm < 1:
        raise ValueError(f"n_perm must be a positive integer, got {n_perm!r}")
    if n_perm < 19:
        warnings.warn(
            f"n_perm = {n_perm} < 19: the test cannot reject at alpha = 0.05",
            UserWarning,
            stacklevel=2,
        )
    obs = float(mmd2_unbiased(K, n))
    perms = torch.stack([torch.randperm(2 * n, generator=generator) for _ in range(n_perm)]).to(
        K.device
    )
    stats = _mmd2_permuted(K, n, perms)
    count = int((stats >= obs - 1e-12 * max(1.0, abs(obs))).sum())
    return obs, (1 + count) / (n_perm + 1)


def _mmd2_permuted(K: Tensor, n: int, perms: Tensor) -> Tensor:
    """``MMD^2_u`` for each permutation row of ``perms (B, 2n)`` at once: the first n indices
    are S_P (the one-sample U cross term pairs S_P's i-th with S_Q's i-th element)."""
    B = perms.shape[0]
    S = torch.zeros(B, 2 * n, dtype=K.dtype, device=K.device)
    S.scatter_(1, perms[:, :n], 1.0)
    Tm = 1.0 - S
    KS, KT = S @ K, Tm @ K
    diag = K.diagonal()
    sxx = (KS * S).sum(1) - S @ diag
    syy = (KT * Tm).sum(1) - Tm @ diag
    sxy = (KS * Tm).sum(1) - K[perms[:, :n], perms[:, n:]].sum(1)
    return (sxx + syy - 2 * sxy) / (n * (n - 1))


@dataclass
class TestResult:
    stat: float
    p_value: float
    reject: bool


def _size(S) -> int:
    if isinstance(S, dict):
        sizes = {len(v) for v in S.values()}
        if len(sizes) != 1:
            raise ValueError(
                f"every feature of a sample must have the same length, got {sorted(sizes)}"
            )
        return sizes.pop()
    return len(S)


def _pair(S_P: Tensor, S_Q: Tensor) -> int:
    S_P, S_Q = _size(S_P), _size(S_Q)
    if S_P != S_Q:
        raise ValueError(
            f"S_P and S_Q must have the same size for the U-statistic, got {S_P} and {S_Q}"
        )
    if S_P < 2:
        raise ValueError(f"each sample needs at least 2 points, got {S_P}")
    return S_P


class GaussianMMD:
    """An untrained product of Gaussian kernels on feature maps of the samples (median
    bandwidths on the pooled sample): ``features`` is a list of callables ``Z -> (2n, f)`` applied
    to the pooled sample (identity for the embeddings themselves), e.g. ``[embed]`` (MMD-G) or
    ``[embed, pixels]`` (an untrained SAMMD analogue)."""

    def __init__(self, features: Sequence[Callable] = (lambda z: z,), n_perm: int = 100,
                 alpha: float = 0.05) -> None:  # fmt: skip
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha}")
        self.features, self.n_perm, self.alpha = list(features), n_perm, alpha

    def gram(self, pooled, generator=None) -> Tensor:
        K = None
        for f in self.features:
            G = gaussian_gram(f(pooled))
            K = G if K is None else K * G
        return K

    def test(self, S_P, S_Q, generator=None) -> TestResult:
        n = _pair(S_P, S_Q)
        pooled = _pool(S_P, S_Q)
        K = self.gram(pooled, generator)
        stat, p = permutation_test(K, n, self.n_perm, generator)
        return TestResult(stat, p, p <= self.alpha)


def _pool(S_P, S_Q):
    if isinstance(S_P, dict):
        return {k: torch.cat([torch.as_tensor(S_P[k]), torch.as_tensor(S_Q[k])]) for k in S_P}
    return torch.cat([torch.as_tensor(S_P), torch.as_tensor(S_Q)])


class TopologicalMMD(GaussianMMD):
    """The base kernel times a Gaussian on per-sample topological features (``fusion="product"``;
    docs/topo_detect.md). ``signature_fn(pooled, generator) -> (2n, F)`` is applied to the
    POOLED sample with label-independent chunking (the validity rule: computing it per group
    would break exchangeability under H0); the API offers no per-group option."""

    def __init__(self, base_features: Sequence[Callable], signature_fn: Callable, n_perm: int = 100,
                 alpha: float = 0.05, fusion: str = "product") -> None:  # fmt: skip
        if fusion != "product":
            raise ValueError(
                f"fusion must be 'product' (the default; 'concat' is not built), got {fusion!r}"
            )
        super().__init__(base_features, n_perm, alpha)
        self.signature_fn = signature_fn

    def gram(self, pooled, generator=None) -> Tensor:
        g = torch.as_tensor(self.signature_fn(pooled, generator))
        n2 = _size(pooled)
        if g.shape[0] != n2:
            raise ValueError(
                f"signature_fn must return one row per pooled sample, ({n2}, F); got {tuple(g.shape)}"
            )
        K = gaussian_gram(g)
        return K if not self.features else super().gram(pooled, generator) * K


def binomial_upper(T: int, p: float = 0.05, q: float = 0.99) -> float:
    """The ``q`` quantile of ``Binomial(T, p) / T`` (the type-I bound of the reproduction)."""
    from scipy.stats import binom

    return float(binom.ppf(q, T, p)) / T
