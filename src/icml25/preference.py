"""Sequence log-probabilities and the sigmoid-DPO loss, shared by the papers that train language
models on preferences or on per-token signals (TWA, FPO, elicitation, proxy feedback).

``token_logprobs(logits, labels)`` is the teacher-forced ``log p(y_t | y_<t, x)`` of every label
(``log_softmax`` in float32 for bf16/fp16 logits, in float64 for float64 ones; ``labels == -100``
give 0). The caller aligns
``logits[:, t]`` with ``labels[:, t]`` (for a causal LM: ``logits[:, :-1]`` and ``labels[:, 1:]``,
or :func:`shift_for_causal_lm`). ``sequence_logprob`` sums them per sequence.

``dpo_loss`` is the sigmoid DPO objective of Rafailov et al. (2023, Eq. 7) with TRL's
``loss_type="sigmoid"`` conventions (``label_smoothing`` = cDPO's ε):
``-(1 - ε) log σ(β h) - ε log σ(-β h)``, ``h = (log π(y_w) - log π_ref(y_w)) - (log π(y_l) - log
π_ref(y_l))``, averaged over pairs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from icml25._validate import as_real

__all__ = [
    "IGNORE_INDEX",
    "PREFERENCE_COLUMNS",
    "DPOOutput",
    "dpo_loss",
    "dpo_losses",
    "check_preference_record",
    "load_preferences",
    "sequence_logprob",
    "shift_for_causal_lm",
    "token_logprobs",
]

IGNORE_INDEX = -100  # transformers' and TRL's label padding


def _check_pair(logits: Tensor, labels: Tensor) -> None:
    if not isinstance(logits, Tensor) or not isinstance(labels, Tensor):
        raise TypeError(
            f"logits and labels must be tensors, got {type(logits).__name__} and "
            f"{type(labels).__name__}"
        )
    if logits.ndim != 3:
        raise ValueError(f"logits must be (B, T, V), got shape {tuple(logits.shape)}")
    if labels.shape != logits.shape[:2]:
        raise ValueError(
            f"labels must be (B, T) = {tuple(logits.shape[:2])} to match the logits, got "
            f"{tuple(labels.shape)}"
        )
    if labels.dtype not in (torch.long, torch.int32, torch.int64):
        raise TypeError(f"labels must be an integer tensor, got {labels.dtype}")
    valid = labels != IGNORE_INDEX
    if bool(valid.any()):
        lab = labels[valid]
        lo, hi = int(lab.min()), int(lab.max())
        if lo < 0 or hi >= logits.shape[-1]:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"label {bad} is outside the vocabulary 0..{logits.shape[-1] - 1} (or use "
                f"{IGNORE_INDEX} for positions without a label)"
            )


def shift_for_causal_lm(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """``(logits[:, :-1], labels[:, 1:])``: a causal LM's logits at ``t`` score token ``t + 1``."""
    return logits[:, :-1], labels[:, 1:]


def token_logprobs(logits: Tensor, labels: Tensor) -> Tensor:
    """``(B, T)`` ``log p(labels[:, t])`` under ``logits[:, t]`` (0 where the label is -100), in
    float32 or wider; differentiable in the logits, on the logits' device."""
    _check_pair(logits, labels)
    labels = labels.to(logits.device)
    valid = labels != IGNORE_INDEX
    dt = torch.promote_types(logits.dtype, torch.float32)  # bf16/fp16 up to float32; f64 stays
    logp = torch.log_softmax(logits.to(dt), dim=-1)
    picked = logp.gather(-1, labels.clamp(min=0).long().unsqueeze(-1)).squeeze(-1)
    if bool((torch.isnan(picked) & ~valid).any()):
        # an all -inf (or NaN) row at an unlabelled position: its log-softmax is NaN, and the
        # backward would send that NaN into the logits under the zero weight. Rare, so only
        # then a second pass over logits with those rows zeroed
        x = logits.to(dt).masked_fill(~valid.unsqueeze(-1), 0.0)
        logp = torch.log_softmax(x, dim=-1)
        picked = logp.gather(-1, labels.clamp(min=0).long().unsqueeze(-1)).squeeze(-1)
    return torch.where(valid, picked, torch.zeros_like(picked))


