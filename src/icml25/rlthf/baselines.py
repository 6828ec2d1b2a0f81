"""The comparators of RLTHF (arXiv:2502.13417, §4-§5), all through the same loop and reward model
so that only the selection and curation rules differ.

* :func:`run_ai_only`: the reward model on the AI labels alone (0 % human).
* :func:`run_full_human`: the reward model on every human label (100 %).
* :func:`run_random`: the same human budget spent on random pairs; no sanitization, weight 1.
* :func:`run_uncertainty`: active learning's margin sampling (smallest ``|m|``), iterative.
* :func:`run_self_confidence`: confident learning's ranking (lowest out-of-fold margin, i.e.
  cleanlab's ``self_confidence`` score on cross-fitted probabilities), one shot.
* :func:`run_self_improvement`: the paper's no-human ablation (flip the AI labels the reward model
  confidently rejects).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from icml25._validate import as_real
from icml25.rlthf.data import PreferencePairs
from icml25.rlthf.loop import RLTHFConfig, RLTHFResult, preference_accuracy, run_rlthf

__all__ = [
    "run_ai_only",
    "run_full_human",
    "run_random",
    "run_self_confidence",
    "run_self_improvement",
    "run_uncertainty",
]


def _cfg(config: RLTHFConfig | None, **changes: Any) -> RLTHFConfig:
    if changes.get("sanitize", "bend_backoff") != "bend_backoff":
        changes.setdefault("backoff_ratio", 0.5)  # the ratio means nothing without the back-off
    return dataclasses.replace(config or RLTHFConfig(), **changes)


def _fit_once(
    pairs: PreferencePairs,
    labels: np.ndarray,
    reward_model: Any,
    test_pairs: PreferencePairs | None,
    seed: int,
    what: str,
) -> RLTHFResult:
    valid = ~pairs.identical() & (labels >= 0)
    idx = np.flatnonzero(valid)
    reward_model.fit(pairs, idx, labels[idx], None, seed=seed * 1000)
    weights = valid.astype(np.float64)
    z = np.where(valid, labels, -1).astype(np.int8)
    row = {
        "iteration": 0,
        "method": what,
        "kept_fraction": float(valid.mean()),
        "test_accuracy": preference_accuracy(reward_model, test_pairs),
    }
    row["human_fraction"] = 1.0 if what == "full_human" else 0.0
    return RLTHFResult(pairs, z, weights, valid, np.zeros(0, dtype=np.int64), [row], reward_model)


def run_ai_only(
    pairs: PreferencePairs,
    ai_labels: Any,
    reward_model: Any,
    test_pairs: PreferencePairs | None = None,
    seed: int = 0,
) -> RLTHFResult:
    """The reward model trained on every AI label (weight 1), no human."""
    from icml25.rlthf.data import check_binary_labels

    z = check_binary_labels(ai_labels, len(pairs), "ai_labels")
    return _fit_once(pairs, z, reward_model, test_pairs, seed, "ai_only")


def run_full_human(
    pairs: PreferencePairs,
    reward_model: Any,
    test_pairs: PreferencePairs | None = None,
    seed: int = 0,
) -> RLTHFResult:
    """The reward model trained on every human label (the pool's ``human_labels``)."""
    if pairs.human_labels is None:
        raise ValueError("run_full_human needs pairs.human_labels")
    return _fit_once(pairs, pairs.human_labels.copy(), reward_model, test_pairs, seed, "full_human")


def run_random(pairs, ai_labels, human, reward_model, config=None, test_pairs=None, **kw):
    """Same per-iteration human budget on uniformly random pairs; no sanitization, weight 1."""
    cfg = _cfg(config, selection="random", sanitize=None, amplification=1.0)
    return run_rlthf(pairs, ai_labels, None, human, reward_model, cfg, test_pairs, **kw)


def run_uncertainty(pairs, ai_labels, human, reward_model, config=None, test_pairs=None, **kw):
    """Margin sampling: the pairs with the smallest ``|m|`` each iteration; no sanitization,
    weight 1 (modAL's ``margin_sampling`` on ``[1 - sigma(m), sigma(m)]``)."""
    cfg = _cfg(config, selection="uncertainty", sanitize=None, amplification=1.0)
    return run_rlthf(pairs, ai_labels, None, human, reward_model, cfg, test_pairs, **kw)


def run_self_confidence(
    pairs, ai_labels, human, reward_model, budget: float = 0.06, config=None, test_pairs=None, **kw
):
    """Confident learning: cross-fitted (``config.cv_folds``) margins of every AI label, the
    ``budget`` fraction with the lowest sent to the human in one shot; no sanitization,
    weight 1."""
    budget = as_real(
        "budget (a fraction of the pool, e.g. 0.06 for 6 %)", budget, low=0, high=1, low_open=True
    )
    cfg = _cfg(
        config,
        selection="self_confidence",
        sanitize=None,
        amplification=1.0,
        iterations=1,
        schedule="constant",
        budget_per_iter=budget,
    )
    return run_rlthf(pairs, ai_labels, None, human, reward_model, cfg, test_pairs, **kw)


def run_self_improvement(pairs, ai_labels, reward_model, config=None, test_pairs=None, **kw):
    """The no-human ablation: each iteration flips the AI labels below the lower bend."""
    cfg = _cfg(config, self_improvement=True)
    return run_rlthf(pairs, ai_labels, None, None, reward_model, cfg, test_pairs, **kw)
