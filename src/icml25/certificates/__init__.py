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

from icml25._moved import moved as _moved
from icml25.certificates.baselines import DTCBFFilter
from icml25.certificates.certificate import SafetyCertificate, candidate_filter
from icml25.certificates.cmdp import OfflineDataset, TabularConfoundedMDP
from icml25.certificates.envs import make_confounded_driving
from icml25.certificates.qfunctions import FrontDoorFQE, NaiveFQE, NeuralFrontDoorFQE, SafetyQ

__all__ = [
    "DTCBFFilter",
    "FrontDoorFQE",
    "NaiveFQE",
    "NeuralFrontDoorFQE",
    "OfflineDataset",
    "SafetyCertificate",
    "SafetyQ",
    "TabularConfoundedMDP",
    "candidate_filter",
    "make_confounded_driving",
]

try:  # the gymnasium environment needs the rl extra
    from icml25.certificates.gym_env import ConfoundedDrivingEnv  # noqa: F401

    __all__.append("ConfoundedDrivingEnv")
except ImportError:  # pragma: no cover - gymnasium absent
    pass

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "AuxDataset": "data",
        "ConfoundedDrivingConfig": "envs",
        "NominalController": "baselines",
        "RolloutResult": "cmdp",
        "StateCodec": "envs",
        "build_auxiliary_dataset": "data",
        "exact_closed_loop_safety": "evaluate",
        "exact_safety_q": "qfunctions",
        "fit_aux_regression": "data",
        "monte_carlo_safety": "evaluate",
        "offline_kernel": "baselines",
        "progress": "evaluate",
        "risk_policy": "qfunctions",
        "safety_barrier": "envs",
        "velocities": "envs",
    },
)