def sequence_logprob(logits: Tensor, labels: Tensor, *, average: bool = False) -> Tensor:
    """``(B,)`` summed token log-probabilities of each sequence's labelled positions
    (``average=True``: their mean, SimPO/IPO-style length normalisation; 0 for a sequence with
    no label)."""
    lp = token_logprobs(logits, labels)
    if not average:
        return lp.sum(-1)
    n = (labels.to(lp.device) != IGNORE_INDEX).sum(-1).clamp(min=1)
    return lp.sum(-1) / n


class DPOOutput(tuple):
    """``(loss, chosen_rewards, rejected_rewards)``; the rewards are ``β (log π - log π_ref)``,
    detached, as TRL logs them."""

    __slots__ = ()

    def __new__(cls, loss: Tensor, chosen_rewards: Tensor, rejected_rewards: Tensor):
        return super().__new__(cls, (loss, chosen_rewards, rejected_rewards))

    @property
    def loss(self) -> Tensor:
        return self[0]

    @property
    def chosen_rewards(self) -> Tensor:
        return self[1]

    @property
    def rejected_rewards(self) -> Tensor:
        return self[2]


def _check_logps(xs: tuple, names: tuple) -> None:
    for n, x in zip(names, xs):
        if not isinstance(x, Tensor):
            raise TypeError(
                f"{n} must be a tensor of summed log-probs (N,), got {type(x).__name__}"
            )
    shapes = {tuple(x.shape) for x in xs}
    if len(shapes) != 1 or xs[0].ndim != 1 or xs[0].numel() == 0:
        raise ValueError(
            f"the four log-prob tensors must share one non-empty (N,) shape, got {shapes}"
        )


