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

from icml25.distinguishability.learner import RewardLearner
from icml25.distinguishability.queries import (
    AnswerBuffer,
    DistinguishabilityQuery,
    DQAnswer,
    PairwiseQuery,
    PCQAnswer,
)
from icml25.distinguishability.reward_model import (
    RewardEnsemble,
    dq_answer_probs,
    dq_loss,
    pcq_loss,
)
from icml25.distinguishability.segments import SegmentBuffer, collect_segments, pendulum_policy
from icml25.distinguishability.selection import dq_scores, select_dq, select_pcq
from icml25.distinguishability.teachers import CallbackTeacher, ScriptedTeacher, Teacher
from icml25.distinguishability.utility import (
    fit_utilities,
    lottery_choice_accuracy,
    sample_lotteries,
)

__all__ = [
    "AnswerBuffer",
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
    "collect_segments",
    "dq_answer_probs",
    "dq_loss",
    "dq_scores",
    "fit_utilities",
    "lottery_choice_accuracy",
    "pcq_loss",
    "pendulum_policy",
    "sample_lotteries",
    "select_dq",
    "select_pcq",
]
