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
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        HFRewardModel(model, tok, batch_size=0)
