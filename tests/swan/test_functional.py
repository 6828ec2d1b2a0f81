"""GradNorm, whitening, NS/NSDS, SinkGD normalisation and swan_direction (tests 1-8)."""

from __future__ import annotations

import pytest
import torch

from icml25.swan import SWAN, swan_direction
from icml25.swan.bench import bench_whitening, powerlaw_matrix
from icml25.swan.functional import (
    grad_norm,
    newton_schulz_inv_sqrt,
    nsds_inv_sqrt,
    sinkhorn_normalize,
    whiten,
)

D = torch.float64


def rand(m, n, seed=0, dtype=D):
    return torch.randn(m, n, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def orth(n, seed):
    return torch.linalg.qr(rand(n, n, seed))[0]


def test_grad_norm_rows_standardised_and_invariances():
    G = rand(8, 20)
    N = grad_norm(G)
    torch.testing.assert_close(N.mean(-1), torch.zeros(8, dtype=D), atol=1e-6, rtol=0)
    torch.testing.assert_close(N.pow(2).mean(-1), torch.ones(8, dtype=D), atol=1e-6, rtol=0)
    b = rand(8, 1, 1)
    scale = rand(8, 1, 2).abs() + 0.1
    torch.testing.assert_close(grad_norm(G + b), N)
    torch.testing.assert_close(grad_norm(scale * G), N, atol=1e-6, rtol=0)
    G[3] = 2.5
    assert torch.equal(grad_norm(G)[3], torch.zeros(20, dtype=D))
    torch.testing.assert_close(grad_norm(G, dim=0), grad_norm(G.T, dim=-1).T)
    rms = G / G.pow(2).mean(-1, keepdim=True).sqrt()
    torch.testing.assert_close(grad_norm(G, center=False), rms, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="at least 2 entries along dim=-1"):
        grad_norm(rand(4, 1))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., m, n\)"):
        grad_norm(torch.ones(5))


@pytest.mark.parametrize("shape", [(6, 10), (10, 6), (7, 7)])
def test_exact_whitening_is_the_polar_factor(shape):
    G = rand(*shape, seed=3)
    O = whiten(G, "svd")
    U, _, Vh = torch.linalg.svd(G, full_matrices=False)
    torch.testing.assert_close(O, U @ Vh, atol=1e-10, rtol=0)
    torch.testing.assert_close(whiten(G, "eigh"), O, atol=1e-9, rtol=0)
    torch.testing.assert_close(whiten(G.T, "svd"), O.T)
    Q, R = orth(shape[0], 5), orth(shape[1], 6)
    torch.testing.assert_close(whiten(Q @ G @ R, "svd"), Q @ O @ R, atol=1e-10, rtol=0)
    torch.testing.assert_close(whiten(7.5 * G, "svd"), O)
    p = min(shape)
    gram = O @ O.T if shape[0] <= shape[1] else O.T @ O
    torch.testing.assert_close(gram, torch.eye(p, dtype=D), atol=1e-10, rtol=0)


def test_newton_schulz_converges_and_beta_08_band():
    G = powerlaw_matrix(20, 50, seed=1).double()  # kappa = 20
    torch.testing.assert_close(
        whiten(G, "ns", steps=40, beta=0.5), whiten(G, "svd"), atol=1e-8, rtol=0
    )
    for m, n in ((64, 150), (150, 64)):
        sv = torch.linalg.svdvals(whiten(powerlaw_matrix(m, n, seed=2), "ns", steps=10, beta=0.8))
        assert float(sv.min()) >= 0.55 and float(sv.max()) <= 1.61
    V = orth(12, 9)
    lam = torch.logspace(-2, 0, 12, dtype=D)
    A = (V * lam) @ V.T
    Y, Z = newton_schulz_inv_sqrt(A, 40, 0.5)
    torch.testing.assert_close(Z, (V * lam.rsqrt()) @ V.T, atol=1e-8, rtol=0)
    torch.testing.assert_close(Y, (V * lam.sqrt()) @ V.T, atol=1e-8, rtol=0)


def _nsds_loop(A, steps, beta):
    p = A.shape[0]
    Y, Z = A.clone(), torch.eye(p, dtype=A.dtype)
    for _ in range(steps):
        z, y = torch.diagonal(Z).clone(), torch.diagonal(Y).clone()
        Znew = torch.empty_like(Z)
        for i in range(p):
            for j in range(p):
                Znew[i, j] = beta * ((3.0 if i == j else 0.0) - z[i] * Y[i, j]) * z[j]
        Y = beta * Y @ torch.diag(3 - z * y)
        Z = Znew
    return Y, Z


