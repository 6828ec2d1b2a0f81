"""Issue 49 review: negative codes in the top-k index set."""

import torch

from icml25.fpo.losses import feature_discrepancy, top_k_active


def test_a_negative_code_is_active_and_ranked_by_size():
    x = torch.tensor([[-5.0, 0.0, 0.0, 0.0]])
    assert top_k_active(x, 2).tolist() == [[True, False, False, False]]
    # Eq. 10 with I = {0}: (1/k) (pol_0 - ref_0)^2 = 25 / 2
    d = feature_discrepancy(x, torch.zeros(1, 4), k=2)
    assert float(d) == 12.5
    # for non-negative codes the ranking is the usual one
    y = torch.tensor([[3.0, 1.0, 2.0, 0.0]])
    assert top_k_active(y, 2).tolist() == [[True, False, True, False]]
    assert top_k_active(torch.tensor([[-3.0, 1.0, 2.0, 0.0]]), 2).tolist() == [
        [True, False, True, False]
    ]
