"""Synthesis of guideline-aligned reasoning supervision (arXiv:2502.04040, §4.2).

For every training query the teacher is shown the guidelines and asked to reason step by step
following them inside the reasoning format's tags, then answer; ``k`` candidates are sampled and
kept only if every filter accepts them (rejection sampling); a query with no accepted candidate is
asked again up to ``max_rounds`` times and then dropped. The acceptance rate is reported per kind
(harmful / helpful), because a skewed acceptance silently changes the training mix.

Each query's outcome is appended to a JSONL store as it arrives (``icml25.llm.JsonlStore``): a rerun
skips what is done, a crash loses at most the queries in flight, and a failing teacher request is an
error row that does not stop the other queries.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from icml25._validate import as_int, as_real
from icml25.safety_reasoning.data import SRGExample, _queries
from icml25.safety_reasoning.filters import Filter, as_filter
from icml25.safety_reasoning.formats import ReasoningFormat
from icml25.safety_reasoning.guidelines import DEFAULT_GUIDELINES, teacher_messages

__all__ = ["SynthesisReport", "synthesize"]


@dataclass
class SynthesisReport:
    """What :func:`synthesize` returns.

    Attributes:
        examples: the accepted :class:`SRGExample` (at most ``keep`` per query).
        acceptance_rate: accepted candidates / sampled candidates.
        acceptance_by_kind: the same per query kind.
        queries_kept_by_kind: fraction of queries with at least one accepted candidate, per kind.
        per_filter_rejects: candidates rejected by each filter (the first filter to reject).
        dropped: ids of the queries with no accepted candidate.
        failed: ids of the queries whose teacher requests failed (error rows in the store).
        errors: ``{query id: error message}`` of the failed queries.
        n_candidates: candidates sampled.
    """

    examples: list[SRGExample]
    acceptance_rate: float
    acceptance_by_kind: dict[str, float]
    queries_kept_by_kind: dict[str, float]
    per_filter_rejects: dict[str, int]
    dropped: list[str]
    failed: list[str] = field(default_factory=list)
    n_candidates: int = 0
    errors: dict[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v:.0%}" for k, v in self.acceptance_by_kind.items())
        return (
            f"{len(self.examples)} examples; acceptance {self.acceptance_rate:.1%} ({kinds}); "
            f"rejects {dict(self.per_filter_rejects)}; {len(self.dropped)} queries dropped, "
            f"{len(self.failed)} failed"
        )


def _seed(seed: int, qid: str, rnd: int) -> int:
    h = hashlib.sha256(f"{seed}:{qid}:{rnd}".encode()).digest()
    return int.from_bytes(h[:4], "little")


def synthesize(
    teacher: Any,
    queries: Sequence[Any],
    guidelines: Sequence[Any] = DEFAULT_GUIDELINES,
    *,
    k: int = 4,
    temperature: float = 0.8,
    filters: Sequence[Filter] | None = None,
    store: str | os.PathLike | None = None,
    concurrency: int = 8,
    fmt: ReasoningFormat | None = None,
    keep: int = 1,
    max_rounds: int = 1,
    max_tokens: int = 1024,
    seed: int = 0,
    progress: bool | None = None,
    retry_errors: bool = True,
    keep_both: bool = False,
) -> SynthesisReport:
    """Sample, filter and keep SRG's reasoning supervision for ``queries``.

    Args:
        teacher: an ``icml25.llm`` chat backend (``OpenAIChat``, ``HFChat``, ``CallableChat``...).
        queries: :class:`~icml25.safety_reasoning.data.Query` objects (the in-distribution
            training queries; no attack prompts).
        guidelines: the guideline set shown to the teacher (never to the student).
        k: candidates per query and round (4; our choice, docs/safety_reasoning.md).
        temperature: sampling temperature of the teacher (0.8; our choice).
        filters: applied in order; default ``[FormatFilter(), OutcomeFilter(
            KeywordRefusalDetector.default())]``. Add a ``GuidelineFilter`` (and a safety judge in
            the ``OutcomeFilter``) for the paper's full rejection sampling.
        store: JSONL path of the per-query records (resumable); ``None`` keeps nothing on disk.
            A row is keyed by everything that made it (the teacher's identity, the sampling
            settings, the format, the guidelines, every filter's parameters: the store's
            ``settings``); a rerun with any of them changed raises
            :class:`icml25.llm.store.SettingsMismatch` naming what differs, never returning the
            other run's rows. ``keep_both=True`` keeps both runs' rows in the file instead.
        concurrency: queries in flight.
        fmt: the reasoning format (default ``<think>``/``</think>``).
        keep: accepted candidates kept per query (1).
        max_rounds: sampling rounds for a query whose candidates were all rejected.
        seed: every (query, round) gets its own seed, a hash of ``seed``, the query id and the
            round, so reruns draw the same candidates and two queries never share a stream.
        retry_errors: a rerun asks again the queries whose last record is an error (default);
            ``False`` keeps them failed.

    Returns:
        :class:`SynthesisReport`. A failing teacher request (or filter) is recorded as an error
        row and reported in ``failed`` with its message in ``errors``; the other queries are
        kept. When every query failed, ``RuntimeError`` quotes the first error (a setup mistake
        such as a wrong URL or a filter that cannot run).
    """
    qs = _queries(queries)
    k, keep, max_rounds = (
        as_int("k", k, 1),
        as_int("keep", keep, 1),
        as_int("max_rounds", max_rounds, 1),
    )
    concurrency, max_tokens = (
        as_int("concurrency", concurrency, 1),
        as_int("max_tokens", max_tokens, 1),
    )
    if keep > k * max_rounds:
        raise ValueError(f"keep={keep} exceeds the k * max_rounds = {k * max_rounds} candidates")
    temperature = as_real("temperature", temperature, low=0.0)
    seed = as_int("seed", seed)  # stored in the settings (JSON) and hashed as text
    _check_objects(teacher, fmt, filters, qs)
    fmt = fmt or ReasoningFormat()
    if filters is None:
        from icml25.llm import KeywordRefusalDetector
        from icml25.safety_reasoning.filters import FormatFilter, OutcomeFilter

        filters = [FormatFilter(), OutcomeFilter(KeywordRefusalDetector.default())]
    sampler = _Sampler(
        teacher,
        guidelines,
        fmt,
        [as_filter(f, i) for i, f in enumerate(filters)],
        k=k,
        keep=keep,
        max_rounds=max_rounds,
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
    )
    records = _run_stored(
        qs,
        sampler,
        sampler.settings(filters),
        store,
        concurrency=concurrency,
        progress=progress,
        retry_errors=retry_errors,
        keep_both=keep_both,
    )
    return _report(qs, records)


def _check_objects(teacher: Any, fmt: Any, filters: Any, qs: list[Any]) -> None:
    """The teacher, format and filters are the objects ``synthesize`` needs, and the query ids
    are unique."""
    if not hasattr(teacher, "chat"):
        raise TypeError(f"teacher must be an icml25.llm chat backend, got {type(teacher).__name__}")
    if fmt is not None and not isinstance(fmt, ReasoningFormat):
        raise TypeError(f"fmt must be a ReasoningFormat, got {type(fmt).__name__}: {fmt!r:.40}")
    if filters is not None and (
        isinstance(filters, (str, bytes)) or not isinstance(filters, Sequence)
    ):
        raise TypeError(f"filters must be a list of filters, got {type(filters).__name__}")
    for i, f in enumerate(filters or []):
        if isinstance(f, type):
            raise TypeError(
                f"filters[{i}] is the class {f.__name__}; pass an instance, e.g. {f.__name__}(...)"
            )
    ids = [q.id for q in qs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"two queries share the id {dup!r}; give each query its own id")


@dataclass
class _Sampler:
    """SRG's rejection sampling for one query (paper Sec. 3): ``k`` candidates per round from
    the teacher shown the guidelines, each through the filter chain in order, until ``keep`` are
    accepted or ``max_rounds`` rounds are spent."""

    teacher: Any
    guidelines: Sequence[Any]
    fmt: ReasoningFormat
    chain: list[Filter]
    k: int
    keep: int
    max_rounds: int
    temperature: float
    max_tokens: int
    seed: int

    def settings(self, filters: Sequence[Any]) -> dict[str, Any]:
        """Everything that makes a query's row: the teacher, the sampling, the format, the
        guidelines and every filter's parameters (its detector's, its judge's)."""
        from icml25.llm.store import describe
        from icml25.safety_reasoning.guidelines import render_guidelines

        return {
            "pipeline": "safety_reasoning.synthesize",
            "teacher": describe(self.teacher),
            "guidelines": render_guidelines(self.guidelines),
            "k": self.k,
            "temperature": self.temperature,
            "keep": self.keep,
            "max_rounds": self.max_rounds,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "format": describe(self.fmt),
            "filters": [
                {"name": f.name, "filter": describe(g)} for f, g in zip(self.chain, filters)
            ],
        }

    def _candidates(self, msgs: list[dict[str, str]], qid: str, rnd: int) -> list[Any]:
        from icml25.llm import Completion

        sampling = dict(
            n=self.k,
            temperature=float(self.temperature),
            max_tokens=self.max_tokens,
            seed=_seed(self.seed, qid, rnd),
        )
        if hasattr(self.teacher, "complete"):  # keeps a server's separate reasoning_content
            return self.teacher.complete(msgs, **sampling)
        return [Completion(t) for t in self.teacher.chat(msgs, **sampling)]

    def __call__(self, q: Any) -> dict[str, Any]:
        msgs = teacher_messages(q.text, self.guidelines, self.fmt)
        accepted: list[dict[str, Any]] = []
        rejects: Counter[str] = Counter()
        n_cand = 0
        for rnd in range(self.max_rounds):
            for j, cand in enumerate(self._candidates(msgs, q.id, rnd)):
                n_cand += 1
                parsed = self.fmt.split_completion(cand)
                rejected_by = next((f.name for f in self.chain if not f(q, parsed).accept), None)
                if rejected_by is not None:
                    rejects[rejected_by] += 1
                elif len(accepted) < self.keep:
                    example = SRGExample(q, parsed.reasoning or "", parsed.answer, rnd * self.k + j)
                    accepted.append(example.to_dict())
            if len(accepted) >= self.keep:
                break
        return {"accepted": accepted, "rejects": dict(rejects), "n_candidates": n_cand}


