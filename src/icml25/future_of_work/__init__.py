"""Paper 07 (arXiv:2504.13959), a position paper: interpretation tools for its proposals.

Interpretation tool; the paper does not specify this mechanism. It argues for collective
licensing with fair compensation for training data and for treating AI's labour-market effects
as a safety issue; this package offers a collective-licensing royalty pool (exact cents), group
data valuation (leave-one-out, Shapley, Banzhaf) to drive attribution-based pay, inequality
measures, and the task-based automation model of Acemoglu and Restrepo.
"""

from icml25.future_of_work._checks import DISCLAIMER
from icml25.future_of_work.inequality import gini, lorenz, theil, top_share
from icml25.future_of_work.licensing import (
    RULES,
    CollectiveLicensingPool,
    FeeRule,
    Flat,
    Hybrid,
    Licensee,
    PerUnit,
    RevenueShare,
    Work,
    largest_remainder,
)
from icml25.future_of_work.tasks_model import TaskModel, household_incomes, simulate_path
from icml25.future_of_work.valuation import (
    MAX_EXACT,
    GroupUtility,
    Valuation,
    banzhaf_exact,
    banzhaf_msr,
    gradient_attribution,
    loo,
    shapley_exact,
    shapley_tmc,
    utility_table,
)

__all__ = [
    "DISCLAIMER",
    "MAX_EXACT",
    "RULES",
    "CollectiveLicensingPool",
    "FeeRule",
    "Flat",
    "GroupUtility",
    "Hybrid",
    "Licensee",
    "PerUnit",
    "RevenueShare",
    "TaskModel",
    "Valuation",
    "Work",
    "banzhaf_exact",
    "banzhaf_msr",
    "gini",
    "gradient_attribution",
    "household_incomes",
    "largest_remainder",
    "loo",
    "lorenz",
    "shapley_exact",
    "shapley_tmc",
    "simulate_path",
    "theil",
    "top_share",
    "utility_table",
]