def test_nsds_matches_loop_and_closed_form():
    X = rand(6, 15, seed=4)
    X = X / torch.linalg.matrix_norm(X)
    A = X @ X.T
    Yl, Zl = _nsds_loop(A, 3, 0.4)
    Y, Z = nsds_inv_sqrt(A, 3, 0.4)
    torch.testing.assert_close(Z, Zl)
    torch.testing.assert_close(Y, Yl)
    p = 32
    X = rand(p, 80, seed=5)
    X = X / X.norm(dim=1, keepdim=True)
    X = X / torch.linalg.matrix_norm(X)
    _, Z = nsds_inv_sqrt(X @ X.T, 2, 0.4)
    a, b = 1.425, 0.4 * 1.1875**3  # beta z1 * 3 and beta z1^3 with z1 = beta (3 - 1/p)
    torch.testing.assert_close(Z, a * torch.eye(p, dtype=D) - b * X @ X.T, atol=1e-15, rtol=0)
    assert abs(b - 0.6698) < 1e-4


def test_rank_deficient_inputs_give_the_pseudo_polar_factor():
    u, v = rand(8, 1, 1), rand(1, 20, 2)
    G1 = u @ v
    expected = (u / u.norm()) @ (v / v.norm())
    for method in ("eigh", "svd"):
        torch.testing.assert_close(whiten(G1, method), expected, atol=1e-9, rtol=0)
    G = rand(8, 4, 3) @ rand(4, 20, 4)  # rank p/2
    U, S, Vh = torch.linalg.svd(G, full_matrices=False)
    ref = U[:, :4] @ Vh[:4]
    for method in ("eigh", "svd"):
        torch.testing.assert_close(whiten(G, method), ref, atol=1e-8, rtol=0)
    assert torch.isfinite(whiten(G.float(), "ns")).all()


def test_bf16_ns_refused_unless_allowed_then_falls_back():
    G = powerlaw_matrix(128, 344).bfloat16()
    with pytest.raises(ValueError, match="overflows"):
        whiten(G, "ns")
    out = whiten(G, "ns", allow_low_precision=True)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    assert torch.isfinite(whiten(G, "nsds", steps=2, beta=0.4)).all()
    with pytest.raises(FloatingPointError):
        whiten(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))


def test_swan_direction_rms_zero_and_scale_invariance():
    G = rand(12, 30, seed=7, dtype=torch.float32)
    for kw in (
        {},
        {"norm": False},
        {"whitening": None},
        {"whitening": "nsds", "ns_steps": 2, "ns_beta": 0.4},
    ):
        d = swan_direction(G, **kw)
        torch.testing.assert_close(d.pow(2).mean().sqrt(), torch.tensor(1.0), rtol=1e-5, atol=0)
        for c in (1e-20, 1e-6, 1e6, 1e20):
            torch.testing.assert_close(swan_direction(G * c, **kw), d, atol=1e-4, rtol=1e-4)
    assert torch.equal(swan_direction(torch.zeros(5, 9)), torch.zeros(5, 9))
    with pytest.raises(ValueError, match="rescale"):
        swan_direction(G, rescale="l2")
    with pytest.raises(ValueError, match="whitening"):
        swan_direction(G, whitening="cholesky")


def test_sinkhorn_normalize():
    G = rand(10, 25, seed=8)
    X = sinkhorn_normalize(G, iters=5)
    torch.testing.assert_close(X.norm(dim=0), torch.full((25,), 10**0.5, dtype=D))
    torch.testing.assert_close(
        X.norm(dim=1), torch.full((10,), 25**0.5, dtype=D), atol=1e-3, rtol=0
    )


def test_bench_whitening_smoke():
    rows = bench_whitening(sizes=((32, 48),), repeats=2)
    assert {r["method"] for r in rows} >= {"ns_b0.8_k10", "nsds_b0.4_k2", "eigh64", "muon5"}
    assert all(r["seconds"] > 0 for r in rows)
    best = next(r for r in rows if r["method"] == "ns_b0.5_k40")
    assert best["rel_error"] < 1e-4


@pytest.mark.parametrize("shape", [(24, 24), (16, 40), (40, 16), (3, 12, 20)])
def test_polar_form_equals_the_coupled_form(shape):
    """X <- beta (3X - X X^T X) gives the coupled Newton-Schulz iterates Z_k X (exact arithmetic:
    float64 to 1e-10), for square, wide, tall and batched inputs."""
    from icml25.swan.functional import _unit_frobenius, newton_schulz_inv_sqrt, newton_schulz_polar

    g = torch.Generator().manual_seed(5)
    G = torch.randn(*shape, generator=g, dtype=torch.float64)
    X = G.mT if shape[-2] > shape[-1] else G
    Xn, _ = _unit_frobenius(X)
    _, Z = newton_schulz_inv_sqrt(Xn @ Xn.mT, 10, 0.8)
    assert torch.allclose(newton_schulz_polar(Xn, 10, 0.8), Z @ Xn, atol=1e-10)
    # whiten picks either form by shape: both paths agree with the coupled reference
    assert torch.allclose(
        whiten(G, "ns"), (Z @ Xn).mT if shape[-2] > shape[-1] else Z @ Xn, atol=1e-10
    )


