"""Losses (test 16), baselines (test 14), torchsort cross-check (test 15), O(n) memory (test 9)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from icml25.lapsum import baselines, soft_rank, soft_sort, soft_topk, spearman_corr
from icml25.lapsum.bench import saved_bytes, time_fwd_bwd
from icml25.lapsum.functional import permutation_cross_entropy
from icml25.lapsum.losses import (
    KNNTopKLoss,
    PermutationCrossEntropyLoss,
    SoftRank,
    SoftSort,
    SoftTopK,
    TopKCrossEntropyLoss,
)


def test_topk_ce_with_p1_equals_cross_entropy():
    logits, labels = torch.randn(16, 10), torch.randint(10, (16,))
    loss = TopKCrossEntropyLoss(p_k=[1, 0, 0, 0, 0], top1_mode="smce")(logits, labels)
    torch.testing.assert_close(loss, nn.CrossEntropyLoss()(logits, labels))


def test_topk_ce_k_at_least_c_is_refused():
    """k >= C is always satisfied: a p_k with all its mass there would train nothing (loss 0,
    no gradient), so it is an error rather than a silent zero."""
    logits, labels = torch.randn(4, 3), torch.randint(3, (4,))
    with pytest.raises(ValueError, match="all its mass on k >= C = 3"):
        TopKCrossEntropyLoss(p_k=[0, 0, 0, 0, 1])(logits, labels)  # k = 5 >= C = 3


@pytest.mark.parametrize("mode", ["smce", "sm", "lapsum"])
def test_topk_ce_trains_a_linear_model(mode):
    torch.manual_seed(0)
    x, y = torch.randn(256, 8), torch.randint(20, (256,))
    model = nn.Linear(8, 20)
    loss_fn = TopKCrossEntropyLoss(p_k=[0.2, 0, 0, 0, 0.8], alpha=1.0, top1_mode=mode)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_learnable_alpha_gets_a_gradient():
    knn = KNNTopKLoss(k=3, alpha=0.5, learn_alpha=True)
    q, c = torch.randn(4, 5, requires_grad=True), torch.randn(12, 5)
    knn(q, c, torch.randint(3, (4,)), torch.randint(3, (12,))).backward()
    assert knn.log_alpha.grad is not None and torch.isfinite(knn.log_alpha.grad)
    perm = PermutationCrossEntropyLoss(alpha=2.0, learn_alpha=True)
    scores = torch.randn(3, 6, requires_grad=True)
    perm(scores, torch.stack([torch.randperm(6) for _ in range(3)])).backward()
    assert perm.log_alpha.grad is not None and float(perm.log_alpha.grad) != 0.0
    for mod in (
        SoftTopK(2, learn_alpha=True),
        SoftRank(learn_alpha=True),
        SoftSort(learn_alpha=True),
    ):
        mod(torch.randn(2, 6)).sum().backward() if not isinstance(mod, SoftRank) else (
            mod(torch.randn(2, 6)).pow(2).sum().backward()
        )
    with pytest.raises(ValueError, match="alpha must be (a )?finite"):
        SoftTopK(2, alpha=0.0)


def test_spearman_is_one_for_monotone_and_differentiable():
    x = torch.randn(3, 50, dtype=torch.float64)
    assert torch.allclose(spearman_corr(x, x.exp(), alpha=1e-3), torch.ones(3, dtype=torch.float64))
    assert torch.allclose(spearman_corr(x, -x, alpha=1e-3), -torch.ones(3, dtype=torch.float64))
    p = x.clone().requires_grad_(True)
    spearman_corr(p, torch.randn(3, 50, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(p.grad).all()


def test_neuralsort_softsort_rows_sum_to_one_and_sort_when_sharp():
    s = torch.randn(2, 9, dtype=torch.float64)
    for relax in (baselines.neuralsort, baselines.softsort):
        P = relax(s, 1.0)
        torch.testing.assert_close(P.sum(-1), torch.ones(2, 9, dtype=torch.float64))
        hard = relax(s, 1e-4)
        desc = s.sort(-1, descending=True).indices
        torch.testing.assert_close(hard.argmax(-1), desc)


def test_sinkhorn_topk_sums_to_k():
    x = torch.randn(3, 40, dtype=torch.float64)
    p = baselines.sinkhorn_topk(x, 10, eps=0.01, iters=100)
    torch.testing.assert_close(
        p.sum(-1), torch.full((3,), 10.0, dtype=torch.float64), atol=1e-6, rtol=0
    )
    assert (p > -1e-2).all() and (p < 1 + 1e-2).all()


def test_torchsort_cross_check():
    if not baselines.torchsort_available():
        pytest.skip("torchsort is not installed (optional peer)")
    x = torch.stack([torch.randperm(30) for _ in range(4)]).float()  # gaps of 1 >> strength
    hard = baselines.hard_rank(x) + 1
    torch.testing.assert_close(baselines.torchsort_soft_rank(x, 1e-3), hard)
    torch.testing.assert_close(soft_rank(x, 1e-5, one_based=True), hard)


def test_torchsort_regularised_ranks_agree_in_the_linear_regime():
    """Where both define the same operator: for scores spread well below the regularisation,
    torchsort's L2 soft rank is (n + 1)/2 + (x - mean)/eps and LapSum's is (n + 1)/2 +
    n (x - mean)/(2 alpha) (Lap(z) = 1/2 + z/2 + O(z^2)), so alpha = n eps / 2 matches them."""
    if not baselines.torchsort_available():
        pytest.skip("torchsort is not installed (optional peer; `make test-all` builds it)")
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 30, generator=g, dtype=torch.float64) * 0.01
    for eps in (1.0, 3.0):
        theirs = baselines.torchsort_soft_rank(x, eps)
        ours = soft_rank(x, alpha=x.shape[-1] * eps / 2, one_based=True)
        spread = float((theirs - theirs.mean(-1, keepdim=True)).abs().max())
        assert spread > 5e-3  # the ranks are not all equal: the comparison can fail
        torch.testing.assert_close(ours, theirs, atol=spread * 2e-3, rtol=0)


def test_saved_memory_is_linear_in_n():
    n = 100_000
    x = torch.randn(1, n)
    assert saved_bytes(lambda z: soft_topk(z, n / 2), x) <= 3 * 4 * n + 4096
    assert saved_bytes(lambda z: soft_rank(z), x) <= 6 * 4 * n + 4096
    assert saved_bytes(lambda z: soft_sort(z), x) <= 6 * 4 * n + 4096
    target = torch.randperm(n)[None]
    assert saved_bytes(lambda z: permutation_cross_entropy(z, target), x) <= 6 * 4 * n + 4096
    assert saved_bytes(lambda z: baselines.neuralsort_topk(z[:, :1000], 500), x) >= 1000**2 * 4


def test_a_million_elements_run_forward_and_backward():
    # an accidental n x n intermediate would need terabytes here; this finishing is the check
    n = 2**20
    x = torch.randn(1, n)
    assert time_fwd_bwd(lambda z: soft_topk(z, n / 2), x, repeats=1, warmup=0) > 0
    assert time_fwd_bwd(lambda z: soft_rank(z), x, repeats=1, warmup=0) > 0
