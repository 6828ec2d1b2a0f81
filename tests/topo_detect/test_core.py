"""icml25.topo_detect: the planned tests 1-7 and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from icml25.topo_detect import (
    GaussianMMD,
    TopologicalContrastiveLoss,
    TopologicalMMD,
    mk_loss,
    sample_signatures,
    tp_loss,
)
from icml25.topo_detect.mmd import mmd2_unbiased, permutation_test
from icml25.topo_detect.persistence import multiscale_kernel, total_persistence, vr_diagrams
from icml25.topo_detect.signatures import chunks

D = torch.float64


def _cloud(n=40, d=5, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=D)


@pytest.mark.parametrize("seed", range(3))
def test_h0_is_the_minimum_spanning_tree(seed):
    from scipy.sparse.csgraph import minimum_spanning_tree

    x = _cloud(seed=seed)
    dg = vr_diagrams(x)[0]
    mst = np.sort(minimum_spanning_tree(torch.cdist(x, x).numpy()).data)
    assert len(dg) == 39 and bool((dg.diagram[:, 0] == 0).all())
    assert np.abs(np.sort(dg.diagram[:, 1].numpy()) - mst).max() < 1e-12


@pytest.mark.parametrize("seed", range(5))
def test_h1_equals_gudhi(seed):
    gudhi = pytest.importorskip("gudhi")
    x = _cloud(seed=10 + seed)
    st = gudhi.RipsComplex(distance_matrix=torch.cdist(x, x).numpy()).create_simplex_tree(
        max_dimension=2
    )
    st.compute_persistence()
    ref = np.sort(np.array(st.persistence_intervals_in_dimension(1)).reshape(-1, 2), axis=0)
    ours = np.sort(vr_diagrams(x)[1].diagram.detach().numpy(), axis=0)
    assert ours.shape == ref.shape and np.abs(ours - ref).max() < 1e-6
    both = vr_diagrams(x, backend="gudhi")[1].diagram
    assert np.abs(np.sort(both.detach().numpy(), axis=0) - ours).max() < 1e-12


def test_duplicates_give_finite_gradients_and_distinct_minus_one_bars():
    x = _cloud(10, 3)
    x = torch.cat([x, x[:4]]).requires_grad_(True)  # four exact duplicates
    assert len(vr_diagrams(x)[0]) == 9  # N_distinct - 1 (zero-length bars dropped)
    y = _cloud(14, 3, seed=5)
    for loss in (tp_loss(x, y), mk_loss(x, y)):
        (g,) = torch.autograd.grad(loss, x)
        assert bool(torch.isfinite(g).all())


def test_gradcheck_tp_and_mk_at_a_generic_cloud():
    x = _cloud(15, 4, seed=3).requires_grad_(True)
    y = _cloud(15, 4, seed=4)
    for alpha in (1.0, 2.0):
        assert torch.autograd.gradcheck(
            lambda a, alpha=alpha: tp_loss(a, y, alpha=alpha), (x,), eps=1e-6, atol=1e-6
        )
    assert torch.autograd.gradcheck(lambda a: mk_loss(a, y), (x,), eps=1e-6, atol=1e-5)


def test_h0_total_persistence_gradient_is_the_sum_of_incident_mst_edge_directions():
    x = _cloud(12, 3, seed=7).requires_grad_(True)
    dg = vr_diagrams(x)[0]
    (g,) = torch.autograd.grad(total_persistence(dg), x)
    ref = torch.zeros_like(x)
    for _, u, v in dg.pairs.tolist():
        e = (x[u] - x[v]).detach()
        ref[u] += e / e.norm()
        ref[v] -= e / e.norm()
    assert (g - ref).abs().max() < 1e-12


def test_multiscale_kernel_properties_and_gudhi_mapping():
    F = vr_diagrams(_cloud(30, 3, seed=1))[1].diagram.detach()
    G = vr_diagrams(_cloud(30, 3, seed=2))[1].diagram.detach()
    assert float(multiscale_kernel(F, G, 0.1)) == pytest.approx(float(multiscale_kernel(G, F, 0.1)))
    assert float(multiscale_kernel(F, F, 0.1)) >= 0
    x = _cloud(30, 3, seed=1)
    assert float(mk_loss(x, x.clone())) == pytest.approx(0.0, abs=1e-12)
    assert float(mk_loss(x, _cloud(30, 3, seed=2))) > 0
    reps = pytest.importorskip("gudhi.representations")
    for sigma in (0.1, 0.5):
        h = 2 * math.sqrt(sigma)
        k = (
            reps.PersistenceScaleSpaceKernel(bandwidth=h)
            .fit([F.numpy()])
            .transform([G.numpy()])[0, 0]
        )
        assert float(multiscale_kernel(F, G, sigma)) == pytest.approx(
            k / (math.sqrt(2 * math.pi) * h), rel=1e-8
        )


def test_losses_are_invariant_to_rigid_motions_and_permutations():
    x, y = _cloud(25, 4, seed=1), _cloud(25, 4, seed=2)
    Qm, _ = torch.linalg.qr(torch.randn(4, 4, generator=torch.Generator().manual_seed(0), dtype=D))
    shift = torch.randn(4, dtype=D)
    perm = torch.randperm(25, generator=torch.Generator().manual_seed(1))
    for fn in (tp_loss, mk_loss):
        a = float(fn(x, y))
        assert float(fn(x @ Qm + shift, y @ Qm - shift)) == pytest.approx(a, rel=1e-9)
        assert float(fn(x[perm], y)) == pytest.approx(a, rel=1e-12)


def test_mmd_statistic_equals_a_double_loop_and_the_test_is_calibrated():
    g = torch.Generator().manual_seed(0)
    Z = torch.randn(20, 3, generator=g, dtype=D)
    from icml25.topo_detect.mmd import gaussian_gram

    K = gaussian_gram(Z)
    n = 10
    ref = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                ref += K[i, j] + K[n + i, n + j] - K[i, n + j] - K[n + i, j]
    assert float(mmd2_unbiased(K, n)) == pytest.approx(float(ref) / (n * (n - 1)), rel=1e-12)
    from scipy.stats import kstest

    ps = []
    for _ in range(200):
        S = torch.randn(24, 2, generator=g, dtype=D)
        ps.append(permutation_test(gaussian_gram(S), 12, 50, g)[1])
    assert kstest(ps, "uniform").pvalue > 0.01
    from scipy.stats import binom

    rate = sum(p <= 0.05 for p in ps) / 200  # type-I error inside its binomial band
    assert binom.ppf(0.005, 200, 0.05) / 200 <= rate <= binom.ppf(0.995, 200, 0.05) / 200
    test = GaussianMMD(n_perm=100)
    shifted = [
        test.test(torch.randn(30, 2, generator=g), torch.randn(30, 2, generator=g) + 2.0, g).reject
        for _ in range(10)
    ]
    assert all(shifted)


def test_topological_mmd_keeps_its_type_i_error_on_clean_data():
    """The validity guard: two disjoint samples from one distribution, signatures computed by
    the library on the pooled sample: rejection rate over 50 trials <= 0.14."""
    g = torch.Generator().manual_seed(3)

    def sig(z, generator):
        return sample_signatures(z, torch.zeros_like(z), generator=generator, chunk_size=20)

    test = TopologicalMMD([lambda z: z], sig, n_perm=50)
    rejections = [
        test.test(torch.randn(40, 4, generator=g), torch.randn(40, 4, generator=g), g).reject
        for _ in range(50)
    ]
    assert sum(rejections) / 50 <= 0.14


def test_attribution_spreads_each_bar_over_its_vertices():
    x = _cloud(30, 3, seed=9)
    s = sample_signatures(x, x.clone(), chunk_size=30, generator=torch.Generator().manual_seed(0))
    dg = vr_diagrams(x)
    # every bar's persistence is split over its vertices: the column sums are the total persistences
    assert float(s[:, 0].sum()) == pytest.approx(float(total_persistence(dg[0])), rel=1e-12)
    assert float(s[:, 1].sum()) == pytest.approx(float(total_persistence(dg[1])), rel=1e-12)
    gsig = sample_signatures(
        x,
        _cloud(30, 3, seed=8),
        mode="gradient",
        chunk_size=30,
        generator=torch.Generator().manual_seed(0),
    )
    assert gsig.shape == (30, 3) and bool(torch.isfinite(gsig).all())


def test_bad_input():
    x = _cloud(10, 3)
    with pytest.raises(ValueError, match=r"max_dim must be an integer in \[0, 2\]"):
        vr_diagrams(x, max_dim=3)
    with pytest.raises(ValueError, match="non-finite"):
        vr_diagrams(torch.tensor([[0.0, math.nan], [1.0, 1.0]]))
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        tp_loss(x, x, alpha=0)
    with pytest.raises(ValueError, match="sigmas must be a finite number > 0"):
        mk_loss(x, x, sigmas=(-1.0,))
    with pytest.raises(ValueError, match="same N"):
        sample_signatures(x, x[:5])
    with pytest.raises(ValueError, match="same size for the one-sample U-statistic"):
        GaussianMMD().test(x, x[:5])
    assert float(tp_loss(x[:1], x[:2])) >= 0  # tiny clouds: empty diagrams, no NaN
    assert vr_diagrams(x[:1])[1].diagram.shape == (0, 2)
    assert float(tp_loss(x.half(), x.float())) == pytest.approx(0.0, abs=1e-2)  # float16 upcast


def test_tiny_two_tower_and_pgd():
    from icml25.topo_detect.attacks import fgsm, pgd_linf
    from icml25.topo_detect.models import TinyTwoTower, digit_prompt_embeddings
    from icml25.toy.digits import digits_split

    xtr, ytr, xte, yte = digits_split(0.4, seed=0, shape="flat")
    T, info = digit_prompt_embeddings()
    assert T.shape == (10, 384) and "MiniLM" in info["model"]
    torch.manual_seed(0)
    m = TinyTwoTower(32).fit(xtr, ytr, T, epochs=40)
    m.requires_grad_(False)
    assert float((m.logits(xte, T).argmax(-1) == yte).float().mean()) >= 0.9
    adv = pgd_linf(m, xte, yte, T, 0.2, generator=torch.Generator().manual_seed(1))
    assert float((adv - xte).abs().max()) <= 0.2 + 1e-6
    assert float((m.logits(adv, T).argmax(-1) == yte).float().mean()) < 0.2
    assert torch.equal(pgd_linf(m, xte, yte, T, 0.0), xte)
    assert fgsm(m, xte, yte, T, 0.1).shape == xte.shape
    with pytest.raises(ValueError, match=r"inputs in \[0, 1\]"):
        pgd_linf(m, xte * 2, yte, T, 0.1)
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        fgsm(m, xte, yte, T, -0.1)
    with pytest.raises(ValueError, match="steps must be an integer >= 1, got 0"):
        pgd_linf(m, xte, yte, T, 0.1, steps=0)
    with pytest.raises(ValueError, match=r"raw prompt embeddings \(K, 384\)"):
        m.logits(xte, m.encode_text_embeddings(T))


def test_review_findings():
    from icml25.topo_detect import TopologicalMMD

    # chunk sizes between chunk_size and 2 chunk_size (a short last chunk joins the previous one)
    for n, c in ((60, 50), (55, 50), (7, 5)):
        s = sample_signatures(torch.randn(n, 8), torch.randn(n, 8), chunk_size=c)
        assert s.shape == (n, 2) and s.dtype == torch.float32
    test = TopologicalMMD(
        [lambda z: z], lambda z, g: sample_signatures(z, z, generator=g), n_perm=20
    )
    test.test(torch.randn(30, 4), torch.randn(30, 4), generator=torch.Generator().manual_seed(0))
    # empty diagrams keep the autograd link (a zero gradient)
    X = torch.randn(4, 3, requires_grad=True)
    tp_loss(X, torch.randn(4, 3), dims=(1,)).backward()
    assert X.grad is not None and float(X.grad.abs().max()) == 0.0
    Z = torch.zeros(8, 3, requires_grad=True)
    mk_loss(Z, torch.randn(8, 3)).backward()
    assert bool(torch.isfinite(Z.grad).all())
    K = torch.eye(60, dtype=D)
    K[0, 1] = math.nan
    with pytest.raises(ValueError, match="non-finite"):
        permutation_test(K, 30, 50)
    A = torch.rand(5, 5, dtype=D)
    A.fill_diagonal_(0)
    with pytest.raises(ValueError, match="symmetric"):
        vr_diagrams(A, precomputed=True)
    with pytest.raises(ValueError, match="zero diagonal"):
        vr_diagrams(torch.ones(4, 4), precomputed=True)
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        sample_signatures(torch.randn(10, 3), torch.randn(10, 3), alpha=0.0)
    with pytest.raises(ValueError, match="text_emb has non-finite"):
        sample_signatures(torch.randn(10, 3), torch.full((10, 3), math.nan))
    with pytest.raises(ValueError, match="no dimension"):
        tp_loss(vr_diagrams(_cloud(10, 3), max_dim=0), vr_diagrams(_cloud(10, 3), max_dim=0))
    with pytest.raises(ValueError, match=r"shape \(k, 2\)"):
        multiscale_kernel(torch.rand(5, 3), torch.rand(4, 3), 0.1)
    bad = TopologicalMMD([], lambda z, g: torch.zeros(3, 2), n_perm=20)
    with pytest.raises(ValueError, match="one row per pooled sample"):
        bad.test(torch.randn(10, 2), torch.randn(10, 2))


def test_hf_clip_adapter_on_a_tiny_random_clip():
    """The real-encoder path with a tiny random-init CLIPModel (no hub): embeddings are
    normalised, PGD runs through the adapter in pixel units, and the TP loss is differentiable
    through the image tower."""
    transformers = pytest.importorskip("transformers")
    from icml25.topo_detect import HFCLIPAdapter
    from icml25.topo_detect.attacks import pgd_linf

    cfg = transformers.CLIPConfig(
        text_config=dict(
            hidden_size=32,
            intermediate_size=37,
            num_attention_heads=4,
            num_hidden_layers=2,
            vocab_size=99,
            max_position_embeddings=16,
            eos_token_id=2,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=37,
            num_attention_heads=4,
            num_hidden_layers=2,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=16,
    )
    torch.manual_seed(0)
    adapter = HFCLIPAdapter(transformers.CLIPModel(cfg))
    x = torch.rand(6, 3, 40, 40, generator=torch.Generator().manual_seed(0))  # resized inside
    e = adapter.encode_image(x)
    assert e.shape == (6, 16) and torch.allclose(e.norm(dim=-1), torch.ones(6), atol=1e-5)
    T = torch.nn.functional.normalize(
        torch.randn(3, 16, generator=torch.Generator().manual_seed(1)), dim=-1
    )
    labels = adapter.logits(x, T).argmax(-1)
    adv = pgd_linf(
        adapter, x, labels, T, 8 / 255, steps=3, generator=torch.Generator().manual_seed(2)
    )
    assert float((adv - x).abs().max()) <= 8 / 255 + 1e-6
    xg = x.clone().requires_grad_(True)
    tp_loss(adapter.encode_image(xg), T[labels]).backward()
    assert bool(torch.isfinite(xg.grad).all())
    with pytest.raises(ValueError, match="needs the processor"):
        adapter.encode_text(["a photo"])
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        adapter.encode_image(torch.rand(2, 32, 32))


def test_review_findings_on_losses_signatures_and_attacks():
    x = torch.randn(1, 3, dtype=torch.float64, requires_grad=True)
    Y = torch.randn(10, 3, dtype=torch.float64)
    for fn in (lambda: mk_loss(x, Y), lambda: mk_loss(x, Y, reduction="kernel")):
        v = fn()
        (g,) = torch.autograd.grad(v, x)  # one point: empty diagrams, still in the graph
        assert torch.equal(g, torch.zeros_like(g))
    with pytest.raises(ValueError, match="alpha must be a finite number > 0, got inf"):
        tp_loss(Y, Y, alpha=float("inf"))
    with pytest.raises(TypeError, match="alpha must be a finite number > 0"):
        tp_loss(Y, Y, alpha="1")
    with pytest.raises(TypeError, match=r"dims must be a tuple of homology dimensions, e\.g\."):
        tp_loss(Y, Y, dims=1)
    with pytest.raises(ValueError, match="must not repeat"):
        tp_loss(Y, Y, dims=(0, 0))
    with pytest.raises(ValueError, match=r"dims must be an integer in \[0, 2\], got 5"):
        sample_signatures(Y, Y, dims=(5,))
    with pytest.raises(ValueError, match="at least 1 point"):
        tp_loss(Y[:0], Y)
    with pytest.raises(TypeError, match=r"unknown keyword\(s\) \['bogus'\]"):
        sample_signatures(Y, Y, bogus=3)
    with pytest.raises(ValueError, match="alpha must be a finite number > 0"):
        TopologicalContrastiveLoss("tp", alpha=-1)
    with pytest.raises(ValueError, match="NaN"):
        multiscale_kernel(torch.tensor([[0.0, math.nan]]), torch.tensor([[0.0, 1.0]]), 0.1)
    with pytest.raises(ValueError, match="size must be an integer >= 1, got 0"):
        chunks(10, 0, None)
