"""Stage 3: Frank-Wolfe iterations for diverse elicitation (arXiv:2502.01236, §4).

The investigator is a mixture ``q̄_T = Σ_t w_t q_t``. Iteration ``t`` linearises the objective
``J(q) = E[r(x, b)] + λ H(q)`` at ``q̄_{t-1}``: a new investigator ``q_t`` (started from the SFT
model, reference the SFT model) is trained by DPO rounds on the penalised reward
``r_t = r - λ log q̄_{t-1}(x | b)``, so prompts the earlier iterates already produce become
unattractive; then ``q̄_t = (1 - η_t) q̄_{t-1} + η_t q_t``. ``λ = 0`` gives independent
restarts (the equal-compute baseline without a diversity term).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icml25._validate import as_int, as_real
from icml25.elicitation.dpo import train_dpo
from icml25.elicitation.investigator import Investigator, InvestigatorMixture, _check_strings
from icml25.elicitation.rewards import PenalizedReward, StringReward

__all__ = ["fw_step_size", "frank_wolfe"]


def fw_step_size(t: int, step: str = "uniform") -> float:
    """``η_t`` for iteration ``t = 1, 2, ...``: ``"uniform"`` ``1/t`` (equal weights over the
    iterates) or ``"classic"`` ``2/(t+1)`` (FW's ``2/(k+2)`` with ``k = t - 1``: weights
    ``∝ t``). ``η_1 = 1`` in both."""
    t = as_int("t", t, 1)
    if step == "uniform":
        return 1.0 / t
    if step == "classic":
        return min(1.0, 2.0 / (t + 1))
    raise ValueError(f"step must be 'uniform' or 'classic', got {step!r}")


def frank_wolfe(
    behaviors: Sequence[str],
    target: Any,
    sft_investigator: Investigator,
    *,
    lam: float,
    n_iters: int = 3,
    rounds_per_iter: int = 20,
    penalty: str = "mixture",
    step: str = "uniform",
    reward: str | Callable[..., Any] = "string",
    normalize: str = "sum",
    n_candidates: int = 8,
    pairs_per_behavior: int = 1,
    min_gap: float = 0.05,
    beta: float = 0.1,
    lr: float = 5e-6,
    steps_per_round: int = 1,
    temperature: float = 1.0,
    top_p: float = 0.95,
    seed: int = 0,
    callbacks: Sequence[Callable[[int, int, dict], None]] = (),
    checkpoint_dir: str | Path | None = None,
    progress: bool | None = None,
) -> InvestigatorMixture:
    """Frank-Wolfe elicitation; returns the mixture (``.history``: per iteration, per round
    statistics, including both reward terms' spreads).

    Args:
        behaviors: the training behaviours (target strings, or rubrics with a rubric reward).
        target: a :class:`~icml25.elicitation.backends.TargetModel` (used by ``reward="string"``).
        sft_investigator: the reverse model; every iterate starts from a copy and uses it as
            the DPO reference.
        lam: the diversity weight ``λ >= 0`` (keyword-only, no default: its scale depends on
            the prompt length and vocabulary; ``λ`` times the spread of ``log q̄`` should not
            swamp the reward's spread, which is warned about).
        penalty: ``"mixture"`` (``log q̄_{t-1}``, the derivation) or ``"last"`` (``log q_{t-1}``).
        step: ``"uniform"`` (``η_t = 1/t``) or ``"classic"`` (``2/(t+1)``).
        reward: ``"string"`` (:class:`StringReward` on ``target``) or a reward callable.
        callbacks: ``cb(iteration, round, stats)`` after every round.
        checkpoint_dir: each finished iterate is saved there (``iterate_<t>/`` and
            ``history.json``); a rerun with the same settings resumes after the last finished
            iterate (other settings: ``ValueError`` naming the difference). A crash loses at
            most the iteration in progress.
        progress: a progress bar per iteration (default: unless ``ICML25_QUIET`` is set).
    """
    fw = _FrankWolfe(**locals())  # the arguments, by name (nothing else is local yet)
    fw.resume()
    for t in range(len(fw.history) + 1, fw.n_iters + 1):
        q_t = sft_investigator.copy()  # every iterate starts from the SFT model
        r_t = fw.penalized_reward()  # r_t = r - λ log q̄_{t-1}(x | b)
        stats, caught = fw.dpo_rounds(q_t, r_t, t)
        _relay_warnings(caught, t, fw.rounds_per_iter)
        fw.add_iterate(q_t, stats, t)  # q̄_t = (1 - η_t) q̄_{t-1} + η_t q_t
    return fw.result()


@dataclass
class _FrankWolfe:
    """One run of :func:`frank_wolfe`: its arguments (checked on construction), the mixture
    ``q̄`` of the finished iterates and their per-round statistics (``history``, one list per
    iterate)."""

    behaviors: list[str]
    target: Any
    sft_investigator: Investigator
    lam: float
    n_iters: int
    rounds_per_iter: int
    penalty: str
    step: str
    reward: str | Callable[..., Any]
    normalize: str
    n_candidates: int
    pairs_per_behavior: int
    min_gap: float
    beta: float
    lr: float
    steps_per_round: int
    temperature: float
    top_p: float
    seed: int
    callbacks: Sequence[Callable[[int, int, dict], None]]
    checkpoint_dir: str | Path | None
    progress: bool | None
    base: Callable[..., Any] = field(init=False)  # the reward r
    ckdir: Path | None = field(init=False, default=None)
    mixture: InvestigatorMixture | None = field(init=False, default=None)
    history: list[list[dict[str, Any]]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        """Check the arguments, in this order (the first bad one is the error)."""
        self.behaviors = _check_strings("behaviors", self.behaviors)
        self.lam = as_real("lam", self.lam, low=0)
        self.n_iters, self.rounds_per_iter = (
            as_int("n_iters", self.n_iters, 1),
            as_int("rounds_per_iter", self.rounds_per_iter, 1),
        )
        self.n_candidates, self.steps_per_round = (
            as_int("n_candidates", self.n_candidates, 2),
            as_int("steps_per_round", self.steps_per_round, 1),
        )
        self.pairs_per_behavior, self.seed = (
            as_int("pairs_per_behavior", self.pairs_per_behavior, 1),
            as_int("seed", self.seed, 0),
        )
        if self.penalty not in ("mixture", "last"):
            raise ValueError(f"penalty must be 'mixture' or 'last', got {self.penalty!r}")
        fw_step_size(1, self.step)
        sft = self.sft_investigator
        if not isinstance(sft, Investigator):
            raise TypeError(f"sft_investigator must be an Investigator, got {type(sft).__name__}")
        self.base = StringReward(self.target) if self.reward == "string" else self.reward
        if not callable(self.base):
            raise ValueError(f"reward must be 'string' or a callable reward, got {self.reward!r}")

    def config(self) -> dict[str, Any]:
        """The settings a checkpoint must match to be resumed."""
        return {
            "behaviors": self.behaviors,
            "lam": float(self.lam),
            "rounds_per_iter": self.rounds_per_iter,
            "penalty": self.penalty,
            "step": self.step,
            "normalize": self.normalize,
            "n_candidates": self.n_candidates,
            "pairs_per_behavior": self.pairs_per_behavior,
            "min_gap": self.min_gap,
            "beta": self.beta,
            "lr": self.lr,
            "steps_per_round": self.steps_per_round,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "sft_weights": _fingerprint(self.sft_investigator),
        }

    def resume(self) -> None:
        """Take the finished iterates and history from ``checkpoint_dir``, if one is given."""
        if self.checkpoint_dir is not None:
            self.ckdir = Path(self.checkpoint_dir)
            self.mixture, self.history = _resume(
                self.ckdir, self.config(), self.sft_investigator, self.step, self.n_iters
            )

    def penalized_reward(self) -> PenalizedReward:
        """``r_t = r - λ log q̄_{t-1}`` (``penalty="mixture"``) or ``r - λ log q_{t-1}``
        (``"last"``); the reward alone at ``t = 1``."""
        if self.mixture is None:
            pen_mix = None
        elif self.penalty == "mixture":
            pen_mix = self.mixture
        else:
            pen_mix = InvestigatorMixture([self.mixture.members[-1]])
        return PenalizedReward(self.base, pen_mix, lam=float(self.lam), normalize=self.normalize)

    def dpo_rounds(
        self, q_t: Investigator, r_t: PenalizedReward, t: int
    ) -> tuple[list[dict[str, Any]], list[warnings.WarningMessage]]:
        """Iteration ``t``'s DPO rounds (§3.2) of ``q_t`` on ``r_t``, the SFT model as the
        reference; returns their statistics and the warnings they raised (for
        :func:`_relay_warnings`)."""
        callbacks = self.callbacks

        def cb(k: int, st: dict, t: int = t) -> None:
            for c in callbacks:
                c(t, k, st)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stats = train_dpo(
                q_t,
                self.sft_investigator,
                r_t,
                self.behaviors,
                self.rounds_per_iter,
                lr=self.lr,
                seed=self.seed * 1000 + t,
                callback=cb,
                progress=self.progress,
                desc=f"Frank-Wolfe iteration {t}/{self.n_iters}",
                n_candidates=self.n_candidates,
                pairs_per_behavior=self.pairs_per_behavior,
                min_gap=self.min_gap,
                beta=self.beta,
                steps=self.steps_per_round,
                temperature=self.temperature,
                top_p=self.top_p,
            )
        return stats, caught

    def add_iterate(self, q_t: Investigator, stats: list[dict[str, Any]], t: int) -> None:
        """``q̄_t = (1 - η_t) q̄_{t-1} + η_t q_t``, and the checkpoint of iterate ``t``."""
        self.history.append(stats)
        if self.mixture is None:
            self.mixture = InvestigatorMixture([q_t])
        else:
            self.mixture.append(q_t, fw_step_size(t, self.step))
        if self.ckdir is not None:  # iterate first, then the history that marks it done
            q_t.save(self.ckdir / f"iterate_{t}")
            tmp = self.ckdir / "history.json.tmp"
            tmp.write_text(json.dumps(self.history))
            tmp.replace(self.ckdir / "history.json")

    def result(self) -> InvestigatorMixture:
        """The mixture, with the history attached."""
        assert self.mixture is not None
        self.mixture.history = self.history  # type: ignore[attr-defined]
        return self.mixture


def _relay_warnings(caught: list[warnings.WarningMessage], t: int, rounds: int) -> None:
    """Iteration ``t``'s warnings again: the rounds' "swamps the reward" warnings as one,
    pointing at :func:`frank_wolfe`'s caller (called from :func:`frank_wolfe` itself:
    ``stacklevel=3``), the others as they were raised."""
    swamped = [w for w in caught if "swamps the reward" in str(w.message)]
    if swamped:
        warnings.warn(
            f"Frank-Wolfe iteration {t}: in {len(swamped)} of {rounds} rounds "
            f"{swamped[-1].message}",
            stacklevel=3,
        )
    for w in caught:
        if "swamps the reward" not in str(w.message):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _fingerprint(inv: Investigator) -> str:
    from icml25.llm.hf import weights_fingerprint

    return weights_fingerprint(inv.model)[:16]


def _resume(
    ckdir: Path, config: dict[str, Any], sft: Investigator, step: str, n_iters: int
) -> tuple[InvestigatorMixture | None, list[list[dict[str, Any]]]]:
    """The finished iterates and history in ``ckdir`` (after checking the settings match)."""
    ckdir.mkdir(parents=True, exist_ok=True)
    cfg_path = ckdir / "config.json"
    if cfg_path.exists():
        old = json.loads(cfg_path.read_text())
        diff = {k: (old.get(k), v) for k, v in config.items() if old.get(k) != v}
        if diff:
            raise ValueError(
                f"{ckdir} holds a run with other settings {diff} (saved, given); use another "
                "checkpoint_dir"
            )
    else:
        cfg_path.write_text(json.dumps(config))
    hist_path = ckdir / "history.json"
    history = json.loads(hist_path.read_text())[:n_iters] if hist_path.exists() else []
    mixture = None
    for t in range(1, len(history) + 1):
        q = Investigator.load(ckdir / f"iterate_{t}")
        q.model.to(sft.device)
        if mixture is None:
            mixture = InvestigatorMixture([q])
        else:
            mixture.append(q, fw_step_size(t, step))
    return mixture, history
