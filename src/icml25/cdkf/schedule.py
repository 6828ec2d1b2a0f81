"""Piecewise-constant measurement rates and their deterministic time stamps (docs/cdkf.md,
paper Proposition 8.1), plus exact Poisson sampling."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from icml25._validate import as_real

__all__ = ["RateSchedule", "deterministic_schedule", "sample_poisson_times"]


class RateSchedule:
    """Rates ``lambda_s(t)`` constant on ``K`` equal intervals of ``[0, T]``: ``values`` is ``(S, K)``."""

    def __init__(self, values: Tensor, T: float) -> None:
        if values.ndim != 2:
            raise ValueError(f"values must be (S, K), got shape {tuple(values.shape)}")
        T = as_real("T", T, low=0, low_open=True)
        v = values.detach()
        bad = (v < 0) | ~torch.isfinite(v)
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"rates must be finite and >= 0, got {float(v[idx])} at (sensor, interval) {idx}"
            )
        self.values, self.T = values, float(T)

    @property
    def S(self) -> int:
        return self.values.shape[0]

    @property
    def K(self) -> int:
        return self.values.shape[1]

    @property
    def dt(self) -> float:
        return self.T / self.K

    def at(self, t: float) -> Tensor:
        """``(S,)`` rates at time ``t`` (right-continuous; ``t = T`` uses the last interval)."""
        k = min(int(t / self.dt), self.K - 1)
        return self.values[:, k]

    def cumulative(self, t: float) -> Tensor:
        """``Lambda_s(t) = int_0^t lambda_s``, ``(S,)``."""
        k = min(int(t / self.dt), self.K - 1)
        full = self.values[:, :k].sum(-1) * self.dt
        return full + self.values[:, k] * (t - k * self.dt)

    def expected_counts(self) -> Tensor:
        return self.values.sum(-1) * self.dt


def deterministic_schedule(rates: RateSchedule, count: str = "round") -> list[Tensor]:
    """Measurement times per sensor: ``n_s = round(Lambda_s(T))`` (or floor/ceil) cells of equal
    cumulative intensity, each represented by its intensity-weighted mean time (Prop. 8.1: the
    W2 projection of the normalised intensity onto ``n_s`` equal atoms). Float64, closed form."""
    if count not in ("round", "floor", "ceil"):
        raise ValueError(f"count must be 'round', 'floor' or 'ceil', got {count!r}")
    vals = rates.values.detach().double().cpu()
    dt, K = rates.dt, rates.K
    edges = torch.arange(K + 1, dtype=torch.float64) * dt
    out = []
    for lam in vals:
        cum = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(lam * dt, 0)])
        total = float(cum[-1])
        n = {"round": round, "floor": math.floor, "ceil": math.ceil}[count](total)
        if n == 0 or total == 0:
            out.append(torch.zeros(0, dtype=torch.float64))
            continue
        levels = torch.arange(n + 1, dtype=torch.float64) * total / n

        m = [_first_moment(lam, cum, edges, float(level)) for level in levels]
        cell = total / n
        out.append(torch.tensor([(m[i + 1] - m[i]) / cell for i in range(n)], dtype=torch.float64))
    return [t.to(rates.values.device) for t in out]


def _first_moment(lam: Tensor, cum: Tensor, edges: Tensor, level: float) -> float:
    """``int_0^{Lambda^{-1}(level)} t lambda(t) dt`` in closed form on the constant pieces."""
    K = lam.numel()
    k = int(torch.searchsorted(cum, torch.tensor(level, dtype=torch.float64))) - 1
    k = min(max(k, 0), K - 1)
    while k < K - 1 and lam[k] == 0:  # zero-rate pieces add nothing
        k += 1
    done = float((lam[:k] * (edges[1 : k + 1] ** 2 - edges[:k] ** 2) / 2).sum())
    rest = level - float(cum[k])
    if lam[k] == 0 or rest <= 0:
        return done
    b = float(edges[k]) + rest / float(lam[k])
    return done + float(lam[k]) * (b * b - float(edges[k]) ** 2) / 2


def sample_poisson_times(rates: RateSchedule, generator: torch.Generator) -> list[Tensor]:
    """One realisation of independent Poisson processes with the piecewise-constant intensities:
    per piece, a Poisson count and uniform times (exact, no thinning)."""
    vals = rates.values.detach().double().cpu()
    out = []
    for lam in vals:
        times = []
        for k in range(rates.K):
            mean = float(lam[k]) * rates.dt
            if mean <= 0:
                continue
            cnt = int(torch.poisson(torch.tensor(mean, dtype=torch.float64), generator=generator))
            if cnt:
                times.append(
                    k * rates.dt
                    + rates.dt * torch.rand(cnt, generator=generator, dtype=torch.float64)
                )
        out.append(
            torch.sort(torch.cat(times)).values if times else torch.zeros(0, dtype=torch.float64)
        )
    return [t.to(rates.values.device) for t in out]
