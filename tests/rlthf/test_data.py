"""PreferencePairs, TRL rows and the text world."""

import json

import numpy as np
import pytest

from icml25.rlthf import PreferencePairs, make_textworld


def test_to_trl_from_trl_round_trip(small_pairs):
    rows = small_pairs.to_trl()
    assert rows[1] == {
        "prompt": "How do I y?\n\n",
        "chosen": "y done right",
        "rejected": "y is hard",
    }
    back = PreferencePairs.from_trl(rows, seed=3)
    assert back.to_trl() == rows
    z = back.human_labels
    assert set(z.tolist()) <= {0, 1}
    # implicit prompt and conversational rows read back to the same texts
    for kw in (
        {"implicit_prompt": True},
        {"conversational": True},
        {"conversational": True, "implicit_prompt": True},
    ):
        again = PreferencePairs.from_trl(small_pairs.to_trl(**kw), shuffle_order=False)
        assert again.prompts == small_pairs.prompts
        oriented = small_pairs.oriented(None, small_pairs.human_labels)
        assert again.responses_a == oriented[1] and again.responses_b == oriented[2]


def test_from_trl_randomises_order_so_both_classes_appear():
    rows = [{"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(200)]
    z = PreferencePairs.from_trl(rows, seed=0).human_labels
    assert 60 < z.sum() < 140
    assert PreferencePairs.from_trl(rows, shuffle_order=False).human_labels.sum() == 200


def test_from_trl_reads_files_and_datasets(tmp_path):
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b"}] * 3
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert len(PreferencePairs.from_trl(str(path))) == 3
    datasets = pytest.importorskip("datasets")
    assert len(PreferencePairs.from_trl(datasets.Dataset.from_list(rows))) == 3


def test_weights_column(small_pairs):
    rows = small_pairs.to_trl(weights=[5.0, 1.0, 1.0])
    assert [r["weight"] for r in rows] == [5.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="weights"):
        small_pairs.to_trl(weights=[1.0, -1.0, 1.0])


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match=r"lengths \(2, 1, 2\)"):
        PreferencePairs(["a", "b"], ["x"], ["y", "z"])
    with pytest.raises(ValueError, match=r"human_labels\[1\] = 2"):
        PreferencePairs(["a", "b"], ["x", "y"], ["y", "z"], np.array([1, 2]))
    with pytest.raises(ValueError, match=r"human_labels\[0\] = nan"):
        PreferencePairs(["a"], ["x"], ["y"], np.array([np.nan]))
    with pytest.raises(TypeError, match=r"prompts\[1\]"):
        PreferencePairs(["a", 3], ["x", "y"], ["y", "z"])
    with pytest.raises(ValueError, match="chosen"):
        PreferencePairs.from_trl([{"prompt": "q", "answer": "a"}])
    with pytest.raises(ValueError, match="outside"):
        PreferencePairs(["a"], ["x"], ["y"]).subset([3])


def test_cleanlab_accepts_exported_labels():
    filt = pytest.importorskip("cleanlab.filter")
    w = make_textworld(300, 0, seed=1)
    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.95, len(w.ai_labels))
    issues = filt.find_label_issues(
        w.ai_labels, np.stack([1 - p, p], 1), return_indices_ranked_by="self_confidence"
    )
    assert issues.ndim == 1 and len(issues) > 0


def test_textworld_properties():
    w = make_textworld(4000, 1000, seed=0)
    assert 0.70 <= w.ai_accuracy <= 0.88
    hard, easy = w.hard, ~w.hard
    z, h = w.ai_labels, w.train.human_labels
    assert np.mean(z[hard] == h[hard]) < np.mean(z[easy] == h[easy])  # the blind spot
    texts = set(w.train.responses_a + w.train.responses_b + w.test.responses_a + w.test.responses_b)
    assert len(texts) <= 2880 and len(set(w.train.prompts)) <= 30
    assert not w.train.identical().any()
    again = make_textworld(4000, 1000, seed=0)
    assert again.train.to_trl() == w.train.to_trl() and (again.ai_labels == w.ai_labels).all()
    assert (
        make_textworld(200, 10, seed=1).train.prompts
        != make_textworld(200, 10, seed=2).train.prompts
    )
