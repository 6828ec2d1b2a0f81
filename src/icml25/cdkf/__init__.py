"""Continuous-discrete Kalman filtering with optimised Poisson measurement rates (Al Ahdab, Leth,
Tan, ICML 2025, arXiv:2507.11240). Work in progress: the models, the filter, the covariance bound
and the deterministic scheduler are here; the rate optimiser and the reproduction are not yet."""

from icml25.cdkf.bound import covariance_bound, information_lower_bound
from icml25.cdkf.filter import ContinuousDiscreteKF, joseph_update
from icml25.cdkf.schedule import RateSchedule, deterministic_schedule, sample_poisson_times
from icml25.cdkf.ssm import LinearSDE, Sensor, matern_kernel, matern_ssm, sum_ssm, van_loan

__all__ = [
    "ContinuousDiscreteKF",
    "LinearSDE",
    "RateSchedule",
    "Sensor",
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
