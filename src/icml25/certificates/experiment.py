"""The reproduction's experiment on ConfoundedDriving (docs/certificates.md, "Reproduction"):
the environment at one confounding strength with its exact values (:class:`Setting`), one seed's
fits and exact evaluation of every controller (:func:`run_seed`), the neural front-door fit
(:func:`neural_fit`) and full mode's sweep over confounding, data size and alpha (:func:`sweep`).
"""

from __future__ import annotations

import time

import torch

from icml25.certificates.baselines import DTCBFFilter, NominalController
from icml25.certificates.certificate import SafetyCertificate
from icml25.certificates.envs import (
    ConfoundedDrivingConfig,
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
)

__all__ = ["Setting", "empty_sets", "neural_fit", "run_seed", "sweep"]

D = torch.float64
H, EPS = 10, 0.2
MC_SIMS, MC_TRAJ = 100, 100  # the paper's 100 x 100 rollouts
ALPHAS = (0.0, 0.5, 1.0)


# -- setup ---------------------------------------------------------------------------------------
class Setting:
    """The environment at one confounding strength, its exact values and fixed baselines."""

    def __init__(self, kappa: float = 1.0, nominal=None) -> None:
        self.cfg = ConfoundedDrivingConfig(kappa=kappa)
        self.mdp, self.codec = make_confounded_driving(self.cfg)
        self.x0 = self.codec.encode(*self.cfg.x0)
        self.nominal = torch.tensor(self.cfg.nominal if nominal is None else nominal, dtype=D)
        self.values = torch.tensor(self.cfg.actions, dtype=D)
        self.h, self.vel = safety_barrier(self.cfg), velocities(self.cfg)
        Q, V = exact_safety_q(self.mdp.interventional_kernel(), self.mdp.safe, H)
        self.oracle = SafetyQ(Q, V, self.mdp.safe)
        self.v_true = float(V[H, self.x0])

    def evaluate(self, controller) -> dict:
        table = controller.table(self.nominal)
        p, curve = exact_closed_loop_safety(self.mdp, table, self.x0)
        return {
            "p_safe": p,
            "curve": curve,
            "progress": progress(self.mdp, table, self.x0, self.vel),
        }

    def certificate(self, q: SafetyQ, alpha: float = 0.0) -> SafetyCertificate:
        return SafetyCertificate(q, eps=EPS, alpha=alpha, action_values=self.values)

    def q_errors(self, q: SafetyQ) -> tuple[float, float]:
        """Largest and mean |Q_hat - Q| over safe states, k = 1..H and identified actions."""
        safe = self.mdp.safe
        err = (q.Q[1:, safe] - self.oracle.Q[1:, safe]).abs()
        err = err[~torch.isnan(err)]
        return float(err.max()), float(err.mean())


def empty_sets(cert: SafetyCertificate) -> int:
    """(t, x) pairs at safe states with no certified action."""
    ks = torch.arange(cert.H, 0, -1)
    m = cert._margins[ks][:, cert.q.safe]
    return int((~(~torch.isnan(m) & (m >= -1e-12)).any(-1)).sum())


# -- per-seed measurement ------------------------------------------------------------------------
def run_seed(st: Setting, seed: int, n_traj: int, mc: bool, alphas=(0.0,)) -> dict:
    """Fit both estimators on one seed's offline data and evaluate every controller."""
    g = torch.Generator().manual_seed(seed)
    data = st.mdp.sample_offline(n_traj, H, generator=g)
    fd = FrontDoorFQE(H, st.mdp.safe, n_actions=5, n_mediators=5).fit(data)
    naive = NaiveFQE(H, st.mdp.safe, n_actions=5).fit(data)
    out = {
        "seed": seed,
        "v_fd": fd.v(st.x0, H),
        "v_naive": naive.v(st.x0, H),
        "backoff": fd.fit_info["backoff_xmu"] + fd.fit_info["backoff_xm"],
    }
    out["err_fd"], out["err_naive"] = st.q_errors(fd), st.q_errors(naive)
    ctrls = {
        "nominal": NominalController(H, st.mdp.n_states),
        "dtcbf_offline": DTCBFFilter(data, st.h, 0.5, H, st.values),
        "dtcbf_true": DTCBFFilter(st.mdp.interventional_kernel(), st.h, 0.5, H, st.values),
    }
    for a in alphas:
        tag = "" if a == 0 else f"@{a:g}"
        ctrls["naive" + tag] = st.certificate(naive, a).as_controller()
        ctrls["front_door" + tag] = st.certificate(fd, a).as_controller()
        ctrls["oracle" + tag] = st.certificate(st.oracle, a).as_controller()
    out["eval"] = {name: st.evaluate(c) for name, c in ctrls.items()}
    out["empty"] = empty_sets(st.certificate(fd, 0.0))
    if mc:
        sim = monte_carlo_safety(
            st.mdp,
            ctrls["front_door"],
            MC_SIMS,
            MC_TRAJ,
            st.x0,
            torch.Generator().manual_seed(10_000 + seed),
            st.nominal,
        )
        # per_sim holds fractions of MC_TRAJ trajectories: back to a count of safe trajectories
        sim["safe"] = round(float(sim["per_sim"].sum()) * MC_TRAJ)
        sim["n"] = MC_SIMS * MC_TRAJ
        out["mc"] = sim
    return out


def neural_fit(st: Setting, seed: int, n_traj: int, steps: int) -> dict:
    """One fit of the neural front-door estimator on one-hot state features: the seed draws the
    offline data and the initialisation (docs/certificates.md: full mode, one fit per seed)."""
    data = st.mdp.sample_offline(n_traj, H, generator=torch.Generator().manual_seed(seed))
    t0 = time.perf_counter()
    net = NeuralFrontDoorFQE(
        torch.eye(st.mdp.n_states, dtype=D), 5, 5, H, st.mdp.safe, steps_per_k=steps, seed=seed
    ).fit(data)
    q = net.safety_q()
    out = st.evaluate(st.certificate(q).as_controller())
    out.update(err=st.q_errors(q), v=q.v(st.x0, H), seconds=time.perf_counter() - t0)
    return out


def sweep(seeds: list[int], kappas, sizes) -> dict:
    """Exact P_safe (front-door, naive, DTCBF offline), front-door progress and backed-off cells
    per ``(kappa, n, alpha)``, one row per seed."""
    out = {}
    for kappa in kappas:
        st = Setting(kappa)
        for n in sizes:
            for a in ALPHAS:
                out[(kappa, n, a)] = []
            for s in seeds:
                m = run_seed(st, s, n, mc=False, alphas=ALPHAS)
                for a in ALPHAS:
                    tag = "" if a == 0 else f"@{a:g}"
                    out[(kappa, n, a)].append(
                        {
                            "front_door": m["eval"]["front_door" + tag]["p_safe"],
                            "naive": m["eval"]["naive" + tag]["p_safe"],
                            "dtcbf_offline": m["eval"]["dtcbf_offline"]["p_safe"],
                            "progress_fd": m["eval"]["front_door" + tag]["progress"],
                            "backoff": m["backoff"],
                        }
                    )
    return out
