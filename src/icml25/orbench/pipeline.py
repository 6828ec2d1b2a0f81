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
        k_min, hard_per_category, remoderate: :func:`~icml25.orbench.select_hard`'s rule
            (``remoderate=None`` turns the stricter second moderation off).
        toxic_per_category: :func:`~icml25.orbench.select_toxic` (paper: 655 prompts in all);
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
    config = {
        "generator": generator.name,
        "rewriter": rewriter.name,
        "moderators": [m.name for m in ensemble.moderators],
        "rule": ensemble.rule,
        "n_rewrites": n_rewrites,
        "seed": seed,
        "templates": hashlib.sha256(json.dumps(asdict(templates)).encode()).hexdigest()[:16],
    }
    _check_same_build(out, config)
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "metadata.json").is_file():  # so a crashed first run is recognised too
        (out / "metadata.json").write_text(json.dumps({"config": config}), encoding="utf-8")
    files = {}
    # Algorithm 1
    # every store is stamped with what makes its rows (the backend's identity and sampling, the
    # prompt, the stage's settings): a rerun with other ones is refused, naming what differs
    fresh = "A build resumes with the same settings only: use another out_dir for the new one"
    seed_calls = JsonlStore(
        out / "seed_calls.jsonl",
        ("category", "call_idx"),
        settings=seed_settings(generator, templates, seed=seed),
        remedy=fresh,
    )
    seed_failures: list[ItemError] = []  # this run's failed generator calls
    seeds = generate_all_seeds(
        generator,
        cats,
        n_seeds,
        concurrency=concurrency,
        templates=templates,
        seed=seed,
        store=seed_calls,
        failures=seed_failures,
    )
    seed_failures.sort(key=lambda e: (cats.index(e.key[0]), e.key[1]))  # categories run in parallel
    empty_categories = [c for c in cats if not any(s.category == c for s in seeds)]
    if not seeds:
        write_jsonl(_failure_rows([("seed_generation", seed_failures)]), out / "failed.jsonl")
        n_replies = sum(r["category"] in cats for r in seed_calls.records())
        seed_calls.close()
        raise _no_seed_error(generator.name, seed_failures, n_replies)
    files["seeds"] = str(write_jsonl(seeds, out / "seeds.jsonl"))
    # Algorithm 2
    rw_store = JsonlStore(
        out / "rewrite_calls.jsonl",
        "id",
        settings=rewrite_settings(rewriter, templates, n_rewrites=n_rewrites),
        remedy=fresh,
    )
    candidates = rewrite_seeds(
        rewriter,
        seeds,
        n_rewrites=n_rewrites,
        store=rw_store,
        concurrency=concurrency,
        templates=templates,
        retry_errors=retry_errors,
        progress=progress,
    )
    files["candidates"] = str(write_jsonl(candidates, out / "candidates.jsonl"))
    # Algorithm 3
    mod_store = JsonlStore(
        out / "moderation.jsonl", "id", settings=ensemble.store_settings(), remedy=fresh
    )
    moderated = ensemble.moderate(
        candidates, mod_store, concurrency=concurrency, retry_errors=retry_errors, progress=progress
    )
    by_id = {m.id: m for m in moderated}
    pool = [
        ORBenchRecord(c.prompt, c.category, "80k", c.id, c.toxic_seed)
        for c in candidates
        if c.id in by_id and not by_id[c.id].is_toxic
    ]
    files["80k"] = str(write_jsonl(pool, out / "or-bench-80k.jsonl"))
    # the toxic control set from moderated seeds
    rng = random.Random(seed)
    sample = []
    for c in cats:
        group = [s for s in seeds if s.category == c]
        sample += rng.sample(group, min(len(group), 2 * toxic_per_category))
    seed_store = JsonlStore(
        out / "seed_moderation.jsonl", "id", settings=ensemble.store_settings(), remedy=fresh
    )
    seed_mod = (
        ensemble.moderate(
            sample,
            seed_store,
            concurrency=concurrency,
            retry_errors=retry_errors,
            progress=progress,
        )
        if sample
        else []
    )
    toxic = select_toxic(seed_mod, per_category=toxic_per_category, seed=seed) if seed_mod else []
    files["toxic"] = str(write_jsonl(toxic, out / "or-bench-toxic.jsonl"))
    failed = {
        "seed_generation": len(seed_failures),
        "rewrite": len(rw_store.errors()),
        "moderation": len(mod_store.errors()),
        "seed_moderation": len(seed_store.errors()),
    }
    hard = None
    meta: dict[str, Any] = {"categories": cats, "n_seeds": n_seeds, "config": config}
    if panel:
        if not isinstance(panel, Mapping):
            raise TypeError(f"panel must be a dict name -> backend, got {type(panel).__name__}")
        # evaluate stamps each panel model's rows with its settings (backend, sampling, judge)
        # and refuses a model's rows made with other ones
        panel_store = out / "panel.jsonl"
        results: dict[str, EvalResult] = {}
        for name, backend in panel.items():
            results[name] = evaluate(
                backend,
                pool,
                detector=detector,
                store=panel_store,
                model=name,
                concurrency=concurrency,
                subset="80k",
                max_tokens=panel_max_tokens,
                retry_errors=retry_errors,
                progress=progress,
            )
        failed["panel"] = sum(r.n_failed for r in results.values())
        sel = select_hard(
            pool,
            results,
            k_min=k_min,
            per_category=hard_per_category,
            remoderate=moderated if remoderate is not None else False,
            rule=remoderate or "majority",
            seed=seed,
        )
        hard = sel.records
        files["hard-1k"] = str(write_jsonl(hard, out / "or-bench-hard-1k.jsonl"))
        meta["hard_selection"] = sel.metadata()
    fails = _failure_rows(
        [("seed_generation", seed_failures)]
        + [
            (stage, st.errors())
            for stage, st in (
                ("rewrite", rw_store),
                ("moderation", mod_store),
                ("seed_moderation", seed_store),
            )
        ]
        + (
            [
                (
                    "panel",
                    [
                        ItemError((r.model, i), t, m)
                        for r in results.values()
                        for i, t, m in r.failures
                    ],
                )
            ]
            if panel
            else []
        )
    )
    files["failed"] = str(write_jsonl(fails, out / "failed.jsonl"))
    report = BuildReport(
        str(out),
        len(seeds),
        len(candidates),
        len(pool),
        sum(m.is_toxic for m in moderated),
        len(toxic),
        None if hard is None else len(hard),
        sum(failed.values()),
        failed,
        files,
        len(sel.removed_by_remoderation) if panel else 0,
        empty_categories,
    )
    meta["report"] = asdict(report)
    (out / "metadata.json").write_text(
        json.dumps(json_safe(meta), indent=1, ensure_ascii=True, allow_nan=False),
        encoding="utf-8",
    )
    for st in (rw_store, mod_store, seed_store, seed_calls):
        st.close()
    return report
