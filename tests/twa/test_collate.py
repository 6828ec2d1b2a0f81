"""TWACollator for causal and seq2seq models, and the loss on a real (tiny, random-init) model."""

from __future__ import annotations

import pytest
import torch

from icml25.toy import build_tokenizer
from icml25.twa import AnnotatedTranslation, ErrorSpan
from icml25.twa.collate import TWACollator, twa_loss_on_batch

WORDS = ["s1", "s2", "s3p", "s4", "=", "t3", "-n0", "t7", "-a1", "t12", "-v0"]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer([" ".join(WORDS)] * 3, kind="word")


def data():
    tgt = "t3 -n0 t7 -a1 t12 -v0"
    a = tgt.index("t7")
    return [
        AnnotatedTranslation("s1 s2 s4", "t3 -n0 t12 -v0 t3 -n0"),  # no error
        AnnotatedTranslation("s1 s3p", tgt, [ErrorSpan(a, a + 6, "Major")]),  # "t7 -a1"
        {
            "source": "s4",
            "target": "t3 -n0",
            "spans": [{"start": 0, "end": 2, "severity": "Minor"}],
        },
    ]


def test_causal_batch(tok):
    batch = TWACollator(tok, model_type="causal")(data())
    B, L = batch["input_ids"].shape
    assert B == 3 and batch["labels"].shape == (3, L) and batch["span_weights"].shape == (3, 1)
    eos = tok.eos_token_id
    for b, (n_prompt, n_tgt) in enumerate(((5, 7), (4, 7), (3, 3))):  # bos + words + "="
        lab = batch["labels"][b]
        assert (lab[:n_prompt] == -100).all() and lab[n_prompt + n_tgt - 1] == eos
        assert (lab[n_prompt + n_tgt :] == -100).all()
        assert not batch["positive"][b, :n_prompt].any()
        assert batch["attention_mask"][b].sum() == n_prompt + n_tgt
    # row 0: every target token positive, EOS included; row 1: CE on "t3 -n0", span "t7 -a1",
    # the rest (EOS included) ignored; row 2: the first token is an error: nothing positive
    assert batch["positive"][0, 5:12].all()
    assert batch["positive"][1].tolist()[4:11] == [True, True, False, False, False, False, False]
    assert batch["span_ids"][1].tolist()[4:11] == [-1, -1, 0, 0, -1, -1, -1]
    assert batch["span_weights"][1].tolist() == [5.0] and batch["span_weights"][0].tolist() == [0.0]
    assert not batch["positive"][2].any() and batch["span_ids"][2].tolist()[3] == 0


def test_seq2seq_batch_and_truncation(tok):
    c = TWACollator(tok, model_type="seq2seq", max_target_len=3)
    batch = c(data())
    assert batch["labels"].shape == (3, 3)
    # rows 0 and 1 are cut after 3 tokens: no EOS (it would teach stopping mid-sentence);
    # row 2 ("t3 -n0") fits and ends with EOS
    assert (batch["labels"][:2] != tok.eos_token_id).all()
    assert batch["labels"][2].tolist()[2] == tok.eos_token_id
    # the span "t7 -a1" is clipped to its first token, the last one kept
    assert batch["span_ids"][1].tolist() == [-1, -1, 0]
    assert batch["positive"][1].tolist() == [True, True, False]
    assert batch["positive"][0].all()
    assert batch["input_ids"][0, -1] == tok.eos_token_id


def test_policies_and_bad_input(tok):
    omission = AnnotatedTranslation("s1 s2", "t3 -n0", [ErrorSpan(0, 2, "Major", side="source")])
    no_pos = TWACollator(tok, unlocalized="no_positive")([omission])
    assert not no_pos["positive"].any()
    ign = TWACollator(tok, unlocalized="ignore")([omission])
    assert ign["positive"].sum() == 3
    with pytest.raises(ValueError, match="every example of the batch was dropped"):
        TWACollator(tok, unlocalized="drop_example")([omission])
    with pytest.raises(ValueError, match="model_type"):
        TWACollator(tok, model_type="encoder")
    with pytest.raises(ValueError, match="batch is empty"):
        TWACollator(tok)([])
    with pytest.raises(KeyError, match="lacks \\['target'\\]"):
        TWACollator(tok)([{"source": "s1"}])
    with pytest.raises(ValueError, match="prompt_template must contain"):
        TWACollator(tok, prompt_template="translate:")


