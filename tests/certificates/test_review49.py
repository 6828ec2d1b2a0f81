"""Issue 49 review: a nominal far outside the box."""

import torch

from icml25.certificates import candidate_filter


def test_a_far_nominal_still_gets_the_closest_certified_candidate():
    seen = []

    def margin(u):
        seen.append(u.clone())
        return 0.5 - (u**2).sum(-1)

    for nominal, pick in ((1e300, max), (-1e300, min), (1e308, max)):
        seen.clear()
        u, info = candidate_filter(
            lambda u: -(u**2).sum(-1),
            margin,
            torch.tensor([nominal], dtype=torch.float64),
            -1.0,
            1.0,
            n_candidates=16,
            generator=torch.Generator().manual_seed(0),
        )
        cand = seen[0][:, 0]
        certified = cand[0.5 - cand**2 >= 0]
        assert not info["fallback"] and float(u[0]) == float(pick(certified))
    # a nominal inside the box: the closest certified candidate, as before
    seen.clear()
    u, _ = candidate_filter(
        lambda u: -(u**2).sum(-1),
        margin,
        torch.tensor([0.3], dtype=torch.float64),
        -1.0,
        1.0,
        n_candidates=16,
    )
    assert float(u[0]) == 0.3
