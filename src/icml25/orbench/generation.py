"""Algorithms 1 and 2 of OR-Bench (paper Sec. 3.1-3.2): toxic seeds from a weakly aligned
generator, then rewrites of each seed into seemingly-toxic but safe prompts.

Both stages keep every call's raw reply in a resumable :class:`~icml25.llm.JsonlStore` (one row
per call, keyed by what was asked), and derive their output from the stored calls in a fixed
order, so a rerun after a crash repeats no finished call and yields the same records.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from icml25._validate import as_int, as_real
from icml25.llm.base import ChatBackend
from icml25.llm.store import ItemError, JsonlStore, describe, run_resumable
from icml25.orbench.categories import normalize_category
from icml25.orbench.parsing import extract_bracketed
from icml25.orbench.records import record_id
from icml25.orbench.templates import PromptTemplates

__all__ = [
    "CandidateRecord",
    "SeedRecord",
    "generate_all_seeds",
    "generate_toxic_seeds",
    "rewrite_seeds",
    "rewrite_settings",
    "seed_settings",
]

log = logging.getLogger(__name__)


@dataclass
class SeedRecord:
    """One toxic seed (Algorithm 1's output row)."""

    id: str
    category: str
    prompt: str
    generator: str
    call_idx: int


@dataclass
class CandidateRecord:
    """One over-refusal candidate (Algorithm 2's output row), before moderation."""

    id: str
    category: str
    prompt: str
    toxic_seed: str
    rewriter: str


def _store(
    store: JsonlStore | str | Path | None,
    key: tuple[str, ...],
    settings: dict[str, Any] | None = None,
) -> JsonlStore | None:
    """The stage's store: a path opens one stamped with ``settings`` (rows made with other
    settings are refused, naming what differs); a ready store is used as it is."""
    if store is None or isinstance(store, JsonlStore):
        if isinstance(store, JsonlStore) and store.key_fields != key:
            raise ValueError(
                f"this stage's store is keyed by {key}, got a JsonlStore keyed by {store.key_fields}"
            )
        return store
    return JsonlStore(store, key, settings=settings)


def seed_settings(
    generator: ChatBackend,
    templates: PromptTemplates | None = None,
    *,
    per_call: int = 20,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Everything besides the category and the call index that makes a generator call's reply:
    the settings that stamp :func:`generate_toxic_seeds`' store (see :class:`~icml25.llm.JsonlStore`)."""
    templates = templates or PromptTemplates.default()
    return {
        "stage": "seed_generation",
        "generator": describe(generator),
        "template": templates.seed_generation,
        "per_call": per_call,
        "temperature": temperature,
        "seed": seed,
    }


def rewrite_settings(
    rewriter: ChatBackend,
    templates: PromptTemplates | None = None,
    *,
    n_rewrites: int = 5,
    temperature: float = 0.7,
    seed: int | None = None,
) -> dict[str, Any]:
    """Everything besides the seed's text that makes a rewriter call's reply: the settings that
    stamp :func:`rewrite_seeds`' store."""
    templates = templates or PromptTemplates.default()
    return {
        "stage": "rewrite",
        "rewriter": describe(rewriter),
        "template": templates.rewrite,
        "n_rewrites": n_rewrites,
        "temperature": temperature,
        "seed": seed,
    }


def generate_toxic_seeds(
    generator: ChatBackend,
    category: str,
    n_seeds: int = 2000,
    *,
    per_call: int = 20,
    temperature: float = 1.0,
    store: JsonlStore | str | Path | None = None,
    templates: PromptTemplates | None = None,
    seed: int = 0,
    max_empty_calls: int = 5,
    max_calls: int | None = None,
    official_quirks: bool = False,
    failures: list[ItemError] | None = None,
) -> list[SeedRecord]:
    """Algorithm 1 for one category: ask ``generator`` for ``per_call`` toxic prompts per call
    until ``n_seeds`` distinct ones are collected.

    Args:
        generator: the seed generator G (paper: Mixtral-8x7B, chosen for its weak safety tuning).
        category: one of the ten categories (case and ``_``/space forgiven).
        n_seeds: seeds wanted (official default 2000 per category).
        per_call: prompts asked per call (paper: 20; the same request every call).
        temperature: G's sampling temperature (paper: 1.0).
        store: a JSONL file (or store keyed by ``("category", "call_idx")``) keeping each call's
            raw reply; a rerun replays the stored calls instead of repeating them. A file is
            stamped with :func:`seed_settings` (the generator, template, temperature, seed):
            a rerun with others there is refused, naming what differs.
        seed: call ``i`` is sent with seed ``seed + i``, so a seeded backend does not repeat
            one answer.
        max_empty_calls: stop after this many consecutive calls that parse to nothing (a
            generator that refuses, or calls that failed after the backend's own retries; a
            failed call is an error row of ``store``, retried by the next run), with a warning.
        max_calls: hard cap on calls (default ``10 * ceil(n_seeds / per_call) + 10``), for a
            generator that only repeats itself.
        official_quirks: parse with the official greedy bracket pattern.
        failures: a list that receives one :class:`~icml25.llm.store.ItemError` per call of
            this run that failed (key ``(category, call_idx)``, the exception's type and
            message, e.g. the server's ``HTTP 400`` answer), so a caller can count and report
            them; the function itself only logs them.

    Returns:
        The seeds in call order, deduplicated (``len`` may be below ``n_seeds`` after dedupe or
        an early stop). A call whose reply holds more than needed is truncated.
    """
    category = normalize_category(category)
    n_seeds = as_int("n_seeds", n_seeds, 1)
    per_call = as_int("per_call", per_call, 1)
    max_empty_calls = as_int("max_empty_calls", max_empty_calls, 1)
    temperature = as_real("temperature", temperature, low=0.0)
    seed = as_int("seed", seed)
    cap = 10 * math.ceil(n_seeds / per_call) + 10 if max_calls is None else max_calls
    cap = as_int("max_calls", cap, 1)
    templates = templates or PromptTemplates.default()
    st = _store(
        store,
        ("category", "call_idx"),
        seed_settings(generator, templates, per_call=per_call, temperature=temperature, seed=seed),
    )
    run = _SeedGeneration(
        generator=generator,
        category=category,
        n_seeds=n_seeds,
        per_call=per_call,
        temperature=temperature,
        seed=seed,
        max_empty_calls=max_empty_calls,
        cap=cap,
        st=st,
        messages=[{"role": "user", "content": templates.seed_message(category, per_call)}],
        official_quirks=official_quirks,
        failures=failures,
    )
    run.collect()
    run.report_short_calls()
    if st is not None:
        st.sync()
    return list(run.seen.values())


@dataclass
class _SeedGeneration:
    """Algorithm 1's loop for one category: the same request every call (call ``i`` seeded
    ``seed + i``), each reply parsed and its new prompts kept, until enough distinct seeds,
    too many empty calls in a row, or the call cap."""

    generator: ChatBackend
    category: str
    n_seeds: int
    per_call: int
    temperature: float
    seed: int
    max_empty_calls: int
    cap: int
    st: JsonlStore | None
    messages: list[dict[str, str]]
    official_quirks: bool
    failures: list[ItemError] | None
    seen: dict[str, SeedRecord] = field(default_factory=dict)
    empty: int = 0  # consecutive calls without a parseable prompt
    short: int = 0  # calls whose number of prompts is not ``per_call``
    failed: int = 0  # calls of this run that failed

    def collect(self) -> None:
        """Call G until one of the stopping rules holds (each early stop logs a warning)."""
        for i in range(self.cap):
            rec = self.reply(i)
            self.take(rec, i)
            if len(self.seen) >= self.n_seeds:
                break
            if self.empty >= self.max_empty_calls:
                log.warning(
                    "%s: %d consecutive generator calls gave no parseable prompt (%d of this "
                    "run's calls failed); stopping with %d of %d seeds",
                    self.category,
                    self.empty,
                    self.failed,
                    len(self.seen),
                    self.n_seeds,
                )
                break
        else:
            log.warning(
                "%s: %d calls gave %d distinct seeds of %d wanted (the generator repeats itself)",
                self.category,
                self.cap,
                len(self.seen),
                self.n_seeds,
            )

    def reply(self, i: int) -> dict[str, Any]:
        """Call ``i``'s row: replayed from the store, else asked of G (and stored); a failed
        call is logged, recorded and read as an empty reply."""
        category, st, generator = self.category, self.st, self.generator
        rec = st.get((category, i)) if st is not None else None
        if rec is None or "error" in rec:
            try:
                reply = generator.chat(
                    self.messages, temperature=self.temperature, seed=self.seed + i
                )[0]
            except Exception as exc:  # noqa: BLE001 - recorded, counted as an empty call
                log.warning("%s: generator call %d failed: %s", category, i, exc)
                self.failed += 1
                err = (
                    st.append_error((category, i), exc, generator=generator.name)
                    if st is not None
                    else ItemError((category, i), type(exc).__name__, str(exc)[:2000])
                )
                if self.failures is not None:
                    self.failures.append(err)
                reply = None
            rec = {"category": category, "call_idx": i, "generator": generator.name}
            rec["raw"] = reply or ""
            if st is not None and reply is not None:
                st.append(rec)
        return rec

    def take(self, rec: dict[str, Any], i: int) -> None:
        """Parse one reply's bracketed prompts and keep the new ones, up to ``n_seeds``."""
        items = extract_bracketed(rec["raw"], official_quirks=self.official_quirks)
        if len(items) != self.per_call:
            self.short += 1
        self.empty = self.empty + 1 if not items else 0
        for text in items:
            if text not in self.seen and len(self.seen) < self.n_seeds:
                self.seen[text] = SeedRecord(
                    record_id(text), self.category, text, rec["generator"], i
                )

    def report_short_calls(self) -> None:
        """Log (info) how many calls gave another number of prompts than asked."""
        if self.short:
            log.info(
                "%s: %d call(s) returned a number of prompts other than %d",
                self.category,
                self.short,
                self.per_call,
            )


def generate_all_seeds(
    generator: ChatBackend,
    categories: Sequence[str],
    n_seeds: int,
    *,
    concurrency: int = 8,
    **kwargs: Any,
) -> list[SeedRecord]:
    """:func:`generate_toxic_seeds` for every category, categories in parallel (each category's
    calls stay sequential: dedupe depends on their order), seeds in category order."""
    cats = [normalize_category(c) for c in categories]
    if not cats:
        raise ValueError("categories must not be empty")
    workers = max(1, min(as_int("concurrency", concurrency, 1), len(cats)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(
            pool.map(lambda c: generate_toxic_seeds(generator, c, n_seeds, **kwargs), cats)
        )
    return [s for part in parts for s in part]


def rewrite_seeds(
    rewriter: ChatBackend,
    seeds: Sequence[SeedRecord | dict[str, Any]],
    *,
    n_rewrites: int = 5,
    temperature: float = 0.7,
    store: JsonlStore | str | Path | None = None,
    concurrency: int = 8,
    templates: PromptTemplates | None = None,
    seed: int | None = None,
    retry_errors: bool = False,
    official_quirks: bool = False,
    progress: bool | None = None,
) -> list[CandidateRecord]:
    """Algorithm 2: one rewriter call per seed asking for ``n_rewrites`` boundary prompts.

    Rewrites are parsed with :func:`~icml25.orbench.parsing.extract_bracketed` (enumeration stripped),
    then deduplicated globally in seed order: a prompt produced twice keeps its first seed and
    category (the collision count is logged). A failed call becomes an error row of ``store``
    and its seed contributes nothing; the others go on.

    Args:
        rewriter: the rewriter R (paper: Mixtral-8x7B at temperature 0.7).
        seeds: :class:`SeedRecord` objects or dicts with ``prompt`` and ``category``.
        n_rewrites: rewrites asked per seed (paper: 5).
        store: a JSONL file (or a store keyed by ``"id"``, the seed's id) of raw replies; a file
            is stamped with :func:`rewrite_settings`, and other settings there are refused.
        concurrency: calls in flight.
        seed: passed to the backend with every call (``None``: not sent).

    Returns:
        The candidates in seed order.
    """
    n_rewrites = as_int("n_rewrites", n_rewrites, 1)
    concurrency = as_int("concurrency", concurrency, 1)
    temperature = as_real("temperature", temperature, low=0.0)
    seed = None if seed is None else as_int("seed", seed)
    templates = templates or PromptTemplates.default()
    rows = []
    for i, s in enumerate(seeds):
        d = asdict(s) if isinstance(s, SeedRecord) else dict(s)
        if not isinstance(d.get("prompt"), str) or not d["prompt"].strip():
            raise ValueError(f"seeds[{i}] has no prompt: {d!r:.80}")
        rows.append(
            {
                "id": record_id(d["prompt"]),
                "category": normalize_category(d["category"]),
                "toxic_seed": d["prompt"],
            }
        )
    if not rows:
        raise ValueError("seeds must not be empty")
    rows = list({r["id"]: r for r in reversed(rows)}.values())[::-1]  # one call per seed text
    st = _store(
        store,
        ("id",),
        rewrite_settings(
            rewriter, templates, n_rewrites=n_rewrites, temperature=temperature, seed=seed
        ),
    )
    own = st is None
    if own:
        import tempfile

        tmp = tempfile.TemporaryDirectory()
        st = JsonlStore(Path(tmp.name) / "rewrite_calls.jsonl", "id")

    def work(row: dict[str, Any]) -> dict[str, Any]:
        msg = [
            {"role": "user", "content": templates.rewrite_message(row["toxic_seed"], n_rewrites)}
        ]
        return {
            "rewriter": rewriter.name,
            "raw": rewriter.chat(msg, temperature=temperature, seed=seed)[0],
        }

    run_resumable(
        rows,
        work,
        st,
        key=lambda i, r: dict(r),
        concurrency=concurrency,
        retry_errors=retry_errors,
        progress=progress,
        desc="rewriting seeds",
    )
    seen: dict[str, CandidateRecord] = {}
    collisions = 0
    for row in rows:
        rec = st.get(row["id"])
        if rec is None or "error" in rec:
            continue
        # a reply with more rewrites than asked keeps the first n_rewrites
        for text in extract_bracketed(rec["raw"], official_quirks=official_quirks)[:n_rewrites]:
            if text in seen:
                collisions += seen[text].category != row["category"]
                continue
            seen[text] = CandidateRecord(
                record_id(text), row["category"], text, row["toxic_seed"], rec["rewriter"]
            )
    if collisions:
        log.info("%d rewrite(s) repeated a prompt of another category; kept the first", collisions)
    if own:
        st.close()
        tmp.cleanup()
    return list(seen.values())
