"""The non-topological control features (k-NN distances, LID) against brute force, their chunks
against the topological signatures', and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from icml25.topo_detect import knn_features, sample_signatures
from icml25.topo_detect.persistence import total_persistence, vr_diagrams
from icml25.topo_detect.signatures import chunks

D = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _brute(X: torch.Tensor, kind: str, k: int, chunk_size: int, seed: int) -> torch.Tensor:
    """Double loops over each chunk of ``chunks(N, chunk_size, Generator(seed))``."""
    out = torch.zeros(len(X), 2 if kind == "knn" else 1, dtype=D)
    for idx in chunks(len(X), chunk_size, _gen(seed)):
        for i in idx.tolist():
            r = sorted(float((X[i] - X[j]).norm()) for j in idx.tolist() if j != i)[:k]
            if kind == "knn":
                out[i] = torch.tensor([r[0], sum(r) / k], dtype=D)
            else:
                out[i, 0] = -1.0 / (sum(math.log(x / r[-1]) for x in r) / k)
    return out


@pytest.mark.parametrize(("kind", "k"), [("knn", 3), ("knn", 1), ("lid", 10), ("lid", 4)])
def test_features_equal_a_double_loop_in_the_chunks(kind, k):
    X = torch.randn(130, 6, generator=_gen(0), dtype=D)
    got = knn_features(X, kind=kind, k=k, generator=_gen(5))
    assert got.shape == (130, 2 if kind == "knn" else 1) and got.dtype == D
    torch.testing.assert_close(got, _brute(X, kind, k, 50, 5), rtol=1e-10, atol=1e-12)
    if kind == "knn":
        assert bool((got[:, 0] <= got[:, 1]).all())  # the nearest is at most the mean of k


def test_the_chunks_are_the_topological_signatures_chunks():
    """Two generators in one state give both functions the same chunks: within each chunk of
    ``chunks(N, 50, g)`` the H0 column of the attribution signatures sums to the chunk's total H0
    persistence, and the 1-NN distances are the chunk's own."""
    X = torch.nn.functional.normalize(torch.randn(120, 8, generator=_gen(1), dtype=D), dim=-1)
    sig = sample_signatures(X, X, generator=_gen(9))
    knn = knn_features(X, generator=_gen(9))
    for idx in chunks(120, 50, _gen(9)):
        h0 = float(total_persistence(vr_diagrams(X[idx], max_dim=1)[0], 1.0))
        assert float(sig[idx, 0].sum()) == pytest.approx(h0, rel=1e-9)
        d = torch.cdist(X[idx], X[idx]).fill_diagonal_(math.inf)
        torch.testing.assert_close(knn[idx, 0], d.min(1).values)
    other = knn_features(X, generator=_gen(10))
    assert not torch.allclose(other, knn)  # other chunks, other neighbours


def test_invariant_to_rigid_motions_and_lid_reads_the_dimension():
    X = torch.randn(100, 5, generator=_gen(2), dtype=D)
    Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=_gen(3), dtype=D))
    for kind in ("knn", "lid"):
        a = knn_features(X, kind=kind, generator=_gen(4))
        b = knn_features(X @ Q + 3.0, kind=kind, generator=_gen(4))
        torch.testing.assert_close(a, b)
    # uniform points on a 2-D and a 6-D cube embedded in 10-D: the LID estimate follows the
    # dimension (one chunk of 600 points, k = 20)
    lids = []
    for dim in (2, 6):
        U = torch.zeros(600, 10, dtype=D)
        U[:, :dim] = torch.rand(600, dim, generator=_gen(dim), dtype=D)
        lid = knn_features(U, kind="lid", k=20, chunk_size=600, generator=_gen(0))
        lids.append(float(lid.median()))
    assert 1.5 < lids[0] < 2.6 and 4.5 < lids[1] < 7.5
    # a denser (scaled-down) cloud has smaller neighbour distances, the same LID
    torch.testing.assert_close(
        knn_features(0.5 * X, generator=_gen(4)), 0.5 * knn_features(X, generator=_gen(4))
    )


def test_dtypes_and_devices_follow_the_input():
    X = torch.randn(40, 3, generator=_gen(6))
    assert knn_features(X).dtype == torch.float32
    assert knn_features(X.double()).dtype == D
    assert knn_features(torch.randint(0, 50, (40, 3), generator=_gen(7))).dtype == torch.float32
    assert knn_features(X, kind="lid", k=5).shape == (40, 1)


@pytest.mark.gpu
def test_cuda_inputs_stay_on_the_gpu():
    X = torch.randn(60, 4, device="cuda")
    assert knn_features(X, generator=_gen(0)).device.type == "cuda"


def test_bad_input_is_refused_with_the_value():
    X = torch.randn(40, 3, generator=_gen(8))
    with pytest.raises(ValueError, match="kind must be one of"):
        knn_features(X, kind="mst")
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        knn_features(X, k=0)
    with pytest.raises(ValueError, match="chunk_size must be an integer >= 2"):
        knn_features(X, chunk_size=1)
    with pytest.raises(ValueError, match=r"fewer than k \+ 1 = 41"):
        knn_features(X, k=40)
    with pytest.raises(ValueError, match="non-finite"):
        knn_features(torch.cat([X, torch.tensor([[math.nan, 0.0, 0.0]])]))
    with pytest.raises(ValueError, match=r"\(N, d\)"):
        knn_features(torch.randn(10))
    dup = torch.cat([X[:1].repeat(12, 1), X[1:]])  # 12 copies: 11 neighbours at distance 0
    with pytest.raises(ValueError, match="LID is infinite"):
        knn_features(dup, kind="lid", k=10, chunk_size=60)
    assert bool(torch.isfinite(knn_features(dup, kind="knn", chunk_size=60)).all())
    with pytest.raises(TypeError, match="generator"):
        knn_features(X, generator=0)
