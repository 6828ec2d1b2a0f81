"""The experiment behind the TWA reproduction (docs/twa.md, "Reproduction"), callable on its own.

:func:`build_base` trains the base model with a systematic error profile on the synthetic
language pair; :func:`run_methods` fine-tunes every method (SFT, Filter + SFT, DPO, TWA and its
ablations) from the same base on one seed's annotated data and evaluates the greedy translations
of held-out sources; :func:`inspan_deltas` measures what the span-level and token-level
unlikelihood do to the log-probabilities inside agreement spans.
"""

from __future__ import annotations

import copy
import random
import time

import numpy as np

from icml25.twa.annotations import AnnotatedTranslation, ErrorSpan
from icml25.twa.baselines import build_dpo_pairs, filter_sft_examples, train_dpo
from icml25.twa.collate import chat_prompt_fn
from icml25.twa.synthetic import SyntheticMT, base_rates_pairs, evaluate_output, translate_greedy
from icml25.twa.train import TWAConfig, train_twa


def build_base(task_seed: int, n_pairs: int, steps: int):
    """The task, its word-level tokenizer and the base model trained on corrupted targets."""
    from icml25.toy import build_tokenizer, tiny_causal_lm, train_causal_lm

    t0 = time.perf_counter()
    task = SyntheticMT(task_seed)
    tok = build_tokenizer([" ".join(task.vocabulary())] * 2, kind="word")
    model = tiny_causal_lm(tok, d_model=128, n_layers=2, max_positions=64, seed=task_seed)
    pairs = base_rates_pairs(task, n_pairs, task_seed, p_stem=0.6)
    train_causal_lm(model, tok, pairs, steps=steps, batch_size=64, lr=1e-3, warmup=50)
    model.eval()
    return task, tok, model, time.perf_counter() - t0


def _seq_data(data: list[AnnotatedTranslation]) -> list[AnnotatedTranslation]:
    """TWA-seq: a translation with errors becomes one span over its whole text, weight
    min(penalty, 25); an error-free one stays as it is (CE on every token)."""
    out = []
    for d in data:
        if d.has_error and d.target:
            w = min(d.mqm_penalty(), 25.0)
            out.append(
                AnnotatedTranslation(
                    d.source, d.target, [ErrorSpan(0, len(d.target), "Major", weight=w)]
                )
            )
        else:
            out.append(AnnotatedTranslation(d.source, d.target))
    return out


