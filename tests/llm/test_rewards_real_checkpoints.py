"""``icml25.llm.HFRewardModel`` on the architecture matrix (issue 45): loads a path with
``device``/``dtype``, scores a padded batch exactly as each pair alone (Llama and GPT-2
classifiers: both pool the last non-pad token), and refuses a pair longer than the context."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from icml25.llm import HFRewardModel  # noqa: E402
from icml25.toy import save_tiny, tiny_model, tiny_tokenizer  # noqa: E402

QUERIES = ["how do I bake bread?", "hi", "what is the capital of France, and why is it there?"]
RESPONSES = ["knead, rest and bake the dough for forty minutes", "hello", "Paris"]


def _classifier(arch: str, dtype=None):
    if arch == "seq_cls":
        return tiny_model("seq_cls", dtype=dtype), tiny_tokenizer("seq_cls")
    config = copy.deepcopy(tiny_model(arch).config)
    config.num_labels = 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = transformers.AutoModelForSequenceClassification.from_config(config)
    return model.to(dtype or torch.float32).eval(), tiny_tokenizer(arch)


def test_loads_a_path_with_dtype_and_device(tmp_path):
    path = save_tiny("seq_cls", tmp_path / "rm")
    rm = HFRewardModel(str(path), dtype="bf16", device="cpu")
    assert rm.model.dtype == torch.bfloat16 and rm.model.device.type == "cpu"
    assert not rm.model.training
    fp32 = HFRewardModel(path, device="cpu")  # a pathlib.Path too; the checkpoint's own dtype
    assert fp32.model.dtype == torch.float32
    s16, s32 = rm.score(QUERIES, RESPONSES), fp32.score(QUERIES, RESPONSES)
    assert s16 == pytest.approx(s32, abs=0.05) and s16 != s32
    with pytest.raises(ValueError, match="dtype must be"):
        HFRewardModel(path, dtype="int4")


@pytest.mark.parametrize("arch", ["seq_cls", "gpt2", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_padded_batch_scores_as_each_pair_alone(arch, dtype):
    model, tok = _classifier(arch, dtype)
    alone = []
    for q, r in zip(QUERIES, RESPONSES):
        ids = tok(HFRewardModel(model, tok).render(q, r))["input_ids"]
        with torch.no_grad():  # no padding at all: the reference
            alone.append(model(input_ids=torch.tensor([ids])).logits[0, 0].float().item())
    tok.padding_side = "left"  # a left-padding tokenizer must not change anything
    batched = HFRewardModel(model, tok, batch_size=3).score(QUERIES, RESPONSES)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert batched == pytest.approx(alone, abs=tol)
    assert len(set(batched)) == 3  # distinct pairs, distinct rewards: the check can fail


def test_a_pair_longer_than_the_context_is_an_error():
    model, tok = _classifier("seq_cls")
    rm = HFRewardModel(model, tok)
    with pytest.raises(ValueError, match=r"pair 1 .*tokens.* context of 128"):
        rm.score(["q", "q"], ["short", "word " * 200])
    # cut to max_length it is scored
    assert len(HFRewardModel(model, tok, max_length=64).score(["q"], ["word " * 200])) == 1
