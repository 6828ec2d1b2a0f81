"""The task-based model of automation (Acemoglu and Restrepo, "The Race between Man and
Machine", AER 2018; "Automation and New Tasks", JEP 2019), the standard formal version of the
displacement and reinstatement argument the paper makes in words.

Interpretation tool; the paper does not specify this mechanism. (Hazra, Majumder and
Chakrabarty argue through economic theory that automation shifts income from labour to capital
and raises inequality; whether they use this model is not known: docs/future_of_work.md.)

Tasks ``z ∈ [N-1, N]``; capital can do tasks ``z <= I``; unit elasticity across tasks. With
inelastic ``L`` and ``K`` and the threshold actually used ``Ĩ = min(I, I*)``::

    ln Y = ∫_{N-1}^{Ĩ} ln(A_K γ_K) + ∫_{Ĩ}^{N} ln(A_L γ_L) + (Ĩ-N+1) ln(K/(Ĩ-N+1)) + (N-Ĩ) ln(L/(N-Ĩ))
    W = (N - Ĩ) Y / L,   R = (Ĩ - N + 1) Y / K,   labour share = N - Ĩ

and ``I*`` the root of ``f(x) = ln(A_K γ_K(x) K / (x-N+1)) - ln(A_L γ_L(x) L / (N-x))``, above
which automating a task is not profitable (``f`` = ∂ ln Y / ∂ I).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from icml25._validate import as_int, as_real
from icml25.future_of_work._checks import DISCLAIMER
from icml25.future_of_work.inequality import gini

__all__ = ["TaskModel", "household_incomes", "simulate_path"]

EDGE = 1e-9  # how close Ĩ may come to N - 1 or N before it counts as the boundary


@dataclass(frozen=True)
class TaskModel:
    """Static equilibrium of the task-based model. Defaults: ``γ_L(z) = e^{a z}``, ``γ_K = 1``,
    ``A_L = A_K = L = K = 1``, ``a = 1`` (our choices, docs/future_of_work.md). ``gamma_L``,
    ``gamma_K``: other comparative-advantage schedules (callables of ``z``), integrated
    numerically. Interpretation tool; the paper does not specify this mechanism."""

    N: float
    I: float  # noqa: E741 - the model's own name for the automation frontier
    a: float = 1.0
    A_L: float = 1.0
    A_K: float = 1.0
    L: float = 1.0
    K: float = 1.0
    gamma_L: Callable[[float], float] | None = None
    gamma_K: Callable[[float], float] | None = None

    def __post_init__(self) -> None:
        N = as_real("N", self.N)
        I = as_real("I", self.I)  # noqa: E741
        if not N - 1 < I < N:
            raise ValueError(f"I must lie in (N - 1, N) = ({N - 1:g}, {N:g}), got I = {I:g}")
        if abs(self.a) * max(abs(N), 1.0) > 600:
            raise ValueError(
                f"a * N = {self.a * N:g}: e^(a z) overflows a float over tasks near N; the task "
                "index is only a label, so shift it (e.g. N = 1) or lower a"
            )
        for k in ("A_L", "A_K", "L", "K"):
            as_real(k, getattr(self, k), low=0, low_open=True)
        as_real("a", self.a)
        if self.gamma_L is not None or self.gamma_K is not None:
            xs = np.linspace(N - 1 + 1e-3, N - 1e-3, 400)
            f = np.array([self.profitability(x) for x in xs])
            if not np.all(np.diff(f) < 0):
                raise ValueError(
                    "with these gamma_L / gamma_K the profitability f(x) is not strictly "
                    "decreasing on (N-1, N): the automation threshold is not unique"
                )

    # -- pieces --------------------------------------------------------------------------------
    def _ln_gL(self, z: float) -> float:
        return self.a * z if self.gamma_L is None else math.log(self.gamma_L(z))

    def _ln_gK(self, z: float) -> float:
        return 0.0 if self.gamma_K is None else math.log(self.gamma_K(z))

    def _int_ln_gL(self, lo: float, hi: float) -> float:
        if self.gamma_L is None:
            return self.a * (hi * hi - lo * lo) / 2
        from scipy.integrate import quad

        return quad(self._ln_gL, lo, hi)[0]

    def _int_ln_gK(self, lo: float, hi: float) -> float:
        if self.gamma_K is None:
            return 0.0
        from scipy.integrate import quad

        return quad(self._ln_gK, lo, hi)[0]

    def profitability(self, x: float) -> float:
        """``f(x)``: log of labour's over capital's unit cost at task ``x`` in the equilibrium
        with threshold ``x`` (= ``∂ ln Y / ∂ I`` at ``x``); automation pays where ``f > 0``."""
        N = self.N
        return (
            math.log(self.A_K * self.K / (x - N + 1))
            + self._ln_gK(x)
            - math.log(self.A_L * self.L / (N - x))
            - self._ln_gL(x)
        )

    def threshold(self, tol: float = 1e-12) -> float:
        """``I*``: the root of ``f`` on ``(N - 1, N)`` by bisection."""
        lo, hi = self.N - 1 + 1e-15, self.N - 1e-15
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if self.profitability(mid) > 0:
                lo = mid
            else:
                hi = mid
            if hi - lo < tol:
                break
        return 0.5 * (lo + hi)

    def ln_output(self, I_eff: float | None = None) -> float:
        """``ln Y`` at the threshold ``I_eff`` (default: the equilibrium's)."""
        x = self.equilibrium()["I_eff"] if I_eff is None else I_eff
        N = self.N
        return (
            (x - N + 1) * math.log(self.A_K)
            + self._int_ln_gK(N - 1, x)
            + (N - x) * math.log(self.A_L)
            + self._int_ln_gL(x, N)
            + (x - N + 1) * math.log(self.K / (x - N + 1))
            + (N - x) * math.log(self.L / (N - x))
        )

    def equilibrium(self) -> dict[str, float]:
        """``Y``, wage ``W``, rental rate ``R``, ``labor_share``, ``I_eff = min(I, I*)`` and
        ``I_star``. Interpretation tool; the paper does not specify this mechanism."""
        i_star = self.threshold()
        x = min(self.I, i_star)
        if x - (self.N - 1) < EDGE or self.N - x < EDGE:
            warnings.warn(
                f"the automation threshold {x:g} is at the edge of (N-1, N): clipped", stacklevel=2
            )
            x = min(max(x, self.N - 1 + EDGE), self.N - EDGE)
        N = self.N
        lnY = self.ln_output(x)
        if not lnY < 700:
            raise ValueError(
                f"ln Y = {lnY:.4g} overflows a float; the model with γ_L = e^(a z) "
                "grows like e^(a N): use smaller N (e.g. N = 1) or a"
            )
        Y = math.exp(lnY)
        return {
            "Y": Y,
            "W": (N - x) * Y / self.L,
            "R": (x - N + 1) * Y / self.K,
            "labor_share": N - x,
            "I_eff": x,
            "I_star": i_star,
        }

    def dlnW_dI(self) -> dict[str, float]:
        """``∂ ln W / ∂ I`` at an interior ``Ĩ = I < I*``: the displacement effect ``-1/(N - I)``
        plus the productivity effect ``f(I)``."""
        if self.threshold() <= self.I:
            raise ValueError(
                f"I = {self.I:g} is not below the profitability threshold I* = {self.threshold():g}: "
                "the economy uses I* and the wage does not respond to I (derivative 0); the "
                "decomposition holds for interior I < I*"
            )
        disp, prod = -1.0 / (self.N - self.I), self.profitability(self.I)
        return {"displacement": disp, "productivity": prod, "total": disp + prod}


def household_incomes(
    eq: dict[str, float],
    L: float,
    K: float,
    phi_own: float,
    royalty_rate: float = 0.0,
    royalty_rule: str = "equal",
    phi_cre: float = 0.1,
) -> tuple[np.ndarray, np.ndarray]:
    """Incomes and population weights: a mass ``phi_own`` of households owns all capital; every
    household supplies ``L``. A royalty ``royalty_rate`` on capital income ``R K`` is paid to
    everyone equally (``"equal"``) or to a creator group of mass ``phi_cre`` (``"creators"``).
    Interpretation tool; the paper does not specify this mechanism."""
    phi_own = as_real("phi_own", phi_own, low=0, high=1, low_open=True)
    rho = as_real("royalty_rate", royalty_rate, low=0, high=1)
    if royalty_rule not in ("equal", "creators"):
        raise ValueError(f"royalty_rule must be 'equal' or 'creators', got {royalty_rule!r}")
    W, R = eq["W"], eq["R"]
    cap, pool = R * K * (1 - rho), R * K * rho
    labour = W * L
    if royalty_rule == "equal":
        inc = [labour + cap / phi_own + pool, labour + pool]
        w = [phi_own, 1 - phi_own]
    else:
        phi_cre = as_real("phi_cre", phi_cre, low=0, high=1 - phi_own, low_open=True)
        inc = [labour + cap / phi_own, labour + pool / phi_cre, labour]
        w = [phi_own, phi_cre, 1 - phi_own - phi_cre]
    keep = [i for i, x in enumerate(w) if x > 0]
    return np.array([inc[i] for i in keep]), np.array([w[i] for i in keep])


def simulate_path(
    T: int = 30,
    g_I: float = 0.02,
    g_N: float = 0.0,
    g_K: float = 0.02,
    phi_own: float = 0.1,
    royalty_rate: float = 0.0,
    royalty_rule: str = "equal",
    *,
    N0: float = 1.0,
    I0: float = 0.3,
    K0: float = 1.0,
    **model_kw: Any,
) -> dict[str, np.ndarray]:
    """``I_t = I_0 + g_I t``, ``N_t = N_0 + g_N t``, ``K_t = K_0 (1 + g_K)^t`` for ``t = 0..T``:
    paths of ``Y, W, R, labor_share, I_eff, gini`` (household incomes, royalty included).
    Defaults: ``N_0 = 1, I_0 = 0.3, g_I = 0.02, g_N = 0, g_K = 0.02, φ_own = 0.1, T = 30`` (ours).
    Interpretation tool; the paper does not specify this mechanism."""
    T = as_int("T", T, 0)
    out: dict[str, list] = {k: [] for k in ("t", "Y", "W", "R", "labor_share", "I_eff", "gini")}
    for t in range(T + 1):
        N, I, K = N0 + g_N * t, I0 + g_I * t, K0 * (1 + g_K) ** t  # noqa: E741
        try:
            m = TaskModel(N=N, I=I, K=K, **model_kw)
        except ValueError as exc:
            raise ValueError(
                f"period t = {t} (N = {N:g}, I = {I:g}): {exc}; shorten T or change "
                "g_I / g_N so that N - 1 < I < N along the path"
            ) from None
        eq = m.equilibrium()
        inc, w = household_incomes(eq, m.L, K, phi_own, royalty_rate, royalty_rule)
        for k in ("Y", "W", "R", "labor_share", "I_eff"):
            out[k].append(eq[k])
        out["gini"].append(gini(inc, w))
        out["t"].append(t)
    return {k: np.array(v) for k, v in out.items()}


_ = DISCLAIMER
