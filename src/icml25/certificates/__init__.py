"""Safety certificates against latent variables (Jing & Nakahira, ICML 2025, arXiv:2506.17927).

Learn the interventional long-term safety value from confounded offline data by front-door
causal RL, then filter any nominal policy through the certificate ``Q(x, k, u) >= E_pi Q(x, k, .)``:

    >>> from icml25.certificates import FrontDoorFQE, SafetyCertificate, make_confounded_driving
    >>> mdp, codec = make_confounded_driving()
    >>> data = mdp.sample_offline(10_000, 10)              # or OfflineDataset(x, u, m, x_next)
    >>> q = FrontDoorFQE(horizon=10, safe=mdp.safe).fit(data)
    >>> cert = SafetyCertificate(q, eps=0.2, action_values=(-3, -2, -1, 0, 1))
    >>> u, info = cert.filter(codec.encode(0, 0), t=0, u_nominal=4)
"""

from icml25.certificates.baselines import DTCBFFilter, NominalController, offline_kernel
from icml25.certificates.certificate import SafetyCertificate, candidate_filter
from icml25.certificates.cmdp import OfflineDataset, RolloutResult, TabularConfoundedMDP
from icml25.certificates.data import AuxDataset, build_auxiliary_dataset, fit_aux_regression
from icml25.certificates.envs import (
    ConfoundedDrivingConfig,
    StateCodec,
    make_confounded_driving,
    safety_barrier,
    velocities,
)
from icml25.certificates.evaluate import exact_closed_loop_safety, monte_carlo_safety, progress
from icml25.certificates.qfunctions import (
    FrontDoorFQE,
    NaiveFQE,
    NeuralFrontDoorFQE,
    SafetyQ,
    exact_safety_q,
    risk_policy,
)

__all__ = [
    "AuxDataset",
    "ConfoundedDrivingConfig",
    "DTCBFFilter",
    "FrontDoorFQE",
    "NaiveFQE",
    "NeuralFrontDoorFQE",
    "NominalController",
    "OfflineDataset",
    "RolloutResult",
    "SafetyCertificate",
    "SafetyQ",
    "StateCodec",
    "TabularConfoundedMDP",
    "build_auxiliary_dataset",
    "candidate_filter",
    "exact_closed_loop_safety",
    "exact_safety_q",
    "fit_aux_regression",
    "make_confounded_driving",
    "monte_carlo_safety",
    "offline_kernel",
    "progress",
    "risk_policy",
    "safety_barrier",
    "velocities",
]

try:  # the gymnasium environment needs the rl extra
    from icml25.certificates.gym_env import ConfoundedDrivingEnv  # noqa: F401

    __all__.append("ConfoundedDrivingEnv")
except ImportError:  # pragma: no cover - gymnasium absent
    pass
