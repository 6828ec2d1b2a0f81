"""Evaluation: win rates (paper Table 2's measure, with a programmatic judge in our repro),
reward accuracy (Table 2 right, "Acc", read as ``P[A_θ(y_w) > A_θ(y_l)]`` on held-out pairs),
next-token entropy along the model's own samples (the diversity column) and the sequential KL to
the reference (the drift that FPO's constraint controls).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from icml25.fpo.data import PreferenceCollator
from icml25.fpo.forward import position_ids, preference_pass
from icml25.fpo.logps import sequential_kl_from_logits

__all__ = [
    "head_to_head",
    "reward_accuracy",
    "sequential_kl",
    "token_entropy",
    "win_outcomes",
    "win_rate",
]


def _scores(name: str, x: Any) -> list[float]:
    if hasattr(x, "tolist"):
        x = x.tolist()
    try:
        out = [float(v) for v in x]
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(x).__name__}") from None
    bad = [i for i, v in enumerate(out) if math.isnan(v)]
    if bad:
        raise ValueError(
            f"{name} holds NaN at item {bad[0]} ({len(bad)} in all): a missing score "
            "is not a loss; drop or re-score the item"
        )
    return out


def win_outcomes(scores_a: Sequence[float], scores_b: Sequence[float]) -> list[float]:
    """Per item ``1`` if A scores higher, ``0.5`` on a tie, ``0`` otherwise."""
    a, b = _scores("scores_a", scores_a), _scores("scores_b", scores_b)
    if len(a) != len(b) or not a:
        raise ValueError(
            f"scores_a and scores_b must be non-empty and equally long, got {len(a)} and {len(b)}"
        )
    return [1.0 if x > y else 0.5 if x == y else 0.0 for x, y in zip(a, b)]


def win_rate(scores_a: Sequence[float], scores_b: Sequence[float]) -> float:
    """Win rate of A over B: mean of :func:`win_outcomes` (a win 1, a tie 0.5)."""
    o = win_outcomes(scores_a, scores_b)
    return sum(o) / len(o)


def head_to_head(scores: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
    """``out[a][b]`` = win rate of model ``a`` over ``b`` for every pair of models scored on
    the same items."""
    if not isinstance(scores, Mapping) or len(scores) < 2:
        raise ValueError("scores must map at least two model names to per-item scores")
    return {a: {b: win_rate(scores[a], scores[b]) for b in scores if b != a} for a in scores}


def _batches(dataset: Any, collator: PreferenceCollator, batch_size: int):
    for s in range(0, len(dataset), batch_size):
        recs = []
        for i in range(s, min(len(dataset), s + batch_size)):
            r = dict(dataset[i])
            r.setdefault("idx", i)
            recs.append(r)
        yield collator(recs)


@torch.no_grad()
def reward_accuracy(
    model: nn.Module,
    tokenizer: Any,
    dataset: Any,
    *,
    batch_size: int = 64,
    max_length: int = 1024,
    max_prompt_length: int = 512,
) -> float:
    """``P[A_θ(y_w) > A_θ(y_l)]`` over the pairs of ``dataset`` (length-normalised log-probs;
    method-agnostic, our reading of the paper's "Acc")."""
    col = PreferenceCollator(tokenizer, max_length, max_prompt_length)
    was = model.training
    model.eval()
    hits = total = 0
    try:
        for b in _batches(dataset, col, batch_size):
            mw, ml = preference_pass(model, b).halves("mean")
            hits += int((mw > ml).sum())
            total += len(mw)
    finally:
        model.train(was)
    return hits / total


@contextlib.contextmanager
def _eval(*models: nn.Module) -> Iterator[None]:
    """Evaluation mode (no dropout) for the call, each model's mode restored after."""
    modes = [m.training for m in models]
    for m in models:
        m.eval()
    try:
        yield
    finally:
        for m, t in zip(models, modes):
            m.train(t)


@torch.no_grad()
def sequential_kl(policy: nn.Module, ref_model: nn.Module, batch: dict[str, Any]) -> Tensor:
    """``(rows,)`` ``Σ_t KL(π_ref ‖ π_θ)`` over each row's response tokens, for a collated batch
    (:class:`PreferenceCollator`: rows are the chosen sequences, then the rejected ones); both
    models in eval mode for the call."""
    if not isinstance(batch, dict) or "labels" not in batch:
        raise TypeError(
            "batch must be a collated dict with input_ids, attention_mask and labels "
            "(PreferenceCollator(tok)(records))"
        )
    with _eval(policy, ref_model):
        a = preference_pass(policy, batch, keep_logits=True, role="policy")
        b = preference_pass(ref_model, batch, keep_logits=True, role="reference model")
    dev = a.logits.device
    return sequential_kl_from_logits(a.logits, b.logits.to(dev), batch["labels"].to(dev))


@torch.no_grad()
def dataset_sequential_kl(
    policy: nn.Module, ref_model: nn.Module, tokenizer: Any, dataset: Any, *, batch_size: int = 64
) -> tuple[Tensor, Tensor]:
    """``(kl_chosen, kl_rejected)``, each ``(N,)``, over a preference dataset."""
    col = PreferenceCollator(tokenizer)
    ws, ls = [], []
    for b in _batches(dataset, col, batch_size):
        kl = sequential_kl(policy, ref_model, b).cpu()
        n = len(kl) // 2
        ws.append(kl[:n])
        ls.append(kl[n:])
    return torch.cat(ws), torch.cat(ls)


@torch.no_grad()
def token_entropy(
    model: nn.Module,
    tokenizer: Any,
    prompts: Sequence[Any],
    responses: Sequence[str],
    *,
    batch_size: int = 64,
) -> float:
    """Mean next-token entropy (nats) of ``model`` along its own samples: over the response
    positions of ``(prompt, response)``. Prompts are rendered as the collator renders them:
    strings as plain text, lists of chat messages with the chat template (pass
    ``[{"role": "user", "content": p}]`` for a chat model). Eval mode for the call."""
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(
            f"prompts and responses must be non-empty and equally long, got "
            f"{len(prompts)} and {len(responses)}"
        )
    col = PreferenceCollator(tokenizer)
    dev = next(model.parameters()).device
    with _eval(model):
        return _entropy(model, col, prompts, responses, batch_size, dev)


def _entropy(model, col, prompts, responses, batch_size, dev) -> float:
    tot, cnt = 0.0, 0
    for s in range(0, len(prompts), batch_size):
        recs = []
        for p, r in zip(prompts[s : s + batch_size], responses[s : s + batch_size]):
            resp = [{"role": "assistant", "content": r}] if isinstance(p, list) else r
            recs.append({"prompt": p, "chosen": resp, "rejected": resp})
        b = col(recs)
        n = b["input_ids"].shape[0] // 2
        ids, att = b["input_ids"][:n].to(dev), b["attention_mask"][:n].to(dev)
        logits = (
            model(
                input_ids=ids, attention_mask=att, position_ids=position_ids(att), use_cache=False
            )
            .logits[:, :-1]
            .float()
        )
        lp = torch.log_softmax(logits, -1)
        ent = -(lp.exp() * lp).sum(-1)
        mask = (b["labels"][:n, 1:] != -100).to(dev)
        tot += float((ent * mask).sum())
        cnt += int(mask.sum())
    return tot / max(cnt, 1)
