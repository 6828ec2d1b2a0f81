"""Continuous-discrete Kalman filtering with optimised Poisson measurement rates (Al Ahdab, Leth,
Tan, ICML 2025, arXiv:2507.11240).

    >>> problem = SchedulingProblem(sde, sensors, T=10.0, K=20, budget=12.0)
    >>> solution = problem.solve()            # rates through the bound of Prop. 6.1 (SLSQP)
    >>> times = solution.schedule()           # deterministic time stamps per sensor (Prop. 8.1)

The filter, the bound, the optimiser and the scheduler are separate public pieces;
``ControlledSchedulingProblem`` adds an auxiliary state (energy, a robot) and its control."""

from icml25.cdkf.aux import (
    AuxiliaryModel,
    distance_noise,
    energy_model,
    mean_aux_bound,
    mean_aux_jacobian,
    robot_energy_model,
)
from icml25.cdkf.baselines import (
    greedy_schedule,
    kalman_bucy_relaxation,
    m_optimized,
    uniform_periodic,
    uniform_rates,
)
from icml25.cdkf.bound import covariance_bound, information_lower_bound
from icml25.cdkf.control import ControlledSchedulingProblem
from icml25.cdkf.evaluate import monte_carlo_covariance, schedule_trace, simulate_and_filter
from icml25.cdkf.filter import ContinuousDiscreteKF, joseph_update
from icml25.cdkf.interop import from_filterpy, to_filterpy
from icml25.cdkf.ocp import SchedulingProblem, Solution
from icml25.cdkf.schedule import RateSchedule, deterministic_schedule, sample_poisson_times
from icml25.cdkf.solvers import project_budget
from icml25.cdkf.ssm import (
    LinearSDE,
    NumericalError,
    Sensor,
    matern_kernel,
    matern_ssm,
    sum_ssm,
    van_loan,
)

__all__ = [
    "NumericalError",
    "AuxiliaryModel",
    "ControlledSchedulingProblem",
    "ContinuousDiscreteKF",
    "distance_noise",
    "energy_model",
    "from_filterpy",
    "greedy_schedule",
    "kalman_bucy_relaxation",
    "m_optimized",
    "mean_aux_bound",
    "mean_aux_jacobian",
    "project_budget",
    "robot_energy_model",
    "to_filterpy",
    "uniform_periodic",
    "uniform_rates",
    "LinearSDE",
    "RateSchedule",
    "SchedulingProblem",
    "Sensor",
    "Solution",
    "monte_carlo_covariance",
    "schedule_trace",
    "simulate_and_filter",
    "covariance_bound",
    "deterministic_schedule",
    "information_lower_bound",
    "joseph_update",
    "matern_kernel",
    "matern_ssm",
    "sample_poisson_times",
    "sum_ssm",
    "van_loan",
]
