"""The offline experiment behind ``icml25 repro orbench`` (docs/orbench.md, "Reproduction").

One base model (a tiny Llama that complies with every request) is shared by all worlds, as one
foundation model is shared by a paper's safety-tuned variants. A world is one seed: the pipeline
run with its own scripted agents and moderators (:func:`build_world`), a panel of strong safety
fine-tunes for the hard subset, and a population of safety fine-tunes, each a checkpoint of a
fine-tuning run (:class:`FineTune`), evaluated through :func:`~icml25.orbench.evaluate` on
:class:`~icml25.llm.HFChat`, the code path of a real local model.
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

__all__ = ["FineTune", "WorldSettings", "build_world", "train_base", "run_world"]


@dataclass(frozen=True)
class FineTune:
    """One safety fine-tuning run of the base model: AdamW (lr 1e-3, batch 64, no warmup,
    cosine over ``max(checkpoints)`` steps) on data with a ``refusal`` fraction of refused toxic
    requests and a ``contrastive`` fraction of answered mitigated requests; a model is kept at
    every step of ``checkpoints``."""

    checkpoints: tuple[int, ...]
    refusal: float = 0.1
    contrastive: float = 0.0
    seed: int = 0

    @property
    def label(self) -> str:
        c = f"-c{self.contrastive:g}" if self.contrastive else ""
        return f"r{self.refusal:g}{c}-s{self.seed}"

    def name(self, step: int) -> str:
        return f"{self.label}@{step}"

    @property
    def family(self) -> str:
        return "contrastive" if self.contrastive else f"refusal {self.refusal:g}"


@dataclass
class WorldSettings:
    """Sizes of one world's experiment (the reproduction's modes pick them)."""

    categories: tuple[str, ...] = CATEGORIES[:4]
    n_seeds: int = 40  # toxic seeds per category (Algorithm 1)
    toxic_per_category: int = 30
    hard_per_category: int | None = None
    pool_eval: int | None = None  # population models see this many pool prompts (None: all)
    n_plain: int = 200  # plain benign prompts (benign verb, neutral noun)
    k_min: int = 2
    panel: tuple[FineTune, ...] = tuple(FineTune((150,), seed=s) for s in (101, 102, 103))
    population: tuple[FineTune, ...] = (FineTune((40, 60, 80, 100, 120, 160)),)
    max_tokens: int = 4  # toy answers are 2-3 words
    extra: dict[str, Any] = field(default_factory=dict)


def train_base(seed: int, *, steps: int = 600, n_pairs: int = 4000) -> tuple[Any, Any]:
    """The shared base: a word-level tokenizer and a tiny Llama (2 layers, width 64) trained
    ``steps`` AdamW steps (lr 3e-3, batch 64) to answer every request, toxic ones included."""
    from icml25.toy import build_tokenizer, tiny_causal_lm, train_causal_lm

    world = OverRefusalWorld(CATEGORIES, seed)
    tok = build_tokenizer(world.vocabulary_texts(), 256, kind="word")
    base = tiny_causal_lm(tok, d_model=64, n_layers=2, n_heads=4, d_ff=128, seed=seed)
    train_causal_lm(
        base,
        tok,
        world.base_pairs(n_pairs, random.Random(seed)),
        steps=steps,
        batch_size=64,
        lr=3e-3,
        seed=seed,
        progress=False,
    )
    return base, tok


def _rows(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _read(path: Path) -> list[ORBenchRecord]:
    return [ORBenchRecord.from_dict(d) for d in _rows(path)]


def fine_tune(
    base: Any, tok: Any, world: OverRefusalWorld, run: FineTune, categories: tuple[str, ...]
) -> dict[int, Any]:
    """``{step: HFChat}`` for every checkpoint of ``run`` (step 0 is the base itself)."""
    from icml25.llm.hf import HFChat
    from icml25.toy import train_causal_lm

    model = copy.deepcopy(base)
    keep: dict[int, Any] = {}
    wanted = set(run.checkpoints)

    def snapshot(step: int, m: Any) -> None:
        if step in wanted:
            keep[step] = copy.deepcopy(m).eval()

    last = max(run.checkpoints)
    if 0 in wanted:
        keep[0] = copy.deepcopy(base)
    if last:
        data = world.safety_pairs(
            4000,
            random.Random(f"{world.seed}-{run.label}"),
            refusal_fraction=run.refusal,
            contrastive_fraction=run.contrastive,
            categories=categories,
        )
        train_causal_lm(
            model,
            tok,
            data,
            steps=last,
            batch_size=64,
            lr=1e-3,
            warmup=0,
            seed=run.seed,
            progress=False,
            callback=snapshot,
        )
    return {s: HFChat(keep[s], tok, batch_size=128, name=run.name(s)) for s in sorted(keep)}


def build_world(
    seed: int, ws: WorldSettings, out: Path, panel: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Run the pipeline in world ``seed`` (with the panel, when given) and measure it against
    the ground truth: contamination before and after the vote, each moderator's and the
    ensemble's error, and the hard set's contamination with and without re-moderation."""
    world = OverRefusalWorld(CATEGORIES, seed)
    moderators = [scripted_moderator(world, i) for i in range(3)]
    build = out / "build"
    report = build_orbench(
        scripted_generator(world),
        scripted_rewriter(world),
        moderators,
        out_dir=build,
        categories=ws.categories,
        n_seeds=ws.n_seeds,
        panel=panel,
        k_min=ws.k_min,
        hard_per_category=ws.hard_per_category,
        toxic_per_category=ws.toxic_per_category,
        seed=seed,
        panel_max_tokens=ws.max_tokens,
        progress=False,
    )
    candidates = _rows(build / "candidates.jsonl")
    moderation = {rec["id"]: rec for rec in _rows(build / "moderation.jsonl")}
    pool = _read(build / "or-bench-80k.jsonl")
    truth = {c["id"]: world.is_toxic(c["prompt"]) for c in candidates}
    votes = [moderation[c["id"]]["votes"] for c in candidates]
    gt = [truth[c["id"]] for c in candidates]
    stats: dict[str, Any] = {
        "n_candidates": len(candidates),
        "n_pool": len(pool),
        "contamination_before": 100 * sum(gt) / len(gt),
        "contamination_after": 100 * sum(truth[r.id] for r in pool) / max(1, len(pool)),
        "moderator_error": [
            100 * sum(v[j] != t for v, t in zip(votes, gt)) / len(gt) for j in range(3)
        ],
        "ensemble_error": 100 * sum((sum(v) >= 2) != t for v, t in zip(votes, gt)) / len(gt),
        "build": report.summary(),
    }
    if panel:
        meta = json.loads((build / "metadata.json").read_text(encoding="utf-8"))
        sel = [i for i, k in meta["hard_selection"]["rejections"].items() if k >= ws.k_min]
        hard, toxic = _read(build / "or-bench-hard-1k.jsonl"), _read(build / "or-bench-toxic.jsonl")
        stats.update(
            n_hard=len(hard),
            n_toxic=len(toxic),
            hard_contamination_panel_only=100 * sum(truth[i] for i in sel) / max(1, len(sel)),
            hard_contamination=100 * sum(truth[r.id] for r in hard) / max(1, len(hard)),
            toxic_truly_toxic=100
            * sum(world.is_toxic(r.prompt) for r in toxic)
            / max(1, len(toxic)),
        )
    return {"seed": seed, "stats": stats, "world": world, "pool": pool}


