"""The interpretation check's experiments (docs/future_of_work.md, "Reproduction"): R1, rights-
holders of known quality on a real training set (digits), their exact and permutation Shapley
values and each payout rule's split of a pool; R2, the task-based model's identities and paths.
Kept apart from ``repro.py`` so users can run them with their own holders, pools and rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from icml25.future_of_work.licensing import CollectiveLicensingPool, Flat, Licensee, Work
from icml25.future_of_work.tasks_model import TaskModel, simulate_path
from icml25.future_of_work.valuation import (
    GroupUtility,
    banzhaf_exact,
    loo,
    shapley_exact,
    shapley_tmc,
    utility_table,
)

__all__ = [
    "RULES",
    "build_rights_holders",
    "cached_utility_table",
    "task_model_checks",
    "value_rights_holders",
]

#: the payout rules R1 compares
RULES = ("volume", "equal", "attribution", "hybrid")


def build_rights_holders(seed: int, H: int = 10, *, val_size: float = 0.4, shrink: float = 1.0):
    """Digits split 60/40 (stratified, ``random_state=seed``) and training rows owned by ``H``
    rights-holders of known quality (docs/future_of_work.md, "Reproduction"):
    h0-h3 clean (10 % each); h4 an exact copy of h0; h5 10 % with 30 % of labels flipped; h6
    10 % with labels permuted (pure noise); h7 three times h0's size drawn with replacement from
    the whole split, 30 % flipped; h9 clean 2 %; h8 the clean rows of classes 0-4 left over;
    with ``H = 12``: h10 the leftover rows of classes 5-9, h11 a copy of h1 with 50 % flipped.
    ``shrink`` < 1 subsamples everything (smoke size). Returns ``(X, y, groups, X_val, y_val)``."""
    from sklearn.model_selection import train_test_split

    from icml25.toy.digits import digits

    if H not in (10, 12):
        raise ValueError(f"H must be 10 or 12, got {H}")
    x, y = digits("flat")
    x, y = x.numpy().astype(np.float64), y.numpy()
    idx = np.arange(len(y))
    tr, va = train_test_split(idx, test_size=val_size, random_state=seed, stratify=y)
    rng = np.random.default_rng(seed)
    tr = rng.permutation(tr)
    if shrink < 1:
        tr, va = tr[: int(len(tr) * shrink)], va[: int(len(va) * shrink)]
    n = len(tr)
    s10, s2 = n // 10, max(n // 50, 2)
    parts, cut = {}, 0
    for h in ("h0", "h1", "h2", "h3", "h5", "h6"):
        parts[h] = tr[cut : cut + s10]
        cut += s10
    parts["h9"] = tr[cut : cut + s2]
    cut += s2
    rest = tr[cut:]
    X, Y, G = [], [], []

    def add(h, rows, labels=None):
        X.append(x[rows])
        Y.append(y[rows] if labels is None else labels)
        G.extend([h] * len(rows))

    def flip(rows, frac):
        lab = y[rows].copy()
        k = int(round(frac * len(rows)))
        which = rng.choice(len(rows), k, replace=False)
        lab[which] = (lab[which] + rng.integers(1, 10, k)) % 10  # a different class, uniformly
        return lab

    for h in ("h0", "h1", "h2", "h3"):
        add(h, parts[h])
    add("h4", parts["h0"])  # exact duplicates of h0
    add("h5", parts["h5"], flip(parts["h5"], 0.3))
    add("h6", parts["h6"], rng.permutation(y[parts["h6"]]))  # labels shuffled: pure noise
    bulk = rng.choice(tr, 3 * s10, replace=True)
    add("h7", bulk, flip(bulk, 0.3))
    add("h8", rest[y[rest] < 5])
    add("h9", parts["h9"])
    if H == 12:
        add("h10", rest[y[rest] >= 5])
        add("h11", parts["h1"], flip(parts["h1"], 0.5))
    return np.concatenate(X), np.concatenate(Y), np.array(G), x[va], y[va]


def cached_utility_table(util: GroupUtility, groups: list, path: Path, H: int) -> np.ndarray:
    """Utilities of all subsets of ``groups``, saved at ``path`` (``.npy``) so a rerun reuses
    them when the saved table has ``2^H`` entries."""
    if path.exists():
        t = np.load(path)
        if t.shape == (2**H,):
            return t
    t = utility_table(util, groups)
    np.save(path, t)
    return t


def value_rights_holders(
    seed: int,
    H: int,
    *,
    pool_amount: str,
    cache: Path,
    shrink: float = 1.0,
    keep_groups: tuple[str, ...] | None = None,
    max_perms: int = 200,
    banzhaf: bool = False,
) -> dict:
    """R1 on one seed (split): the holders of :func:`build_rights_holders` (only ``keep_groups``
    when given), validation accuracy of ``LogisticRegression(max_iter=200)`` as the utility (the
    table cached at ``cache``), exact Shapley, permutation Shapley (``max_perms`` permutations, no
    truncation) with its SE and Hoeffding bound, leave-one-out, (``banzhaf``) Banzhaf values, and
    every rule's payouts of a pool of ``pool_amount`` with the largest gap to the net pool in
    cents."""
    from sklearn.linear_model import LogisticRegression

    X, y, G, Xv, yv = build_rights_holders(seed, H, shrink=shrink)
    if keep_groups is not None:
        keep = np.isin(G, keep_groups)
        X, y, G = X[keep], y[keep], G[keep]
    groups = list(dict.fromkeys(G.tolist()))
    util = GroupUtility(LogisticRegression(max_iter=200, C=1.0), X, y, G, Xv, yv)
    table = cached_utility_table(util, groups, cache, H)

    def lookup(s):
        return float(table[sum(1 << groups.index(h) for h in s)])

    ex = shapley_exact(lookup, groups)
    mc = shapley_tmc(
        lookup,
        groups,
        max_perms=max_perms,
        tol=0.0,
        seed=seed,
        min_perms=10**6,
        value_range=1.0,
    )
    within = sum(bool(abs(ex[h] - mc[h]) <= 3 * mc.stderr[h]) for h in groups)
    out = {
        "groups": groups,
        "exact": dict(ex),
        "tmc": dict(mc),
        "tmc_se": mc.stderr,
        "bound": mc.bound,
        "efficiency_gap": abs(sum(ex.values()) - ex.total),
        "within": int(within),
        "loo": dict(loo(lookup, groups)),
        "units": {h: int((h == G).sum()) for h in groups},
    }
    if banzhaf:
        out["banzhaf"] = dict(banzhaf_exact(lookup, groups))
    works = [Work(f"corpus-{h}", h, out["units"][h]) for h in groups]
    pool = CollectiveLicensingPool(works, Flat(pool_amount))
    pool.collect([Licensee("developer")])
    pays, gaps = {}, []
    for rule in RULES:
        p = pool.distribute(rule, values=out["exact"], alpha=0.5)
        pays[rule] = {h: float(v) for h, v in p.items()}
        gaps.append(
            abs(int(round(sum(p.values()) * 100)) - int(round(float(pool.report()["net"]) * 100)))
        )
    out["payouts"], out["money_gap"] = pays, max(gaps)
    return out


def task_model_checks() -> dict:
    """R2: the largest relative error of the identities ``W L + R K = Y`` and labour share
    ``= N - I_eff`` (three settings), of d ln W / d I against central differences (five interior
    points), the steps where the labour share rises or the Gini falls with ``g_N = 0``, the
    largest change along the ``g_N = g_I`` path, the smallest Gini reduction from a 10 % royalty
    on capital income, and the three paths."""
    rel = 0.0
    for N, I, K in ((1.0, 0.3, 1.0), (2.0, 1.5, 3.0), (1.0, 0.9, 0.5)):  # noqa: E741
        m = TaskModel(N, I, K=K)
        eq = m.equilibrium()
        rel = max(
            rel,
            abs(eq["W"] * m.L + eq["R"] * m.K - eq["Y"]) / eq["Y"],
            abs(eq["labor_share"] - (N - eq["I_eff"])),
        )
    dev, h = 0.0, 1e-6
    for I in (0.1, 0.2, 0.3, 0.35, 0.38):  # noqa: E741  interior: below I* = 0.401 at the defaults
        fd = (
            np.log(TaskModel(1.0, I + h).equilibrium()["W"])
            - np.log(TaskModel(1.0, I - h).equilibrium()["W"])
        ) / (2 * h)
        dev = max(dev, abs(fd - TaskModel(1.0, I).dlnW_dI()["total"]))
    p0, p1, pr = simulate_path(g_N=0.0), simulate_path(g_N=0.02), simulate_path(royalty_rate=0.1)
    wrong = int(np.sum(np.diff(p0["labor_share"]) > 1e-12) + np.sum(np.diff(p0["gini"]) < -1e-12))
    flat = float(max(np.ptp(p1["labor_share"]), np.ptp(p1["gini"])))
    return {
        "identity_err": rel,
        "deriv_err": dev,
        "wrong_steps": wrong,
        "flat_change": flat,
        "royalty_min_drop": float(np.min(p0["gini"] - pr["gini"])),
        "paths": (p0, p1, pr),
    }
