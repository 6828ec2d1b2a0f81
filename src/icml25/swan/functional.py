"""SWAN's stateless gradient operators (Ma, Gong, Scetbon, Meeds, ICML 2025, arXiv:2412.13148).

``grad_norm`` is the paper's Algorithm 3 (GradNorm: standardise every row), ``whiten`` its
Algorithm 2 (GradWhitening: ``(G G^T)^{-1/2} G``, by Newton-Schulz, its diagonal-substitution
variant NSDS, or exactly by ``eigh`` / ``svd``), and ``swan_direction`` composes them with the final
RMS rescale of Algorithm 1. All operators accept leading batch dimensions ``(..., m, n)``.
References: the paper (arXiv:2412.13148) and docs/swan.md.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from icml25._validate import as_int, as_real

__all__ = [
    "grad_norm",
    "muon_orthogonalize",
    "newton_schulz_inv_sqrt",
    "newton_schulz_polar",
    "nsds_inv_sqrt",
    "quintic_polar",
    "sinkhorn_normalize",
    "swan_direction",
    "whiten",
]

WHITENINGS = ("ns", "nsds", "eigh", "svd", "muon")
#: Muon's quintic Newton-Schulz coefficients (Keller Jordan's Muon; torch.optim.Muon's defaults)
MUON_COEFFS = (3.4445, -4.7750, 2.0315)
RESCALES = ("rms", "match_norm", "none")
_LOW = (torch.float16, torch.bfloat16)
#: the dtypes the whitening and GradNorm run in (float8 has no matmul or norm kernels on CPU)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _narrows(src: torch.dtype, dst: torch.dtype) -> bool:
    """Whether casting ``src`` to ``dst`` loses range (float64 -> float32, float32 -> float16)."""
    return src.is_floating_point and torch.finfo(src).max > torch.finfo(dst).max


def _check_matrix(G: Tensor, name: str = "G") -> None:
    if not isinstance(G, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(G).__name__}")
    if not G.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {G.dtype}")
    if G.ndim < 2:
        raise ValueError(f"{name} must have shape (..., m, n), got {tuple(G.shape)}")


def check_matmul_dtype(matmul_dtype) -> None:
    """``matmul_dtype`` must be None or a floating torch dtype (an integer one would round the
    unit-norm iterates to zeros: a silently frozen update)."""
    if matmul_dtype is not None and matmul_dtype not in FLOAT_DTYPES:
        raise ValueError(
            "matmul_dtype must be None or one of torch.float16, torch.bfloat16, torch.float32, "
            f"torch.float64, got {matmul_dtype!r}"
        )


def _unit_frobenius(X: Tensor) -> tuple[Tensor, Tensor]:
    """``X / ||X||_F`` per matrix, exactly scale-invariant (max-abs first, so nothing underflows).

    Returns the normalised matrices and a boolean mask of the all-zero ones (left as zeros).
    """
    amax = torch.linalg.vector_norm(X, ord=math.inf, dim=(-2, -1), keepdim=True)  # no |X| copy
    zero = amax == 0
    Xs = X / torch.where(zero, torch.ones_like(amax), amax)
    norm = torch.linalg.matrix_norm(Xs, keepdim=True)
    return Xs.div_(torch.where(zero, torch.ones_like(norm), norm)), zero


def grad_norm(G: Tensor, dim: int = -1, eps: float = 1e-8, center: bool = True) -> Tensor:
    """GradNorm (paper Algorithm 3): standardise every row of ``G`` along ``dim``.

    ``(G - mean) / (std + eps)`` with the population std (ddof = 0), so each row has mean 0 and mean
    square 1; a constant row becomes zeros. ``center=False`` divides by the row RMS only.
    Each centred row is first divided by its largest magnitude, so the result does not depend on
    the gradient's scale (1e-20 or 1e20 alike, docs/swan.md) and ``eps`` acts relative to
    that magnitude. Returns ``G``'s shape and dtype.
    """
    _check_matrix(G)
    if not torch.compiler.is_compiling():  # checked once, eagerly: no graph break in SWAN.step
        dim = as_int("dim", dim)
        eps = as_real("eps", eps, low=0)
    if not -G.ndim <= dim < G.ndim:
        raise ValueError(
            f"dim must be in [{-G.ndim}, {G.ndim}) for G of shape {tuple(G.shape)}, got {dim}"
        )
    if G.shape[dim] < 2:
        raise ValueError(
            f"grad_norm needs at least 2 entries along dim={dim}; G has shape {tuple(G.shape)} "
            "(a 1-long row would be standardised to 0)"
        )
    C = G - G.mean(dim=dim, keepdim=True) if center else G
    # norms as reductions (no |C| or C^2 temporaries): six passes over the matrix, not eight
    peak = torch.linalg.vector_norm(C, ord=math.inf, dim=dim, keepdim=True)
    C = C / torch.where(peak > 0, peak, torch.ones_like(peak))
    s = torch.linalg.vector_norm(C, dim=dim, keepdim=True) / math.sqrt(C.shape[dim])
    return C.div_(s + eps)


def newton_schulz_inv_sqrt(A: Tensor, steps: int, beta: float) -> tuple[Tensor, Tensor]:
    """Coupled Newton-Schulz iteration for an SPD ``A`` with eigenvalues in (0, 1] (docs/swan.md).

    ``T = 3I - Z Y; Y <- beta Y T; Z <- beta T Z`` from ``Y = A, Z = I``. With ``beta = 1/2`` it
    converges to ``(A^{1/2}, A^{-1/2})``; ``beta > 2/3`` settles singular values into a band.
    """
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand_as(A)
    Y, Z = A, eye
    for i in range(steps):
        T = 3 * eye - (Y if i == 0 else Z @ Y)  # Z_0 = I
        Y = beta * (Y @ T)
        Z = beta * (T if i == 0 else T @ Z)
    return Y, Z


def nsds_inv_sqrt(A: Tensor, steps: int, beta: float) -> tuple[Tensor, Tensor]:
    """Newton-Schulz with diagonal substitution (paper's NSDS, docs/swan.md): O(p^2) per step.

    ``Y <- beta Y Diag(3 - z*y)``, ``Z <- beta (3I - Diag(z) Y) Diag(z)`` with ``z = diag(Z)``,
    ``y = diag(Y)``, from ``Y = A, Z = I``.
    """
    p = A.shape[-1]
    eye = torch.eye(p, dtype=A.dtype, device=A.device)
    Y = A
    z = torch.ones(A.shape[:-1], dtype=A.dtype, device=A.device)
    Z = eye.expand_as(A)
    for _ in range(steps):
        y = Y.diagonal(dim1=-2, dim2=-1)
        Z = beta * (3 * eye - z[..., :, None] * Y) * z[..., None, :]
        Y = beta * Y * (3 - z * y)[..., None, :]
        z = Z.diagonal(dim1=-2, dim2=-1)
    return Y, Z


def whiten(
    G: Tensor,
    method: str = "ns",
    *,
    steps: int | None = None,
    beta: float = 0.8,
    eps: float = 1e-8,
    rel_tol: float = 1e-7,
    allow_low_precision: bool = False,
    matmul_dtype: torch.dtype | None = None,
    check: bool = True,
) -> Tensor:
    """GradWhitening (paper Algorithm 2): ``(G G^T)^{-1/2} G`` on the smaller side of ``G``.

    Args:
        G: ``(..., m, n)``; tall matrices are whitened as ``G (G^T G)^{-1/2}``.
        method: ``"ns"`` (coupled Newton-Schulz; defaults beta=0.8, k=10, unverified), ``"nsds"``
            (diagonal substitution; pass beta=0.4, steps=2), ``"eigh"`` or ``"svd"`` (exact polar
            factor ``U V^T``; singular values below ``rel_tol * max`` count as zero), or
            ``"muon"`` (not the paper's: Muon's quintic iteration, :func:`quintic_polar`; pass
            matmul_dtype=torch.bfloat16 for Muon's own setting; ``beta`` unused).
        steps: iterations; None is 5 for ``"muon"`` (Muon's) and 10 for the others.
        allow_low_precision: half-precision inputs are refused for ``"ns"`` unless allowed (the
            coupled form overflows in bf16/fp16); then a non-finite result is recomputed in
            float32.
        matmul_dtype: ``torch.bfloat16`` runs the Newton-Schulz matmuls in bf16 (the rest in the
            input's dtype): about 2x faster on CPUs with AVX512-BF16, relative error about 2e-2
            (:func:`newton_schulz_polar`).
        check: verify the input and the result are finite (two host syncs; the optimizer, which
            checks the gradients once per step, turns it off).
    Returns:
        ``G``'s shape and dtype. Zero input gives zero output.
    Raises:
        FloatingPointError: non-finite input or a non-finite result in float32/64.
    """
    _check_matrix(G)
    if method not in WHITENINGS:
        raise ValueError(f"method must be one of {WHITENINGS}, got {method!r}")
    if steps is None:
        steps = 5 if method == "muon" else 10
    if not torch.compiler.is_compiling():  # checked once, eagerly: no graph break in SWAN.step
        steps = as_int("steps", steps, 1)
        beta = as_real("beta", beta, low=0, high=1, low_open=True)
        rel_tol = as_real("rel_tol", rel_tol, low=0, high=1, high_open=True)
        check_matmul_dtype(matmul_dtype)
    if G.numel() == 0:  # an empty matrix whitens to itself (amax has nothing to reduce)
        return G.clone()
    if check and not bool(torch.isfinite(G).all()):
        raise FloatingPointError("whiten: G contains NaN or inf")
    if method == "ns" and G.dtype in _LOW and not allow_low_precision:
        raise ValueError(
            f"whiten(method='ns') in {G.dtype} overflows to NaN (docs/swan.md); cast G to float32, or "
            "pass allow_low_precision=True to try it with a float32 fallback"
        )
    tall = G.shape[-2] > G.shape[-1]
    X = G.mT if tall else G
    if method in ("eigh", "svd") and X.dtype in _LOW:
        X = X.float()
    Xn, zero = _unit_frobenius(X)
    O = _whiten_wide(Xn, method, steps, beta, rel_tol, matmul_dtype)
    if check and not bool(torch.isfinite(O).all()):
        if O.dtype in _LOW or matmul_dtype is not None:
            O = _whiten_wide(Xn.float(), method, steps, beta, rel_tol)
        if not bool(torch.isfinite(O).all()):
            raise FloatingPointError(f"whiten(method={method!r}) produced NaN/inf")
    O = torch.where(zero, torch.zeros_like(O), O).to(G.dtype)
    return O.mT if tall else O


def _whiten_wide(
    X: Tensor,
    method: str,
    steps: int,
    beta: float,
    rel_tol: float,
    matmul_dtype: torch.dtype | None = None,
) -> Tensor:
    """Whitening of unit-Frobenius ``X`` with ``p <= q`` (rows <= columns)."""
    if method == "svd":
        U, S, Vh = torch.linalg.svd(X, full_matrices=False)
        keep = (rel_tol * S.amax(dim=-1, keepdim=True) < S).to(X.dtype)
        return (U * keep[..., None, :]) @ Vh
    if method == "muon":
        return _quintic(X, steps, matmul_dtype)
    if method == "ns" and (matmul_dtype is not None or X.shape[-1] < 1.5 * X.shape[-2]):
        return newton_schulz_polar(X, steps, beta, matmul_dtype)
    A = X @ X.mT
    if method == "eigh":
        lam, V = torch.linalg.eigh(A)
        # Gram eigenvalues are squared singular values: the tolerance applies to sqrt(lambda)
        keep = lam > (rel_tol**2) * lam.amax(dim=-1, keepdim=True).clamp(min=0)
        inv = torch.where(keep, lam.clamp(min=torch.finfo(lam.dtype).tiny).rsqrt(), 0)
        return (V * inv[..., None, :]) @ V.mT @ X
    _, Z = (newton_schulz_inv_sqrt if method == "ns" else nsds_inv_sqrt)(A, steps, beta)
    return Z @ X


def newton_schulz_polar(
    X: Tensor, steps: int, beta: float, matmul_dtype: torch.dtype | None = None
) -> Tensor:
    """``X <- beta (3 X - X X^T X)``, ``steps`` times, for a unit-Frobenius wide ``X``
    ``(..., p, q)``, ``p <= q``.

    The same iterates as the coupled form of :func:`newton_schulz_inv_sqrt` applied to ``X``
    (``Z_k X``: in exact arithmetic ``Z_k A`` and ``X_k X_k^T`` coincide), with two matmuls of
    ``p^2 q`` per step instead of three of ``p^3`` plus one, and no ``A^{-1/2}`` built on the
    side: on a 1024 x 1024 float32 matrix it is 1.6x faster and about 50x more accurate against
    float64 (2.5e-6 vs 1.2e-4 relative). For ``q >= 1.5 p`` the Gram-side coupled form is cheaper,
    and :func:`whiten` uses it there unless ``matmul_dtype`` asks for low-precision matmuls.
    ``matmul_dtype=torch.bfloat16`` runs the matmuls in bf16 (float32 accumulation on CPUs with
    AVX512-BF16 and on GPUs): relative error about 2e-2 against float64 (docs/swan.md).
    """

    def cubic(Y: Tensor) -> Tensor:
        return torch.baddbmm(Y, torch.bmm(Y, Y.mT), Y, beta=3 * beta, alpha=-beta)

    return _iterate_batched(X, cubic, steps, matmul_dtype)


def _muon_direction(
    X: Tensor, steps: int, matmul_dtype: torch.dtype, rescale: str, reference: Tensor
) -> Tensor:
    """SWAN's step with Muon-class whitening after GradNorm, in as few passes over the matrix as
    Muon's own step (the optimizer's path: ``SWAN(variant="swan_muon")``). GradNorm leaves every
    row with mean square 1, so the Frobenius norm needs no max-abs guard, and the division is
    fused with the cast to ``matmul_dtype``; the iterate stays in ``matmul_dtype`` until the
    rescale, which casts it back in the same pass. An all-zero matrix stays zero. The same values
    as :func:`whiten` followed by the rescale, to ``matmul_dtype``'s rounding."""
    if rescale == "none":  # whiten's contract: the whitened matrix in X's dtype
        rescale_to = None
    elif rescale == "rms":
        rescale_to = math.sqrt(X.shape[-2] * X.shape[-1])
    else:
        rescale_to = torch.linalg.matrix_norm(reference, keepdim=True)
    tall = X.shape[-2] > X.shape[-1]
    W = X.mT if tall else X
    norm = torch.linalg.matrix_norm(W, keepdim=True)
    Y = torch.empty(W.shape, dtype=matmul_dtype, device=W.device)
    torch.mul(W, 1 / torch.where(norm > 0, norm, torch.ones_like(norm)), out=Y)
    Y = _quintic(Y, steps)  # in matmul_dtype already
    Y = Y.mT if tall else Y
    if rescale_to is None:
        return Y.to(X.dtype)
    out_norm = torch.linalg.vector_norm(Y, dim=(-2, -1), keepdim=True, dtype=X.dtype)
    return torch.mul(Y, rescale_to / torch.where(out_norm > 0, out_norm, torch.ones_like(out_norm)))


def _iterate_batched(X: Tensor, step, steps: int, matmul_dtype: torch.dtype | None) -> Tensor:
    """``step`` applied ``steps`` times to ``X`` as one ``(batch, p, q)`` stack, in
    ``matmul_dtype`` when given; returned in ``X``'s shape and dtype."""
    Y = X.reshape(-1, X.shape[-2], X.shape[-1])
    if matmul_dtype is not None:
        Y = Y.to(matmul_dtype)
    for _ in range(steps):
        Y = step(Y)
    return Y.reshape(X.shape).to(X.dtype)


def quintic_polar(X: Tensor, steps: int = 5, matmul_dtype: torch.dtype | None = None) -> Tensor:
    """Muon's quintic Newton-Schulz iteration for a unit-Frobenius wide ``X`` ``(..., p, q)``:
    ``A = X X^T; X <- a X + (b A + c A^2) X`` with ``(a, b, c) = MUON_COEFFS``, ``steps`` times,
    batched over the leading dimensions (two ``baddbmm`` and one ``bmm`` per step).

    Not the exact polar factor: the coefficients maximise the slope at 0, so after 5 steps the
    singular values lie in a band around 1 (about 0.7 to 1.2) instead of at 1 (docs/swan.md,
    Muon-class whitening, for the measured error). ``matmul_dtype=torch.bfloat16`` runs the
    iteration in bf16 as Muon does. A tall ``X`` is iterated on its transpose.

    Raises ValueError for a matrix whose Frobenius norm exceeds 1 (the iteration diverges; divide
    by the norm first, or call ``whiten(X, "muon")``, which does)."""
    _check_matrix(X, "X")
    steps = as_int("steps", steps, 0)
    check_matmul_dtype(matmul_dtype)
    if X.numel() == 0:
        return X.clone()
    norms = torch.linalg.matrix_norm(X.double())
    if not bool(torch.isfinite(norms).all()) or float(norms.max()) > 1 + 1e-3:
        raise ValueError(
            "quintic_polar needs matrices of Frobenius norm at most 1 (the iteration diverges "
            f"beyond); the largest here is {float(norms.max()):.4g}: divide X by "
            "torch.linalg.matrix_norm(X, keepdim=True) first, or call whiten(X, 'muon')"
        )
    tall = X.shape[-2] > X.shape[-1]
    Y = _quintic(X.mT if tall else X, steps, matmul_dtype)
    return Y.mT if tall else Y


def _quintic(X: Tensor, steps: int, matmul_dtype: torch.dtype | None = None) -> Tensor:
    """:func:`quintic_polar` without its checks, for a wide unit-norm ``X`` (the hot path)."""
    a, b, c = MUON_COEFFS

    def quintic(Y: Tensor) -> Tensor:
        A = torch.bmm(Y, Y.mT)
        return torch.baddbmm(Y, torch.baddbmm(A, A, A, beta=b, alpha=c), Y, beta=a)

    return _iterate_batched(X, quintic, steps, matmul_dtype)


def muon_orthogonalize(
    G: Tensor,
    steps: int = 5,
    coeffs: tuple[float, float, float] = (3.4445, -4.7750, 2.0315),
    eps: float = 1e-7,
) -> Tensor:
    """Keller Jordan's quintic Newton-Schulz (Muon's orthogonalisation), for the benchmarks."""
    _check_matrix(G)
    a, b, c = coeffs
    tall = G.shape[-2] > G.shape[-1]
    X = G.mT if tall else G
    X = X / (torch.linalg.matrix_norm(X, keepdim=True) + eps)
    for _ in range(steps):
        A = X @ X.mT
        X = a * X + (b * A + c * A @ A) @ X
    return X.mT if tall else X


def sinkhorn_normalize(G: Tensor, iters: int = 5, eps: float = 1e-8) -> Tensor:
    """SinkGD's multi-normalisation: ``iters`` rounds of rows to L2 norm sqrt(n), then columns to
    L2 norm sqrt(m) (arXiv:2502.06742)."""
    _check_matrix(G)
    if not torch.compiler.is_compiling():  # checked once, eagerly: no graph break in SWAN.step
        iters = as_int("iters", iters, 1)
        eps = as_real("eps", eps, low=0)
    m, n = G.shape[-2], G.shape[-1]
    X = G
    for _ in range(iters):
        X = X * (math.sqrt(n) / (torch.linalg.vector_norm(X, dim=-1, keepdim=True) + eps))
        X = X * (math.sqrt(m) / (torch.linalg.vector_norm(X, dim=-2, keepdim=True) + eps))
    return X


def swan_direction(
    G: Tensor,
    *,
    norm: bool = True,
    norm_dim: int = -1,
    center: bool = True,
    whitening: str | None = "ns",
    ns_steps: int = 10,
    ns_beta: float = 0.8,
    rescale: str = "rms",
    eps: float = 1e-8,
    compute_dtype: torch.dtype = torch.float32,
    matmul_dtype: torch.dtype | None = None,
    check: bool = True,
) -> Tensor:
    """The SWAN update direction ``Delta W`` for a gradient ``G`` (paper Algorithm 1, docs/swan.md).

    ``G~ = GradNorm(G)`` (if ``norm``), ``O = GradWhitening(G~)`` (if ``whitening``), then
    ``rescale``: ``"rms"`` gives ``sqrt(m n) O / ||O||_F`` (update RMS exactly 1), ``"match_norm"``
    scales to ``||G~||_F``, ``"none"`` returns ``O``. Computed in ``compute_dtype`` (float32 by
    default, as the paper whitens in FP32); returns ``G``'s shape in ``compute_dtype``. Invariant to
    the scale of ``G``; a zero gradient gives a zero direction.
    """
    _check_matrix(G)
    if rescale not in RESCALES:
        raise ValueError(f"rescale must be one of {RESCALES}, got {rescale!r}")
    if whitening is not None and whitening not in WHITENINGS:
        raise ValueError(f"whitening must be one of {WHITENINGS} or None, got {whitening!r}")
    scale = None
    if norm and _narrows(G.dtype, compute_dtype):
        # GradNorm in G's own dtype first: a float64 gradient past float32's range (or a float32
        # one past float16's) would be inf after the cast; standardised rows are bounded by
        # sqrt(n), which every dtype holds
        X = grad_norm(G, dim=norm_dim, eps=eps, center=center).to(compute_dtype)
    elif _narrows(G.dtype, compute_dtype) and G.numel():
        # no GradNorm to bound the entries: divide by the largest magnitude in G's dtype before
        # the cast; the whitening and the rms rescale do not see it, and it is multiplied back
        # where the output keeps G's scale (there it may overflow: the optimizer checks)
        peak = G.abs().amax(dim=(-2, -1), keepdim=True)
        scale = torch.where(peak > 0, peak, torch.ones_like(peak))
        X = (G / scale).to(compute_dtype)
    else:
        X = G.to(compute_dtype)
        if norm:
            X = grad_norm(X, dim=norm_dim, eps=eps, center=center)
    if X.numel() == 0:
        return X.clone()
    out = _whiten_and_rescale(
        X, norm, whitening, ns_steps, ns_beta, rescale, eps, compute_dtype, matmul_dtype, check
    )
    if scale is not None and (rescale == "match_norm" or (whitening is None and rescale == "none")):
        out = out * scale.to(out.dtype)
    return out


def _whiten_and_rescale(
    X, norm, whitening, ns_steps, ns_beta, rescale, eps, compute_dtype, matmul_dtype, check
) -> Tensor:
    """The rest of :func:`swan_direction` after GradNorm, on ``X`` in ``compute_dtype``."""
    reference = X
    if (
        whitening == "muon"
        and norm
        and not check
        and matmul_dtype in _LOW
        and X.dtype in (torch.float32, torch.float64)
    ):  # the optimizer's path: low-precision matmuls on a float32/64 GradNorm'd gradient
        return _muon_direction(X, ns_steps, matmul_dtype, rescale, reference)
    if whitening is not None:
        X = whiten(
            X,
            whitening,
            steps=ns_steps,
            beta=ns_beta,
            eps=eps,
            allow_low_precision=compute_dtype in _LOW,
            matmul_dtype=matmul_dtype,
            check=check,
        )
    if rescale == "none":
        return X
    if whitening is not None:
        # a whitened matrix has singular values near 1 or 0 whatever G's scale: its norm needs no
        # max-abs guard against overflow, and the scaling is one pass
        norm = torch.linalg.matrix_norm(X, keepdim=True)
        target = (
            math.sqrt(X.shape[-2] * X.shape[-1])
            if rescale == "rms"
            else torch.linalg.matrix_norm(reference, keepdim=True)
        )
        return X * (target / torch.where(norm > 0, norm, torch.ones_like(norm)))
    unit, _zero = _unit_frobenius(X)
    if rescale == "rms":
        return unit.mul_(math.sqrt(X.shape[-2] * X.shape[-1]))
    return unit.mul_(torch.linalg.matrix_norm(reference, keepdim=True))
