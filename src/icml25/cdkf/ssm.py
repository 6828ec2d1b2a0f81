"""Linear SDE models for continuous-discrete Kalman filtering (Al Ahdab, Leth, Tan, ICML 2025,
arXiv:2507.11240), docs/cdkf.md: ``dx = A x dt + sigma dbeta``, sensors ``y = C x + v``, and
temporal Gaussian processes (Matern kernels) written as state-space models."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from icml25._validate import as_real, shown

__all__ = [
    "LinearSDE",
    "NumericalError",
    "Sensor",
    "matern_kernel",
    "matern_ssm",
    "sum_ssm",
    "van_loan",
]


class NumericalError(ArithmeticError):
    """A covariance lost positive (semi-)definiteness: an unstable model, a non-SPD noise
    matrix, or too coarse an integration step."""


MatrixFn = Tensor | Callable[[Tensor | None, float], Tensor]


def _value(m: MatrixFn, xi: Tensor | None, t: float) -> Tensor:
    return m(xi, t) if callable(m) else m


# the block exponential is taken over a step ``delta`` with ``||A||_1 delta <= _VL_NORM``: there its
# ``e^{-A^T delta}`` block is at most ``e`` in size, so nothing overflows or cancels
_VL_NORM = 1.0


def van_loan(A: Tensor, Qc: Tensor, h: float) -> tuple[Tensor, Tensor]:
    """Exact discretisation over a step ``h``: ``Phi = e^{A h}``, ``Qd = int_0^h e^{A s} Qc e^{A^T s} ds``
    from one matrix exponential of ``[[A, Qc], [0, -A^T]] delta`` (Van Loan 1978, docs/cdkf.md),
    stable for any step: with ``delta = h / 2^s`` and ``s`` the least with ``||A||_1 delta <= 1``,
    ``(Phi, Qd)`` over ``delta`` are doubled ``s`` times, ``Phi_{2d} = Phi_d Phi_d``, ``Qd_{2d} =
    Phi_d Qd_d Phi_d^T + Qd_d`` (scaling and squaring; ``s = 0``, one exponential, for a non-stiff
    step). The exponential of the full step would hold ``e^{+|lambda| h}``, which loses every digit
    of ``Qd`` once ``|lambda| h`` passes about 30 and overflows past about 700 (docs/cdkf.md, Stiff
    models). Computed in float64 (on devices that have it) and returned in ``A``'s dtype;
    differentiable in ``A`` and ``Qc``."""
    n = A.shape[-1]
    out_dtype = A.dtype
    work = torch.float64 if A.device.type != "mps" else A.dtype
    A, Qc = A.to(work), Qc.to(work)
    h = float(h)
    norm = float(torch.linalg.matrix_norm(A.detach(), ord=1)) * abs(h)
    s = 0
    if math.isfinite(norm) and norm > _VL_NORM:
        s = min(int(math.ceil(math.log2(norm / _VL_NORM))), 1000)
    delta = h / 2.0**s
    # Balance the block: exp([[A, c Qc], [0, -A^T]] delta) holds c times the same upper-right
    # block, so scaling Qc to A's size (undone after) keeps a large Qc from costing Phi its digits
    # (q = 80 cost e^{a h} 1.2e-12 of relative error before, found by the property test).
    q_norm = float(torch.linalg.matrix_norm(Qc.detach(), ord=1))
    c = 1.0
    if delta != 0 and math.isfinite(q_norm) and q_norm > 0:
        c = max(norm / abs(h), 1.0 / abs(delta)) / q_norm
    M = torch.zeros(2 * n, 2 * n, dtype=work, device=A.device)
    M[:n, :n] = A
    M[:n, n:] = Qc * c
    M[n:, n:] = -A.mT
    E = torch.linalg.matrix_exp(M * delta)
    Phi = E[:n, :n]
    Qd = (E[:n, n:] / c) @ Phi.mT
    Qd = 0.5 * (Qd + Qd.mT)
    for _ in range(s):
        Qd = Phi @ Qd @ Phi.mT + Qd
        Qd = 0.5 * (Qd + Qd.mT)
        Phi = Phi @ Phi
    return Phi.to(out_dtype), Qd.to(out_dtype)


@dataclass
class LinearSDE:
    """``dx = A(xi, t) x dt + sigma dbeta`` with ``Qc = sigma sigma^T``, ``x(0) ~ N(mu0, Sigma0)``.

    ``A`` and ``Qc`` are ``(n, n)`` tensors or callables ``(xi, t) -> (n, n)``. ``H`` (optional) is
    the output row of a GP model (``f = H x``).
    """

    A: MatrixFn
    Qc: MatrixFn
    mu0: Tensor
    Sigma0: Tensor
    H: Tensor | None = None

    def __post_init__(self) -> None:
        n = self.mu0.shape[-1]
        if self.Sigma0.shape != (n, n):
            raise ValueError(
                f"Sigma0 must be ({n}, {n}) to match mu0, got {tuple(self.Sigma0.shape)}"
            )
        for name in ("A", "Qc", "mu0", "Sigma0"):
            m = getattr(self, name)
            if not callable(m) and name in ("A", "Qc") and m.shape != (n, n):
                raise ValueError(f"{name} must be ({n}, {n}), got {tuple(m.shape)}")
            if not callable(m) and not bool(torch.isfinite(m.detach()).all()):
                raise ValueError(f"{name} must be finite, got {m.tolist()}")
        S = self.Sigma0.detach().double()
        if not torch.allclose(S, S.mT, atol=1e-10 * max(1.0, float(S.abs().max()))):
            raise ValueError(f"Sigma0 must be symmetric, got {self.Sigma0.tolist()}")
        if bool((torch.linalg.eigvalsh(S) < -1e-10 * max(1.0, float(S.abs().max()))).any()):
            raise ValueError(
                f"Sigma0 must be positive semi-definite, got eigenvalues {torch.linalg.eigvalsh(S).tolist()}"
            )
        if not callable(self.Qc):
            Q = self.Qc.detach().double()
            if not torch.allclose(Q, Q.mT, atol=1e-10 * max(1.0, float(Q.abs().max()))):
                raise ValueError(f"Qc must be symmetric, got {self.Qc.tolist()}")
            if bool((torch.linalg.eigvalsh(Q) < -1e-10 * max(1.0, float(Q.abs().max()))).any()):
                raise ValueError(
                    "Qc = sigma sigma^T must be positive semi-definite, got eigenvalues "
                    f"{torch.linalg.eigvalsh(Q).tolist()}"
                )

    @property
    def n(self) -> int:
        return self.mu0.shape[-1]

    @property
    def time_invariant(self) -> bool:
        return not callable(self.A) and not callable(self.Qc)

    def matrices(self, xi: Tensor | None = None, t: float = 0.0) -> tuple[Tensor, Tensor]:
        return _value(self.A, xi, t), _value(self.Qc, xi, t)

    def discretize(
        self, h: float, xi: Tensor | None = None, t: float = 0.0
    ) -> tuple[Tensor, Tensor]:
        """``(Phi, Qd)`` over a step ``h`` (Van Loan), with ``A``/``Qc`` frozen at ``(xi, t)``."""
        return van_loan(*self.matrices(xi, t), h)


@dataclass
class Sensor:
    """``y = C(xi, t) x + v``, ``v ~ N(0, R(xi, t))``; ``cost`` per measurement (energy, dose)."""

    C: MatrixFn
    R: MatrixFn
    cost: float = 0.0
    name: str | None = None

    def __post_init__(self) -> None:
        if not callable(self.R):
            if not isinstance(self.R, Tensor):  # a number: a scalar sensor's noise variance
                self.R = torch.as_tensor(self.R, dtype=torch.float64)
            if self.R.ndim == 0:
                self.R = self.R.reshape(1, 1)
            R = self.R
            if R.ndim != 2 or R.shape[0] != R.shape[1]:
                raise ValueError(f"R must be a square matrix, got shape {tuple(R.shape)}")
            if (
                not bool(torch.isfinite(R).all())
                or not torch.allclose(R, R.mT)
                or bool((torch.linalg.eigvalsh(R) <= 0).any())
            ):
                raise ValueError(f"R must be symmetric positive definite, got {R.tolist()}")
        if not callable(self.C):
            if not isinstance(self.C, Tensor) or self.C.ndim != 2:
                shape = tuple(self.C.shape) if isinstance(self.C, Tensor) else type(self.C).__name__
                raise ValueError(
                    f"C must be a (d, n) tensor (d outputs, n states; one output: C of shape "
                    f"(1, n), e.g. C[None]), got {shape}"
                )
            if not callable(self.R) and self.R.shape[0] != self.C.shape[0]:
                raise ValueError(
                    f"R must be ({self.C.shape[0]}, {self.C.shape[0]}) to match C's "
                    f"{self.C.shape[0]} rows, got {tuple(self.R.shape)}"
                )
        self.cost = as_real("cost", self.cost, low=0)

    def matrices(self, xi: Tensor | None = None, t: float = 0.0) -> tuple[Tensor, Tensor]:
        return _value(self.C, xi, t), _value(self.R, xi, t)


def matern_ssm(
    nu: float, lengthscale: float | Tensor, variance: float | Tensor, dtype=torch.float64
) -> LinearSDE:
    """Matern-``nu`` GP (``nu = p + 1/2``) as an SDE on ``(f, f', ..., f^(p))`` (docs/cdkf.md).

    ``F`` is the companion matrix of ``(s + lam)^(p+1)`` with ``lam = sqrt(2 nu) / lengthscale``,
    ``Qc = q e_{p+1} e_{p+1}^T`` with ``q = variance 2 sqrt(pi) Gamma(p+1) lam^(2p+1) / Gamma(p+1/2)``,
    started at the stationary covariance ``P_inf`` (solves ``F P + P F^T + Qc = 0``); ``H = e_1^T``.
    ``lengthscale`` and ``variance`` may be tensors requiring grad (differentiable model).
    """
    p = as_real("nu", nu, low=0.5) - 0.5
    if abs(p - round(p)) > 1e-12:
        raise ValueError(f"nu must be p + 1/2 for an integer p >= 0 (0.5, 1.5, 2.5, ...), got {nu}")
    for name, v in (("lengthscale", lengthscale), ("variance", variance)):
        if isinstance(v, Tensor) and v.numel() == 1:  # kept a tensor: it may require grad
            if not bool(torch.isfinite(v).all() & (v > 0).all()):
                raise ValueError(f"{name} must be a finite number > 0, got {shown(v)}")
        else:
            as_real(name, v, low=0, low_open=True)
    p = int(round(p))
    n = p + 1
    # tensors (possibly requiring grad: hyper-parameters fitted through log_likelihood) stay in
    # the autograd graph; plain floats become float tensors of ``dtype``
    ell = torch.as_tensor(lengthscale, dtype=dtype)
    s2 = torch.as_tensor(variance, dtype=dtype)
    lam = math.sqrt(2 * nu) / ell
    F = torch.zeros(n, n, dtype=dtype)
    if n > 1:
        F[torch.arange(n - 1), torch.arange(1, n)] = 1.0
    F[-1] = torch.stack([-math.comb(n, k) * lam ** (n - k) for k in range(n)])
    q = s2 * (2 * math.sqrt(math.pi) * math.gamma(p + 1) / math.gamma(p + 0.5)) * lam ** (2 * p + 1)
    Qc = torch.zeros(n, n, dtype=dtype)
    Qc[-1, -1] = q
    P_inf = stationary_covariance(F, Qc)
    H = torch.zeros(1, n, dtype=dtype)
    H[0, 0] = 1.0
    return LinearSDE(F, Qc, torch.zeros(n, dtype=dtype), P_inf, H)


def stationary_covariance(F: Tensor, Qc: Tensor) -> Tensor:
    """``P`` with ``F P + P F^T + Qc = 0`` (Kronecker solve; fine for the small state dimensions here)."""
    n = F.shape[0]
    eye = torch.eye(n, dtype=F.dtype, device=F.device)
    K = torch.kron(eye, F) + torch.kron(F, eye)
    P = torch.linalg.solve(K, -Qc.reshape(-1)).reshape(n, n)
    return 0.5 * (P + P.mT)


def matern_kernel(tau: Tensor, nu: float, lengthscale: float, variance: float) -> Tensor:
    """The Matern covariance ``k(tau)`` for ``nu`` in {1/2, 3/2, 5/2} (reference for the SSM)."""
    r = tau.abs() * math.sqrt(2 * nu) / lengthscale
    if nu == 0.5:
        return variance * torch.exp(-r)
    if nu == 1.5:
        return variance * (1 + r) * torch.exp(-r)
    if nu == 2.5:
        return variance * (1 + r + r * r / 3) * torch.exp(-r)
    raise ValueError(f"closed form only for nu in (0.5, 1.5, 2.5), got {nu}")


def sum_ssm(*models: LinearSDE) -> LinearSDE:
    """Block-diagonal stacking (sum of independent GPs: ``H`` is the concatenation)."""
    if not models or any(not m.time_invariant for m in models):
        raise ValueError("sum_ssm needs one or more time-invariant models")
    A = torch.block_diag(*[m.A for m in models])
    Qc = torch.block_diag(*[m.Qc for m in models])
    S0 = torch.block_diag(*[m.Sigma0 for m in models])
    mu0 = torch.cat([m.mu0 for m in models])
    H = None
    if all(m.H is not None for m in models):
        H = torch.cat([m.H for m in models], dim=-1)
    return LinearSDE(A, Qc, mu0, S0, H)
