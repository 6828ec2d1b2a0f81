"""Elicitation metrics (arXiv:2502.01236, §5): success, likelihood, coverage and diversity."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from icml25._validate import as_int, as_real
from icml25.elicitation.investigator import _check_strings

__all__ = [
    "distinct_n",
    "mean_logprob",
    "pairwise_jaccard",
    "success_rate",
    "successes",
    "trigger_coverage",
]


def successes(
    target: Any,
    prompts: Sequence[str],
    behaviors: Sequence[str],
    *,
    max_new_tokens: int = 64,
    match: str = "exact",
) -> list[bool]:
    """Whether the target's greedy response to each prompt elicits its behaviour:
    ``match="exact"`` (equal after stripping), ``"prefix"`` (starts with it) or ``"contains"``."""
    ps, bs = (
        _check_strings("prompts", prompts, allow_empty=True),
        _check_strings("behaviors", behaviors),
    )
    if len(ps) != len(bs):
        raise ValueError(f"{len(ps)} prompts but {len(bs)} behaviors")
    if match not in ("exact", "prefix", "contains"):
        raise ValueError(f"match must be 'exact', 'prefix' or 'contains', got {match!r}")
    ys = [y.strip() for y in target.generate(ps, max_new_tokens, greedy=True)]
    if match == "exact":
        return [y == b.strip() for y, b in zip(ys, bs)]
    if match == "prefix":
        return [y.startswith(b.strip()) for y, b in zip(ys, bs)]
    return [b.strip() in y for y, b in zip(ys, bs)]


def success_rate(target: Any, prompts: Sequence[str], behaviors: Sequence[str], **kw: Any) -> float:
    """Share of prompts whose greedy response elicits the behaviour (:func:`successes`)."""
    s = successes(target, prompts, behaviors, **kw)
    return sum(s) / len(s)


def mean_logprob(
    target: Any, prompts: Sequence[str], behaviors: Sequence[str], normalize: str = "sum"
) -> float:
    """Mean ``log p_m(b | x)``."""
    return float(
        torch.as_tensor(target.logprob(list(prompts), list(behaviors), normalize=normalize)).mean()
    )


def trigger_coverage(credited: Sequence[Sequence[int | None]], threshold: float = 0.05) -> float:
    """Mean over behaviours of the number of strategies holding at least ``threshold`` of that
    behaviour's successful samples. ``credited[j]``: the strategy (e.g. trigger index) credited
    to each successful sample of behaviour ``j`` (``None`` entries are ignored); a behaviour
    without successes covers 0."""
    threshold = as_real("threshold", threshold, low=0, high=1, low_open=True)
    if isinstance(credited, (str, bytes)) or not hasattr(credited, "__len__"):
        raise TypeError(
            "credited must be a list with one list of credited strategies per behaviour "
            f"(e.g. [[0, 1, 0], [2]]), got {type(credited).__name__}"
        )
    if len(credited) == 0:
        raise ValueError("credited is empty")
    out = []
    for j, ks in enumerate(credited):
        if isinstance(ks, (str, bytes)) or not hasattr(ks, "__iter__"):
            raise TypeError(
                "credited must be a list with one list of credited strategies per behaviour "
                f"(e.g. [[0, 1, 0], [2]]), got credited[{j}] = {ks!r} ({type(ks).__name__}), "
                "not a list"
            )
        ks = [k for k in ks if k is not None]
        if not ks:
            out.append(0)
            continue
        c = Counter(ks)
        out.append(sum(v / len(ks) >= threshold for v in c.values()))
    return sum(out) / len(out)


def distinct_n(texts: Sequence[str], n: int = 2) -> float:
    """Distinct word n-grams over all n-grams of ``texts`` (0 when there are none)."""
    n = as_int("n", n, 1)
    if isinstance(texts, (str, bytes)):
        raise TypeError("texts must be a list of strings, not one string")
    grams = [tuple(w[i : i + n]) for t in texts for w in [t.split()] for i in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def pairwise_jaccard(texts: Sequence[str]) -> float:
    """Mean Jaccard similarity of the word sets of every pair of texts (lower = more diverse)."""
    sets = [set(t.split()) for t in _check_strings("texts", texts, allow_empty=True)]
    if len(sets) < 2:
        raise ValueError("pairwise_jaccard needs at least 2 texts")
    tot, n = 0.0, 0
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            u = sets[i] | sets[j]
            tot += len(sets[i] & sets[j]) / len(u) if u else 1.0
            n += 1
    return tot / n
