from __future__ import annotations

import pytest

from icml25.llm import CallableReward, HFRewardModel, RewardModel


def test_callable_reward():
    rm = CallableReward(lambda q, r: len(r) - len(q))
    assert isinstance(rm, RewardModel)
    assert rm.score(["a", "bb"], ["abc", "b"]) == [2.0, -1.0]


@pytest.mark.parametrize(
    ("q", "r", "error", "match"),
    [
        (["a"], ["b", "c"], ValueError, "got 1 queries, 2 responses"),
        ("a", ["b"], TypeError, "queries must be a list of strings"),
        (["a"], [3], TypeError, r"responses\[0\] is int"),
    ],
)
def test_bad_pairs(q, r, error, match):
    with pytest.raises(error, match=match):
        CallableReward(lambda q, r: 0.0).score(q, r)


def test_hf_reward_model_scores_each_pair_padding_excluded():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from icml25.toy import build_tokenizer

    tok = build_tokenizer(["good answer", "bad answer", "question"], 300)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_labels=1,
        pad_token_id=tok.pad_token_id,
    )
    model = LlamaForSequenceClassification(cfg).eval()
    rm = HFRewardModel(model, tok, batch_size=4)
    qs, rs = ["question"] * 3, ["good answer", "bad", "a much longer bad answer here"]
    batched = rm.score(qs, rs)
    single = [HFRewardModel(model, tok, batch_size=1).score([q], [r])[0] for q, r in zip(qs, rs)]
    assert len(batched) == 3 and batched == pytest.approx(single, abs=1e-5)
    assert rm.render("q", "a") == "<|user|>q<|end|><|assistant|>a<|end|>"
    tok.chat_template = "<|bos|>" + tok.chat_template
    assert rm.render("q", "a").startswith("<|user|>")  # BOS text stripped
    assert HFRewardModel(model, tok, strip_bos_text=False).render("q", "a").startswith("<|bos|>")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        HFRewardModel(model, tok, batch_size=0)


def test_hf_reward_model_pools_the_last_real_token_like_the_pipeline():
    """A chat template ending in EOS and a tokenizer without a pad token: the official TPO
    reward (a transformers pipeline, batch size 1) pools the EOS position. Padding with pad = EOS
    used to pool one token early; every batch size must now give the pipeline's score."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from icml25.toy import build_tokenizer

    tok = build_tokenizer(["good answer", "bad answer", "question"], 300)
    tok.pad_token = None
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_labels=1,
        pad_token_id=None,
    )
    model = transformers.LlamaForSequenceClassification(cfg).eval()
    qs, rs = ["question"] * 3, ["good answer", "bad", "a much longer bad answer here"]
    rm = HFRewardModel(model, tok, batch_size=3)
    pipe = transformers.pipeline(
        "text-classification", model=model, tokenizer=tok, function_to_apply="none", top_k=None
    )

    def one(text):  # a single string gives [{...}] or [[{...}]] depending on the version
        out = pipe(text, batch_size=1)
        while isinstance(out, list):
            out = out[0]
        return out["score"]

    official = [one(rm.render(q, r)) for q, r in zip(qs, rs)]
    assert rm.score(qs, rs) == pytest.approx(official, abs=1e-5)
    assert HFRewardModel(model, tok, batch_size=1).score(qs, rs) == pytest.approx(
        official, abs=1e-5
    )
    assert tok.pad_token is None and model.config.pad_token_id is None  # nothing mutated
    # the old behaviour (pad = EOS in the config) pools one token early: a different number
    model.config.pad_token_id = tok.eos_token_id
    with torch.no_grad():
        early = model(**tok(rm.render(qs[0], rs[0]), return_tensors="pt")).logits[0, 0].item()
    model.config.pad_token_id = None
    assert abs(early - official[0]) > 1e-4
    long = "answer " * 50
    assert rm.truncate(long, 5) != long and len(tok.encode(rm.truncate(long, 5))) <= 6
    assert rm.truncate("good answer", 50) == "good answer"
