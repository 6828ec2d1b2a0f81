"""Algorithm 4 of OR-Bench (paper Sec. 3.4): the hard subset and the toxic control set.

The paper's public code does not contain the hard-set selection; :func:`select_hard` is the
parameterised rule docs/orbench.md describes: a prompt of the over-refusal pool is hard when at
least ``k_min`` models of a *selection panel* refuse it, and it still passes moderation under a
stricter rule (``"unanimous"``: every moderator says safe). Selecting by refusal enriches the
prompts that leaked through moderation (a toxic prompt is refused by every safe model), so the
re-moderation is on by default and the set's contamination should always be reported.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from icml25._validate import as_int
from icml25.orbench.categories import CATEGORIES, normalize_category
from icml25.orbench.moderation import EnsembleModerator, ModerationResult, vote_threshold
from icml25.orbench.records import ORBenchRecord

__all__ = ["HardSelection", "select_hard", "select_toxic"]


@dataclass
class HardSelection:
    """The hard subset and how it was derived (enough to re-derive it).

    ``rejections[id]``: how many panel models refused that pool prompt; ``removed_by_remoderation``:
    ids refused by the panel but flagged by the stricter re-moderation.
    """

    records: list[ORBenchRecord]
    panel: list[str]
    k_min: int
    rule: str | int | None
    rejections: dict[str, int]
    removed_by_remoderation: list[str] = field(default_factory=list)
    per_category: int | None = None

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def metadata(self) -> dict[str, Any]:
        return {
            "panel": self.panel,
            "k_min": self.k_min,
            "remoderation_rule": self.rule,
            "per_category": self.per_category,
            "n_hard": len(self.records),
            "n_removed_by_remoderation": len(self.removed_by_remoderation),
            "rejections": self.rejections,
        }


def _records(pool: Sequence[Any]) -> list[ORBenchRecord]:
    if isinstance(pool, (str, bytes)) or not isinstance(pool, Sequence) or not pool:
        raise ValueError("pool must be a non-empty list of ORBenchRecord (the 80K-style pool)")
    out = []
    for i, r in enumerate(pool):
        if isinstance(r, ORBenchRecord):
            out.append(r)
        elif isinstance(r, Mapping):
            out.append(ORBenchRecord.from_dict(dict(r)))
        else:
            d = getattr(r, "__dict__", None)
            if not d or "prompt" not in d:
                raise TypeError(f"pool[{i}] is not a record with a prompt: {r!r:.80}")
            out.append(ORBenchRecord(d["prompt"], d["category"], "80k", d.get("id", "")))
    return out


def select_hard(
    pool: Sequence[Any],
    panel_results: Mapping[str, Any],
    *,
    k_min: int = 3,
    per_category: int | None = None,
    remoderate: EnsembleModerator
    | Mapping[str, ModerationResult]
    | Sequence[ModerationResult]
    | None = None,
    rule: str | int = "unanimous",
    seed: int = 0,
) -> HardSelection:
    """The hard subset of ``pool``.

    Args:
        pool: the over-refusal pool (records that passed the moderation ensemble).
        panel_results: ``{panel model: refusals}``; refusals are an :class:`EvalResult` on the
            pool, a ``{id: refused}`` dict, or a list of bools aligned with ``pool``.
        k_min: refusals needed (the paper's rule is unpublished; our default 3, docs/orbench.md).
        per_category: keep at most this many per category (a seeded sample); ``None``: all.
        remoderate: the stricter second moderation: an :class:`EnsembleModerator` (run again on
            the hard candidates, under ``rule``), or the stored :class:`ModerationResult` of the
            pool (re-decided under ``rule`` from the same votes: no new calls). ``False`` skips
            it; ``None`` (not given) skips it with a warning, since the hard set then
            concentrates the toxic prompts that leaked through moderation.
        rule: the re-moderation's voting rule (default ``"unanimous"``).
        seed: seeds the per-category sample.
    """
    records = _records(pool)
    if not isinstance(panel_results, Mapping) or not panel_results:
        raise ValueError("panel_results must be a non-empty dict {panel model: refusals}")
    k_min = as_int("k_min", k_min, 1, len(panel_results))  # at most the panel's size
    if per_category is not None:
        per_category = as_int("per_category", per_category, 1)
    seed = as_int("seed", seed)  # random.Random refuses numpy integers with a raw TypeError
    counts = {r.id: 0 for r in records}
    for name, res in panel_results.items():
        refused = _refusals(name, res, records)
        if refused and not set(refused) & set(counts):
            raise ValueError(
                f"panel model {name!r}: none of its {len(refused)} refusal ids is a pool prompt's "
                "id (ids are record_id(prompt)); was it evaluated on this pool?"
            )
        for r in records:
            counts[r.id] += bool(refused.get(r.id, False))
    hard = [r for r in records if counts[r.id] >= k_min]
    removed: list[str] = []
    if remoderate is None:
        import warnings

        warnings.warn(
            "select_hard without remoderate=: no stricter re-moderation of the hard candidates, "
            "which concentrates the toxic prompts that leaked through moderation; pass the "
            "EnsembleModerator or the pool's ModerationResults (remoderate=False silences this)",
            stacklevel=2,
        )
        remoderate = False
    if remoderate is not False:
        if isinstance(remoderate, EnsembleModerator):
            strict = EnsembleModerator(remoderate.moderators, rule)
            flagged = {m.id for m in strict.moderate(hard) if m.is_toxic} if hard else set()
            failed = {i for i, _ in getattr(strict, "last_failures", [])}
            flagged |= failed  # a prompt the stricter check could not moderate is not kept
        else:
            results = remoderate.values() if isinstance(remoderate, Mapping) else remoderate
            by_id = {m.id: m for m in results}
            missing = [r.id for r in hard if r.id not in by_id]
            if missing:
                raise ValueError(
                    f"{len(missing)} hard candidate(s) have no stored moderation result (first "
                    f"id {missing[0]}); pass the EnsembleModerator to re-run it instead"
                )
            flagged = {r.id for r in hard if by_id[r.id].toxic_under(rule)}
        removed = [r.id for r in hard if r.id in flagged]
        hard = [r for r in hard if r.id not in flagged]
    if per_category is not None:
        rng = random.Random(seed)
        kept = []
        for c in CATEGORIES:
            group = [r for r in hard if r.category == c]
            kept_ids = {r.id for r in rng.sample(group, min(per_category, len(group)))}
            kept += [r for r in group if r.id in kept_ids]
        order = {r.id: i for i, r in enumerate(hard)}
        hard = sorted(kept, key=lambda r: order[r.id])
    out = [ORBenchRecord(r.prompt, r.category, "hard-1k", r.id, r.toxic_seed) for r in hard]
    return HardSelection(
        out,
        list(panel_results),
        k_min,
        rule if remoderate is not False else None,
        counts,
        removed,
        per_category,
    )


def _refusals(name: str, res: Any, records: list[ORBenchRecord]) -> dict[str, bool]:
    rows = getattr(res, "per_prompt", None)
    if rows is not None:
        return {r["id"]: bool(r.get("refused")) for r in rows}
    if isinstance(res, Mapping):
        return {str(k): bool(v) for k, v in res.items()}
    if isinstance(res, Sequence) and not isinstance(res, (str, bytes)):
        if len(res) != len(records):
            raise ValueError(
                f"panel model {name!r}: {len(res)} refusals for a pool of {len(records)} prompts"
            )
        return {r.id: bool(v) for r, v in zip(records, res)}
    raise TypeError(
        f"panel model {name!r}: refusals must be an EvalResult, a dict id -> bool or a list of "
        f"bools, got {type(res).__name__}"
    )


def select_toxic(
    moderated: Sequence[ModerationResult],
    *,
    per_category: int = 66,
    seed: int = 0,
    rule: str | int | None = None,
) -> list[ORBenchRecord]:
    """OR-Bench-Toxic: a stratified sample of prompts the ensemble flags as toxic, at most
    ``per_category`` per category (paper: 655 prompts over 10 categories; the sampling is
    unpublished, docs/orbench.md). ``moderated`` are :class:`ModerationResult` objects of
    records with a category (typically the toxic seeds); ``rule`` re-decides their stored votes
    (default: the decision as stored)."""
    per_category = as_int("per_category", per_category, 1)
    seed = as_int("seed", seed)
    if isinstance(moderated, (str, bytes)) or not isinstance(moderated, Sequence) or not moderated:
        raise ValueError("moderated must be a non-empty list of ModerationResult")
    rng = random.Random(seed)
    out = []
    for c in CATEGORIES:
        group = []
        for m in moderated:
            if not isinstance(m, ModerationResult):
                raise TypeError(f"expected ModerationResult objects, got {type(m).__name__}")
            if m.category is None:
                raise ValueError(
                    f"moderation result {m.id} has no category: moderate records (with their "
                    "category), not bare strings"
                )
            toxic = (
                m.is_toxic if rule is None else sum(m.votes) >= vote_threshold(rule, len(m.votes))
            )
            if toxic and normalize_category(m.category) == c:
                group.append(m)
        for m in rng.sample(group, min(per_category, len(group))):
            out.append(ORBenchRecord(m.prompt, c, "toxic", m.id))
    return out
