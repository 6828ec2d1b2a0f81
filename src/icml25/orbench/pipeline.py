"""The whole OR-Bench build (paper Sec. 3, Fig. 2): seeds -> rewrites -> moderation -> pool ->
hard subset and toxic control set, one resumable JSONL store per stage.

``out_dir`` holds, in pipeline order: ``seed_calls.jsonl`` (raw generator replies) ->
``seeds.jsonl``; ``rewrite_calls.jsonl`` -> ``candidates.jsonl``; ``moderation.jsonl`` (every
vote and raw reply) -> ``or-bench-80k.jsonl`` (the pool); ``seed_moderation.jsonl`` ->
``or-bench-toxic.jsonl``; with a panel, ``panel.jsonl`` (every panel answer) ->
``or-bench-hard-1k.jsonl``; ``failed.jsonl`` (every failed call of every stage, generation
included: stage, key, the exception's type and message, e.g. the server's ``HTTP 400`` answer)
and ``metadata.json``.
The ``*_calls``/``moderation``/``panel`` stores are what a rerun resumes from; the other files are
rewritten from them, identically, at the end of every run.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from icml25.llm.base import ChatBackend
from icml25.llm.store import ItemError, JsonlStore, json_safe
from icml25.orbench.categories import CATEGORIES, normalize_category
from icml25.orbench.evaluation import EvalResult, evaluate
from icml25.orbench.generation import (
    generate_all_seeds,
    rewrite_seeds,
    rewrite_settings,
    seed_settings,
)
from icml25.orbench.moderation import EnsembleModerator, LLMModerator
from icml25.orbench.records import ORBenchRecord
from icml25.orbench.selection import select_hard, select_toxic
from icml25.orbench.templates import PromptTemplates

__all__ = ["BuildReport", "build_orbench", "write_jsonl"]


@dataclass
class BuildReport:
    """Counts of every stage and where its output is."""

    out_dir: str
    n_seeds: int
    n_candidates: int
    n_pool: int
    n_flagged: int
    n_toxic: int
    n_hard: int | None
    n_failed: int
    failed: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    n_removed_by_remoderation: int = 0
    empty_categories: list[str] = field(default_factory=list)

    def summary(self) -> str:
        hard = "no panel" if self.n_hard is None else str(self.n_hard)
        if self.n_removed_by_remoderation:
            hard += f" ({self.n_removed_by_remoderation} more removed by the re-moderation)"
        stages = ", ".join(f"{k} {v}" for k, v in self.failed.items() if v)
        text = (
            f"{self.n_seeds} seeds -> {self.n_candidates} candidates -> pool {self.n_pool} "
            f"({self.n_flagged} flagged toxic), hard {hard}, toxic {self.n_toxic}; "
            f"{self.n_failed} failed calls/items{f' ({stages})' if stages else ''} (failed.jsonl)"
        )
        if self.empty_categories:
            text += f"; no seed in {', '.join(self.empty_categories)}"
        return text


def write_jsonl(rows: Sequence[Any], path: Path) -> Path:
    """Rewrite ``path`` with one JSON object per row (atomic: a temp file, then rename); strict
    JSON: a non-finite number is written ``null``."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            d = (
                r.to_dict()
                if hasattr(r, "to_dict")
                else asdict(r)
                if hasattr(r, "__dataclass_fields__")
                else r
            )
            f.write(json.dumps(json_safe(d), ensure_ascii=True, allow_nan=False) + "\n")
    tmp.replace(path)
    return path


def _check_same_build(out: Path, config: dict[str, Any]) -> None:
    """A rerun in an existing ``out_dir`` resumes only the same build: other models, prompts or
    settings there would silently mix with the stored calls."""
    meta = out / "metadata.json"
    if not meta.is_file():
        return
    old = json.loads(meta.read_text(encoding="utf-8")).get("config")
    if old is not None and old != config:
        diff = ", ".join(
            f"{k}: {old.get(k)!r} -> {v!r}" for k, v in config.items() if old.get(k) != v
        )
        raise ValueError(
            f"{str(out)!r} holds a build with other settings ({diff}); a rerun there resumes the "
            "same build only: use another out_dir for the new one"
        )


def _failure_rows(stages: Sequence[tuple[str, Sequence[ItemError]]]) -> list[dict[str, Any]]:
    return [
        {"stage": stage, "key": list(e.key), "type": e.error_type, "message": e.message}
        for stage, errors in stages
        for e in errors
    ]


