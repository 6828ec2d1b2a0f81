"""Cardinal utility from comparisons (docs/distinguishability.md).

Noise-free pairwise answers identify utilities only up to a strictly increasing map; answers to
distinguishability queries are difference-relation statements (``u(a) - u(b) >= u(c) - u(d)``) and
pin down an interval scale, which is what choices under risk need: a lottery over ``{a, c}`` beats a
sure ``b`` iff ``p u(a) + (1 - p) u(c) > u(b)``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.distinguishability.reward_model import dq_loss, pcq_loss

__all__ = ["fit_utilities", "lottery_choice_accuracy", "sample_lotteries"]


def fit_utilities(
    n_items: int,
    pcq: list[tuple] | None = None,
    dq: list[tuple] | None = None,
    *,
    weight_decay: float = 1e-3,  # docs/distinguishability.md, part B
    steps: int = 2000,  # docs/distinguishability.md, part B
    lr: float = 0.05,  # docs/distinguishability.md, part B
    likelihood: str = "abs",
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Free utilities ``u_hat (n_items,)`` fitted full-batch with Adam to PCQ answers ``(i, j, y)``
    (Bradley-Terry) and DQ answers ``(i, j, k, l, d, y[, d_pref])`` (loss (E3)), plus
    ``weight_decay * ||u_hat||^2``. ``d_pref`` defaults to ``d`` (required when ``d = 0.5``)."""
    n_items = as_int("n_items", n_items, 2)
    steps = as_int("steps", steps, 0)
    lr = as_real("lr", lr, low=0.0, low_open=True)
    weight_decay = as_real("weight_decay", weight_decay, low=0.0)
    pcq, dq = list(pcq or []), list(dq or [])
    if not pcq and not dq:
        raise ValueError("give at least one PCQ or DQ answer")
    for ans in pcq + dq:
        for i in ans[: 2 if len(ans) == 3 else 4]:
            if not 0 <= int(i) < n_items:
                raise ValueError(f"item index {i} out of range for {n_items} items in answer {ans}")
    u = torch.zeros(n_items, dtype=dtype, requires_grad=True)
    opt = torch.optim.Adam([u], lr=lr)
    if pcq:
        pi = torch.tensor([[a[0], a[1]] for a in pcq])
        py = torch.tensor([float(a[2]) for a in pcq], dtype=dtype)
    if dq:
        di = torch.tensor([[a[0], a[1], a[2], a[3]] for a in dq])
        dd = torch.tensor([float(a[4]) for a in dq], dtype=dtype)
        dy = torch.tensor([float(a[5]) for a in dq], dtype=dtype)
        dp = torch.tensor([float(a[6]) if len(a) > 6 else float(a[4]) for a in dq], dtype=dtype)
    for _ in range(steps):
        opt.zero_grad()
        loss = weight_decay * (u * u).sum()
        if pcq:
            loss = loss + pcq_loss(u[pi[:, 0]][None], u[pi[:, 1]][None], py)
        if dq:
            r = u[di]
            loss = loss + dq_loss(
                r[None, :, 0],
                r[None, :, 1],
                r[None, :, 2],
                r[None, :, 3],
                dd,
                dp,
                dy,
                likelihood=likelihood,
            )
        loss.backward()
        opt.step()
    return u.detach()


def sample_lotteries(u_true: Tensor, n: int, rng=None) -> Tensor:
    """``n`` decisions "sure b vs lottery (p: a, 1-p: c)" with ``a < b < c`` in true rank and
    ``p ~ U(0.1, 0.9)``; rows ``(a, b, c, p)`` (float64)."""
    n = as_int("n", n, 0)
    u_true = torch.as_tensor(u_true)
    if not bool(torch.isfinite(u_true).all()):
        raise ValueError("u_true holds NaN or inf values")
    g = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    order = torch.argsort(u_true).cpu().numpy()
    m = len(order)
    if m < 3:
        raise ValueError("need at least 3 items for lotteries")
    rows = []
    for _ in range(n):
        a, b, c = sorted(g.choice(m, size=3, replace=False))
        rows.append((order[a], order[b], order[c], g.uniform(0.1, 0.9)))
    return torch.tensor(rows, dtype=torch.float64)


def lottery_choice_accuracy(u_hat: Tensor, u_true: Tensor, lotteries: Tensor) -> float:
    """Balanced accuracy of the expected-utility choice (lottery vs sure item) made with ``u_hat``
    against the one made with ``u_true`` (mean of the recalls of both choices; plain accuracy
    is misleading when one choice dominates)."""
    a, b, c = (lotteries[:, i].long() for i in range(3))
    p = lotteries[:, 3]

    def choose(u):
        u = u.to(torch.float64)
        return p * u[a] + (1 - p) * u[c] > u[b]

    truth, pred = choose(u_true), choose(u_hat)
    recalls = [
        float((pred[truth == cls] == cls).to(torch.float64).mean())
        for cls in (True, False)
        if bool((truth == cls).any())
    ]
    return sum(recalls) / len(recalls)
