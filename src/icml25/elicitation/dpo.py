"""Stage 2: RL by iterative DPO on self-generated preference pairs (arXiv:2502.01236, §3.2).

One round: sample ``n_candidates`` prompts per behaviour from the policy, score them with the
reward, pair the best with the worst (``pairs_per_behavior`` pairs: rank a vs rank n+1-a) when
their scores differ by at least ``min_gap``, and take DPO steps against the frozen reference
(the SFT model): ``-log σ(β [(log q(x_w) - log q_ref(x_w)) - (log q(x_l) - log q_ref(x_l))])``
(Rafailov et al., 2023), the loss of ``icml25.preference`` (TRL's sigmoid DPO). Reference
log-probs are computed once per pair.

The loop follows TRL's ``DPOTrainer`` conventions: policy log-probs with dropout off
(``disable_dropout=True``, as ``DPOConfig``), so with the policy equal to the reference the first
loss is exactly ``log 2``; the reference in eval mode; a bf16/fp16 investigator trained with
float32 master weights and the forward under autocast in its dtype (``icml25.llm.MixedPrecision``);
the chosen and rejected prompts tokenised as TRL tokenises the rows of :func:`dpo_trainer`
(:meth:`Investigator.row`).

:func:`dpo_round` and :func:`train_dpo` are single-process loops (they refuse to run under several
processes). For several GPUs, :func:`dpo_trainer` builds TRL's ``DPOTrainer`` on a round's pairs
(extra ``train``): data-parallel under ``torchrun`` / ``accelerate launch``, the sigmoid loss a
mean over pairs, so equal per-process batches give the global-batch mean (docs/elicitation.md,
Several GPUs). Sampling and scoring a round's candidates stay single-process here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from icml25._validate import as_int, as_real
from icml25.elicitation._decode import train_mode
from icml25.elicitation.investigator import Investigator, _check_strings
from icml25.llm.distributed import check_global_batches, refuse_several_processes
from icml25.preference import dpo_losses as _shared_dpo_losses

__all__ = [
    "PreferencePair",
    "dpo_loss",
    "default_dpo_config",
    "dpo_round",
    "dpo_trainer",
    "sample_preference_pairs",
    "train_dpo",
]


def dpo_loss(
    pc: torch.Tensor, pr: torch.Tensor, rc: torch.Tensor, rr: torch.Tensor, beta: float = 0.1
) -> tuple[torch.Tensor, dict[str, float]]:
    """Mean sigmoid-DPO loss over pairs (``icml25.preference.dpo_losses``, TRL's formula; the
    inputs' precision is kept, float32 at least) and its statistics:
    ``reward_accuracy`` (share of pairs whose implicit reward ranks chosen first) and
    ``margin`` (mean ``β h``). ``pc, pr``: policy log-probs of chosen/rejected; ``rc, rr``:
    reference's. ``β = 0.1`` (DPO's default and the third-party recipe's). A NaN log-prob is a
    ``ValueError``; ``-inf`` (a zero-probability sequence) gives the loss's limit."""
    beta = as_real("beta", beta, low=0, low_open=True)
    for name, x in (("pc", pc), ("pr", pr), ("rc", rc), ("rr", rr)):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and bool(torch.isnan(x).any()):
            raise ValueError(
                f"{name} holds NaN log-probs ({int(torch.isnan(x).sum())} of {x.numel()})"
            )
    _, u = _shared_dpo_losses(pc, pr, rc, rr, beta)  # u = β h, in float32 or wider
    # -log σ(u) itself: the shared form adds 0 · log σ(-u), NaN at u = +inf (a -inf rejected
    # log-prob), where the loss's limit is 0
    losses = -torch.nn.functional.logsigmoid(u)
    u = u.detach()
    return losses.mean(), {
        "reward_accuracy": float((u > 0).float().mean()),
        "margin": float(u.mean()),
    }


@dataclass(frozen=True)
class PreferencePair:
    """A DPO preference pair for one target behaviour: the chosen and rejected prompts with their
    behaviour scores."""

    behavior: str
    chosen: str
    rejected: str
    score_chosen: float
    score_rejected: float


def sample_preference_pairs(
    behaviors: Sequence[str],
    candidates: Sequence[Sequence[str]],
    scores: Sequence[Any],
    *,
    pairs_per_behavior: int = 1,
    min_gap: float = 0.05,
    seed: int = 0,
) -> tuple[list[PreferencePair], int]:
    """Pairs from scored candidates: per behaviour, duplicates dropped, sorted by score (ties in
    a seeded random order), rank ``a`` paired with rank ``n + 1 - a`` for ``a = 1..pairs``
    while ``score_a - score_{n+1-a} >= min_gap``. Returns ``(pairs, behaviours without a pair)``.
    ``min_gap = 0.05``: the third-party recipe's, on per-token means (scale it to your reward)."""
    bs = _check_strings("behaviors", behaviors)
    if len(candidates) != len(bs) or len(scores) != len(bs):
        raise ValueError(
            f"{len(bs)} behaviors need as many candidate and score lists, got "
            f"{len(candidates)} and {len(scores)}"
        )
    pairs_per_behavior = as_int("pairs_per_behavior", pairs_per_behavior, 1)
    min_gap = as_real("min_gap", min_gap, low=0)
    rng = random.Random(seed)
    pairs: list[PreferencePair] = []
    without = 0
    for b, cands, sc in zip(bs, candidates, scores):
        sc = [float(s) for s in sc]
        if len(sc) != len(cands):
            raise ValueError(
                f"{len(cands)} candidates but {len(sc)} scores for behaviour {b!r:.40}"
            )
        if any(math.isnan(s) for s in sc):
            raise ValueError(f"a score is nan for behaviour {b!r:.40}")
        seen: dict[str, float] = {}
        for c, s in zip(cands, sc):
            if c.strip() and c not in seen:
                seen[c] = s
        items = list(seen.items())
        rng.shuffle(items)
        items.sort(key=lambda kv: -kv[1])
        made = 0
        for a in range(min(pairs_per_behavior, len(items) // 2)):
            (cw, sw), (cl, sl) = items[a], items[len(items) - 1 - a]
            if sw - sl >= min_gap and sw > sl:
                pairs.append(PreferencePair(b, cw, cl, sw, sl))
                made += 1
        without += made == 0
    return pairs, without


def dpo_round(
    policy: Investigator,
    ref: Investigator,
    reward: Callable[..., torch.Tensor],
    behaviors: Sequence[str],
    *,
    optimizer: torch.optim.Optimizer | None = None,
    n_candidates: int = 8,
    pairs_per_behavior: int = 1,
    min_gap: float = 0.05,
    beta: float = 0.1,
    lr: float = 5e-6,
    steps: int = 1,
    temperature: float = 1.0,
    top_p: float = 0.95,
    seed: int = 0,
    disable_dropout: bool = True,
) -> dict[str, Any]:
    """One on-policy DPO round (see the module docstring); returns its statistics. A round with
    no pair skips the optimiser step. ``optimizer`` (kept across rounds) defaults to a fresh
    AdamW at ``lr`` (5e-6: the third-party recipe's); build it after
    ``policy.mixed_precision()`` for a bf16/fp16 investigator (:func:`train_dpo` does).
    ``disable_dropout`` (default ``True``, TRL's ``DPOConfig.disable_dropout``): the policy's
    log-probs come from the model without dropout. Every submodule's train/eval flag is restored
    afterwards. Single-process: under ``torchrun`` with more than one process it raises
    ``RuntimeError``; :func:`dpo_trainer` is the entry point for several GPUs."""
    refuse_several_processes(
        "dpo_round",
        "icml25.elicitation.dpo_trainer (TRL's DPOTrainer, data-parallel under torchrun / accelerate launch)",
    )
    bs = _check_strings("behaviors", behaviors)
    n_candidates, steps = as_int("n_candidates", n_candidates, 2), as_int("steps", steps, 1)
    seed = as_int("seed", seed, 0)
    beta = as_real("beta", beta, low=0, low_open=True)
    lr = as_real("lr", lr, low=0, low_open=True)
    cands, scores = _scored_candidates(policy, reward, bs, n_candidates, temperature, top_p, seed)
    per = [scores[i * n_candidates : (i + 1) * n_candidates].tolist() for i in range(len(bs))]
    pairs, without = sample_preference_pairs(
        bs, cands, per, pairs_per_behavior=pairs_per_behavior, min_gap=min_gap, seed=seed
    )
    stats: dict[str, Any] = {
        "mean_reward": float(scores.mean()),
        "n_pairs": len(pairs),
        "no_pair": without,
        "spread": dict(getattr(reward, "last_spread", {}) or {}),
        "loss": None,
    }
    if not pairs:
        return stats
    loss, info = _dpo_steps(policy, ref, pairs, optimizer, lr, steps, beta, disable_dropout)
    stats.update(loss=float(loss.detach()), **info)
    return stats


def _scored_candidates(
    policy: Investigator,
    reward: Callable[..., torch.Tensor],
    bs: list[str],
    n_candidates: int,
    temperature: float,
    top_p: float,
    seed: int,
) -> tuple[list[list[str]], torch.Tensor]:
    """``n_candidates`` prompts per behaviour sampled from the policy, and their rewards (float32,
    on the CPU, one per candidate in behaviour order), checked."""
    cands = policy.sample(bs, n_candidates, temperature=temperature, top_p=top_p, seed=seed)
    flat_b = [b for b, cs in zip(bs, cands) for _ in cs]
    flat_x = [x for cs in cands for x in cs]
    with torch.no_grad():
        scores = reward(flat_x, flat_b)
    if not isinstance(scores, torch.Tensor):
        raise TypeError(
            f"the reward must return a tensor of {len(flat_x)} scores, got {type(scores).__name__}"
        )
    scores = scores.float().cpu()
    if scores.shape != (len(flat_x),) or not torch.isfinite(scores).all():
        raise ValueError(
            f"the reward must return {len(flat_x)} finite scores, got shape {tuple(scores.shape)}"
        )
    return cands, scores


def _dpo_steps(
    policy: Investigator,
    ref: Investigator,
    pairs: list[PreferencePair],
    optimizer: torch.optim.Optimizer | None,
    lr: float,
    steps: int,
    beta: float,
    disable_dropout: bool,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``steps`` DPO steps on a round's pairs (the reference's log-probs computed once); returns
    the last step's loss and statistics."""
    mp = policy.mixed_precision()  # float32 master weights before the optimizer holds them
    if optimizer is None:
        optimizer = torch.optim.AdamW(
            [p for p in policy.model.parameters() if p.requires_grad], lr=lr
        )
    pb = [p.behavior for p in pairs]
    with torch.no_grad():  # the reference in eval mode, always
        rc = ref.logprob(pb, [p.chosen for p in pairs])
        rr = ref.logprob(pb, [p.rejected for p in pairs])
    with train_mode(policy.model, disable_dropout=disable_dropout):
        for _ in range(steps):
            with mp.autocast():
                pc = policy._logprob(pb, [p.chosen for p in pairs])
                pr = policy._logprob(pb, [p.rejected for p in pairs])
            loss, info = dpo_loss(pc, pr, rc.to(pc.device), rr.to(pc.device), beta)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            params = [p for p in policy.model.parameters() if p.grad is not None]
            norm = torch.nn.utils.clip_grad_norm_(params, float("inf"))
            if not (torch.isfinite(loss) and torch.isfinite(norm)):
                raise FloatingPointError(
                    f"DPO produced a non-finite loss or gradient ({float(loss)}, grad norm {float(norm)}) "
                    f"{_precision_hint(policy)}"
                )
            optimizer.step()
            if not all(bool(torch.isfinite(p).all()) for p in params):
                raise FloatingPointError(
                    f"a DPO step left non-finite weights {_precision_hint(policy)}"
                )
    return loss, info


def _precision_hint(inv: Investigator) -> str:
    """Which precision the investigator trained in, and what to do about an overflow."""
    compute = inv.compute_dtype
    where = (
        f"in the {next(inv.model.parameters()).dtype} investigator"
        if compute is None
        else f"in the {compute} investigator (float32 master weights, forward in {compute})"
    )
    if compute == torch.float16:
        return f"{where}: float16 activations overflow here; load it in bfloat16 or float32 (dtype='bf16')"
    return f"{where}; lower the learning rate or check the rewards"


def train_dpo(
    policy: Investigator,
    ref: Investigator,
    reward: Callable[..., torch.Tensor],
    behaviors: Sequence[str],
    rounds: int,
    *,
    lr: float = 5e-6,
    seed: int = 0,
    callback: Callable[[int, dict], None] | None = None,
    progress: bool | None = None,
    desc: str = "DPO rounds",
    **round_kw: Any,
) -> list[dict[str, Any]]:
    """``rounds`` DPO rounds with one AdamW kept across them; ``callback(round, stats)``.
    Single-process, as :func:`dpo_round` (``RuntimeError`` under several processes; use
    :func:`dpo_trainer` on each round's pairs for several GPUs)."""
    refuse_several_processes(
        "train_dpo",
        "icml25.elicitation.dpo_trainer (TRL's DPOTrainer, data-parallel under torchrun / accelerate launch)",
    )
    rounds = as_int("rounds", rounds, 1)
    lr = as_real("lr", lr, low=0, low_open=True)
    from icml25.progress import track

    policy.mixed_precision()  # float32 master weights first: the optimizer must hold them
    opt = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=lr)
    history = []
    for k in track(
        range(rounds), desc, total=rounds, disable=None if progress is None else not progress
    ):
        st = dpo_round(
            policy, ref, reward, behaviors, optimizer=opt, seed=seed * 100_003 + k, **round_kw
        )
        history.append(st)
        if callback is not None:
            callback(k, st)
    return history


def _pair_rows(policy: Investigator, pairs: Any, what: str) -> Any:
    """A ``datasets.Dataset`` of TRL preference rows (:meth:`Investigator.row`) from
    :class:`PreferencePair` s; a ``datasets.Dataset`` (or a dict of them) passes through."""
    import datasets

    if isinstance(pairs, (datasets.Dataset, datasets.IterableDataset)):
        return pairs
    if isinstance(pairs, dict):
        return {k: _pair_rows(policy, v, f"{what}[{k!r}]") for k, v in pairs.items()}
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise TypeError(
            f"{what} must be a list of PreferencePair or a datasets.Dataset, got {type(pairs).__name__}"
        )
    pairs = list(pairs)
    if not pairs:
        raise ValueError(f"{what} is empty")
    rows = []
    for i, p in enumerate(pairs):
        if not isinstance(p, PreferencePair):
            raise TypeError(f"{what}[{i}] must be a PreferencePair, got {type(p).__name__}")
        prompt, chosen = policy.row(p.behavior, p.chosen)
        rows.append(
            {"prompt": prompt, "chosen": chosen, "rejected": policy.row(p.behavior, p.rejected)[1]}
        )
    return datasets.Dataset.from_list(rows)


def default_dpo_config(**overrides: Any) -> Any:
    """The ``DPOConfig`` :func:`dpo_trainer` uses when ``args=None``. The paper states no DPO
    hyper-parameters (§3.2 names DPO only), so these are :func:`dpo_round`'s, written down:

    - ``beta=0.1``, ``learning_rate=5e-6`` (the third-party Llama-3.1-8B recipe's, as
      :func:`dpo_round`), sigmoid loss, ``disable_dropout=True`` (TRL's);
    - one pass over the round's pairs (``num_train_epochs=1``: the pairs are on-policy),
      ``per_device_train_batch_size=8`` / ``per_device_eval_batch_size=8`` (TRL's);
    - AdamW with ``weight_decay=0.01`` and a constant learning rate, no gradient clipping
      (``max_grad_norm=0``), no truncation (``max_length=None``), no gradient checkpointing: what
      :func:`dpo_round`'s ``torch.optim.AdamW`` step does;
    - ``output_dir``: a fresh temporary folder, ``save_strategy="no"``, ``report_to=[]``,
      ``logging_steps=1``: nothing is written in the working directory;
    - ``bf16=True`` only on a CUDA device that supports it, otherwise float32 (``use_cpu`` when
      there is no CUDA device), so the defaults run on a CPU machine.

    ``overrides`` replace any of these (``DPOConfig`` keywords).
    """
    from trl import DPOConfig

    from icml25.elicitation.sft import _trl_config

    fields = dict(
        beta=0.1,
        learning_rate=5e-6,
        disable_dropout=True,
        num_train_epochs=1,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        weight_decay=0.01,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=0.0,
        max_length=None,
    )
    return _trl_config(DPOConfig, "icml25-elicit-dpo-", fields, overrides)


def dpo_trainer(
    policy: Investigator,
    ref: Investigator,
    pairs: Sequence[PreferencePair],
    args: Any = None,
    *,
    eval_dataset: Any = None,
    **kwargs: Any,
) -> Any:
    """TRL's ``DPOTrainer`` (sigmoid loss, the same as :func:`dpo_loss`) on the pairs of a round,
    with the SFT investigator as the explicit reference (needs ``icml25[train]``).

    Rows are :meth:`Investigator.row` (a chat investigator gives conversational rows, ended by
    the template's end of turn; a ``"tags"`` one text rows, to which TRL appends the EOS): TRL
    tokenises them exactly as :func:`dpo_round` scores them. ``eval_dataset``: more pairs (or a
    ``datasets.Dataset`` of rows) for ``trainer.evaluate()``. ``args=None``:
    :func:`default_dpo_config` (the defaults of :func:`dpo_round`, a temporary output folder, runs
    on CPU). A bf16/fp16 investigator gets float32 master weights first, as in :func:`dpo_round`.
    Use it for investigators without a restricted vocabulary (TRL normalises over the whole
    vocabulary). ``kwargs`` go to ``DPOTrainer`` (``callbacks=...``).

    The entry point for several GPUs: run the script under ``torchrun --nproc_per_node N`` (or
    ``accelerate launch --num_processes N``); each process takes ``per_device_train_batch_size``
    pairs of every global batch and DDP averages the per-process mean losses, which is the mean
    over the global batch when every process holds as many pairs (give a number of pairs that is a
    multiple of processes x batch: accelerate fills a short last batch by repeating pairs). Two
    gloo processes train to the weights of one process on the same batch
    (tests/elicitation/test_distributed.py). Call ``trainer.save_model(path)`` on every process;
    the main process writes the checkpoint."""
    try:
        import datasets  # noqa: F401
        from trl import DPOTrainer
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError("dpo_trainer needs TRL: pip install 'icml25[train]'") from exc
    from icml25.elicitation.sft import _check_trl_investigator

    _check_trl_investigator(policy, "dpo_round")
    train = _pair_rows(policy, pairs, "pairs")
    evals = None if eval_dataset is None else _pair_rows(policy, eval_dataset, "eval_dataset")
    if args is None:
        args = default_dpo_config()
    policy.mixed_precision()
    trainer = DPOTrainer(
        model=policy.model,
        ref_model=ref.model,
        args=args,
        train_dataset=train,
        eval_dataset=evals,
        processing_class=policy.tokenizer,
        **kwargs,
    )
    check_global_batches(trainer)
    return trainer
