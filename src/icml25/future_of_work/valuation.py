"""Group-level data valuation: what each rights-holder's data is worth to a model, the
``attribution`` input of the royalty pool.

Interpretation tool; the paper does not specify this mechanism. The estimators are the standard
ones: leave-one-out, exact Shapley (enumeration of all subsets), permutation Shapley with
truncation (Ghorbani and Zou, ICML 2019, "Data Shapley", Algorithm 1), exact Banzhaf and
maximum-sample-reuse Banzhaf (Wang and Jia, AISTATS 2023), and a first-order gradient
similarity (TracIn-style, Pruthi et al. 2020), which is not a Shapley value.

A utility is any callable ``U(frozenset of group ids) -> float``; :class:`GroupUtility` builds
one from a scikit-learn estimator (or a fit function) and data.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from icml25._validate import as_int, as_real
from icml25.future_of_work._checks import DISCLAIMER


def _rng(seed: Any) -> np.random.Generator:
    """``seed`` (an integer >= 0 as Python, numpy or a 0-d torch tensor, ``None``, or a numpy
    ``Generator``) as a numpy ``Generator``."""
    if seed is None or isinstance(seed, np.random.Generator):
        return np.random.default_rng(seed)
    return np.random.default_rng(as_int("seed", seed, 0))


__all__ = [
    "MAX_EXACT",
    "GroupUtility",
    "Valuation",
    "banzhaf_exact",
    "banzhaf_msr",
    "gradient_attribution",
    "loo",
    "shapley_exact",
    "shapley_tmc",
    "utility_table",
]

LOG_LOSS_CLIP = 1e-15  # probabilities are clipped here before the log (as scikit-learn's log_loss)
MAX_EXACT = 14  # 2^14 = 16384 subsets: exact enumeration above this is the wrong tool


class Valuation(dict):
    """``{group: value}`` plus how it was obtained: ``method``, ``stderr`` (Monte-Carlo
    estimators), ``bound`` (a simultaneous (1 - delta) error bound on every value, Monte-Carlo
    Shapley), ``n_utility_calls`` and ``total`` (``U(all) - U(∅)``, what Shapley values sum to).
    Compares and hashes as the dict of values. Interpretation tool; the paper does not specify
    this mechanism."""

    def __init__(
        self,
        values: dict,
        *,
        method: str = "",
        stderr: dict | None = None,
        bound: float | None = None,
        n_utility_calls: int = 0,
        total: float | None = None,
    ) -> None:
        super().__init__(values)
        self.method = method
        self.stderr = {} if stderr is None else stderr
        self.bound = bound
        self.n_utility_calls = n_utility_calls
        self.total = total

    def __repr__(self) -> str:
        return f"Valuation({dict(self)!r}, method={self.method!r})"


class _Counted:
    """Caches a utility on frozensets and counts the distinct calls."""

    def __init__(self, utility: Callable[[frozenset], float]) -> None:
        if not callable(utility):
            raise TypeError(
                f"utility must be a callable U(frozenset) -> float, got {type(utility).__name__}"
            )
        self.u = utility
        self.cache: dict[frozenset, float] = {}

    def __call__(self, s: frozenset) -> float:
        if s not in self.cache:
            v = float(self.u(frozenset(s)))
            if not math.isfinite(v):
                raise ValueError(f"the utility returned {v} for the subset {sorted(map(str, s))}")
            self.cache[s] = v
        return self.cache[s]


def _groups(groups: Any) -> list[Hashable]:
    g = list(groups)
    if not g:
        raise ValueError("groups is empty")
    if len(set(g)) != len(g):
        raise ValueError(f"groups must be distinct, got {g}")
    return g


def utility_table(utility: Callable[[frozenset], float], groups: Sequence[Hashable]) -> np.ndarray:
    """``U`` of every subset, indexed by bitmask (bit ``i`` = ``groups[i]``): ``2^n`` calls
    (``n <= 14``).
    Interpretation tool; the paper does not specify this mechanism."""
    g = _groups(groups)
    if len(g) > MAX_EXACT:
        raise ValueError(
            f"{len(g)} groups is too many for exact enumeration (2^{len(g)} fits); "
            f"use shapley_tmc or banzhaf_msr (max {MAX_EXACT})"
        )
    u = utility if isinstance(utility, _Counted) else _Counted(utility)
    n = len(g)
    out = np.empty(2**n)
    for mask in range(2**n):
        out[mask] = u(frozenset(g[i] for i in range(n) if mask >> i & 1))
    return out


def shapley_exact(utility: Callable[[frozenset], float], groups: Sequence[Hashable]) -> Valuation:
    """Exact Shapley values ``φ_h = Σ_{S ⊆ H \\ {h}} |S|! (n - |S| - 1)! / n! (U(S ∪ {h}) - U(S))``
    by enumerating all ``2^n`` subsets once (``n <= 14``; ``ValueError`` above: use
    :func:`shapley_tmc`). They sum to ``U(all) - U(∅)`` (efficiency).
    Interpretation tool; the paper does not specify this mechanism."""
    g = _groups(groups)
    table = utility_table(utility, g)
    n = len(g)
    masks = np.arange(2**n)
    size = np.array([bin(m).count("1") for m in masks])
    w = np.array(
        [
            math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n) if k < n else 0.0
            for k in range(n + 1)
        ]
    )
    phi = {}
    for i, h in enumerate(g):
        without = masks[(masks >> i & 1) == 0]
        phi[h] = float(np.sum(w[size[without]] * (table[without | (1 << i)] - table[without])))
    return Valuation(
        phi, method="shapley_exact", n_utility_calls=2**n, total=float(table[-1] - table[0])
    )


def banzhaf_exact(utility: Callable[[frozenset], float], groups: Sequence[Hashable]) -> Valuation:
    """Exact Banzhaf values ``β_h = 2^{-(n-1)} Σ_{S ∌ h} (U(S ∪ {h}) - U(S))`` (``n <= 14``).
    Interpretation tool; the paper does not specify this mechanism."""
    g = _groups(groups)
    table = utility_table(utility, g)
    n = len(g)
    masks = np.arange(2**n)
    out = {}
    for i, h in enumerate(g):
        without = masks[(masks >> i & 1) == 0]
        out[h] = float(np.mean(table[without | (1 << i)] - table[without]))
    return Valuation(out, method="banzhaf_exact", n_utility_calls=2**n)


def loo(utility: Callable[[frozenset], float], groups: Sequence[Hashable]) -> Valuation:
    """Leave-one-out: ``φ_h = U(all) - U(all \\ {h})``. Two groups that duplicate each other both
    get (about) 0. Interpretation tool; the paper does not specify this mechanism."""
    g = _groups(groups)
    u = _Counted(utility)
    full = frozenset(g)
    out = {h: u(full) - u(full - {h}) for h in g}
    return Valuation(out, method="loo", n_utility_calls=len(u.cache))


def shapley_tmc(
    utility: Callable[[frozenset], float],
    groups: Sequence[Hashable],
    max_perms: int = 500,
    tol: float = 0.01,
    seed: int = 0,
    *,
    min_perms: int = 50,
    convergence: float = 0.05,
    value_range: float | None = None,
    delta: float = 0.05,
) -> Valuation:
    """Truncated Monte-Carlo Shapley (Ghorbani and Zou 2019, Algorithm 1).

    For random permutations, add the groups one by one and record each marginal
    ``U(prefix ∪ {h}) - U(prefix)``; once ``|U(all) - U(prefix)| < tol · |U(all)|`` the remaining
    marginals are 0 (``tol=0``: no truncation, unbiased). Stops after ``max_perms``, or once the
    largest relative change of the running means over the last ``min_perms`` permutations is
    below ``convergence``. ``stderr``: standard errors of the means. ``bound``: a Hoeffding bound
    holding for every group at once with probability ``1 - delta``,
    ``b sqrt(2 ln(2n / delta) / M)``, with marginals in ``[-b, b]``, ``b = value_range`` (e.g. 1
    for accuracy) or, if not given, the observed range of ``U`` (then an empirical bound); it
    covers the sampling error of the untruncated estimator (``tol=0``).
    Interpretation tool; the paper does not specify this mechanism."""
    g = _groups(groups)
    max_perms = as_int("max_perms", max_perms, 1)
    min_perms = as_int("min_perms", min_perms, 1)
    tol = as_real("tol", tol, low=0)
    delta = as_real("delta", delta, low=0, high=1, low_open=True, high_open=True)
    u = utility if isinstance(utility, _Counted) else _Counted(utility)
    rng = _rng(seed)
    n = len(g)
    full = frozenset(g)
    u_all, u_empty = u(full), u(frozenset())
    rows = []
    means_hist = []
    for m in range(max_perms):
        perm = rng.permutation(n)
        marg = np.zeros(n)
        prefix: frozenset = frozenset()
        prev = u_empty
        for i in perm:
            if tol > 0 and abs(u_all - prev) < tol * abs(u_all):
                break  # truncation: the rest add (about) nothing
            cur = u(prefix | {g[i]})
            marg[i] = cur - prev
            prefix, prev = prefix | {g[i]}, cur
        rows.append(marg)
        mean = np.mean(rows, axis=0)
        means_hist.append(mean)
        if m + 1 >= 2 * min_perms:
            old = means_hist[-min_perms - 1]
            change = np.max(np.abs(mean - old) / np.maximum(np.abs(mean), 1e-12))
            if change < convergence:
                break
    a = np.array(rows)
    M = a.shape[0]
    se = a.std(axis=0, ddof=1) / np.sqrt(M) if M > 1 else np.full(n, np.inf)
    if value_range is not None:
        b = as_real("value_range", value_range, low=0, low_open=True)
    else:
        b = float(max(u.cache.values()) - min(u.cache.values()))
    bound = b * math.sqrt(2 * math.log(2 * n / delta) / M)
    return Valuation(
        {h: float(a[:, i].mean()) for i, h in enumerate(g)},
        method="shapley_tmc",
        stderr={h: float(se[i]) for i, h in enumerate(g)},
        bound=bound,
        n_utility_calls=len(u.cache),
        total=u_all - u_empty,
    )


def banzhaf_msr(
    utility: Callable[[frozenset], float],
    groups: Sequence[Hashable],
    n_samples: int = 1000,
    seed: int = 0,
) -> Valuation:
    """Maximum-sample-reuse Banzhaf (Wang and Jia 2023): subsets drawn uniformly (each group in
    with probability 1/2); ``β_h = mean U(S | h ∈ S) - mean U(S | h ∉ S)``, every sample used for
    every group. Interpretation tool; the paper does not specify this mechanism."""
    g = _groups(groups)
    n_samples = as_int("n_samples", n_samples, 2)
    u = utility if isinstance(utility, _Counted) else _Counted(utility)
    rng = _rng(seed)
    inc = rng.random((n_samples, len(g))) < 0.5
    vals = np.array([u(frozenset(h for h, b in zip(g, row) if b)) for row in inc])
    out, se = {}, {}
    for i, h in enumerate(g):
        a, b = vals[inc[:, i]], vals[~inc[:, i]]
        if a.size == 0 or b.size == 0:
            out[h], se[h] = float("nan"), float("inf")
            continue
        out[h] = float(a.mean() - b.mean())
        se[h] = (
            float(math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size))
            if min(a.size, b.size) > 1
            else float("inf")
        )
    return Valuation(out, method="banzhaf_msr", stderr=se, n_utility_calls=len(u.cache))


def gradient_attribution(
    train_grads: Any, val_grads: Any, groups: Any, lr: Sequence[float] | float = 1.0
) -> Valuation:
    """First-order (TracIn-style) attribution: ``φ_h = Σ_c η_c Σ_{z ∈ D_h} Σ_{z' ∈ V} ∇ℓ_c(z') ·
    ∇ℓ_c(z)`` from per-example loss gradients at checkpoints ``c``: ``train_grads`` ``(C, n, p)``
    (or ``(n, p)``: one checkpoint), ``val_grads`` ``(C, m, p)``, ``groups`` ``(n,)`` the group of
    each training example. Cheap and not a Shapley value (no efficiency, no symmetry guarantee);
    for large models use TRAK or dattri. Interpretation tool; the paper does not specify this
    mechanism.

    Returns finite values or raises: NaN or inf gradients or rates are refused
    (``ValueError`` naming the argument and the index), and so are products that overflow
    float64. An empty validation set gives zeros; an empty training set, no groups.
    """
    tg, vg = _float64(train_grads), _float64(val_grads)
    for name, a in (("train_grads", tg), ("val_grads", vg)):
        if not np.isfinite(a).all():
            at = tuple(int(i) for i in np.argwhere(~np.isfinite(a))[0])
            raise ValueError(f"{name} must be finite, got {a[at]!r} at index {at}")
    if tg.ndim == 2:
        tg, vg = tg[None], vg[None]
    if tg.ndim != 3 or vg.ndim != 3 or tg.shape[0] != vg.shape[0] or tg.shape[2] != vg.shape[2]:
        raise ValueError(
            f"train_grads (C, n, p) and val_grads (C, m, p) must share C and p, got "
            f"{tg.shape} and {vg.shape}"
        )
    grp = np.asarray(groups)
    if grp.shape != (tg.shape[1],):
        raise ValueError(
            f"groups must have one entry per training example ({tg.shape[1]}), got {grp.shape}"
        )
    lr_list = np.asarray(lr, dtype=object).reshape(-1).tolist() if np.ndim(lr) else [lr]
    if len(lr_list) not in (1, tg.shape[0]):
        raise ValueError(
            f"lr must be one rate or one per checkpoint ({tg.shape[0]}), got {len(lr_list)}"
        )
    eta = np.broadcast_to(
        np.array([as_real("lr", v) for v in lr_list], dtype=float), (tg.shape[0],)
    )
    with np.errstate(over="ignore", invalid="ignore"):
        per_example = np.einsum("c,cnp,cp->n", eta, tg, vg.sum(axis=1))
    if not np.isfinite(per_example).all():
        raise ValueError(
            "the gradient products overflowed float64 (an attribution came out inf or NaN); "
            "rescale train_grads/val_grads (e.g. divide by their largest norm) and retry"
        )
    return Valuation(
        {h: float(per_example[grp == h].sum()) for h in dict.fromkeys(grp.tolist())},
        method="gradient",
    )


class GroupUtility:
    """``U(S)``: the validation score of a model trained on the data of the groups in ``S``.

    Args:
        model_factory: a scikit-learn estimator (cloned for every fit) or a callable returning a
            fresh one; anything with ``fit`` and ``predict`` (``predict_proba`` for log-loss).
        X, y: training data; ``groups``: ``(n,)`` the group (rights-holder) of each row.
        X_val, y_val: validation data.
        metric: ``"accuracy"``, ``"neg_log_loss"`` or a callable ``(y_true, y_pred) -> float``.
        base_idx: rows always in the training set (a public base corpus); default none;
            integer row indices in ``[0, n)``.
        labels: for ``"neg_log_loss"``, every class the validation labels may hold (as
            scikit-learn's ``log_loss(labels=...)``); a class the model never saw gets the clip
            probability 1e-15. Default: the training classes, and a validation class missing
            from them is refused (``ValueError`` naming it).
        fit_fn: instead of an estimator, ``fit_fn(X, y) -> predict_fn`` (e.g. a torch loop).

    ``U(∅)`` (and any subset with one class, or whose fit fails) is the score of a constant
    predictor: the majority class of the training rows in the subset, or of all rows for the
    empty set; for ``"neg_log_loss"`` their Laplace-smoothed class prior (uniform for the empty
    set), with model probabilities clipped at 1e-15. An estimator class is called for each fit.
    If the very first fit fails, a ``RuntimeError`` says so (a broken estimator would otherwise
    value every subset as a constant). Fits run single-threaded (``threadpoolctl``).
    Interpretation tool; the paper does not specify this mechanism.
    """

    def __init__(
        self,
        model_factory: Any,
        X: Any,
        y: Any,
        groups: Any,
        X_val: Any,
        y_val: Any,
        *,
        metric: str | Callable = "accuracy",
        base_idx: Any = None,
        fit_fn: Callable | None = None,
        labels: Any = None,
    ) -> None:
        self.X, self.y = np.asarray(X), np.asarray(y)
        if self.X.ndim != 2:
            raise ValueError(f"X must be 2-D (rows, features), got shape {self.X.shape}")
        self.groups = np.asarray(groups)
        self.X_val, self.y_val = np.asarray(X_val), np.asarray(y_val)
        if self.X.shape[0] != self.y.shape[0] or self.groups.shape != (self.y.shape[0],):
            raise ValueError(
                f"X, y and groups need one row each: {self.X.shape[0]}, "
                f"{self.y.shape[0]}, {self.groups.shape}"
            )
        if self.X_val.shape[0] != self.y_val.shape[0] or self.X_val.shape[0] == 0:
            raise ValueError("X_val and y_val need the same, non-zero number of rows")
        if model_factory is None and fit_fn is None:
            raise ValueError("pass model_factory (an estimator) or fit_fn")
        if metric not in ("accuracy", "neg_log_loss") and not callable(metric):
            raise ValueError(
                f"metric must be 'accuracy', 'neg_log_loss' or a callable, got {metric!r}"
            )
        self.model_factory, self.fit_fn, self.metric = model_factory, fit_fn, metric
        self.base_idx = _base_idx(base_idx, self.y.shape[0])
        self.classes = np.unique(self.y)
        if labels is not None:
            lab = np.unique(np.asarray(labels))
            missing = np.setdiff1d(self.classes, lab)
            if missing.size:
                raise ValueError(
                    f"labels must include every training class; missing {missing.tolist()}"
                )
            self.classes = lab
        if metric == "neg_log_loss":
            unseen = np.setdiff1d(np.unique(self.y_val), self.classes)
            if unseen.size:
                raise ValueError(
                    f"y_val has class(es) {unseen.tolist()} that the training labels never hold "
                    f"(classes {self.classes.tolist()}): the log-loss of such a row is undefined; "
                    "pass labels= with every class (as sklearn's log_loss) to score it at the "
                    "clip probability 1e-15"
                )
        self.failures: list[tuple[frozenset, str]] = []
        self._cache: dict[frozenset, float] = {}
        self._fitted_once = False

    @property
    def group_ids(self) -> list:
        return list(dict.fromkeys(self.groups.tolist()))

    def __call__(self, subset: Any) -> float:
        s = frozenset(subset)
        if s not in self._cache:
            unknown = s - set(self.group_ids)
            if unknown:
                raise ValueError(f"unknown groups {sorted(map(str, unknown))}")
            self._cache[s] = self._score(s)
        return self._cache[s]

    def _constant(self, labels: np.ndarray) -> float:
        vals, counts = np.unique(labels if labels.size else self.y, return_counts=True)
        c = vals[np.argmax(counts)]
        if self.metric == "accuracy":
            return float(np.mean(self.y_val == c))
        pred = np.full(self.y_val.shape, c)
        if callable(self.metric):
            return float(self.metric(self.y_val, pred))
        # log-loss: the training labels' class prior, Laplace-smoothed (uniform for no labels)
        counts = np.array([np.sum(labels == k) for k in self.classes], dtype=float) + 1.0
        p = np.broadcast_to(counts / counts.sum(), (len(self.y_val), len(self.classes)))
        return float(
            np.mean(
                np.log(p[np.arange(len(self.y_val)), np.searchsorted(self.classes, self.y_val)])
            )
        )

    def _score(self, s: frozenset) -> float:
        rows = (
            np.concatenate([np.flatnonzero(np.isin(self.groups, list(s))), self.base_idx])
            if s
            else self.base_idx
        )
        Xs, ys = self.X[rows], self.y[rows]
        if ys.size == 0 or np.unique(ys).size < 2:
            return self._constant(ys)
        try:
            with _single_thread():
                if self.fit_fn is not None:
                    predict = self.fit_fn(Xs, ys)
                    self._fitted_once = True
                    pred = predict(self.X_val)
                    return (
                        float(self.metric(self.y_val, pred))
                        if callable(self.metric)
                        else float(np.mean(pred == self.y_val))
                    )
                model = _fresh(self.model_factory)
                model.fit(Xs, ys)
                self._fitted_once = True
                if self.metric == "accuracy":
                    return float(np.mean(model.predict(self.X_val) == self.y_val))
                if self.metric == "neg_log_loss":
                    proba = np.full((len(self.y_val), len(self.classes)), LOG_LOSS_CLIP)
                    cols = np.searchsorted(self.classes, model.classes_)
                    proba[:, cols] = model.predict_proba(self.X_val)
                    proba /= proba.sum(1, keepdims=True)
                    idx = np.searchsorted(self.classes, self.y_val)
                    return float(np.mean(np.log(proba[np.arange(len(idx)), idx])))
                return float(self.metric(self.y_val, model.predict(self.X_val)))
        except Exception as exc:  # a failed fit is the constant predictor, recorded
            if not self._fitted_once:
                raise RuntimeError(
                    f"the first model fit (groups {sorted(map(str, s))}) failed: "
                    f"{type(exc).__name__}: {exc}; check model_factory / fit_fn (later failures on "
                    "single subsets are scored as the majority-class predictor)"
                ) from exc
            self.failures.append((s, f"{type(exc).__name__}: {exc}"))
            warnings.warn(
                f"fit failed on groups {sorted(map(str, s))} ({exc}); scored as the "
                "majority-class predictor",
                stacklevel=3,
            )
            return self._constant(ys)


def _float64(a: Any) -> np.ndarray:
    """An array-like (torch tensors of any float dtype, bfloat16 included) as float64 numpy."""
    if hasattr(a, "detach") and hasattr(a, "dtype"):
        a = a.detach().cpu().double().numpy()
    return np.asarray(a, dtype=float)


def _base_idx(base_idx: Any, n: int) -> np.ndarray:
    """``base_idx`` as integer row indices in ``[0, n)``, or ValueError naming the bad one."""
    if base_idx is None:
        return np.zeros(0, dtype=int)
    a = np.asarray(base_idx)
    if a.size == 0:
        return np.zeros(0, dtype=int)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError(
            f"base_idx must be a 1-D sequence of integer row indices, got dtype {a.dtype} "
            f"and shape {a.shape}"
        )
    bad = (a < 0) | (a >= n)
    if bad.any():
        raise ValueError(
            f"base_idx must hold row indices in [0, {n}) (the training set has {n} rows), "
            f"got {int(a[bad][0])}"
        )
    return a.astype(int)


def _fresh(factory: Any) -> Any:
    if isinstance(factory, type):  # a class: call it for a fresh estimator
        return factory()
    if hasattr(factory, "fit") and hasattr(factory, "get_params"):
        from sklearn.base import clone

        return clone(factory)
    if callable(factory):
        return factory()
    raise TypeError(
        f"model_factory must be an estimator or a callable returning one, got {type(factory).__name__}"
    )


class _single_thread:
    def __enter__(self):
        try:
            from threadpoolctl import threadpool_limits

            self._ctx = threadpool_limits(1)
            self._ctx.__enter__()
        except ImportError:  # threadpoolctl missing: fits still run
            self._ctx = None
        return self

    def __exit__(self, *a):
        if self._ctx is not None:
            self._ctx.__exit__(*a)
        return False


_ = DISCLAIMER