def _run_stored(
    qs: list[Any],
    sampler: _Sampler,
    settings: dict[str, Any],
    store: str | os.PathLike | None,
    *,
    concurrency: int,
    progress: bool | None,
    retry_errors: bool,
    keep_both: bool,
) -> dict[str, dict[str, Any] | None]:
    """Run the sampler over the queries through the resumable store; each query's last record
    (``None`` when there is none of this query)."""
    from icml25.llm import JsonlStore, run_resumable
    from icml25.llm.store import content_hash

    # a row is keyed by the query's id and stamped with a hash of its text and kind: a query
    # relabelled (harmful -> helpful) or reworded under the same id is asked again, never given
    # the row of the query that had that id before
    content = {q.id: content_hash(f"{q.kind}\0{q.text}".encode())[:16] for q in qs}

    def other_query(rec: dict[str, Any]) -> bool:
        return rec.get("query_hash") != content[rec["id"]]

    path = store if store is not None else _temp_path()
    st = JsonlStore(
        path, key="id", settings=settings, on_mismatch="separate" if keep_both else "refuse"
    )
    try:
        run_resumable(
            qs,
            sampler,
            st,
            key=lambda _i, q: {"id": q.id, "query_hash": content[q.id]},
            concurrency=concurrency,
            progress=progress,
            retry_errors=retry_errors,
            desc="SRG synthesis",
            redo=other_query,
        )
        records = {q.id: st.get(q.id) for q in qs}
        # an error row of another query under this id (not retried without retry_errors)
        return {
            i: (None if r is not None and r.get("query_hash") != content[i] else r)
            for i, r in records.items()
        }
    finally:
        st.close()
        if store is None:
            os.unlink(path) if os.path.exists(path) else None


