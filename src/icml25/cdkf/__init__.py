"""Continuous-discrete Kalman filtering with optimised Poisson measurement rates (Al Ahdab, Leth,
Tan, ICML 2025, arXiv:2507.11240).

    >>> problem = SchedulingProblem(sde, sensors, T=10.0, K=20, budget=12.0)
    >>> solution = problem.solve()            # rates through the bound of Prop. 6.1 (SLSQP)
    >>> times = solution.schedule()           # deterministic time stamps per sensor (Prop. 8.1)

The filter (``ContinuousDiscreteKF``), the bound (``covariance_bound``) and the optimiser are
separate public pieces, the scheduler is ``icml25.cdkf.schedule``; ``ControlledSchedulingProblem``
adds an auxiliary state (energy, a robot) and its control."""

from icml25._moved import moved as _moved
from icml25.cdkf.aux import AuxiliaryModel, distance_noise, energy_model, robot_energy_model
from icml25.cdkf.baselines import kalman_bucy_relaxation
from icml25.cdkf.bound import covariance_bound
from icml25.cdkf.control import ControlledSchedulingProblem
from icml25.cdkf.filter import ContinuousDiscreteKF
from icml25.cdkf.ocp import SchedulingProblem, Solution
from icml25.cdkf.schedule import RateSchedule
from icml25.cdkf.ssm import LinearSDE, NumericalError, Sensor, matern_ssm

__all__ = [
    "NumericalError",
    "AuxiliaryModel",
    "ControlledSchedulingProblem",
    "ContinuousDiscreteKF",
    "distance_noise",
    "energy_model",
    "kalman_bucy_relaxation",
    "robot_energy_model",
    "LinearSDE",
    "RateSchedule",
    "SchedulingProblem",
    "Sensor",
    "Solution",
    "covariance_bound",
    "matern_ssm",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "deterministic_schedule": "schedule",
        "from_filterpy": "interop",
        "greedy_schedule": "baselines",
        "information_lower_bound": "bound",
        "joseph_update": "filter",
        "m_optimized": "baselines",
        "matern_kernel": "ssm",
        "mean_aux_bound": "aux",
        "mean_aux_jacobian": "aux",
        "monte_carlo_covariance": "evaluate",
        "project_budget": "solvers",
        "sample_poisson_times": "schedule",
        "schedule_trace": "evaluate",
        "simulate_and_filter": "evaluate",
        "sum_ssm": "ssm",
        "to_filterpy": "interop",
        "uniform_periodic": "baselines",
        "uniform_rates": "baselines",
        "van_loan": "ssm",
    },
)