def _no_seed_error(name: str, failures: Sequence[ItemError], n_replies: int) -> ValueError:
    """Why no seed came out: the calls' own errors when they failed, the replies otherwise."""
    if failures:
        first = failures[0]
        cause = f"first: {first.error_type}: {first.message[:500]}"
        if not n_replies:
            return ValueError(
                f"every call to the generator {name!r} failed ({len(failures)} calls; {cause}); "
                "no reply was received. Every failure is in failed.jsonl"
            )
        return ValueError(
            f"the generator {name!r} produced no parseable seed in any category: "
            f"{len(failures)} of its calls failed ({cause}; all in failed.jsonl), and its "
            f"{n_replies} replies hold no [[prompt]] item (it refused, or answered in another "
            "format; see seed_calls.jsonl)"
        )
    return ValueError(
        f"the generator {name!r} produced no parseable seed in any category (it "
        "refused, or its replies lack the [[prompt]] format); see seed_calls.jsonl"
    )


def build_orbench(
    generator: ChatBackend,
    rewriter: ChatBackend,
    moderators: Sequence[ChatBackend | LLMModerator] | EnsembleModerator,
    *,
    out_dir: str | Path,
    categories: Sequence[str] = CATEGORIES,
    n_seeds: int = 2000,
    n_rewrites: int = 5,
    panel: Mapping[str, ChatBackend] | None = None,
    k_min: int = 3,
    hard_per_category: int | None = None,
    toxic_per_category: int = 66,
    rule: str | int = "majority",
    remoderate: str | int | None = "unanimous",
    detector: Any = None,
    concurrency: int = 8,
    templates: PromptTemplates | None = None,
    seed: int = 0,
    retry_errors: bool = False,
    panel_max_tokens: int | None = 1000,
    progress: bool | None = None,
) -> BuildReport:
    """Build an OR-Bench-style dataset with your own models (paper Sec. 3), resumably.

    Args:
        generator, rewriter: G and R (paper: Mixtral-8x7B at temperatures 1.0 and 0.7).
        moderators: the moderator backends (paper: GPT-4-turbo, Llama-3-70b, Gemini-1.5-pro),
            or a ready :class:`EnsembleModerator`.
        out_dir: where every stage's store lives (see the module docstring).
        categories, n_seeds, n_rewrites: seeds per category (official 2000) and rewrites per
            seed (5).
        panel: ``{name: backend}`` of strong, safety-aligned models for the hard subset; ``None``
            skips it.
        k_min, hard_per_category, remoderate: :func:`~icml25.orbench.selection.select_hard`'s rule
            (``remoderate=None`` turns the stricter second moderation off).
        toxic_per_category: :func:`~icml25.orbench.selection.select_toxic` (paper: 655 prompts in all);
            twice this many seeds per category are moderated to find them.
        rule: the ensemble's voting rule (paper: majority).
        detector: the refusal judge of the panel (default: keyword matching).
        seed: seeds generator calls (``seed + call index``) and the samples.
        retry_errors: retry the items whose calls failed in an earlier run.
    """
    out = Path(out_dir)
    if isinstance(categories, str):
        categories = [categories]
    cats = [normalize_category(c) for c in categories]
    if not cats:
        raise ValueError("categories must not be empty")
    templates = templates or PromptTemplates.default()
    ensemble = (
        moderators
        if isinstance(moderators, EnsembleModerator)
        else EnsembleModerator(list(moderators), rule, templates=templates)
    )
    b = _Build(out, cats, templates, ensemble, seed, concurrency, retry_errors, progress)
    b.open(generator, rewriter, n_rewrites)
    try:
        seeds = b.generate_seeds(generator, n_seeds)  # Algorithm 1
        candidates = b.rewrite(rewriter, seeds, n_rewrites)  # Algorithm 2
        moderated, pool = b.moderate(candidates)  # Algorithm 3
        toxic = b.toxic_set(seeds, toxic_per_category)
        hard = None
        if panel:
            hard = b.hard_subset(
                pool,
                moderated,
                panel,
                detector,
                panel_max_tokens,
                k_min,
                hard_per_category,
                remoderate,
            )
        return b.finish(n_seeds, seeds, candidates, pool, moderated, toxic, hard)
    finally:
        b.close()


