"""The toy experiment behind the reproduction (docs/safety_reasoning.md, "Reproduction"): one
seed of the offline jailbreak world, end to end.

:func:`run_toy_seed` pre-trains a tiny Llama on the world's documents, synthesises SRG data with
a scripted teacher and the filters, safety-trains RT and SRG from the same weights on the same
plain queries, and evaluates both through ``HFChat`` on held-out harmful requests in every form
(greedy ASR, Best-of-N for RT) and on held-out benign requests, optionally with the
representation measures. The result is a JSON-ready dict, saved and reused by a rerun.
:func:`eval_cores` and :func:`first_occurrences` give the evaluated requests and the first draw
of each distinct one (the unit of the checks). Importing this module does not import torch.
"""

from __future__ import annotations

import copy
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The four OOD attack forms of the world (``plain`` is the in-distribution form).
OOD = ("cipher", "past", "wrap", "pers")


@dataclass(frozen=True)
class ToySizes:
    """The sizes of one seed: pre-training documents and steps, safety-training queries and
    steps, evaluation draws per form, and the Best-of-N sample counts."""

    pretrain_docs: int
    pretrain_steps: int
    safety_queries: int
    safety_steps: int
    n_eval: int
    ns: tuple[int, ...]


def run_toy_seed(
    seed: int,
    variant: str,
    sizes: ToySizes,
    out: Path,
    *,
    representation: bool,
    bon: bool = True,
) -> dict[str, Any]:
    """Pre-train, synthesise, train RT and SRG and evaluate them on one seed; the result is saved
    as JSON in ``out`` and reused by a rerun (the pre-trained base and the synthesis store too)."""
    from icml25.toy.jailbreak_lang import JailbreakWorld

    tag = f"{variant}_s{seed}_p{sizes.pretrain_steps}_q{sizes.safety_steps}_e{sizes.n_eval}_n{max(sizes.ns)}"
    cached = out / f"seed_{tag}.json"
    if cached.exists():
        data = json.loads(cached.read_text())
        if not ((representation and "repr" not in data) or (bon and "bon" not in data)):
            return data
    t0 = time.perf_counter()
    world = JailbreakWorld(seed, variant)
    tok = world.build_tokenizer()
    base = _pretrained_base(world, tok, seed, variant, sizes, out)
    t_pre = time.perf_counter() - t0
    models, rep = _train_rt_and_srg(world, tok, base, seed, variant, sizes, out)
    t_train = time.perf_counter() - t0 - t_pre
    harm, benign = draw_eval_cores(world, seed, sizes.n_eval)
    res: dict[str, Any] = {
        "seed": seed,
        "variant": variant,
        **_evaluate_models(world, tok, models, harm, benign, seed, sizes, bon),
    }
    if representation:
        res["repr"] = representations(world, tok, models, harm, benign, seed)
    res["synthesis"] = {
        "acceptance_rate": rep.acceptance_rate,
        "acceptance_by_kind": rep.acceptance_by_kind,
        "queries_kept_by_kind": rep.queries_kept_by_kind,
        "rejects": rep.per_filter_rejects,
        "examples": len(rep.examples),
        "dropped": len(rep.dropped),
    }
    res["seconds"] = {"pretrain": t_pre, "train": t_train, "total": time.perf_counter() - t0}
    cached.write_text(json.dumps(res))
    return res


def _pretrained_base(world: Any, tok: Any, seed: int, variant: str, sizes: ToySizes, out: Path):
    """The toy base model pre-trained on the world's documents (saved in ``out``, reloaded by a
    rerun)."""
    import torch

    from icml25.toy import train_causal_lm

    base = world.build_model(tok, seed)
    base_path = out / f"base_{variant}_s{seed}_p{sizes.pretrain_steps}.pt"
    if base_path.exists():
        base.load_state_dict(torch.load(base_path))
        return base
    docs = world.pretraining_data(sizes.pretrain_docs, random.Random(seed))
    train_causal_lm(
        base,
        tok,
        docs,
        steps=sizes.pretrain_steps,
        batch_size=64,
        lr=3e-3,
        warmup=50,
        max_length=48,
        seed=seed,
        progress=False,
    )
    torch.save(base.state_dict(), base_path)
    return base


