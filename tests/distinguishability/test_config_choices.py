"""DistQConfig's and CurveConfig's string choices are typed as ``Literal`` with exactly the values
that the functions they feed (:func:`select_dq`, :func:`dq_scores`, :class:`RewardLearner`)
accept."""

from __future__ import annotations

from typing import get_args, get_type_hints

import pytest
import torch

from icml25.distinguishability.experiment import CurveConfig
from icml25.distinguishability.learner import RewardLearner
from icml25.distinguishability.reward_model import RewardEnsemble
from icml25.distinguishability.rl import DistQConfig
from icml25.distinguishability.segments import SegmentBuffer
from icml25.distinguishability.selection import dq_scores, select_dq


def test_distq_choices_are_typed_as_the_values_they_accept():
    hints = get_type_hints(DistQConfig)
    dq_hints = get_type_hints(select_dq)
    assert get_args(hints["rule"]) == get_args(dq_hints["rule"]) == ("filter", "weighted")
    infos = get_args(get_type_hints(dq_scores)["informativeness_kind"])
    assert get_args(hints["informativeness"]) == get_args(dq_hints["informativeness"]) == infos
    likelihoods = get_args(get_type_hints(RewardLearner.__init__)["likelihood"])
    assert get_args(hints["likelihood"]) == likelihoods
    assert get_args(get_type_hints(CurveConfig)["likelihood"]) == likelihoods

    g = torch.Generator().manual_seed(0)
    obs, act = torch.randn(12, 5, 2, generator=g), torch.randn(12, 5, 1, generator=g)
    buf = SegmentBuffer(obs, act, obs[..., 0])
    torch.manual_seed(0)
    ens = RewardEnsemble(2, 1, hidden=8, n_layers=1)
    for rule in get_args(hints["rule"]):
        assert len(select_dq(ens, buf, 2, rule=rule, rng=0)) == 2
    with pytest.raises(ValueError, match="rule must be"):
        select_dq(ens, buf, 2, rule="other", rng=0)
    ret = torch.randn(2, 3, 4, generator=g)
    for kind in infos:
        assert dq_scores(ret, informativeness_kind=kind)[0].shape == (3,)
    with pytest.raises(ValueError, match="informativeness must be"):
        dq_scores(ret, informativeness_kind="other")
    for likelihood in likelihoods:
        assert RewardLearner(ens, likelihood=likelihood).likelihood == likelihood
    with pytest.raises(ValueError, match="likelihood must be"):
        RewardLearner(ens, likelihood="other")