def test_choices_are_typed_as_the_values_they_accept(tok):
    """The ``Literal`` types of the string choices list exactly what the checks accept."""
    from typing import get_args, get_type_hints

    from icml25.twa.align import UNLOCALIZED_POLICIES, build_token_roles
    from icml25.twa.collate import twa_loss_denominator
    from icml25.twa.loss import REDUCTIONS, twa_loss
    from icml25.twa.train import TWAConfig

    hints = get_type_hints(TWAConfig)
    assert get_args(hints["unlocalized"]) == UNLOCALIZED_POLICIES
    assert get_args(hints["reduction"]) == REDUCTIONS
    loss_hints = get_type_hints(twa_loss)
    assert get_args(hints["unlikelihood"]) == get_args(loss_hints["unlikelihood"])
    assert get_args(loss_hints["reduction"]) == REDUCTIONS
    assert get_args(get_type_hints(build_token_roles)["unlocalized"]) == UNLOCALIZED_POLICIES
    assert get_args(get_type_hints(twa_loss_denominator)["reduction"]) == REDUCTIONS
    model_types = get_args(get_type_hints(TWACollator.__init__)["model_type"])
    assert get_args(get_type_hints(twa_loss_on_batch)["model_type"]) == model_types
    assert get_args(get_type_hints(twa_loss_denominator)["model_type"]) == model_types
    for name in ("unlikelihood", "unlocalized", "reduction"):
        for choice in get_args(hints[name]):
            assert getattr(TWAConfig(**{name: choice}), name) == choice
        with pytest.raises(ValueError, match=f"{name} must be"):
            TWAConfig(**{name: "other"})
    _, uniform, none = get_args(hints["severity_weights"])
    assert get_args(uniform) == ("uniform",) and none is type(None)
    assert TWAConfig(severity_weights="uniform").severity_weights == "uniform"
    with pytest.raises(ValueError, match="severity_weights must be None, a dict or 'uniform'"):
        TWAConfig(severity_weights="other")
    col_hints = get_type_hints(TWACollator.__init__)
    assert get_args(col_hints["unlocalized"]) == UNLOCALIZED_POLICIES
    for name in ("model_type", "unlocalized"):
        for choice in get_args(col_hints[name]):
            TWACollator(tok, **{name: choice})
        with pytest.raises(ValueError, match=f"{name} must be"):
            TWACollator(tok, **{name: "other"})


def test_the_loss_on_a_tiny_causal_lm_trains(tok):
    from icml25.toy import tiny_causal_lm

    model = tiny_causal_lm(tok, d_model=32, n_layers=1, max_positions=32, seed=0)
    batch = TWACollator(tok)(data())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, span_lp = [], []
    for _ in range(15):
        out = twa_loss_on_batch(model, batch)
        opt.zero_grad()
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(out.loss.detach()))
        span_lp.append(float(out.span_logprob[1, 0]))
    assert losses[-1] < losses[0]
    assert span_lp[-1] < span_lp[0]  # the annotated error became less likely


@pytest.mark.parametrize("arch", ["marian", "t5"])
def test_the_loss_on_real_seq2seq_models(tok, arch):
    """Random-init Marian and T5 (as Hugging Face builds them) train on TWA batches: the model
    builds its decoder inputs from the labels, whose logits align with the labels unshifted."""
    transformers = pytest.importorskip("transformers")
    V, pad, eos = len(tok), tok.pad_token_id, tok.eos_token_id
    if arch == "marian":
        cfg = transformers.MarianConfig(
            vocab_size=V,
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            pad_token_id=pad,
            eos_token_id=eos,
            decoder_start_token_id=pad,
            max_position_embeddings=64,
        )
        model = transformers.MarianMTModel(cfg)
    else:
        cfg = transformers.T5Config(
            vocab_size=V,
            d_model=32,
            d_kv=16,
            d_ff=64,
            num_layers=1,
            num_decoder_layers=1,
            num_heads=2,
            pad_token_id=pad,
            eos_token_id=eos,
            decoder_start_token_id=pad,
        )
        model = transformers.T5ForConditionalGeneration(cfg)
    torch.manual_seed(0)
    batch = TWACollator(tok, model_type="seq2seq")(data())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = last = None
    for _ in range(8):
        out = twa_loss_on_batch(model, batch, model_type="seq2seq")
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        first = first if first is not None else float(out.loss.detach())
        last = float(out.loss.detach())
    assert last < first and out.n_span_tokens == 2 + 1  # "t7 -a1" (row 1) and "t3" (row 2)


def test_dict_spans_missing_fields_name_the_example(tok):
    from icml25.twa.annotations import from_records

    with pytest.raises(ValueError, match="example 0: a span needs start, end and severity"):
        TWACollator(tok)([{"source": "s1", "target": "t3 -n0", "spans": [{"start": 0, "end": 2}]}])
    with pytest.raises(ValueError, match="row 0: a span needs start, end and severity"):
        from_records([{"source": "s", "target": "t", "spans": [{"start": 0}]}])