def run_world(seed: int, ws: WorldSettings, out: Path, base: Any, tok: Any) -> dict[str, Any]:
    """Build the benchmark in world ``seed`` with its panel and evaluate the population: per
    model the rates on the toxic set (TR), the pool, the hard set and plain benign prompts, and
    the per-prompt refusals of the hard and toxic sets."""
    import torch

    world = OverRefusalWorld(CATEGORIES, seed)
    out.mkdir(parents=True, exist_ok=True)
    panel = {}
    for run in ws.panel:
        for chat in fine_tune(base, tok, world, run, ws.categories).values():
            panel[f"panel-{chat.name}"] = chat
    with torch.no_grad():
        built = build_world(seed, ws, out, panel)
    build = out / "build"
    hard, toxic = _read(build / "or-bench-hard-1k.jsonl"), _read(build / "or-bench-toxic.jsonl")
    pool = built["pool"]
    rng = random.Random(f"plain-{seed}")
    texts: dict[str, None] = {}
    while len(texts) < ws.n_plain:  # distinct plain benign prompts (the language has 1,920)
        texts[world.plain_benign(rng)] = None
    plain = [ORBenchRecord(t, ws.categories[0], "plain") for t in texts]
    pool_eval = (
        pool
        if ws.pool_eval is None or ws.pool_eval >= len(pool)
        else random.Random(f"pool-{seed}").sample(pool, ws.pool_eval)
    )
    models: dict[str, dict[str, Any]] = {}
    for run in ws.population:
        for step, chat in fine_tune(base, tok, world, run, ws.categories).items():
            with torch.no_grad():
                res = {
                    name: evaluate(
                        chat, recs, max_tokens=ws.max_tokens, progress=False, subset=name
                    )
                    for name, recs in (
                        ("toxic", toxic),
                        ("pool", pool_eval),
                        ("hard", hard),
                        ("plain", plain),
                    )
                    if recs
                }
            models[chat.name] = _model_row(run, step, res)
    return {"seed": seed, "stats": built["stats"], "models": models}


def _model_row(run: FineTune, step: int, res: dict[str, EvalResult]) -> dict[str, Any]:
    row: dict[str, Any] = {"run": run.label, "step": step, "family": run.family}
    for name in ("toxic", "pool", "hard", "plain"):  # an empty set (no hard prompt): NaN
        row[name] = float("nan")
        row[f"{name}_per_category"] = {}
        row[f"{name}_refused"] = {}
    for name, r in res.items():
        row[name] = r.rate
        row[f"{name}_n"] = r.n
        row[f"{name}_per_category"] = {c: v[0] for c, v in r.per_category.items()}
        if name in ("toxic", "hard"):
            row[f"{name}_refused"] = {p["id"]: bool(p["refused"]) for p in r.judged}
    return row