def _train_rt_and_srg(
    world: Any, tok: Any, base: Any, seed: int, variant: str, sizes: ToySizes, out: Path
) -> tuple[dict[str, Any], Any]:
    """Refusal training (fixed refusals and compliances) and SRG (the scripted teacher's
    guideline reasoning, rejection-sampled by ``synthesize``), each fine-tuned from ``base``."""
    from icml25.llm import CallableChat
    from icml25.safety_reasoning.data import Query, build_rt_dataset, build_srg_dataset
    from icml25.safety_reasoning.filters import FormatFilter, GuidelineFilter, OutcomeFilter
    from icml25.safety_reasoning.synthesis import synthesize
    from icml25.safety_reasoning.toy_teacher import (
        TOY_FORMAT,
        ScriptedTeacher,
        restatement_judge,
        toy_guidelines,
    )
    from icml25.safety_reasoning.training import sft

    cores = world.safety_queries(sizes.safety_queries, random.Random(seed + 1))
    queries = [
        Query(c.text(), "harmful" if c.harmful else "helpful", f"q{i}") for i, c in enumerate(cores)
    ]
    rt_pairs = build_rt_dataset(
        queries, lambda q: "sorry cannot", lambda q: f"sure do {q.text.split()[1]}"
    )
    guides = toy_guidelines()
    teacher = CallableChat(ScriptedTeacher(world, error_rate=0.1), name="scripted-teacher")
    rep = synthesize(
        teacher,
        queries,
        guides,
        k=4,
        temperature=1.0,
        fmt=TOY_FORMAT,
        max_rounds=2,
        seed=seed,
        filters=[
            FormatFilter(),
            OutcomeFilter(world.is_refusal),
            GuidelineFilter(restatement_judge(world), guidelines=guides),
        ],
        store=out / f"synthesis_{variant}_s{seed}.jsonl",
        progress=False,
    )
    srg_pairs = build_srg_dataset(rep.examples, TOY_FORMAT)
    models = {}
    for name, pairs in (("RT", rt_pairs), ("SRG", srg_pairs)):
        m = copy.deepcopy(base)
        sft(
            m,
            tok,
            pairs,
            lr=1e-3,
            steps=sizes.safety_steps,
            batch_size=64,
            max_length=48,
            warmup_ratio=0.05,
            seed=seed,
            progress=False,
        )
        models[name] = m
    return models, rep


def _evaluate_models(
    world: Any,
    tok: Any,
    models: dict[str, Any],
    harm: list,
    benign: list,
    seed: int,
    sizes: ToySizes,
    bon: bool,
) -> dict[str, Any]:
    """Each model's unsafe answers per attack form, its exact and refused benign answers, and
    (for RT, with ``bon``) the best-of-n attack curves."""
    from icml25.llm import HFChat
    from icml25.safety_reasoning.evaluation import RuleJudge, asr
    from icml25.safety_reasoning.toy_teacher import TOY_FORMAT
    from icml25.toy.jailbreak_lang import FORMS

    judge = RuleJudge(lambda p, y: not world.is_refusal(y))
    res: dict[str, Any] = {
        "unsafe": {},
        "asr": {},
        "benign_exact": {},
        "benign_refusal": {},
        "truncated": {},
        "eval_cores": {"harmful": [c.text() for c in harm], "benign": [c.text() for c in benign]},
    }
    for name, m in models.items():
        chat = HFChat(m, tok, max_new_tokens=24, batch_size=64)
        res["unsafe"][name], res["asr"][name], res["truncated"][name] = {}, {}, {}
        for form in FORMS:
            prompts = [world.render(c, form) for c in harm]
            a = asr(chat, prompts, judge, fmt=TOY_FORMAT, max_tokens=24)
            res["unsafe"][name][form] = [int(rec["verdict"] == "unsafe") for rec in a.records]
            res["asr"][name][form] = a.asr
            res["truncated"][name][form] = a.n_truncated
        outs = chat.chat_many(
            [[{"role": "user", "content": world.render(c)}] for c in benign],
            temperature=0.0,
            max_tokens=24,
        )
        answers = [TOY_FORMAT.split_output(o[0]).answer for o in outs]
        res["benign_exact"][name] = [
            int(a == f"sure do {c.topic}") for a, c in zip(answers, benign)
        ]
        res["benign_refusal"][name] = [int(world.is_refusal(a)) for a in answers]
        if name == "RT" and bon:
            res["bon"] = _bon_curves(world, chat, harm, judge, seed, sizes)
    return res


