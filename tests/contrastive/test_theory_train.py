"""Theory helpers (test 5), statistics (7) and determinism (10); the repro smoke run (9) is in
test_repro.py."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.contrastive import similarity_stats, theory
from icml25.contrastive.augment import digits_augment
from icml25.contrastive.losses import (
    ContrastiveLoss,
    independent_additive_loss,
    infonce_loss,
    nt_xent_loss,
)
from icml25.contrastive.train import DigitsSimCLR, train_simclr

D = torch.float64


def test_etf_and_bounds():
    E = theory.simplex_etf(6, 8)
    G = E @ E.T
    torch.testing.assert_close(G.diagonal(), torch.ones(6, dtype=D))
    off = ~torch.eye(6, dtype=torch.bool)
    torch.testing.assert_close(G[off], torch.full((30,), -0.2, dtype=D))
    with pytest.raises(ValueError, match="d >= n-1"):
        theory.simplex_etf(6, 4)
    lo, hi = theory.minibatch_variance_bounds(4, 2)
    assert lo == pytest.approx(2 / 9) and hi == pytest.approx(8 / 9)
    assert theory.minibatch_variance_bounds(8, 8) == (0.0, 0.0)
    with pytest.raises(ValueError, match="dividing n"):
        theory.minibatch_variance_bounds(8, 3)
    assert theory.etf_threshold(8) == pytest.approx(-1 / 7)


def test_siglip_condition_uses_b_paper_equal_minus_bias():
    assert theory.siglip_excessive_separation(8, 5.0, 2.0)
    assert not theory.siglip_excessive_separation(8, 10.0, 6.0)
    # sigmoid_loss takes SigLIP's bias; the paper's b is its negation
    phi, psi = theory.siglip_phi_psi(8, 5.0, 2.0)
    x = torch.tensor(0.3, dtype=D)
    assert float(phi(x)) == pytest.approx(-math.log1p(math.exp(-(5.0 * 0.3 + (-2.0)))))


def test_theorem_52_identity_and_bound():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        n = int(torch.randint(2, 10, (1,), generator=g))
        u = torch.nn.functional.normalize(torch.randn(n, 4, dtype=D, generator=g), dim=-1)
        v = torch.nn.functional.normalize(torch.randn(n, 4, dtype=D, generator=g), dim=-1)
        gap, centred = theory.alignment_gap(u, v)
        assert abs(gap - centred) < 1e-10 and gap <= n / (n - 1) + 1e-12


def test_full_batch_optima_match_the_theory():
    n = 6
    thr = theory.etf_threshold(n)
    U, V = theory.optimize_embeddings(
        lambda a, b: infonce_loss(a, b, 0.5, validate=False), n, 8, steps=1500
    )
    S = U @ V.T
    off = ~torch.eye(n, dtype=torch.bool)
    assert float(S.diagonal().min()) > 0.999 and float((S[off] - thr).abs().max()) < 1e-3
    phi, psi = theory.siglip_phi_psi(n, 5.0, 2.0)  # Eq. 10 holds: excessive separation
    pred = theory.predicted_ind_add_optimum(phi, psi, n)
    U, V = theory.optimize_embeddings(
        lambda a, b: independent_additive_loss(a, b, phi, psi, 1, 0, validate=False),
        n,
        8,
        steps=1500,
    )
    S = U @ V.T
    assert abs(float(S.diagonal().mean()) - pred[0]) < 2e-3
    assert abs(float(S[off].mean()) - pred[1]) < 2e-3
    # The spectral loss has psi(x) = x^2, convex but not increasing: Thm 5.3 does not apply and its
    # optimum (d >= n) is aligned positives with orthogonal negatives, not the h(x) prediction.
    sq = (lambda x: x), (lambda x: x * x)
    U, V = theory.optimize_embeddings(
        lambda a, b: independent_additive_loss(a, b, *sq, 1, 0, validate=False), n, 8, steps=1500
    )
    S = U @ V.T
    assert float(S.diagonal().min()) > 0.999 and float(S[off].abs().max()) < 1e-3


def test_similarity_stats_chunked_equals_dense():
    g = torch.Generator().manual_seed(1)
    u, v = torch.randn(3000, 8, generator=g), torch.randn(3000, 8, generator=g)
    a = similarity_stats(u, v, block=512)
    b = similarity_stats(u, v, block=4096)
    for k, x in a.to_dict().items():
        assert x == pytest.approx(b.to_dict()[k], abs=1e-9), k
    assert a.theorem52_gap >= 0


def test_training_is_deterministic():
    x = torch.rand(64, 1, 8, 8)

    def losses():
        torch.manual_seed(0)
        model = DigitsSimCLR()
        hist = train_simclr(
            model,
            x,
            digits_augment,
            loss=ContrastiveLoss("simclr", 0.2),
            batch_size=16,
            steps=20,
            seed=3,
        )
        return [h["loss"] for h in hist]

    assert losses() == losses()


def test_nt_xent_reference_value():
    u = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=D)
    z = torch.cat([u, u])
    logits = (z @ z.T / 0.5).fill_diagonal_(-math.inf)
    ref = torch.nn.functional.cross_entropy(logits, torch.tensor([2, 3, 0, 1]))
    torch.testing.assert_close(nt_xent_loss(u, u, 0.5), ref)
