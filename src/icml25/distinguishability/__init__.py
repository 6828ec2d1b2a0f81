"""Distinguishability queries for preference-based RL (Feng, Jiang, Kaufmann, Huellermeier, Weng,
Zhu, ICML 2025, "Comparing Comparisons", DistQ).

    >>> ens = RewardEnsemble(obs_dim, act_dim)
    >>> queries = select_dq(ens, segments, 10)                 # DistQ: informative, then easy
    >>> answers = ScriptedTeacher.preset("oracle").answer_dq(segments, queries)   # or a human
    >>> learner = RewardLearner(ens); learner.add(queries, answers); learner.train(segments)

A labeler first says which of two pairs of segments is easier to distinguish, then which segment
of that pair is better. Reward models, selection schemes and teachers are separate pieces; the
PEBBLE loop is :class:`icml25.distinguishability.rl.PreferenceRL`, and
:mod:`icml25.distinguishability.sb3` runs the feedback rounds inside any Stable-Baselines3
``model.learn``.
"""

from icml25._moved import moved as _moved
from icml25.distinguishability.learner import RewardLearner
from icml25.distinguishability.queries import (
    DistinguishabilityQuery,
    DQAnswer,
    PairwiseQuery,
    PCQAnswer,
)
from icml25.distinguishability.reward_model import RewardEnsemble
from icml25.distinguishability.segments import SegmentBuffer
from icml25.distinguishability.selection import select_dq, select_pcq
from icml25.distinguishability.teachers import CallbackTeacher, ScriptedTeacher, Teacher

__all__ = [
    "CallbackTeacher",
    "DQAnswer",
    "DistinguishabilityQuery",
    "PCQAnswer",
    "PairwiseQuery",
    "RewardEnsemble",
    "RewardLearner",
    "ScriptedTeacher",
    "SegmentBuffer",
    "Teacher",
    "select_dq",
    "select_pcq",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "AnswerBuffer": "queries",
        "collect_segments": "segments",
        "dq_answer_probs": "reward_model",
        "dq_loss": "reward_model",
        "dq_scores": "selection",
        "fit_utilities": "utility",
        "lottery_choice_accuracy": "utility",
        "pcq_loss": "reward_model",
        "pendulum_policy": "segments",
        "sample_lotteries": "utility",
    },
)
