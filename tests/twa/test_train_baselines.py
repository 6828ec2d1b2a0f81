"""Baselines (Filter + SFT, DPO pairs in TRL's columns, TWA-seq) and training (the plain loop and
the transformers.Trainer subclass) on a tiny random-init model."""

from __future__ import annotations

import pytest
import torch

from icml25.toy import build_tokenizer, tiny_causal_lm
from icml25.twa import AnnotatedTranslation, ErrorSpan, twa_loss
from icml25.twa.baselines import (
    build_dpo_pairs,
    filter_sft_examples,
    sft_loss,
    twa_seq_roles,
)
from icml25.twa.train import TWAConfig, TWAHFTrainer, train_twa

WORDS = ["s1", "s2", "s3", "=", "t1", "-n0", "t2", "-a1", "t3", "-v0", "-n1"]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer([" ".join(WORDS)] * 3, kind="word")


def annotated():
    out = []
    for src in ("s1 s2", "s2 s3", "s1 s3"):
        out.append(AnnotatedTranslation(src, "t1 -n0 t2 -a1", system="A"))
        out.append(
            AnnotatedTranslation(src, "t1 -n1 t2 -a1", [ErrorSpan(3, 6, "Minor")], system="B")
        )
        out.append(
            AnnotatedTranslation(src, "t3 -n0 t2 -a1", [ErrorSpan(0, 2, "Major")], system="C")
        )
        out.append(
            AnnotatedTranslation(
                src,
                "t3 -n1 t2 -a1",
                [ErrorSpan(0, 2, "Major"), ErrorSpan(3, 6, "Minor")],
                system="D",
            )
        )
    return out


def test_filter_and_dpo_pairs():
    data = annotated()
    assert [d.system for d in filter_sft_examples(data)] == ["A"] * 3
    assert len(filter_sft_examples(data, max_penalty=1.0)) == 6
    pairs = build_dpo_pairs(data, max_pairs_per_source=3, rng=0)
    assert len(pairs) == 9 and set(pairs[0]) >= {"prompt", "chosen", "rejected"}
    for p in pairs:
        assert p["chosen_penalty"] < p["rejected_penalty"]  # never equal penalties
        assert p["prompt"].endswith(" =") and p["chosen"].startswith(" ")
    all_pairs = build_dpo_pairs(data, max_pairs_per_source=10, rng=0)
    assert len(all_pairs) == 3 * 6  # 4 translations, all penalties distinct: 6 pairs each
    # penalties 0, 1, 5, 6: a gap above 1 excludes (A, B) and (C, D)
    assert len(build_dpo_pairs(data, max_pairs_per_source=10, min_gap=1.0)) == 3 * 4
    with pytest.raises(TypeError, match=r"data\[0\] must be an AnnotatedTranslation"):
        build_dpo_pairs([{"source": "x"}])


def test_twa_seq_and_sft_loss():
    r = twa_seq_roles(4, 0.0)
    assert r.positive.all() and r.span_weights.numel() == 0
    r = twa_seq_roles(4, 31.0)
    assert not r.positive.any() and (r.span_ids == 0).all() and r.span_weights.tolist() == [25.0]
    logits = torch.randn(1, 4, 6, dtype=torch.float64)
    labels = torch.tensor([[1, 2, 3, 4]])
    seq = twa_loss(
        logits, labels, r.positive[None], r.span_ids[None], r.span_weights[None], reduction="sum"
    ).loss
    lp = torch.log_softmax(logits, -1)[0, range(4), labels[0]].sum()
    want = -25.0 * torch.log(1 - (1 - 1e-6) * torch.exp(lp))
    assert float(seq) == pytest.approx(float(want), rel=1e-6)
    assert float(sft_loss(logits, labels)) == pytest.approx(
        float(torch.nn.functional.cross_entropy(logits[0], labels[0])), rel=1e-6
    )


def test_train_twa_lowers_the_loss_in_a_few_steps(tok):
    model = tiny_causal_lm(tok, d_model=32, n_layers=1, max_positions=32, seed=0)
    cfg = TWAConfig(lr=5e-3, batch_size=12, max_steps=6, seed=0)
    evals = []
    hist = train_twa(
        model,
        tok,
        annotated(),
        cfg,
        eval_fn=lambda m: evals.append(1) or {"ok": 1},
        eval_every=3,
        progress=False,
    )
    losses = [s["loss"] for s in hist.steps]
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert [e["step"] for e in hist.evals] == [3, 6] and not model.training  # the last once
    with pytest.raises(ValueError, match="data is empty"):
        train_twa(model, tok, [], cfg)
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        TWAConfig(lr=0)


def test_the_transformers_trainer_path(tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    from icml25.twa import TWACollator

    model = tiny_causal_lm(tok, d_model=32, n_layers=1, max_positions=32, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    args = transformers.Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=6,
        max_steps=3,
        learning_rate=5e-3,
        remove_unused_columns=False,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
    )
    trainer = TWAHFTrainer(
        model=model, args=args, train_dataset=annotated(), data_collator=TWACollator(tok)
    )
    trainer.train()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    bad = transformers.Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), report_to=[], use_cpu=True
    )
    with pytest.raises(ValueError, match="remove_unused_columns=False"):
        TWAHFTrainer(
            model=model, args=bad, train_dataset=annotated(), data_collator=TWACollator(tok)
        )
    with pytest.raises(TypeError, match="needs data_collator=TWACollator"):
        TWAHFTrainer(model=model, args=args, train_dataset=annotated())


