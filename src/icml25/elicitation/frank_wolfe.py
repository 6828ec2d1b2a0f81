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
    bs = _check_strings("behaviors", behaviors)
    lam = as_real("lam", lam, low=0)
    n_iters, rounds_per_iter = (
        as_int("n_iters", n_iters, 1),
        as_int("rounds_per_iter", rounds_per_iter, 1),
    )
    n_candidates, steps_per_round = (
        as_int("n_candidates", n_candidates, 2),
        as_int("steps_per_round", steps_per_round, 1),
    )
    pairs_per_behavior, seed = (
        as_int("pairs_per_behavior", pairs_per_behavior, 1),
        as_int("seed", seed, 0),
    )
    if penalty not in ("mixture", "last"):
        raise ValueError(f"penalty must be 'mixture' or 'last', got {penalty!r}")
    fw_step_size(1, step)
    if not isinstance(sft_investigator, Investigator):
        raise TypeError(
            f"sft_investigator must be an Investigator, got {type(sft_investigator).__name__}"
        )
    base = StringReward(target) if reward == "string" else reward
    if not callable(base):
        raise ValueError(f"reward must be 'string' or a callable reward, got {reward!r}")
    mixture: InvestigatorMixture | None = None
    history: list[list[dict[str, Any]]] = []
    ckdir = None
    if checkpoint_dir is not None:
        ckdir = Path(checkpoint_dir)
        config = {
            "behaviors": bs,
            "lam": float(lam),
            "rounds_per_iter": rounds_per_iter,
            "penalty": penalty,
            "step": step,
            "normalize": normalize,
            "n_candidates": n_candidates,
            "pairs_per_behavior": pairs_per_behavior,
            "min_gap": min_gap,
            "beta": beta,
            "lr": lr,
            "steps_per_round": steps_per_round,
            "temperature": temperature,
            "top_p": top_p,
            "seed": seed,
            "sft_weights": _fingerprint(sft_investigator),
        }
        mixture, history = _resume(ckdir, config, sft_investigator, step, n_iters)
    for t in range(len(history) + 1, n_iters + 1):
        q_t = sft_investigator.copy()
        if mixture is None:
            pen_mix = None
        elif penalty == "mixture":
            pen_mix = mixture
        else:
            pen_mix = InvestigatorMixture([mixture.members[-1]])
        r_t = PenalizedReward(base, pen_mix, lam=float(lam), normalize=normalize)

        def cb(k: int, st: dict, t: int = t) -> None:
            for c in callbacks:
                c(t, k, st)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stats = train_dpo(
                q_t,
                sft_investigator,
                r_t,
                bs,
                rounds_per_iter,
                lr=lr,
                seed=seed * 1000 + t,
                callback=cb,
                progress=progress,
                desc=f"Frank-Wolfe iteration {t}/{n_iters}",
                n_candidates=n_candidates,
                pairs_per_behavior=pairs_per_behavior,
                min_gap=min_gap,
                beta=beta,
                steps=steps_per_round,
                temperature=temperature,
                top_p=top_p,
            )
        swamped = [w for w in caught if "swamps the reward" in str(w.message)]
        if swamped:
            warnings.warn(
                f"Frank-Wolfe iteration {t}: in {len(swamped)} of {rounds_per_iter} rounds "
                f"{swamped[-1].message}",
                stacklevel=2,
            )
        for w in caught:
            if "swamps the reward" not in str(w.message):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        history.append(stats)
        if mixture is None:
            mixture = InvestigatorMixture([q_t])
        else:
            mixture.append(q_t, fw_step_size(t, step))
        if ckdir is not None:  # iterate first, then the history that marks it done
            q_t.save(ckdir / f"iterate_{t}")
            tmp = ckdir / "history.json.tmp"
            tmp.write_text(json.dumps(history))
            tmp.replace(ckdir / "history.json")
    assert mixture is not None
    mixture.history = history  # type: ignore[attr-defined]
    return mixture


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