def dpo_losses(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    beta: float = 0.1,
    *,
    label_smoothing: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Per-pair sigmoid-DPO losses ``(N,)`` and logits ``u = β h`` ``(N,)`` (float32 or wider,
    on the policy's device); :func:`dpo_loss` is their mean.

    A NaN log-prob propagates to its pair's loss (the training loops stop or skip on it); a
    ``-inf`` one (a zero-probability sequence) gives the loss's limit, except where the margin
    ``h = (π_c - ref_c) - (π_r - ref_r)`` is itself undefined (``-inf`` on both sides:
    ``inf - inf``): that is a ``ValueError`` naming the pair."""
    xs = (policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    _check_logps(xs, ("policy_chosen", "policy_rejected", "ref_chosen", "ref_rejected"))
    beta = as_real("beta", beta, low=0, low_open=True)
    eps = as_real("label_smoothing", label_smoothing, low=0, high=0.5, high_open=True)
    dev = policy_chosen.device
    dt = torch.promote_types(policy_chosen.dtype, torch.float32)
    pw, pl = policy_chosen.to(dt), policy_rejected.to(device=dev, dtype=dt)
    rw = ref_chosen.to(device=dev, dtype=dt).detach()
    rl = ref_rejected.to(device=dev, dtype=dt).detach()
    u = beta * ((pw - rw) - (pl - rl))
    # a NaN input propagates (the training loops' non-finite policies see it); a NaN made here
    # from NaN-free inputs is an undefined margin
    made = torch.isnan(u) & ~(pw.isnan() | pl.isnan() | rw.isnan() | rl.isnan())
    if bool(made.any()):
        i = int(made.nonzero()[0, 0])
        raise ValueError(
            f"the DPO margin of pair {i} is undefined: (policy_chosen - ref_chosen) - "
            f"(policy_rejected - ref_rejected) = ({float(pw[i])} - {float(rw[i])}) - "
            f"({float(pl[i])} - {float(rl[i])}) is inf - inf (log-probs of -inf on both sides); "
            "drop the pair or clamp the log-probs"
        )
    # without smoothing, -log sigma(u) alone: at u = +inf (a rejected log-prob of -inf) the
    # smoothed form's 0 * (-inf) would be NaN where the loss is 0
    losses = -F.logsigmoid(u) if eps == 0 else -(1 - eps) * F.logsigmoid(u) - eps * F.logsigmoid(-u)
    return losses, u


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    beta: float = 0.1,  # DPO paper and TRL's DPOConfig default
    *,
    label_smoothing: float = 0.0,
) -> DPOOutput:
    """Sigmoid DPO on summed sequence log-probs ``(N,)`` of the chosen and rejected answers under
    the policy and the frozen reference. Returns :class:`DPOOutput` (mean loss, rewards)."""
    losses, _ = dpo_losses(
        policy_chosen,
        policy_rejected,
        ref_chosen,
        ref_rejected,
        beta,
        label_smoothing=label_smoothing,
    )
    dev = policy_chosen.device
    dt = losses.dtype
    cw = beta * (policy_chosen.to(dt) - ref_chosen.to(device=dev, dtype=dt))
    cl = beta * (policy_rejected.to(device=dev, dtype=dt) - ref_rejected.to(device=dev, dtype=dt))
    return DPOOutput(losses.mean().float(), cw.detach().float(), cl.detach().float())


# -- preference records in TRL's format (files users have) -----------------------------------
#: TRL's preference columns (``prompt`` may be folded into ``chosen``/``rejected``: "implicit prompt")
PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")
COLUMNS = PREFERENCE_COLUMNS


def check_preference_record(i: int, r: Any) -> dict[str, Any]:
    """Record ``i`` as a dict with TRL's columns (strings or chat-message lists); ``TypeError``/
    ``ValueError`` naming the record and the missing or malformed column."""
    if not isinstance(r, dict):
        if hasattr(r, "keys") and hasattr(r, "__getitem__"):  # a Mapping (e.g. a datasets row)
            r = dict(r)
        else:
            raise TypeError(
                f"preference record {i} must be a dict with keys {COLUMNS}, got "
                f"{type(r).__name__} {r!r:.60}"
            )
    missing = [c for c in COLUMNS if c not in r]
    if missing:
        raise ValueError(
            f"preference record {i} lacks {missing} (has {sorted(r)}); TRL's columns are {COLUMNS}"
        )
    for c in COLUMNS:
        v = r[c]
        if not (
            isinstance(v, str) or (isinstance(v, list) and all(isinstance(m, dict) for m in v))
        ):
            raise TypeError(
                f"record {i}: {c!r} must be a string or a list of chat messages, got "
                f"{type(v).__name__}"
            )
    return r


def load_preferences(source: Any, *, split: str = "train") -> list[dict[str, Any]]:
    """Preference records (dicts with ``prompt``, ``chosen``, ``rejected`` and any extra columns)
    from a path (``.jsonl``, ``.json``, ``.csv``, ``.parquet``, a ``datasets.save_to_disk``
    folder), a ``datasets.Dataset``/``DatasetDict`` (``split``), a pandas DataFrame or a list of
    dicts. Nothing is downloaded. Raises ``ValueError`` naming the first bad record."""
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if os.path.isdir(path):
            import datasets

            source = datasets.load_from_disk(path)
        elif not os.path.isfile(path):
            raise FileNotFoundError(f"no preference data at {path!r}")
        elif path.endswith(".jsonl"):
            with open(path, encoding="utf-8") as f:
                source = []
                for ln, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            source.append(json.loads(line))
                        except json.JSONDecodeError as e:
                            raise ValueError(f"{path}:{ln} is not valid JSON: {e}") from None
        elif path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                source = json.load(f)
        elif path.endswith(".csv"):
            import csv

            with open(path, newline="", encoding="utf-8") as f:
                source = list(csv.DictReader(f))
        elif path.endswith(".parquet"):
            import pyarrow.parquet as pq

            source = pq.read_table(path).to_pylist()
        else:
            raise ValueError(
                f"unsupported preference file {path!r}: use .jsonl, .json, .csv, "
                ".parquet or a datasets folder"
            )
    if hasattr(source, "iloc") and hasattr(source, "to_dict"):  # pandas DataFrame
        source = source.to_dict("records")
    elif type(source).__name__ in ("DatasetDict", "IterableDatasetDict"):
        if split not in source:
            raise ValueError(
                f"split {split!r} is not in the DatasetDict (has {list(source.keys())}); "
                "pass split=..."
            )
        source = source[split]
    if isinstance(source, dict):
        if all(c in source for c in COLUMNS) and all(isinstance(source[c], list) for c in COLUMNS):
            raise TypeError(
                "got a dict of columns; pass a list of records (dicts with prompt/"
                "chosen/rejected) or datasets.Dataset.from_dict(columns)"
            )
        raise TypeError("got a single dict; pass a list of preference records")
    if hasattr(source, "column_names") and hasattr(source, "__getitem__"):  # datasets.Dataset
        source = [source[i] for i in range(len(source))]
    if not isinstance(source, Sequence) or isinstance(source, (str, bytes)):
        raise TypeError(
            f"cannot read preference data from {type(source).__name__}: use a path, "
            "a list of dicts, a datasets.Dataset or a pandas DataFrame"
        )
    recs = [check_preference_record(i, r) for i, r in enumerate(source)]
    if not recs:
        raise ValueError("the preference data is empty")
    return recs