def test_train_dpo_raises_the_chosen_margin(tok):
    import copy

    from icml25.preference import sequence_logprob
    from icml25.twa import TWACollator
    from icml25.twa.baselines import train_dpo

    model = tiny_causal_lm(tok, d_model=32, n_layers=1, max_positions=32, seed=0)
    ref = copy.deepcopy(model)
    pairs = build_dpo_pairs(annotated(), max_pairs_per_source=2, rng=0)
    collate = TWACollator(tok)

    def margin(m):
        srcs = [p["prompt"][:-2] for p in pairs]
        c = collate([AnnotatedTranslation(s, p["chosen"].strip()) for s, p in zip(srcs, pairs)])
        r = collate([AnnotatedTranslation(s, p["rejected"].strip()) for s, p in zip(srcs, pairs)])
        with torch.no_grad():
            lc = sequence_logprob(m(input_ids=c["input_ids"]).logits[:, :-1], c["labels"][:, 1:])
            lr_ = sequence_logprob(m(input_ids=r["input_ids"]).logits[:, :-1], r["labels"][:, 1:])
        return float((lc - lr_).mean())

    before = margin(model)
    losses = train_dpo(model, ref, tok, pairs, lr=5e-3, batch_size=6, epochs=3)
    assert losses[0] == pytest.approx(0.6931, abs=1e-3)  # policy = reference at the start
    assert margin(model) > before and losses[-1] < losses[0]
    with pytest.raises(ValueError, match="pairs is empty"):
        train_dpo(model, ref, tok, [])


def test_greedy_translation_and_base_pairs():
    from icml25.toy import train_causal_lm
    from icml25.twa.collate import chat_prompt_fn
    from icml25.twa.synthetic import SyntheticMT, base_rates_pairs, translate_greedy

    task = SyntheticMT(0)
    tk = build_tokenizer([" ".join(task.vocabulary())] * 2, kind="word")
    pairs = base_rates_pairs(task, 50, 0)
    assert all(len(t.split()) == 2 * len(s.split()) for s, t in pairs)
    model = tiny_causal_lm(tk, d_model=32, n_layers=1, max_positions=48, seed=0)
    train_causal_lm(model, tk, pairs, steps=5, batch_size=16, lr=1e-3, warmup=1)
    outs = translate_greedy(
        model, tk, [s for s, _ in pairs[:4]], chat_prompt_fn(tk), max_new_tokens=5
    )
    assert len(outs) == 4 and all(isinstance(o, str) and len(o.split()) <= 5 for o in outs)


def test_review_findings_weights_model_type_and_config(tok):
    from icml25.twa import TWACollator, load_mqm_tsv, twa_loss_on_batch
    from icml25.twa.annotations import severity_weight

    # the uniform ablation re-weights loaded spans (a loaded span carries its weight)
    d = annotated()
    default = TWACollator(tok)(d)["span_weights"]
    uniform = TWACollator(tok, weights="uniform")(d)["span_weights"]
    assert default.max() == 5.0 and set(uniform.unique().tolist()) <= {0.0, 1.0}
    assert severity_weight("Non-translation!", "Non-translation!", "uniform") == 1.0
    with pytest.raises(ValueError, match="unknown severity 'Critical'"):
        severity_weight("Critical", weights="uniform")
    with pytest.raises(ValueError, match="severity_weights must be None, a dict or 'uniform'"):
        TWAConfig(severity_weights="unifrom")
    for bad in (
        dict(unlikelihood="seq"),
        dict(reduction="mean"),
        dict(unlocalized="skip"),
        dict(eps=1.0),
        dict(eps=-1e-3),
    ):
        with pytest.raises(ValueError):
            TWAConfig(**bad)
    # merged raters: one span per position, the larger weight
    import io

    tsv = (
        "system\tdoc\tdoc_id\tseg_id\trater\tsource\ttarget\tcategory\tseverity\n"
        "A\td\t1\t1\tr1\ts\tthe <v>cat</v>\tAccuracy\tMajor\n"
        "A\td\t1\t1\tr2\ts\tthe <v>cat</v>\tAccuracy\tMinor\n"
    )
    (m,) = load_mqm_tsv(io.StringIO(tsv), merge_raters=True)
    assert [(s.start, s.end, s.weight) for s in m.spans] == [(4, 7, 5.0)]
    # a model_type that does not fit the model is refused
    model = tiny_causal_lm(tok, d_model=32, n_layers=1, max_positions=32, seed=0)
    with pytest.raises(ValueError, match="decoder-only model: use model_type='causal'"):
        twa_loss_on_batch(model, TWACollator(tok)(d), model_type="seq2seq")
    # every example dropped: an error, not a silent no-op
    omission = [AnnotatedTranslation("s1", "t1 -n0", [ErrorSpan(0, 2, "Major", side="source")])]
    with pytest.raises(ValueError, match="every"):
        train_twa(model, tok, omission, TWAConfig(unlocalized="drop_example", max_steps=2))
