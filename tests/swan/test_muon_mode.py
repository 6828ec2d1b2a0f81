"""SWAN's Muon-class whitening (issue 50): ``whiten(method="muon")`` is Muon's quintic
Newton-Schulz iteration (torch.optim.Muon's), batched over same-shape matrices, and
``SWAN(variant="swan_muon")`` runs it in bf16 after GradNorm."""

import pytest
import torch

from icml25.swan import SWAN, swan_param_groups
from icml25.swan.functional import muon_orthogonalize, quintic_polar, swan_direction, whiten


def _g(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("shape", [(16, 16), (24, 80), (80, 24)])
def test_muon_whitening_is_muons_iteration(shape):
    G = _g(*shape)
    torch.testing.assert_close(
        whiten(G, "muon", steps=5), muon_orthogonalize(G), rtol=1e-4, atol=1e-5
    )
    zeropower = pytest.importorskip("torch.optim._muon")._zeropower_via_newtonschulz
    ref = zeropower(G, (3.4445, -4.7750, 2.0315), 5, 1e-7).float()
    ours = whiten(G, "muon", steps=5, matmul_dtype=torch.bfloat16)
    rel = torch.linalg.matrix_norm(ours - ref) / torch.linalg.matrix_norm(ref)
    assert float(rel) < 3e-2  # both in bf16; they normalise in different precisions


def test_muon_whitening_is_batched_and_scale_invariant():
    G = _g(5, 12, 40)
    batched = whiten(G, "muon", steps=5)
    one_by_one = torch.stack([whiten(g, "muon", steps=5) for g in G])
    torch.testing.assert_close(batched, one_by_one, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(whiten(G * 1e-20, "muon", steps=5), batched, rtol=1e-5, atol=1e-6)
    assert bool((whiten(torch.zeros(3, 4), "muon") == 0).all())


def test_quintic_iteration_lands_in_a_band_not_at_one():
    # documented: singular values of a wide Gaussian matrix after 5 steps in about [0.68, 1.14]
    s = torch.linalg.svdvals(quintic_polar(_unit(_g(64, 256))))
    assert float(s.min()) > 0.6 and float(s.max()) < 1.25 and float((s - 1).abs().max()) > 0.05


def _unit(X):
    return X / torch.linalg.matrix_norm(X)


def test_swan_muon_variant_defaults_to_bf16_and_keeps_the_rms():
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 6))
    opt = SWAN(swan_param_groups(model), lr=1e-2, variant="swan_muon")
    swan_group = next(g for g in opt.param_groups if g["use_swan"])
    assert (swan_group["whitening"], swan_group["ns_steps"], swan_group["matmul_dtype"]) == (
        "muon",
        5,
        torch.bfloat16,
    )
    own = SWAN(swan_param_groups(model), variant="swan_muon", matmul_dtype=None)
    assert next(g for g in own.param_groups if g["use_swan"])["matmul_dtype"] is None
    plain = SWAN(swan_param_groups(model))
    assert next(g for g in plain.param_groups if g["use_swan"])["matmul_dtype"] is None
    D = swan_direction(_g(24, 12), whitening="muon", ns_steps=5, matmul_dtype=torch.bfloat16)
    assert float(D.pow(2).mean().sqrt()) == pytest.approx(1.0, rel=1e-5)
    x = _g(32, 12, seed=1)
    losses = []
    for _ in range(5):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("bad", [torch.int32, "bf16", torch.bool, torch.float8_e4m3fn])
def test_a_non_floating_matmul_dtype_is_refused(bad):
    # before: torch.int32 rounded the iterates to zeros (a silently frozen model); "bf16" gave
    # a raw "Invalid device string"; float8 failed inside the step
    with pytest.raises(ValueError, match="matmul_dtype must be None or one of torch.float16"):
        whiten(_g(8, 16), "muon", matmul_dtype=bad)
    model = torch.nn.Linear(8, 8)
    with pytest.raises(ValueError, match="matmul_dtype must be None or one of torch.float16"):
        SWAN(swan_param_groups(model), variant="swan_muon", matmul_dtype=bad)


def test_whiten_muon_defaults_to_muons_five_steps():
    """A new user's review (issue 50): ``whiten(G, "muon")`` took the shared default of 10 steps."""
    G = _g(64, 32)
    assert torch.equal(whiten(G, "muon"), whiten(G, "muon", steps=5))
    assert not torch.equal(whiten(G, "muon"), whiten(G, "muon", steps=10))
    assert torch.equal(whiten(G, "ns"), whiten(G, "ns", steps=10))


def test_quintic_polar_checks_its_input_and_takes_tall_matrices():
    """A new user's review (issue 50): an unnormalised input gave NaN silently, a tall one inf, a
    vector an IndexError, ``steps=-1`` the input back and an empty matrix a reshape error."""
    G = _g(32, 64)
    X = G / torch.linalg.matrix_norm(G)
    with pytest.raises(ValueError, match="Frobenius norm at most 1.*largest here is 100"):
        quintic_polar(X * 100)
    tall = quintic_polar(X.mT)
    assert bool(torch.isfinite(tall).all())
    torch.testing.assert_close(tall, quintic_polar(X).mT)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., m, n\)"):
        quintic_polar(torch.randn(5))
    with pytest.raises(ValueError, match="steps"):
        quintic_polar(X, steps=-1)
    with pytest.raises(ValueError, match="matmul_dtype"):
        quintic_polar(X, matmul_dtype=torch.int32)
    assert quintic_polar(torch.empty(0, 4)).shape == (0, 4)
    assert torch.equal(quintic_polar(X, steps=0), X)


def test_an_unused_ns_beta_is_named():
    with pytest.warns(UserWarning, match="ns_beta=0.5 is unused by whitening='muon'"):
        SWAN(swan_param_groups(torch.nn.Linear(8, 8)), variant="swan_muon", ns_beta=0.5)


@pytest.mark.parametrize(
    "kw",
    [
        dict(variant="swan_muon", compute_dtype=torch.float16),
        dict(variant="swan_muon", matmul_dtype=torch.float64),
        dict(variant="swan_muon", matmul_dtype=torch.float16),
        dict(compute_dtype=torch.float16),
    ],
)
def test_every_accepted_dtype_steps_to_finite_weights(kw):
    """A new user's review of issue 50: swan_muon's fast path crashed with these dtypes, and a
    float16 step wrote NaN into a ReLU MLP's weights (its dead units' gradient rows are zero)."""
    import warnings

    from icml25.swan import SWAN, swan_param_groups

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the half-precision advice
        opt = SWAN(swan_param_groups(m), **kw)
    before = [p.detach().clone() for p in m.parameters()]
    m(torch.randn(8, 16)).sum().backward()
    opt.step()
    assert all(bool(torch.isfinite(p).all()) for p in m.parameters())
    assert any(not torch.equal(a, p) for a, p in zip(before, m.parameters()))


def test_quintic_polar_is_exported():
    from icml25.swan import functional

    assert "quintic_polar" in functional.__all__
