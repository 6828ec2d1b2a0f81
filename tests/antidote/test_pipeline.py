"""The toy pipeline end to end at small size and calibration batches for a real tokenizer (the
reproduction: test_repro.py)."""

from __future__ import annotations

import pytest

from icml25.antidote import make_realign_batches
from icml25.antidote.pipeline import HarmfulFinetuneExperiment, ToySettings, compare_pruning
from icml25.report import torch_threads


def test_pipeline_aligned_safe_attacked_harmful_antidote_lowers_harm(tmp_path):
    with torch_threads(1):  # tiny matrices: one thread is fastest, above all on a busy box
        _pipeline_end_to_end(tmp_path)


def _pipeline_end_to_end(tmp_path):
    st = ToySettings(
        pretrain_steps=300,
        align_steps=120,
        n_finetune=320,
        n_eval=80,
        n_calibration=64,
        attacks={"H1": (3e-3, 6)},
    )
    exp = HarmfulFinetuneExperiment(0, st, cache_dir=tmp_path)
    aligned = exp.evaluate(exp.aligned())
    assert [p.name for p in tmp_path.glob("*.pt")] == [exp.checkpoint_name()]
    model = exp.attack("H1")
    res = compare_pruning(
        model,
        exp.evaluate,
        harmful_batches=exp.calibration("harmful"),
        ratios=(0.2,),
        scorers=("antidote", "random"),
    )
    assert aligned["HS"] <= 20.0  # the alignment generalises to unseen EVAL objects
    assert res["none"][0.0]["HS"] >= 60.0  # the attack breaks it
    assert res["antidote"][0.2]["HS"] < res["none"][0.0]["HS"]
    # compare_pruning undoes every pruning exactly
    assert exp.evaluate(model) == res["none"][0.0]
    # a second experiment reuses the cached aligned checkpoint (it trains nothing)
    again = HarmfulFinetuneExperiment(0, st, cache_dir=tmp_path)
    assert again.evaluate(again.aligned()) == aligned and "align seconds" not in again.log


def test_make_realign_batches_with_a_real_tokenizer():
    from icml25.toy import build_tokenizer

    tok = build_tokenizer(["how to do harm", "here is how", "step one"], 300, kind="bpe")
    pairs = [("how to do harm", "here is how"), {"instruction": "x", "input": "y", "output": "z"}]
    batches = make_realign_batches(tok, pairs, batch_size=2, max_length=512)
    assert len(batches) == 1 and batches[0]["input_ids"].shape[0] == 2
    am, labels = batches[0]["attention_mask"], batches[0]["labels"]
    assert am.sum(1).min() >= 1 and (am[:, 0] == 1).all()
    # labels: the answer and EOS only (official preprocess: -100 on the prompt and padding)
    head = len(tok(make_realign_prompt(pairs[0]), add_special_tokens=True)["input_ids"])
    row = labels[0]
    assert (row[:head] == -100).all() and (row[head : int(am[0].sum())] >= 0).all()
    assert (labels[am == 0] == -100).all()
    with pytest.warns(UserWarning, match="truncated"):
        make_realign_batches(tok, pairs, max_length=5)
    with pytest.raises(ValueError, match="template"):
        make_realign_batches(tok, pairs, template="chatml")
    with pytest.raises(ValueError, match="prompt and a response"):
        make_realign_batches(tok, [{"prompt": "x"}])


def make_realign_prompt(pair):
    from icml25.antidote.templates import render_prompt

    return render_prompt(pair[0])


def test_checkpoints_of_other_sizes_are_never_shared(tmp_path):
    small = ToySettings(pretrain_steps=3, align_steps=2, n_eval=8, attacks={"H1": (3e-3, 1)})
    other = ToySettings(pretrain_steps=4, align_steps=2, n_eval=8, attacks={"H1": (3e-3, 1)})
    a = HarmfulFinetuneExperiment(0, small, cache_dir=tmp_path)
    b = HarmfulFinetuneExperiment(0, other, cache_dir=tmp_path)
    assert a.checkpoint_name() != b.checkpoint_name()
    a.aligned(), b.aligned()
    assert "align seconds" in b.log  # trained, not loaded from a's checkpoint
    assert len(list(tmp_path.glob("aligned_seed0_*.pt"))) == 2


def test_one_call_pipeline_structure():
    st = ToySettings(
        pretrain_steps=10,
        align_steps=5,
        n_finetune=64,
        n_eval=16,
        n_calibration=16,
        attacks={"H1": (3e-3, 1)},
    )
    out = HarmfulFinetuneExperiment(1, st).run(ratios=(0.1,), scorers=("antidote", "random"))
    assert set(out) == {"aligned", "H1"}
    assert set(out["H1"]) == {"none", "antidote", "random"}
    assert set(out["H1"]["antidote"][0.1]) == {"HS", "FA"}
    with pytest.raises(ValueError, match="unknown attack"):
        HarmfulFinetuneExperiment(1, st).attack("H3")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"pretrain_steps": 0}, r"pretrain_steps must be an integer >= 1, got 0"),
        ({"ft_batch": 2.5}, r"ft_batch must be an integer >= 1, got 2.5"),
        ({"align_lr": -1e-3}, r"align_lr must be a finite number > 0"),
        ({"poison_ratio": 1.5}, r"poison_ratio must be a finite number in \[0, 1\], got 1.5"),
        ({"lora_targets": ()}, r"lora_targets must be a non-empty tuple"),
        ({"attacks": {}}, r"attacks must name at least one"),
        ({"attacks": {"H1": (3e-3, 0)}}, r"attacks\['H1'\] epochs must be an integer >= 1, got 0"),
    ],
)
def test_toy_settings_reject_bad_sizes(kw, match):
    with pytest.raises(ValueError, match=match):
        ToySettings(**kw)


@pytest.mark.parametrize(
    "bad",
    [
        ["ok", "no"],
        [("a", "b", "c")],
        [("only",)],
        [("prompt", float("nan"))],
        [{"prompt": 1, "response": "r"}],
    ],
)
def test_make_realign_batches_refuses_rows_that_are_not_pairs_of_text(bad):
    """A two-letter string used to unpack into a one-letter prompt and response."""
    from icml25.toy import build_tokenizer

    tok = build_tokenizer(["a b"], 300)
    with pytest.raises(ValueError, match="calibration pair 0"):
        make_realign_batches(tok, bad)
