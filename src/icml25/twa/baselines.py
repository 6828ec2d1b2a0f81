"""The paper's baselines on the same annotated data (paper §5; docs/twa.md): Filter + SFT (SFT on
the translations without annotated errors), DPO on pairs of translations of the same source
(chosen = lower MQM penalty; TRL's ``prompt``/``chosen``/``rejected`` columns, so
``trl.DPOTrainer`` takes them as they are) and TWA-seq (the whole translation as one unit).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.preference import IGNORE_INDEX, dpo_loss
from icml25.twa.align import TokenRoles
from icml25.twa.annotations import DEFAULT_SEVERITY_WEIGHTS, AnnotatedTranslation

__all__ = [
    "build_dpo_pairs",
    "dpo_loss",
    "filter_sft_examples",
    "sft_loss",
    "train_dpo",
    "twa_seq_roles",
]


def _check_data(data) -> list[AnnotatedTranslation]:
    if isinstance(data, (str, bytes, Mapping)) or not isinstance(data, Sequence):
        raise TypeError(f"data must be a list of AnnotatedTranslation, got {type(data).__name__}")
    for i, d in enumerate(data):
        if not isinstance(d, AnnotatedTranslation):
            raise TypeError(f"data[{i}] must be an AnnotatedTranslation, got {type(d).__name__}")
    return list(data)


def filter_sft_examples(
    data: Sequence[AnnotatedTranslation],
    max_penalty: float = 0.0,  # keep error-free translations (threshold unverified, docs/twa.md)
    weights: Mapping[str, float] | str = DEFAULT_SEVERITY_WEIGHTS,
) -> list[AnnotatedTranslation]:
    """The translations whose MQM penalty is at most ``max_penalty`` (Filter + SFT's data)."""
    max_penalty = as_real("max_penalty", max_penalty, low=0, finite=False)
    return [d for d in _check_data(data) if d.mqm_penalty(weights) <= max_penalty]


def build_dpo_pairs(
    data: Sequence[AnnotatedTranslation],
    *,
    max_pairs_per_source: int = 3,
    min_gap: float = 0.0,
    rng: random.Random | int | None = None,
    prompt_template: str = "{source} =",
    completion_prefix: str = " ",
    weights: Mapping[str, float] | str = DEFAULT_SEVERITY_WEIGHTS,
) -> list[dict[str, str]]:
    """Preference pairs from translations of the same source: ``chosen`` has the lower penalty,
    by more than ``min_gap`` (equal penalties are never paired); at most
    ``max_pairs_per_source`` pairs per source, drawn at random (``rng``). Rows are TRL's
    ``{"prompt", "chosen", "rejected"}`` plus ``chosen_penalty``/``rejected_penalty``; the
    completions start with ``completion_prefix`` because TRL joins prompt and completion
    without a separator."""
    max_pairs_per_source = as_int("max_pairs_per_source", max_pairs_per_source, 1)
    min_gap = as_real("min_gap", min_gap, low=0)
    r = rng if isinstance(rng, random.Random) else random.Random(rng)
    by_src: dict[str, list[AnnotatedTranslation]] = {}
    for d in _check_data(data):
        by_src.setdefault(d.source, []).append(d)
    out = []
    for src, group in by_src.items():
        seen, cands = set(), []
        for a, b in itertools.combinations(group, 2):
            pa, pb = a.mqm_penalty(weights), b.mqm_penalty(weights)
            if abs(pa - pb) <= min_gap or a.target == b.target:
                continue
            w, l_, pw, pl = (a, b, pa, pb) if pa < pb else (b, a, pb, pa)
            key = (w.target, l_.target)
            if key in seen:
                continue
            seen.add(key)
            cands.append((w, l_, pw, pl))
        r.shuffle(cands)
        for w, l_, pw, pl in cands[:max_pairs_per_source]:
            out.append(
                {
                    "prompt": prompt_template.format(source=src),
                    "chosen": completion_prefix + w.target,
                    "rejected": completion_prefix + l_.target,
                    "chosen_penalty": pw,
                    "rejected_penalty": pl,
                }
            )
    return out


def sft_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Token-mean cross-entropy over the labelled positions (``-100`` ignored), in float32."""
    if logits.ndim != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (B, T, V) and labels (B, T), got {tuple(logits.shape)} and "
            f"{tuple(labels.shape)}"
        )
    if not bool((labels != IGNORE_INDEX).any()):
        return logits.sum() * 0.0
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX
    )


def twa_seq_roles(T: int, total_weight: float, cap: float = 25.0) -> TokenRoles:
    """TWA-seq (the paper's sequence-level baseline; exact form unverified, docs/twa.md): an
    error-free translation (``total_weight = 0``) gets cross-entropy on all ``T`` tokens, EOS
    included; otherwise one unlikelihood term on the whole sequence with weight
    ``min(total_weight, cap)``."""
    T = as_int("T", T, 1)
    total_weight = as_real("total_weight", total_weight, low=0)
    cap = as_real("cap", cap, low=0)
    if total_weight == 0:
        return TokenRoles(
            torch.ones(T, dtype=torch.bool),
            torch.full((T,), -1),
            torch.zeros(0),
            span_mask=torch.zeros(0, T, dtype=torch.bool),
        )
    return TokenRoles(
        torch.zeros(T, dtype=torch.bool),
        torch.zeros(T, dtype=torch.long),
        torch.tensor([min(total_weight, cap)]),
        span_mask=torch.ones(1, T, dtype=torch.bool),
    )


def _pair_batch(collate, rows: Sequence[Mapping[str, str]], sources: Sequence[str]):
    """Chosen and rejected batches (spans empty: labels on the whole completion + EOS)."""
    chosen = [AnnotatedTranslation(s, r["chosen"].lstrip()) for s, r in zip(sources, rows)]
    rejected = [AnnotatedTranslation(s, r["rejected"].lstrip()) for s, r in zip(sources, rows)]
    return collate(chosen), collate(rejected)


def _seq_logp(model, batch, model_type: str) -> Tensor:
    from icml25.preference import sequence_logprob

    p = next(model.parameters())
    b = {k: v.to(p.device) for k, v in batch.items()}
    if model_type == "causal":
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        logits = out.logits if hasattr(out, "logits") else out
        return sequence_logprob(logits[:, :-1], b["labels"][:, 1:])
    out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"])
    return sequence_logprob(out.logits, b["labels"])


def train_dpo(
    model,
    ref_model,
    tokenizer,
    pairs: Sequence[Mapping[str, str]],
    *,
    sources: Sequence[str] | None = None,
    beta: float = 0.1,  # DPO and TRL default
    lr: float = 2e-4,
    batch_size: int = 32,
    epochs: int = 1,
    max_grad_norm: float | None = 1.0,
    model_type: str = "causal",
    prompt_fn=None,
    seed: int = 0,
) -> list[float]:
    """Sigmoid DPO on :func:`build_dpo_pairs` rows with a frozen ``ref_model`` (the offline
    loop; at scale hand the same rows to ``trl.DPOTrainer``). ``sources``: the source sentence of
    each pair (default: read back from the prompt with the ``"{source} ="`` template); prompts are
    encoded like :class:`TWACollator` (``prompt_fn``), so DPO, SFT and TWA see identical
    inputs. As TRL's ``DPOTrainer``: the policy's log-probs are taken without dropout (so the
    first loss is log 2 when ``model`` equals ``ref_model``) and a bf16/fp16 model trains with
    float32 master weights under autocast (:class:`icml25.llm.MixedPrecision`). Returns the loss
    per step; the model is left in ``eval()`` mode. Single-process: under ``torchrun`` it
    raises, naming ``trl.DPOTrainer``, the data-parallel entry point for the same rows."""
    from icml25.llm import MixedPrecision, check_finite_loss, dropout_disabled
    from icml25.llm.distributed import refuse_several_processes
    from icml25.twa.collate import TWACollator

    refuse_several_processes("train_dpo", "trl.DPOTrainer on the same rows")
    if not pairs:
        raise ValueError("pairs is empty: nothing to train on")
    for i, row in enumerate(pairs):
        missing = [k for k in ("prompt", "chosen", "rejected") if k not in row]
        if missing:
            raise KeyError(f"pairs[{i}] lacks {missing}; rows come from build_dpo_pairs")
    if sources is None:
        if not all(r["prompt"].endswith(" =") for r in pairs):
            raise ValueError("pass sources= when the prompts were not made with '{source} ='")
        sources = [r["prompt"][:-2] for r in pairs]
    if len(sources) != len(pairs):
        raise ValueError(f"{len(sources)} sources for {len(pairs)} pairs")
    collate = TWACollator(tokenizer, model_type=model_type, prompt_fn=prompt_fn)
    ref_model.eval()  # scored under no_grad; its parameters are left as they are
    mp = MixedPrecision.prepare(model)  # before the optimizer: it must hold the float32 masters
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    rng = random.Random(seed)
    losses = []
    model.train()
    for _ in range(epochs):
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            cb, rb = _pair_batch(collate, [pairs[i] for i in idx], [sources[i] for i in idx])
            with torch.no_grad(), mp.autocast():
                ref_w, ref_l = (
                    _seq_logp(ref_model, cb, model_type),
                    _seq_logp(ref_model, rb, model_type),
                )
            with dropout_disabled(model), mp.autocast():
                pol_w, pol_l = _seq_logp(model, cb, model_type), _seq_logp(model, rb, model_type)
            out = dpo_loss(pol_w, pol_l, ref_w, ref_l, beta)
            check_finite_loss(out.loss, f"train_dpo step {len(losses)}")
            opt.zero_grad()
            out.loss.backward()
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
            opt.step()
            losses.append(float(out.loss.detach()))
    model.eval()
    return losses