@dataclass
class _Build:
    """One run of :func:`build_orbench`: its settings, its stores (each stamped with what makes
    its rows, so a rerun with other settings is refused, naming what differs) and what the
    stages produced so far."""

    out: Path
    cats: list[str]
    templates: PromptTemplates
    ensemble: EnsembleModerator
    seed: int
    concurrency: int
    retry_errors: bool
    progress: bool | None
    config: dict[str, Any] = field(default_factory=dict)
    stores: dict[str, JsonlStore] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    seed_failures: list[ItemError] = field(default_factory=list)  # this run's failed calls
    panel_failures: list[ItemError] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    n_removed: int = 0

    #: the remedy every store names when it refuses other settings
    FRESH = "A build resumes with the same settings only: use another out_dir for the new one"

    def open(self, generator: ChatBackend, rewriter: ChatBackend, n_rewrites: int) -> None:
        """Refuse an out_dir built with other settings, and record these ones."""
        self.config = {
            "generator": generator.name,
            "rewriter": rewriter.name,
            "moderators": [m.name for m in self.ensemble.moderators],
            "rule": self.ensemble.rule,
            "n_rewrites": n_rewrites,
            "seed": self.seed,
            "templates": hashlib.sha256(json.dumps(asdict(self.templates)).encode()).hexdigest()[
                :16
            ],
        }
        _check_same_build(self.out, self.config)
        self.out.mkdir(parents=True, exist_ok=True)
        if not (self.out / "metadata.json").is_file():  # so a crashed first run is recognised too
            meta = json.dumps({"config": self.config})
            (self.out / "metadata.json").write_text(meta, encoding="utf-8")

    def _store(self, name: str, key: Any, settings: dict[str, Any]) -> JsonlStore:
        store = JsonlStore(self.out / f"{name}.jsonl", key, settings=settings, remedy=self.FRESH)
        self.stores[name] = store
        return store

    def generate_seeds(self, generator: ChatBackend, n_seeds: int) -> list:
        """Algorithm 1: toxic seeds per category (a failed call is retried by the next run)."""
        settings = seed_settings(generator, self.templates, seed=self.seed)
        store = self._store("seed_calls", ("category", "call_idx"), settings)
        seeds = generate_all_seeds(
            generator,
            self.cats,
            n_seeds,
            concurrency=self.concurrency,
            templates=self.templates,
            seed=self.seed,
            store=store,
            failures=self.seed_failures,
        )
        # categories run in parallel: failures in a fixed order
        self.seed_failures.sort(key=lambda e: (self.cats.index(e.key[0]), e.key[1]))
        if not seeds:
            rows = _failure_rows([("seed_generation", self.seed_failures)])
            write_jsonl(rows, self.out / "failed.jsonl")
            n_replies = sum(r["category"] in self.cats for r in store.records())
            raise _no_seed_error(generator.name, self.seed_failures, n_replies)
        self.files["seeds"] = str(write_jsonl(seeds, self.out / "seeds.jsonl"))
        return seeds

    def rewrite(self, rewriter: ChatBackend, seeds: list, n_rewrites: int) -> list:
        """Algorithm 2: ``n_rewrites`` seemingly toxic rewrites of each seed."""
        settings = rewrite_settings(rewriter, self.templates, n_rewrites=n_rewrites)
        candidates = rewrite_seeds(
            rewriter,
            seeds,
            n_rewrites=n_rewrites,
            store=self._store("rewrite_calls", "id", settings),
            concurrency=self.concurrency,
            templates=self.templates,
            retry_errors=self.retry_errors,
            progress=self.progress,
        )
        self.files["candidates"] = str(write_jsonl(candidates, self.out / "candidates.jsonl"))
        return candidates

    def _moderate(self, items: list, name: str) -> list:
        store = self._store(name, "id", self.ensemble.store_settings())
        return self.ensemble.moderate(
            items,
            store,
            concurrency=self.concurrency,
            retry_errors=self.retry_errors,
            progress=self.progress,
        )

    def moderate(self, candidates: list) -> tuple[list, list[ORBenchRecord]]:
        """Algorithm 3: the ensemble's verdict on every candidate; the pool (OR-Bench-80K) is the
        candidates it does not flag."""
        moderated = self._moderate(candidates, "moderation")
        by_id = {m.id: m for m in moderated}
        pool = [
            ORBenchRecord(c.prompt, c.category, "80k", c.id, c.toxic_seed)
            for c in candidates
            if c.id in by_id and not by_id[c.id].is_toxic
        ]
        self.files["80k"] = str(write_jsonl(pool, self.out / "or-bench-80k.jsonl"))
        return moderated, pool

    def toxic_set(self, seeds: list, toxic_per_category: int) -> list:
        """The toxic control set: twice ``toxic_per_category`` seeds per category moderated,
        ``toxic_per_category`` of the flagged ones kept."""
        rng = random.Random(self.seed)
        sample = []
        for c in self.cats:
            group = [s for s in seeds if s.category == c]
            sample += rng.sample(group, min(len(group), 2 * toxic_per_category))
        if sample:
            seed_mod = self._moderate(sample, "seed_moderation")
        else:
            self._store("seed_moderation", "id", self.ensemble.store_settings())
            seed_mod = []
        toxic = (
            select_toxic(seed_mod, per_category=toxic_per_category, seed=self.seed)
            if seed_mod
            else []
        )
        self.files["toxic"] = str(write_jsonl(toxic, self.out / "or-bench-toxic.jsonl"))
        return toxic

    def hard_subset(
        self, pool, moderated, panel, detector, max_tokens, k_min, per_category, remoderate
    ) -> list[ORBenchRecord]:
        """The hard subset: the pool prompts that at least ``k_min`` panel models refuse, after
        the stricter second moderation (:func:`~icml25.orbench.selection.select_hard`)."""
        if not isinstance(panel, Mapping):
            raise TypeError(f"panel must be a dict name -> backend, got {type(panel).__name__}")
        # evaluate stamps each panel model's rows with its settings (backend, sampling, judge)
        # and refuses a model's rows made with other ones
        results: dict[str, EvalResult] = {}
        for name, backend in panel.items():
            results[name] = evaluate(
                backend,
                pool,
                detector=detector,
                # the build's advice on a mismatch (evaluate's keep_both is not a build option)
                store=JsonlStore(self.out / "panel.jsonl", ("model", "id"), remedy=self.FRESH),
                model=name,
                concurrency=self.concurrency,
                subset="80k",
                max_tokens=max_tokens,
                retry_errors=self.retry_errors,
                progress=self.progress,
            )
        self.panel_failures = [
            ItemError((r.model, i), t, m) for r in results.values() for i, t, m in r.failures
        ]
        sel = select_hard(
            pool,
            results,
            k_min=k_min,
            per_category=per_category,
            remoderate=moderated if remoderate is not None else False,
            rule=remoderate or "majority",
            seed=self.seed,
        )
        self.files["hard-1k"] = str(write_jsonl(sel.records, self.out / "or-bench-hard-1k.jsonl"))
        self.meta["hard_selection"] = sel.metadata()
        self.n_removed = len(sel.removed_by_remoderation)
        return sel.records

    def finish(self, n_seeds, seeds, candidates, pool, moderated, toxic, hard) -> BuildReport:
        """Write the failures and the metadata, and return the counts of every stage."""
        failed = {"seed_generation": len(self.seed_failures)}
        for stage, store in self._stage_stores():
            failed[stage] = len(store.errors())
        stages = [("seed_generation", self.seed_failures)]
        stages += [(stage, store.errors()) for stage, store in self._stage_stores()]
        if self.panel_failures is not None:
            failed["panel"] = len(self.panel_failures)
            stages.append(("panel", self.panel_failures))
        self.files["failed"] = str(write_jsonl(_failure_rows(stages), self.out / "failed.jsonl"))
        report = BuildReport(
            str(self.out),
            len(seeds),
            len(candidates),
            len(pool),
            sum(m.is_toxic for m in moderated),
            len(toxic),
            None if hard is None else len(hard),
            sum(failed.values()),
            failed,
            self.files,
            self.n_removed,
            [c for c in self.cats if not any(s.category == c for s in seeds)],
        )
        meta = {"categories": self.cats, "n_seeds": n_seeds, "config": self.config}
        meta.update(self.meta)
        meta["report"] = asdict(report)
        (self.out / "metadata.json").write_text(
            json.dumps(json_safe(meta), indent=1, ensure_ascii=True, allow_nan=False),
            encoding="utf-8",
        )
        return report

    def _stage_stores(self) -> list[tuple[str, JsonlStore]]:
        names = {"rewrite": "rewrite_calls", "moderation": "moderation"}
        names["seed_moderation"] = "seed_moderation"
        return [(stage, self.stores[name]) for stage, name in names.items()]

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
