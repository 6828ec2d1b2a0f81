"""From character spans to token roles (paper §3; docs/twa.md "Decisions").

:func:`char_spans_to_token_spans` maps the error spans of a target string onto its tokens with a
fast tokenizer's offsets: a token belongs to a span when its non-space characters overlap the
span by at least one character (a token's offsets often include the space or ``▁`` before the
word). Special tokens (offsets ``(0, 0)``) never belong to a span.

:func:`build_token_roles` applies TWA's trajectory rule: with ``t*`` the first error token,
tokens before ``t*`` are positive (cross-entropy), error-span tokens get the span unlikelihood,
and every other token after ``t*`` is ignored (off-trajectory), EOS included when the translation
has an error. ``ignore_off_trajectory=False`` makes every non-error token positive (ablation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from icml25._validate import as_int, as_real
from icml25.twa.annotations import DEFAULT_SEVERITY_WEIGHTS, ErrorSpan

__all__ = ["UNLOCALIZED_POLICIES", "TokenRoles", "build_token_roles", "char_spans_to_token_spans"]

UNLOCALIZED_POLICIES = ("no_positive", "ignore", "drop_example")


def _fast(tokenizer) -> None:
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            f"{type(tokenizer).__name__} is not a fast tokenizer: character offsets need "
            "return_offsets_mapping, which only fast (Rust) tokenizers give; load it with "
            "AutoTokenizer.from_pretrained(..., use_fast=True)"
        )


def char_spans_to_token_spans(
    text: str,
    spans: Sequence[ErrorSpan],
    tokenizer,
    *,
    add_special_tokens: bool = False,
    max_length: int | None = None,
    weights: Mapping[str, float] | str = DEFAULT_SEVERITY_WEIGHTS,
) -> tuple[list[tuple[int, int, float]], list[ErrorSpan]]:
    """``(token_spans, unlocalized)``: the target-side spans of ``text`` as half-open token ranges
    ``(a, b, weight)`` over ``tokenizer(text)``'s tokens (truncated to ``max_length``; spans
    cut by the truncation are clipped, spans beyond it dropped), and the spans that cannot be
    placed: source-side ones, zero-length ones and those covering no token. Identical token spans
    are merged keeping the largest weight; spans of weight 0 (Neutral) are skipped."""
    _fast(tokenizer)
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if max_length is not None:
        max_length = as_int("max_length", max_length, 0)
    enc = tokenizer(text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    offsets = list(enc["offset_mapping"])
    if max_length is not None:
        offsets = offsets[:max_length]
    # each token's non-space characters
    core = []
    for a, b in offsets:
        if a == b:  # special token
            core.append(None)
            continue
        while a < b and (text[a].isspace() or text[a] == "▁"):
            a += 1
        core.append((a, b) if a < b else None)
    out: dict[tuple[int, int], float] = {}
    unlocalized: list[ErrorSpan] = []
    for s in spans:
        if not isinstance(s, ErrorSpan):
            raise TypeError(f"spans must be ErrorSpan objects, got {type(s).__name__}")
        w = s.resolved_weight(weights)
        if w <= 0:
            continue
        if s.side != "target" or s.start == s.end:
            unlocalized.append(s)
            continue
        if s.end > len(text):
            raise ValueError(f"span [{s.start}, {s.end}) is outside the text of length {len(text)}")
        hit = [i for i, c in enumerate(core) if c is not None and c[0] < s.end and s.start < c[1]]
        if not hit:
            if _covered_by_truncation(s, text, enc, max_length):
                continue  # entirely beyond max_length: dropped
            unlocalized.append(s)
            continue
        key = (hit[0], hit[-1] + 1)
        out[key] = max(out.get(key, 0.0), w)
    return [(a, b, w) for (a, b), w in sorted(out.items())], unlocalized


def _covered_by_truncation(s: ErrorSpan, text, enc, max_length) -> bool:
    if max_length is None:
        return False
    full = list(enc["offset_mapping"])
    kept_end = max((b for a, b in full[:max_length] if a != b), default=0)
    return s.start >= kept_end


@dataclass
class TokenRoles:
    """Per target token: ``positive`` (cross-entropy), ``span_ids`` (-1: not in an error span;
    a token in several spans: the earliest-starting one) and ``span_weights (K,)``;
    ``span_mask (K, T)``: the tokens of each span, overlaps included (what :func:`twa_loss`
    scores each span over); ``drop`` is True when the example must be skipped
    (``unlocalized="drop_example"``)."""

    positive: Tensor
    span_ids: Tensor
    span_weights: Tensor
    drop: bool = False
    span_mask: Tensor | None = None


def build_token_roles(
    T: int,
    token_spans: Sequence[tuple[int, int, float]],
    *,
    ignore_off_trajectory: bool = True,
    has_unlocalized: bool = False,
    unlocalized: Literal["no_positive", "ignore", "drop_example"] = "no_positive",
) -> TokenRoles:
    """TWA's roles for ``T`` target tokens (EOS included, last). A token in several spans belongs
    to the earliest-starting one for ``span_ids``; ``span_mask`` keeps every span's own tokens,
    so that a span nested in another or overlapping it keeps its whole term (docs/twa.md,
    "Decisions"). ``has_unlocalized``: the translation has an error that could not
    be placed: ``"no_positive"`` keeps its spans but trusts no token as positive (default),
    ``"ignore"`` acts as if that error did not exist, ``"drop_example"`` marks the example to
    drop."""
    T = as_int("T", T, 0)
    if unlocalized not in UNLOCALIZED_POLICIES:
        raise ValueError(f"unlocalized must be one of {UNLOCALIZED_POLICIES}, got {unlocalized!r}")
    spans = []
    for sp in token_spans:
        if len(sp) != 3:
            raise ValueError(f"a token span is (start, end, weight), got {sp!r}")
        a, b = as_int("a token span's start", sp[0]), as_int("a token span's end", sp[1])
        w = as_real("a token span's weight", sp[2], low=0)
        if not 0 <= a < b <= T:
            raise ValueError(f"token span [{a}, {b}) must satisfy 0 <= start < end <= T = {T}")
        if not w >= 0:
            raise ValueError(f"span weights must be >= 0, got {w}")
        if w > 0:
            spans.append((a, b, w))
    spans.sort()
    span_ids = torch.full((T,), -1, dtype=torch.long)
    for k, (a, b, _) in enumerate(spans):
        free = span_ids[a:b] < 0
        span_ids[a:b] = torch.where(free, torch.full_like(span_ids[a:b], k), span_ids[a:b])
    weights = torch.tensor([w for _, _, w in spans], dtype=torch.float32)
    span_mask = torch.zeros(len(spans), T, dtype=torch.bool)
    for k, (a, b, _) in enumerate(spans):
        span_mask[k, a:b] = True
    in_span = span_ids >= 0
    if has_unlocalized and unlocalized == "drop_example":
        return TokenRoles(torch.zeros(T, dtype=torch.bool), span_ids, weights, True, span_mask)
    if has_unlocalized and unlocalized == "no_positive":
        positive = torch.zeros(T, dtype=torch.bool)
    elif ignore_off_trajectory:
        t_star = spans[0][0] if spans else T
        positive = torch.arange(T) < t_star
    else:
        positive = ~in_span
    return TokenRoles(positive & ~in_span, span_ids, weights, False, span_mask)