def run_methods(task, tok, base, seed, n_src, epochs, n_eval, methods) -> dict:
    """One seed of the reproduction: ``n_src`` fresh sources annotated from the four other
    systems (data seed ``1000 + seed``), every method in ``methods`` fine-tuned from a copy of
    ``base`` (seed ``seed``), each evaluated by greedy decoding of ``n_eval`` held-out sources
    (fixed per task) and the evaluation annotator. Returns per method the penalty of every
    held-out segment, the exact-match rate and Major / Minor errors per segment, the error-free
    share of the data, and with ``twa`` and ``twa_token_ul`` the in-span deltas
    (:func:`inspan_deltas`)."""
    data, _ = task.annotated_data(n_src, 1000 + seed)
    rng = random.Random(50_000 + task.seed)  # held-out sources: fixed per task
    held = [task.sample_source(rng) for _ in range(n_eval)]
    src_text = [task.source_text(s) for s in held]
    pf = chat_prompt_fn(tok)
    cfg = dict(lr=2e-4, batch_size=32, epochs=epochs, seed=seed)
    out = {
        "penalty": {},
        "exact": {},
        "major": {},
        "minor": {},
        "error_free": float(np.mean([not d.has_error for d in data])),
    }
    trained = {}
    for m in methods:
        model = copy.deepcopy(base)
        if m == "sft_all":
            train_twa(
                model,
                tok,
                [AnnotatedTranslation(d.source, d.target) for d in data],
                TWAConfig(**cfg),
                progress=False,
                prompt_fn=pf,
            )
        elif m == "filter_sft":
            keep = [AnnotatedTranslation(d.source, d.target) for d in filter_sft_examples(data)]
            train_twa(model, tok, keep, TWAConfig(**cfg), progress=False, prompt_fn=pf)
        elif m == "dpo":
            pairs = build_dpo_pairs(data, max_pairs_per_source=3, rng=seed)
            train_dpo(
                model,
                base,
                tok,
                pairs,
                prompt_fn=pf,
                lr=cfg["lr"],
                batch_size=32,
                epochs=epochs,
                seed=seed,
            )
        elif m == "twa":
            train_twa(model, tok, data, TWAConfig(**cfg), progress=False, prompt_fn=pf)
        elif m == "twa_token_ul":
            train_twa(
                model,
                tok,
                data,
                TWAConfig(**cfg, unlikelihood="token"),
                progress=False,
                prompt_fn=pf,
            )
        elif m == "twa_all_nonerror":
            train_twa(
                model,
                tok,
                data,
                TWAConfig(**cfg, ignore_off_trajectory=False),
                progress=False,
                prompt_fn=pf,
            )
        elif m == "twa_seq":
            train_twa(model, tok, _seq_data(data), TWAConfig(**cfg), progress=False, prompt_fn=pf)
        elif m == "twa_uniform_weights":
            uni = [
                AnnotatedTranslation(
                    d.source,
                    d.target,
                    [
                        ErrorSpan(
                            s.start,
                            s.end,
                            s.severity,
                            s.category,
                            s.side,
                            1.0 if (s.weight or 0) > 0 else 0.0,
                        )
                        for s in d.spans
                    ],
                )
                for d in data
            ]
            train_twa(model, tok, uni, TWAConfig(**cfg), progress=False, prompt_fn=pf)
        if m in ("twa", "twa_token_ul"):
            trained[m] = model
        outs = translate_greedy(model, tok, src_text, pf)
        res = [evaluate_output(task, s, o) for s, o in zip(held, outs)]
        out["penalty"][m] = [x["penalty"] for x in res]
        out["exact"][m] = float(np.mean([x["exact"] for x in res]))
        out["major"][m] = float(
            np.mean([x["mistranslation"] + x["omission"] + x["addition"] for x in res])
        )
        out["minor"][m] = float(np.mean([x["agreement"] + x["order"] + x["fluency"] for x in res]))
    if "twa_token_ul" in trained:
        out["inspan"] = inspan_deltas(base, trained["twa"], trained["twa_token_ul"], tok, data, pf)
    return out


def inspan_deltas(base, span_ul, token_ul, tok, data, prompt_fn) -> dict[str, list[float]]:
    """Per training span of the agreement type (the stem right, the suffix wrong): the change
    of the teacher-forced log-probability of its stem token and of its suffix token, fine-tuned
    minus base, under span-level and token-level unlikelihood."""
    import torch

    from icml25.preference import token_logprobs
    from icml25.twa.collate import TWACollator

    ex = [
        AnnotatedTranslation(d.source, d.target, [s])
        for d in data
        for s in d.spans
        if s.category == "Fluency/Grammar" and s.side == "target" and s.end > s.start
    ]
    out = {k: [] for k in ("stem_span", "stem_token", "suffix_span", "suffix_token")}
    if not ex:
        return out
    collate = TWACollator(tok, prompt_fn=prompt_fn)
    for s in range(0, len(ex), 64):
        batch = collate(ex[s : s + 64])
        lps = []
        for model in (base, span_ul, token_ul):
            with torch.no_grad():
                logits = model(
                    input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
                ).logits
            lps.append(token_logprobs(logits[:, :-1], batch["labels"][:, 1:]))
        ids = batch["span_ids"][:, 1:]
        for b in range(ids.shape[0]):
            pos = (ids[b] == 0).nonzero().flatten().tolist()
            if len(pos) != 2:  # a word is exactly a stem and a suffix token
                continue
            st, sf = pos
            out["stem_span"].append(float(lps[1][b, st] - lps[0][b, st]))
            out["stem_token"].append(float(lps[2][b, st] - lps[0][b, st]))
            out["suffix_span"].append(float(lps[1][b, sf] - lps[0][b, sf]))
            out["suffix_token"].append(float(lps[2][b, sf] - lps[0][b, sf]))
    return out
