"""The offline experiment behind ``icml25 repro orbench`` (docs/orbench.md, "Reproduction"):
one toy world, the pipeline run on it with scripted agents, and a population of tiny chat models
with graded safety tuning, evaluated through :func:`~icml25.orbench.evaluate` on
:class:`~icml25.llm.HFChat` (the code path of a real local model).
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icml25.orbench.categories import CATEGORIES
from icml25.orbench.evaluation import EvalResult, evaluate
from icml25.orbench.pipeline import build_orbench
from icml25.orbench.records import ORBenchRecord
from icml25.orbench.standin import scripted_generator, scripted_moderator, scripted_rewriter
from icml25.toy.overrefusal_lang import OverRefusalWorld

__all__ = ["ModelSpec", "WorldSettings", "run_world"]


@dataclass(frozen=True)
class ModelSpec:
    """One safety fine-tune of the base model: ``steps`` of AdamW (lr 1e-3, no warmup) on data
    with a ``refusal`` fraction of refused toxic requests and a ``contrastive`` fraction of
    answered mitigated requests; ``seed`` seeds its data and batch order."""

    steps: int
    refusal: float = 0.1
    contrastive: float = 0.0
    seed: int = 0

    @property
    def name(self) -> str:
        c = f"-c{self.contrastive:g}" if self.contrastive else ""
        return f"ft{self.steps}{c}-s{self.seed}"

    @property
    def family(self) -> str:
        return "contrastive" if self.contrastive else "safety fine-tune"


@dataclass
class WorldSettings:
    """Sizes of one world's experiment (the reproduction's modes pick them)."""

    categories: tuple[str, ...] = CATEGORIES[:2]
    n_seeds: int = 40  # toxic seeds per category (Algorithm 1)
    toxic_per_category: int = 30
    hard_per_category: int | None = None
    pool_eval: int | None = None  # population models see this many pool prompts (None: all)
    n_plain: int = 200  # plain benign prompts (benign verb, neutral noun)
    base_steps: int = 600
    base_pairs: int = 4000
    k_min: int = 2
    panel: tuple[ModelSpec, ...] = (ModelSpec(150, seed=101), ModelSpec(200, seed=102),
                                    ModelSpec(300, seed=103))  # fmt: skip
    population: tuple[ModelSpec, ...] = (ModelSpec(60), ModelSpec(80), ModelSpec(100),
                                         ModelSpec(120))  # fmt: skip
    max_tokens: int = 4  # toy answers are 2-3 words
    extra: dict[str, Any] = field(default_factory=dict)


def _rows(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _read(path: Path) -> list[ORBenchRecord]:
    return [ORBenchRecord.from_dict(d) for d in _rows(path)]


def run_world(seed: int, ws: WorldSettings, out: Path) -> dict[str, Any]:
    """Build the benchmark in world ``seed`` and evaluate the population on it.

    Returns the moderation statistics (ground-truth contamination before and after, each
    moderator's and the ensemble's error), the hard-set contamination with and without the
    stricter re-moderation, and per model the rates on the toxic set (TR), the pool, the hard set
    and plain benign prompts, with the per-prompt rows of the hard and toxic sets."""
    import torch

    from icml25.llm.hf import HFChat
    from icml25.toy import build_tokenizer, tiny_causal_lm, train_causal_lm

    world = OverRefusalWorld(CATEGORIES, seed)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(world.vocabulary_texts(), 256, kind="word")
    base = tiny_causal_lm(tok, d_model=64, n_layers=2, n_heads=4, d_ff=128, seed=seed)
    train_causal_lm(base, tok, world.base_pairs(ws.base_pairs, random.Random(seed)),
                    steps=ws.base_steps, batch_size=64, lr=3e-3, seed=seed, progress=False)  # fmt: skip

    def fine_tune(spec: ModelSpec) -> HFChat:
        model = copy.deepcopy(base)
        if spec.steps:
            data = world.safety_pairs(
                4000, random.Random(f"{seed}-{spec.name}"), refusal_fraction=spec.refusal,
                contrastive_fraction=spec.contrastive, categories=ws.categories,
            )  # fmt: skip
            train_causal_lm(model, tok, data, steps=spec.steps, batch_size=64, lr=1e-3,
                            warmup=0, seed=spec.seed, progress=False)  # fmt: skip
        return HFChat(model, tok, batch_size=128, name=spec.name)

    moderators = [scripted_moderator(world, i) for i in range(3)]
    panel = {f"panel-{s.name}": fine_tune(s) for s in ws.panel}
    with torch.no_grad():
        report = build_orbench(
            scripted_generator(world), scripted_rewriter(world), moderators,
            out_dir=out / "build", categories=ws.categories, n_seeds=ws.n_seeds, panel=panel,
            k_min=ws.k_min, hard_per_category=ws.hard_per_category,
            toxic_per_category=ws.toxic_per_category, seed=seed, panel_max_tokens=ws.max_tokens,
            progress=False,
        )  # fmt: skip
    build = out / "build"
    candidates = _rows(build / "candidates.jsonl")
    moderation = {rec["id"]: rec for rec in _rows(build / "moderation.jsonl")}
    pool, hard, toxic = (_read(build / f) for f in
                         ("or-bench-80k.jsonl", "or-bench-hard-1k.jsonl", "or-bench-toxic.jsonl"))  # fmt: skip
    meta = json.loads((build / "metadata.json").read_text(encoding="utf-8"))
    truth = {c["id"]: world.is_toxic(c["prompt"]) for c in candidates}
    votes = [moderation[c["id"]]["votes"] for c in candidates]
    ensemble = [sum(v) >= 2 for v in votes]
    gt = [truth[c["id"]] for c in candidates]
    single_err = [100 * sum(v[j] != t for v, t in zip(votes, gt)) / len(gt) for j in range(3)]
    panel_hard_ids = [i for i, k in meta["hard_selection"]["rejections"].items() if k >= ws.k_min]
    stats = {
        "n_candidates": len(candidates),
        "n_pool": len(pool),
        "n_hard": len(hard),
        "n_toxic": len(toxic),
        "contamination_before": 100 * sum(gt) / len(gt),
        "contamination_after": 100 * sum(truth[r.id] for r in pool) / max(1, len(pool)),
        "moderator_error": single_err,
        "ensemble_error": 100 * sum(e != t for e, t in zip(ensemble, gt)) / len(gt),
        "hard_contamination_panel_only": 100 * sum(truth[i] for i in panel_hard_ids)
        / max(1, len(panel_hard_ids)),
        "hard_contamination": 100 * sum(truth[r.id] for r in hard) / max(1, len(hard)),
        "toxic_truly_toxic": 100 * sum(world.is_toxic(r.prompt) for r in toxic) / max(1, len(toxic)),
        "build": report.summary(),
    }  # fmt: skip
    rng = random.Random(f"plain-{seed}")
    plain = [
        ORBenchRecord(world.plain_benign(rng), ws.categories[0], "plain") for _ in range(ws.n_plain)
    ]
    pool_eval = pool if ws.pool_eval is None or ws.pool_eval >= len(pool) else \
        random.Random(f"pool-{seed}").sample(pool, ws.pool_eval)  # fmt: skip
    models: dict[str, dict[str, Any]] = {}
    for spec in ws.population:
        chat = fine_tune(spec)
        with torch.no_grad():
            res = {name: evaluate(chat, recs, max_tokens=ws.max_tokens, progress=False, subset=name)
                   for name, recs in (("toxic", toxic), ("pool", pool_eval), ("hard", hard),
                                      ("plain", plain)) if recs}  # fmt: skip
        models[spec.name] = _model_row(spec, res)
    return {"seed": seed, "stats": stats, "models": models}


def _model_row(spec: ModelSpec, res: dict[str, EvalResult]) -> dict[str, Any]:
    row: dict[str, Any] = {"spec": spec.__dict__, "family": spec.family}
    for name in ("toxic", "pool", "hard", "plain"):  # an empty set (no hard prompt): NaN
        row.setdefault(name, float("nan"))
        row.setdefault(f"{name}_per_category", {})
        row.setdefault(f"{name}_refused", {})
    for name, r in res.items():
        row[name] = r.rate
        row[f"{name}_n"] = r.n
        row[f"{name}_per_category"] = {c: v[0] for c, v in r.per_category.items()}
    for name in ("toxic", "hard"):
        if name in res:
            row[f"{name}_refused"] = {p["id"]: bool(p["refused"]) for p in res[name].judged}
    return row
