"""Response log-probabilities and the sequential KL (paper §2, Table 1; TDPO, Zeng et al. 2024).

For a response ``y`` of ``|y|`` labelled tokens (prompt and padding carry label -100; EOS counts):
``LP(y) = Σ_t log π(y_t | x, y_<t)`` and the length-normalised ``A(y) = LP(y) / |y|``.
``D_seq(y) = Σ_t KL(π_ref(·|x, y_<t) ‖ π_θ(·|x, y_<t))`` over the same positions.
Log-softmaxes are taken in float32 (float64 stays float64) by :mod:`icml25.preference`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from icml25.preference import IGNORE_INDEX, shift_for_causal_lm, token_logprobs

__all__ = ["response_logps", "sequential_kl_from_logits"]


def _lengths(labels: Tensor, what: str = "response") -> Tensor:
    n = (labels != IGNORE_INDEX).sum(-1)
    if bool((n == 0).any()):
        bad = int((n == 0).nonzero()[0, 0])
        raise ValueError(
            f"example {bad} of the batch has an empty {what} (|y| = 0 after "
            "truncation): every row needs at least one labelled token"
        )
    return n


def response_logps(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(sum, mean, length)``, each ``(B,)``, of the response log-probs of a causal LM.

    ``logits`` ``(B, T, V)`` and ``labels`` ``(B, T)`` are unshifted (``labels[:, t]`` is token
    ``t`` or -100); the shift (``logits[:, :-1]`` scores ``labels[:, 1:]``) happens here.
    Raises ``ValueError`` naming the row when a response is empty, ``FloatingPointError`` when
    the logits hold NaN/inf.
    """
    for n, x in (("logits", logits), ("labels", labels)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{n} must be a torch tensor, got {type(x).__name__}")
    if logits.ndim != 3:
        raise ValueError(f"logits must be (B, T, V), got shape {tuple(logits.shape)}")
    lg, lb = shift_for_causal_lm(logits, labels)
    lp = token_logprobs(lg, lb)
    if not bool(torch.isfinite(lp).all()):
        raise FloatingPointError("NaN or inf in the response log-probabilities (check the logits)")
    n = _lengths(lb.to(lp.device))
    s = lp.sum(-1)
    return s, s / n.to(s.dtype), n


def sequential_kl_from_logits(policy_logits: Tensor, ref_logits: Tensor, labels: Tensor) -> Tensor:
    """``(B,)`` ``Σ_t KL(π_ref ‖ π_θ)`` over the response positions (unshifted labels as in
    :func:`response_logps`); differentiable in ``policy_logits``."""
    for n, x in (("policy_logits", policy_logits), ("ref_logits", ref_logits), ("labels", labels)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{n} must be a torch tensor, got {type(x).__name__}")
    if policy_logits.shape != ref_logits.shape or policy_logits.ndim != 3:
        raise ValueError(
            f"policy and reference logits must share one (B, T, V) shape, got "
            f"{tuple(policy_logits.shape)} and {tuple(ref_logits.shape)}"
        )
    if labels.shape != policy_logits.shape[:2]:
        raise ValueError(
            f"labels must be (B, T) = {tuple(policy_logits.shape[:2])}, got {tuple(labels.shape)}"
        )
    dt = torch.promote_types(policy_logits.dtype, torch.float32)
    lp = torch.log_softmax(policy_logits[:, :-1].to(dt), -1)
    lr = torch.log_softmax(ref_logits[:, :-1].to(device=lp.device, dtype=dt), -1).detach()
    terms = F.kl_div(lp, lr, log_target=True, reduction="none")  # p_ref (log p_ref - log p)
    if bool(torch.isneginf(lr).any()):  # a token the reference masks out adds 0 (not 0 * -inf)
        terms = terms.masked_fill(torch.isneginf(lr), 0.0)
    kl = terms.sum(-1)
    mask = (labels[:, 1:] != IGNORE_INDEX).to(lp.device)
    _lengths(labels[:, 1:])
    return (kl * mask).sum(-1)
