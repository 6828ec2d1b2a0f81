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

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "IGNORE_INDEX",
    "DPOOutput",
    "dpo_loss",
    "dpo_losses",
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
    on the policy's device); :func:`dpo_loss` is their mean."""
    xs = (policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    _check_logps(xs, ("policy_chosen", "policy_rejected", "ref_chosen", "ref_rejected"))
    if isinstance(beta, bool) or not float(beta) > 0:
        raise ValueError(f"beta must be > 0, got {beta!r}")
    if not 0.0 <= float(label_smoothing) < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing!r}")
    dev = policy_chosen.device
    dt = torch.promote_types(policy_chosen.dtype, torch.float32)
    pw, pl = policy_chosen.to(dt), policy_rejected.to(device=dev, dtype=dt)
    rw = ref_chosen.to(device=dev, dtype=dt).detach()
    rl = ref_rejected.to(device=dev, dtype=dt).detach()
    u = float(beta) * ((pw - rw) - (pl - rl))
    eps = float(label_smoothing)
    losses = -(1 - eps) * F.logsigmoid(u) - eps * F.logsigmoid(-u)
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
    losses, _ = dpo_losses(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta,
                           label_smoothing=label_smoothing)  # fmt: skip
    dev = policy_chosen.device
    dt = losses.dtype
    cw = beta * (policy_chosen.to(dt) - ref_chosen.to(device=dev, dtype=dt))
    cl = beta * (policy_rejected.to(device=dev, dtype=dt) - ref_rejected.to(device=dev, dtype=dt))
    return DPOOutput(losses.mean().float(), cw.detach().float(), cl.detach().float())