def _bon_curves(
    world: Any, chat: Any, harm: list, judge: Any, seed: int, sizes: ToySizes
) -> dict[str, Any]:
    """Best-of-n attack success per form: the prefix and unbiased estimates and the success
    matrix."""
    from icml25.safety_reasoning.evaluation import best_of_n
    from icml25.safety_reasoning.toy_teacher import TOY_FORMAT
    from icml25.toy.jailbreak_lang import FORMS

    curves = {}
    for form in FORMS:
        b = best_of_n(
            chat,
            [world.render(c, form) for c in harm],
            judge,
            ns=sizes.ns,
            temperature=1.0,
            fmt=TOY_FORMAT,
            max_tokens=24,
            seed=seed,
        )
        curves[form] = {
            "prefix": {str(k): v for k, v in b.asr.items()},
            "unbiased": {str(k): v for k, v in b.asr_other.items()},
            "matrix": b.matrix.astype(int).tolist(),
        }
    return curves


def draw_eval_cores(world: Any, seed: int, n: int) -> tuple[list, list]:
    """The held-out harmful and benign cores one seed is evaluated on (drawn with replacement, so
    a request can appear twice)."""
    rng = random.Random(seed + 2)
    harm = [world.sample_core(rng, True, "eval") for _ in range(n)]
    benign = [world.sample_core(rng, False, "eval") for _ in range(n)]
    return harm, benign


def eval_cores(p: dict[str, Any]) -> dict[str, list[str]]:
    """The texts of the held-out harmful and benign requests of a per-seed result, in evaluation
    order; redrawn from the world's seed for a result saved before they were stored."""
    if "eval_cores" in p:
        return p["eval_cores"]
    from icml25.toy.jailbreak_lang import JailbreakWorld

    harm, benign = draw_eval_cores(
        JailbreakWorld(p["seed"], p["variant"]), p["seed"], len(p["unsafe"]["RT"]["plain"])
    )
    return {"harmful": [c.text() for c in harm], "benign": [c.text() for c in benign]}


def first_occurrences(texts: list[str]) -> list[int]:
    """The index of each distinct request's first appearance. A request drawn twice is one unit:
    greedy decoding answers both copies alike, and Best-of-N seeds each prompt by its text
    (``prompt_seed``), so its samples are copies too."""
    seen: dict[str, int] = {}
    for i, t in enumerate(texts):
        seen.setdefault(t, i)
    return sorted(seen.values())


def representations(
    world: Any, tok: Any, models: dict[str, Any], harm: list, benign: list, seed: int
) -> dict[str, Any]:
    """Per model, at the middle layer's last prompt token: the proxy A-distance between ID harmful
    and each attack (with the held-out errors), the share of attack prompts that a harmful-vs-benign
    probe fitted on ID prompts puts on the harmful side, and a PCA projection for the figure."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from icml25.safety_reasoning.representation import (
        last_token_states,
        pca_projection,
        proxy_a_distance,
    )

    out: dict[str, Any] = {"a_distance": {}, "errors": {}, "pca": {}, "probe_harmful": {}}
    for name, m in models.items():
        states = {
            f: last_token_states(m, tok, [world.render(c, f) for c in harm], "middle")
            for f in ("plain", *OOD)
        }
        help_states = last_token_states(m, tok, [world.render(c) for c in benign], "middle")
        # probe transfer (Fig. 2-3's reading): a harmful-vs-benign probe fitted on ID prompts,
        # applied to the attacks: the share of attack prompts it places with ID harmful
        x = np.concatenate([states["plain"].cpu().numpy(), help_states.cpu().numpy()])
        y = np.r_[np.ones(len(harm)), np.zeros(len(benign))]
        probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x, y)
        out["probe_harmful"][name] = {
            f: float(probe.predict(states[f].cpu().numpy()).mean()) for f in OOD
        }
        out["a_distance"][name], out["errors"][name] = {}, {}
        for f in OOD:
            d, err = proxy_a_distance(states["plain"], states[f], seed, return_errors=True)
            out["a_distance"][name][f] = float(d)
            out["errors"][name][f] = err.astype(int).tolist()
        p = pca_projection(states["plain"], help_states, {f: states[f] for f in OOD})
        out["pca"][name] = {
            "id_harm": p["id_harm"].tolist(),
            "id_help": p["id_help"].tolist(),
            "ood": {k: v.tolist() for k, v in p["ood"].items()},
        }
    return out