def test_bf16_matmul_mode_error_is_bounded_and_documented():
    g = torch.Generator().manual_seed(6)
    G = torch.randn(64, 96, generator=g, dtype=torch.float64)
    ref = swan_direction(G, compute_dtype=torch.float64)
    fast = swan_direction(G.float(), matmul_dtype=torch.bfloat16)
    rel = float((fast.double() - ref).norm() / ref.norm())
    assert fast.dtype == torch.float32 and 1e-4 < rel < 6e-2  # bf16 rounding, not a bug
    exact32 = swan_direction(G.float())
    assert float((exact32.double() - ref).norm() / ref.norm()) < 1e-3


@pytest.mark.parametrize(
    ("dtype", "compute", "scale"),
    [(torch.float64, torch.float32, 1e300), (torch.float32, torch.float16, 1e30)],
)
def test_gradnorm_runs_before_a_cast_that_would_overflow(dtype, compute, scale):
    """Issue 50: a float64 gradient past float32's range (or a float32 one past float16's) was
    cast first and became inf ("whiten: G contains NaN or inf"); GradNorm now standardises it in
    its own dtype, so SWAN's scale invariance holds across the whole range."""
    g = torch.Generator().manual_seed(0)
    G = torch.randn(8, 6, dtype=dtype, generator=g)
    kw = (
        {"compute_dtype": compute}
        if compute != torch.float16
        else {"compute_dtype": compute, "matmul_dtype": torch.float32}
    )
    small, big = swan_direction(G, **kw), swan_direction(G * scale, **kw)
    assert big.dtype == compute and bool(torch.isfinite(big).all())
    torch.testing.assert_close(
        big.float(), small.float(), rtol=0, atol=1e-6 if compute == torch.float32 else 2e-2
    )
    p = torch.nn.Parameter(torch.ones(8, 6, dtype=dtype))
    opt = SWAN([{"params": [p], "use_swan": True}], lr=0.1, compute_dtype=torch.float32)
    p.grad = G * (scale if dtype == torch.float64 else 1.0)
    opt.step()
    assert bool(torch.isfinite(p).all())


@pytest.mark.parametrize("variant", ["swan", "swan_muon", "swan_nsds", "swan_exact"])
def test_without_gradnorm_a_narrowing_cast_never_reaches_the_weights(variant):
    """A new user's review (issue 50): with ``norm=False`` a float64 gradient past float32's range
    was cast to inf after the finiteness check and written into the weights as NaN (even with
    ``nonfinite="skip"``). Now it is scaled in its own dtype before the cast (the rms direction is
    the unscaled one's), and an update that still overflows (``rescale="match_norm"`` keeps G's
    norm) raises or is skipped before any parameter changes."""
    g = torch.Generator().manual_seed(1)
    G = torch.randn(8, 16, dtype=torch.float64, generator=g)
    w0 = torch.randn(8, 16, dtype=torch.float64, generator=g)
    steps = {}
    for scale in (1.0, 1e300):
        w = torch.nn.Parameter(w0.clone())
        opt = SWAN([{"params": [w], "use_swan": True}], lr=0.1, norm=False, variant=variant)
        w.grad = G * scale
        opt.step()
        steps[scale] = w.detach() - w0
    assert bool(torch.isfinite(steps[1e300]).all())
    torch.testing.assert_close(steps[1e300], steps[1.0], rtol=1e-5, atol=1e-6)
    b = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
    w = torch.nn.Parameter(w0.clone())
    groups = [{"params": [w], "use_swan": True}, {"params": [b], "use_swan": False}]
    opt = SWAN(groups, lr=0.1, norm=False, rescale="match_norm", variant=variant)
    w.grad, b.grad = G * 1e300, torch.ones(3, dtype=torch.float64)
    with pytest.raises(FloatingPointError, match="overflowed compute_dtype"):
        opt.step()
    assert torch.equal(w.detach(), w0) and bool((b == 0).all())  # the AdamW part waited too
    opt.nonfinite = "skip"
    opt.step()
    assert opt.skipped_steps == 1 and torch.equal(w.detach(), w0)
