"""Experiments of the reproduction (docs/distinguishability.md, Part A: reward learning per query;
Part B: preference strength and expected utility; Part C: the online PEBBLE loop). Kept separate
from ``repro.py`` so that users can run them on their own segments, teachers and selection
schemes."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from icml25.distinguishability.learner import RewardLearner
from icml25.distinguishability.queries import DistinguishabilityQuery, PairwiseQuery
from icml25.distinguishability.reward_model import RewardEnsemble
from icml25.distinguishability.segments import SegmentBuffer
from icml25.distinguishability.selection import select_dq, select_pcq
from icml25.distinguishability.teachers import ScriptedTeacher
from icml25.distinguishability.utility import (
    fit_utilities,
    lottery_choice_accuracy,
    sample_lotteries,
)

__all__ = [
    "CurveConfig",
    "heldout_metrics",
    "learning_curve",
    "lottery_experiment",
    "online_comparison",
    "split",
]


@dataclass
class CurveConfig:
    """Part A settings (docs/distinguishability.md, "Reproduction"; the reward model is smaller than B-Pref's
    for speed, a documented deviation)."""

    budgets: tuple[int, ...] = (20, 40, 60)  # quick: evaluate at 20/40/60 queries
    batch: int = 10  # queries per round (B)
    large_batch: int = 10  # M
    hidden: int = 32
    n_layers: int = 2
    n_members: int = 3
    lr: float = 3e-3
    epochs: int = 60  # per round, full batch, continuing from the previous weights
    likelihood: Literal["abs", "difference"] = "abs"
    keep_frac: float = 0.5
    n_quadruples: int = 2000
    extra: dict = field(default_factory=dict)


def split(buf: SegmentBuffer, frac: float, seed: int) -> tuple[SegmentBuffer, SegmentBuffer]:
    """A fixed permutation per seed: ``frac`` of the segments to the query pool, the rest held out."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(buf), generator=g)
    cut = int(round(frac * len(buf)))
    return buf.subset(perm[:cut]), buf.subset(perm[cut:])


def _pearson(a: Tensor, b: Tensor) -> float:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    return float((a * b).sum() / (a.norm() * b.norm()).clamp_min(1e-300))


def _rank(x: Tensor) -> Tensor:
    r = torch.empty_like(x, dtype=torch.float64)
    r[torch.argsort(x)] = torch.arange(len(x), dtype=torch.float64)
    return r


@torch.no_grad()
def heldout_metrics(ens: RewardEnsemble, held: SegmentBuffer, n_quadruples: int, seed: int) -> dict:
    """Pearson (primary) and Spearman of the ensemble-mean return, pairwise accuracy over all
    pairs, and difference accuracy on random quadruples (docs/distinguishability.md, part A metrics)."""
    pred = ens.segment_returns(held.obs, held.act).mean(0).double()
    true = held.returns().double()
    diff_p, diff_t = pred[:, None] - pred[None], true[:, None] - true[None]
    mask = diff_t != 0
    pair_acc = float(((diff_p > 0) == (diff_t > 0))[mask].double().mean())
    g = np.random.default_rng(seed)
    q = torch.from_numpy(g.integers(0, len(held), size=(n_quadruples, 4)))
    s_p = (pred[q[:, 0]] - pred[q[:, 1]]).abs() - (pred[q[:, 2]] - pred[q[:, 3]]).abs()
    s_t = (true[q[:, 0]] - true[q[:, 1]]).abs() - (true[q[:, 2]] - true[q[:, 3]]).abs()
    keep = s_t != 0
    return {
        "pearson": _pearson(pred, true),
        "spearman": _pearson(_rank(pred), _rank(true)),
        "pair_acc": pair_acc,
        "diff_acc": float(((s_p > 0) == (s_t > 0))[keep].double().mean()),
    }


def learning_curve(
    pool: SegmentBuffer,
    held: SegmentBuffer,
    teacher: ScriptedTeacher,
    method: str,
    cfg: CurveConfig,
    seed: int,
) -> dict:
    """Reward learning from ``method`` = ``"<pcq|dq>+<selection>"`` queries, evaluated on the
    held-out segments at each budget. Returns per-budget metrics, the teacher's error rate on the
    answers it gave, the score (mean held-out Pearson over the budgets) and the wall time."""
    kind, sel = method.split("+", 1)
    if kind not in ("pcq", "dq"):
        raise ValueError(f"method must start with 'pcq+' or 'dq+', got {method!r}")
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    ens = RewardEnsemble(
        pool.obs.shape[-1], pool.act.shape[-1], cfg.n_members, cfg.hidden, cfg.n_layers
    )
    learner = RewardLearner(
        ens,
        lr=cfg.lr,
        batch_size=None,
        max_epochs=cfg.epochs,
        stop_acc=None,
        likelihood=cfg.likelihood,
    )
    rng = np.random.default_rng(seed + 7919)
    curve, asked, labelled_pcq = {}, 0, []
    answered_before, errors_before = teacher.answered, teacher.errors
    while asked < max(cfg.budgets):
        n = min(cfg.batch, max(cfg.budgets) - asked)
        first = asked == 0
        if kind == "pcq":
            queries: list = select_pcq(
                ens, pool, n, "uniform" if first else sel, cfg.large_batch, rng, labelled_pcq
            )
            answers = teacher.answer_pcq(pool, queries)
            labelled_pcq += [q for q, a in zip(queries, answers) if a is not None]
        else:
            queries = select_dq(
                ens,
                pool,
                n,
                "uniform" if first else sel,
                cfg.large_batch,
                keep_frac=cfg.keep_frac,
                rng=rng,
            )
            answers = teacher.answer_dq(pool, queries)
        learner.add(queries, answers)
        learner.train(pool)
        asked += n
        if asked in cfg.budgets:
            curve[asked] = heldout_metrics(ens, held, cfg.n_quadruples, seed)
    answered = teacher.answered - answered_before
    err = (teacher.errors - errors_before) / answered if answered else 0.0
    score = sum(curve[b]["pearson"] for b in cfg.budgets) / len(cfg.budgets)
    score_s = sum(curve[b]["spearman"] for b in cfg.budgets) / len(cfg.budgets)
    return {
        "curve": curve,
        "score": score,
        "score_spearman": score_s,
        "teacher_error": err,
        "seconds": time.perf_counter() - t0,
        "ensemble": ens,
    }