def _report(qs: list[Any], records: dict[str, dict[str, Any] | None]) -> SynthesisReport:
    """Tally the records into the report (acceptance by query kind, rejects per filter, the
    dropped and failed queries); every query failing is a ``RuntimeError``."""
    examples, dropped, failed = [], [], []
    errors: dict[str, str] = {}
    rejects: Counter[str] = Counter()
    cand_kind: Counter[str] = Counter()
    acc_kind: Counter[str] = Counter()
    kept_kind: Counter[str] = Counter()
    n_kind: Counter[str] = Counter()
    for q in qs:
        rec = records[q.id]
        n_kind[q.kind] += 1
        if rec is None or "error" in rec:
            failed.append(q.id)
            err = (rec or {}).get("error") or {}
            errors[q.id] = (
                f"{err.get('type', 'Error')}: {err.get('message', 'not run')}"
                if isinstance(err, dict)
                else str(err)
            )
            continue
        rejects.update(rec["rejects"])
        cand_kind[q.kind] += rec["n_candidates"]
        n_acc = rec["n_candidates"] - sum(rec["rejects"].values())
        acc_kind[q.kind] += n_acc
        if rec["accepted"]:
            kept_kind[q.kind] += 1
            examples += [SRGExample.from_dict(r) for r in rec["accepted"]]
        else:
            dropped.append(q.id)
    total = sum(cand_kind.values())
    if failed and len(failed) == len(qs):
        first = errors[failed[0]]
        raise RuntimeError(
            f"every query failed ({len(qs)}); the first error: {first}. Fix it and rerun: the "
            "failed queries are asked again"
        )
    return SynthesisReport(
        examples=examples,
        acceptance_rate=sum(acc_kind.values()) / total if total else 0.0,
        acceptance_by_kind={kd: acc_kind[kd] / cand_kind[kd] for kd in cand_kind if cand_kind[kd]},
        queries_kept_by_kind={kd: kept_kind[kd] / n_kind[kd] for kd in n_kind},
        per_filter_rejects=dict(rejects),
        dropped=dropped,
        failed=failed,
        n_candidates=total,
        errors=errors,
    )


def _temp_path() -> str:
    import tempfile

    fd, path = tempfile.mkstemp(prefix="icml25-srg-", suffix=".jsonl")
    os.close(fd)
    os.unlink(path)
    return path
