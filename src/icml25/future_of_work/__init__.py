"""Paper 07 (arXiv:2504.13959), a position paper: interpretation tools for its proposals.

Interpretation tool; the paper does not specify this mechanism. It argues for collective
licensing with fair compensation for training data and for treating AI's labour-market effects
as a safety issue; this package offers a collective-licensing royalty pool (exact cents), group
data valuation (leave-one-out, Shapley, Banzhaf) to drive attribution-based pay, inequality
measures (``icml25.future_of_work.inequality``), and the task-based automation model of Acemoglu
and Restrepo.
"""

from icml25._moved import moved as _moved
from icml25.future_of_work._checks import DISCLAIMER
from icml25.future_of_work.licensing import (
    CollectiveLicensingPool,
    FeeRule,
    Flat,
    Hybrid,
    Licensee,
    PerUnit,
    RevenueShare,
    Work,
)
from icml25.future_of_work.tasks_model import TaskModel, simulate_path
from icml25.future_of_work.valuation import (
    GroupUtility,
    Valuation,
    banzhaf_exact,
    banzhaf_msr,
    gradient_attribution,
    loo,
    shapley_exact,
    shapley_tmc,
)

__all__ = [
    "DISCLAIMER",
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
    "gradient_attribution",
    "loo",
    "shapley_exact",
    "shapley_tmc",
    "simulate_path",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "MAX_EXACT": "valuation",
        "RULES": "licensing",
        "gini": "inequality",
        "household_incomes": "tasks_model",
        "largest_remainder": "licensing",
        "lorenz": "inequality",
        "theil": "inequality",
        "top_share": "inequality",
        "utility_table": "valuation",
    },
)