def lottery_experiment(seed: int, n_items: int = 12, n_answers: int = 60, n_decisions: int = 1000):
    """Part B: noise-free PCQ vs DQ answers on items with ``u_i = exp(0.35 i)``; balanced accuracy of
    expected-utility choices and the Pearson of the fitted utilities."""
    g = np.random.default_rng(seed)
    u = torch.exp(0.35 * torch.arange(n_items, dtype=torch.float64))
    items = SegmentBuffer(
        torch.zeros(n_items, 1, 1), torch.zeros(n_items, 1, 1), u.reshape(n_items, 1)
    )
    teacher = ScriptedTeacher(beta=-1.0, rng=seed)
    pairs = [g.choice(n_items, 2, replace=False) for _ in range(n_answers)]
    pq = [PairwiseQuery(int(i), int(j)) for i, j in pairs]
    pcq = [(q.i0, q.i1, a.y) for q, a in zip(pq, teacher.answer_pcq(items, pq))]
    quads = [
        (g.choice(n_items, 2, replace=False), g.choice(n_items, 2, replace=False))
        for _ in range(n_answers)
    ]
    dqs = [
        DistinguishabilityQuery(PairwiseQuery(int(a), int(b)), PairwiseQuery(int(c), int(d)))
        for (a, b), (c, d) in quads
    ]
    dq = [(*q.segments, a.d, a.y, a.d_pref) for q, a in zip(dqs, teacher.answer_dq(items, dqs))]
    u_pcq, u_dq = fit_utilities(n_items, pcq=pcq), fit_utilities(n_items, dq=dq)
    lot = sample_lotteries(u, n_decisions, seed + 1)
    return {
        "u_true": u,
        "u_pcq": u_pcq,
        "u_dq": u_dq,
        "acc_pcq": lottery_choice_accuracy(u_pcq, u, lot),
        "acc_dq": lottery_choice_accuracy(u_dq, u, lot),
        "pearson_pcq": _pearson(u_pcq, u),
        "pearson_dq": _pearson(u_dq, u),
    }


def affine_align(u_hat: Tensor, u: Tensor) -> Tensor:
    """Least-squares ``a u_hat + b`` closest to ``u`` (for plotting)."""
    X = torch.stack([u_hat.double(), torch.ones_like(u_hat, dtype=torch.float64)], 1)
    coef = torch.linalg.lstsq(X, u.double()[:, None]).solution
    return (X @ coef).squeeze(1)


def online_comparison(
    seed: int, methods: tuple[str, ...], *, smoke: bool = False
) -> dict[str, dict]:
    """Part C for one seed: the online PEBBLE loop with SAC on Pendulum-v1, once per
    ``"query+selection"`` method of ``methods`` (oracle teacher) and once with SAC on the true
    reward (``"sac+true reward"``, the ceiling); each run's history (``"step"``,
    ``"true_return"``, ...) by name. 15k steps and 120 queries (smoke: 1.5k and 40)."""
    import gymnasium as gym

    from icml25.distinguishability.rl import PEBBLEConfig, PreferenceRL, SACConfig

    steps = 1500 if smoke else 15_000
    cfg = PEBBLEConfig(
        num_seed_steps=500 if smoke else 1000,
        num_unsup_steps=0,
        segment=25,
        reward_batch=20,
        num_interact=500 if smoke else 1500,
        max_feedback=40 if smoke else 120,
        eval_frequency=500 if smoke else 1500,
        num_eval_episodes=2 if smoke else 10,
        reward_hidden=32 if smoke else 256,
        reward_layers=2 if smoke else 3,
    )
    out = {}
    for name in (*methods, "sac+true reward"):
        env, ev = gym.make("Pendulum-v1"), gym.make("Pendulum-v1")
        sac = SACConfig(hidden=32 if smoke else 128)
        if name == "sac+true reward":
            rl = PreferenceRL(env, cfg=cfg, sac=sac, seed=seed, eval_env=ev, true_reward=True)
        else:
            q, sel = name.split("+")
            teacher = ScriptedTeacher.preset("oracle", rng=seed + 11)
            rl = PreferenceRL(env, q, sel, teacher, cfg=cfg, sac=sac, seed=seed, eval_env=ev)
        out[name] = rl.run(steps, progress=False)
    return out
