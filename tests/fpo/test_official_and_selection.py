"""Issue 49: ``paper_mode=False`` computes the official code's FeatureAlignment discrepancy
(codes at the shifted label positions, divided by T - 1), the top-k index set does not depend on
the feature numbering, and numbers come as numpy scalars too."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from icml25.fpo import PreferenceCollator, PreferenceConfig
from icml25.fpo.losses import feature_discrepancy, pool_codes
from icml25.fpo.trainer import preference_step_loss


def _official_d(pol_h, ref_h, labels, k):
    """The official ``fpo_get_batch_logps`` feature term written as loops: for each row, sum the
    codes at positions t < T - 1 whose next label is a response token, divide by T - 1, take the
    policy's k largest features and average the squared differences over those k."""
    B, T, m = pol_h.shape
    out = []
    for b in range(B):
        sp, sr = [0.0] * m, [0.0] * m
        for t in range(T - 1):
            if int(labels[b, t + 1]) != -100:
                for i in range(m):
                    sp[i] += float(pol_h[b, t, i])
                    sr[i] += float(ref_h[b, t, i])
        sp = [x / (T - 1) for x in sp]
        sr = [x / (T - 1) for x in sr]
        top = sorted(range(m), key=lambda i: -sp[i])[:k]
        out.append(sum((sr[i] - sp[i]) ** 2 for i in top) / k)
    return out


def _hand_batch():
    # two rows, T = 5: row 0 has a 2-token prompt and 3 response tokens; row 1 a 1-token prompt,
    # 2 response tokens and 2 padding positions
    labels = torch.tensor([[-100, -100, 7, 8, 9], [-100, 4, 5, -100, -100]])
    g = torch.Generator().manual_seed(3)
    pol = torch.rand(2, 5, 6, generator=g, dtype=torch.float64) + 0.1  # all features active
    ref = torch.rand(2, 5, 6, generator=g, dtype=torch.float64) + 0.1
    return pol, ref, labels


def test_official_pooling_equals_the_official_loop_on_a_hand_built_batch():
    pol, ref, labels = _hand_batch()
    mask = labels != -100
    k = 3
    got = feature_discrepancy(
        pool_codes(pol, mask, "official"), pool_codes(ref, mask, "official"), k, "policy"
    )
    want = _official_d(pol, ref, labels, k)
    assert got.tolist() == pytest.approx(want, rel=1e-12)
    # the earlier "padded_mean" (response positions / T) is a different number on this batch
    old = feature_discrepancy(
        pool_codes(pol, mask, "padded_mean"), pool_codes(ref, mask, "padded_mean"), k, "policy"
    )
    assert abs(float(old[0]) - want[0]) > 1e-3


def test_paper_mode_false_step_equals_the_official_computation(toy, toy_sae):
    """The whole ``paper_mode=False`` path (online reference, hidden_states of the last block,
    policy top-k, official pooling) against the loop above on the models' own hidden states."""
    tok, model, recs = toy
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    k = 4  # below the SAE's k_sae = 6 active features per token: no zero is ever selected
    cfg = PreferenceConfig(method="fpo", layer=1, k=k, paper_mode=False, progress=False)
    assert cfg.pool == "official"
    batch = PreferenceCollator(tok)(recs[:4])
    _, logs = preference_step_loss(model, batch, cfg, sae=toy_sae, ref_model=ref)
    ds = []
    with torch.no_grad():
        hs = []
        for mdl in (model, ref):
            out = mdl(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                output_hidden_states=True,
            )
            hs.append(toy_sae.encode(out.hidden_states[-1].float()).double())
        ds = _official_d(hs[0], hs[1], batch["labels"], k)
    n = len(ds) // 2
    assert logs["d_w"] == pytest.approx(np.mean(ds[:n]), rel=1e-4)
    assert logs["d_l"] == pytest.approx(np.mean(ds[n:]), rel=1e-4)


def test_official_pooling_of_a_row_without_a_shifted_position_is_refused():
    with pytest.raises(ValueError, match="example 0 has no response token after its first"):
        pool_codes(torch.ones(1, 3, 2), torch.tensor([[1, 0, 0]]), "official")


@pytest.mark.parametrize("mode", ["union", "policy"])
def test_discrepancy_does_not_depend_on_the_feature_numbering(mode):
    # fewer than k active features on both sides: torch.topk filled the set with zeros by index
    g = torch.Generator().manual_seed(0)
    m, k = 12, 5
    pol = torch.zeros(3, m, dtype=torch.float64)
    ref = torch.zeros(3, m, dtype=torch.float64)
    pol[:, [1, 4]] = torch.rand(3, 2, generator=g, dtype=torch.float64) + 0.5
    ref[:, [2, 4, 9, 10, 11]] = torch.rand(3, 5, generator=g, dtype=torch.float64) + 0.5
    ref[:, 3] = 0.01  # active on the reference, outside its top-k
    base = feature_discrepancy(pol, ref, k, mode)
    for seed in range(5):
        perm = torch.randperm(m, generator=torch.Generator().manual_seed(seed))
        got = feature_discrepancy(pol[:, perm], ref[:, perm], k, mode)
        assert torch.allclose(got, base, rtol=0, atol=1e-15)
    # only active features count: the policy's set is {1, 4}
    if mode == "policy":
        want = ((pol[:, [1, 4]] - ref[:, [1, 4]]) ** 2).sum(1) / k
        assert torch.allclose(base, want)


def test_ties_at_the_kth_value_are_all_included():
    pol = torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0]])
    ref = torch.zeros_like(pol)
    # k = 2: 3 and both 2's (tied at the k-th value), never 1 or the zero
    assert float(feature_discrepancy(pol, ref, 2, "policy")) == pytest.approx((9 + 4 + 4) / 2)


def test_numpy_scalars_are_accepted_with_the_same_result():
    from icml25.fpo import fpo_loss

    g = torch.Generator().manual_seed(1)
    v = [torch.randn(3, generator=g) for _ in range(4)]
    c = [torch.rand(3, 10, generator=g) for _ in range(4)]
    a = fpo_loss(*v, *c, beta=0.1, alpha=0.5, k=4)
    b = fpo_loss(*v, *c, beta=np.float32(0.1), alpha=np.float64(0.5), k=np.int64(4))
    assert torch.allclose(a.losses, b.losses, rtol=1e-6)
    cfg = PreferenceConfig(beta=np.float32(0.1), alpha=np.float64(0.5), k=np.int32(8))
    assert (type(cfg.beta), type(cfg.k)) == (float, int)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.5])
def test_config_refuses_a_bad_alpha_at_construction(bad):
    with pytest.raises(ValueError, match=f"alpha must be a finite number >= 0, got {bad}"):
        PreferenceConfig(alpha=bad)
