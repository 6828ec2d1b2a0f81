"""Antidote's statistics, scores and masks against brute force and the official rules."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from icml25.antidote import AntidoteConfig, antidote_prune, wanda_scores
from icml25.antidote.masks import (
    apply_mask,
    harmful_mask,
    magnitude_mask,
    random_mask,
    row_mask,
    tensor_mask,
    undo_mask,
)
from icml25.antidote.scores import activation_sq_norms
from icml25.antidote.targets import select_target_layers


class Stack(nn.Module):
    """A plain nn.Linear stack over token embeddings: called as model(input_ids=...)."""

    def __init__(self, vocab=11, d=6, h=5, dtype=torch.float64):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = nn.Embedding(vocab, d).to(dtype)
        self.fc1, self.fc2 = nn.Linear(d, h).to(dtype), nn.Linear(h, 3).to(dtype)
        for p in self.parameters():
            p.data = torch.randn(p.shape, generator=g, dtype=dtype)

    def forward(self, input_ids, attention_mask=None):
        return self.fc2(torch.tanh(self.fc1(self.emb(input_ids))))


def _seqs(n=5, seed=1):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(2, 7, (n,), generator=g).tolist()
    return [torch.randint(0, 11, (t,), generator=g) for t in lens]


def _batch(seqs):
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    am = torch.zeros(len(seqs), T, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], am[i, : len(s)] = s, 1
    return {"input_ids": ids, "attention_mask": am}


def _brute(model, seqs):
    """sum over sequences and tokens of x_j^2, divided by the number of sequences (float64)."""
    acc = {"fc1": torch.zeros(6, dtype=torch.float64), "fc2": torch.zeros(5, dtype=torch.float64)}
    for s in seqs:
        for t in range(len(s)):
            x1 = model.emb(s[t : t + 1])[0]
            x2 = torch.tanh(model.fc1(x1))
            acc["fc1"] += x1**2
            acc["fc2"] += x2**2
    return {k: v / len(seqs) for k, v in acc.items()}


def test_sq_norms_equal_brute_force_with_padding_excluded_and_any_batch_size():
    model, seqs = Stack(), _seqs()
    layers = {"fc1": model.fc1, "fc2": model.fc2}
    ref = _brute(model, seqs)
    one = activation_sq_norms(model, layers, [_batch([s]) for s in seqs], stat_dtype=torch.float64)
    four = activation_sq_norms(
        model, layers, [_batch(seqs[:4]), _batch(seqs[4:])], stat_dtype=torch.float64
    )
    for k in layers:
        torch.testing.assert_close(one[k], ref[k], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(four[k], ref[k], rtol=1e-12, atol=1e-12)
    # padding included would change the statistics (the check can fail)
    incl = activation_sq_norms(
        model, layers, [_batch(seqs)], exclude_padding=False, stat_dtype=torch.float64
    )
    assert not torch.allclose(incl["fc1"], ref["fc1"])


def test_bad_calibration_input():
    model = Stack()
    layers = {"fc1": model.fc1}
    with pytest.raises(ValueError, match="empty"):
        activation_sq_norms(model, layers, [])
    pad_only = {
        "input_ids": torch.zeros(2, 3, dtype=torch.long),
        "attention_mask": torch.zeros(2, 3),
    }
    with pytest.raises(ValueError, match="padding"):
        activation_sq_norms(model, layers, [pad_only])
    model.emb.weight.data[3, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="fc1"):
        activation_sq_norms(model, layers, [torch.tensor([[3, 4]])])


def test_mask_rows_select_exactly_the_top_scores_with_stable_ties():
    g = torch.Generator().manual_seed(0)
    s = torch.rand(7, 13, generator=g)
    for rho in (0.05, 0.1, 0.3, 0.5, 0.99):
        m = row_mask(s, rho)
        k = 13 - math.floor(13 * (1 - rho))
        assert (m.sum(1) == k).all()
        for i in range(7):  # brute force: the k largest of each row
            top = set(sorted(range(13), key=lambda j: (-float(s[i, j]), -j))[:k])
            assert set(torch.nonzero(m[i]).flatten().tolist()) == top
    ties = torch.ones(2, 10)
    m = row_mask(ties, 0.3)  # equal scores: the lower column indices are kept
    assert m[:, 7:].all() and not m[:, :7].any()
    with pytest.warns(UserWarning, match="empty"):
        assert not harmful_mask({"w": s}, 0.0)["w"].any()
    with pytest.warns(UserWarning, match="every"):
        assert harmful_mask({"w": s}, 1.0)["w"].all()
    for bad in (-0.1, 1.5, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="dense_ratio"):
            harmful_mask({"w": s}, bad)


def _official_wanda(model, layers, seqs, sparsity):
    """Wanda's prune_wanda as in locuslab/wanda (add_batch running mean; per-row stable sort of
    |W| * sqrt(scaler_row); the lowest int(d_in * sparsity) removed), re-written for this test."""
    scaler = {k: torch.zeros(l.weight.shape[1], dtype=torch.float64) for k, l in layers.items()}
    nsamples = dict.fromkeys(layers, 0)
    hooks = []
    for k, l in layers.items():

        def hook(_m, inp, k=k):
            x = inp[0].reshape(-1, inp[0].shape[-1]).t().to(torch.float64)  # (d_in, tokens)
            tmp = 1
            scaler[k] *= nsamples[k] / (nsamples[k] + tmp)
            nsamples[k] += tmp
            scaler[k] += torch.norm(x, p=2, dim=1) ** 2 / nsamples[k]

        hooks.append(l.register_forward_pre_hook(hook))
    with torch.no_grad():
        for s in seqs:
            model(input_ids=s[None])
    for h in hooks:
        h.remove()
    masks = {}
    for k, l in layers.items():
        metric = l.weight.detach().abs() * torch.sqrt(scaler[k].reshape(1, -1))
        idx = torch.sort(metric, dim=-1, stable=True)[1][:, : int(metric.shape[1] * sparsity)]
        masks[k] = torch.zeros_like(metric, dtype=torch.bool).scatter_(1, idx, True)
    return masks


def test_wanda_parity_with_the_mask_inverted_back():
    model, seqs = Stack(d=8, h=9), _seqs(6)
    model.emb = nn.Embedding(11, 8).to(torch.float64)
    layers = {"fc1": model.fc1, "fc2": model.fc2}
    sq = activation_sq_norms(model, layers, [_batch([s]) for s in seqs], stat_dtype=torch.float64)
    ours = harmful_mask(wanda_scores(layers, sq), 0.5, remove="lowest")
    ref = _official_wanda(model, layers, seqs, 0.5)
    for k in layers:
        assert torch.equal(ours[k], ref[k])


def test_magnitude_is_wanda_with_unit_activations_and_random_is_per_tensor():
    model = Stack(d=8, h=9)
    layers = {"fc1": model.fc1, "fc2": model.fc2}
    unit = {k: torch.ones(l.weight.shape[1], dtype=torch.float64) for k, l in layers.items()}
    w = harmful_mask(wanda_scores(layers, unit), 0.25)
    m = magnitude_mask(layers, 0.25)
    assert all(torch.equal(w[k], m[k]) for k in layers)
    r1, r2 = random_mask(layers, 0.3, seed=5), random_mask(layers, 0.3, seed=5)
    r3 = random_mask(layers, 0.3, seed=6)
    for k, l in layers.items():
        assert int(r1[k].sum()) == int(l.weight.numel() * 0.3)
        assert torch.equal(r1[k], r2[k])
    assert any(not torch.equal(r1[k], r3[k]) for k in layers)


def test_apply_mask_zeroes_exactly_the_mask_and_undo_restores():
    model = Stack(d=8, h=9)
    layers = {"fc1": model.fc1, "fc2": model.fc2}
    before = {k: l.weight.detach().clone() for k, l in layers.items()}
    bias = model.fc1.bias.detach().clone()
    mask = magnitude_mask(layers, 0.2)
    removed = apply_mask(layers, mask)
    for k, l in layers.items():
        assert (l.weight[mask[k]] == 0).all()
        assert torch.equal(l.weight[~mask[k]], before[k][~mask[k]])
    assert torch.equal(model.fc1.bias, bias)
    again = apply_mask(layers, mask)  # idempotent
    assert all((v == 0).all() for v in again.values())
    undo_mask(layers, mask, removed)
    assert all(torch.equal(l.weight, before[k]) for k, l in layers.items())


def test_nan_weight_and_config_errors():
    model = Stack()
    model.fc1.weight.data[0, 0] = float("inf")
    cfg = AntidoteConfig(score="magnitude", target="custom", target_filter=lambda n, m: True)
    with pytest.raises(FloatingPointError, match="fc1"):
        antidote_prune(model, None, cfg)
    for bad in (dict(dense_ratio=1.2), dict(dense_ratio=-0.1), dict(score="owl")):
        with pytest.raises(ValueError):
            antidote_prune(
                Stack(),
                None,
                AntidoteConfig(target="custom", target_filter=lambda n, m: True, **bad),
            )
    with pytest.raises(ValueError, match="realign_batches"):
        antidote_prune(
            Stack(), None, AntidoteConfig(target="custom", target_filter=lambda n, m: True)
        )
    with pytest.raises(ValueError, match="no target layers"):
        select_target_layers(Stack(), "lora")


def test_ratios_of_any_real_type_mean_the_same():
    """numpy floats, 0-d arrays and 0-d tensors are accepted; np.float32(0.1) is 0.1 (at d_in 10
    its float32 value, 0.10000000149, would otherwise remove 2 weights per row instead of 1)."""
    import numpy as np

    s = torch.rand(4, 10, generator=torch.Generator().manual_seed(0))
    ref = harmful_mask({"w": s}, 0.1)["w"]
    assert (ref.sum(1) == 1).all()
    for rho in (
        np.float32(0.1),
        np.float64(0.1),
        np.array(0.1, dtype=np.float32),
        torch.tensor(0.1),
        torch.tensor(0.1, dtype=torch.float64),
    ):
        assert torch.equal(harmful_mask({"w": s}, rho)["w"], ref), repr(rho)
    model = Stack(d=10, h=4)
    layers = {"fc1": model.fc1}
    cfg = AntidoteConfig(dense_ratio=np.float32(0.1), score="magnitude")
    res = antidote_prune(model, None, cfg, layers=layers)
    assert (res.mask["fc1"].sum(1) == 1).all()
    for bad in (np.bool_(True), torch.tensor(True), torch.tensor([0.1]), np.float32("nan"), None):
        with pytest.raises(ValueError, match="dense_ratio"):
            harmful_mask({"w": s}, bad)


def test_tensor_mask_is_the_per_tensor_top_rho():
    g = torch.Generator().manual_seed(3)
    s = torch.rand(5, 7, generator=g)
    for rho in (0.0, 0.05, 0.2, 0.5, 1.0):
        m = tensor_mask(s, rho)
        k = int(35 * rho)
        assert int(m.sum()) == k
        top = set(torch.argsort(s.flatten(), descending=True)[:k].tolist())
        assert set(torch.nonzero(m.flatten()).flatten().tolist()) == top
    ties = torch.ones(2, 5)
    m = tensor_mask(ties, 0.3)  # 3 of 10 equal scores: the highest flat indices are removed
    assert m.flatten().tolist() == [False] * 7 + [True] * 3


def test_bad_calibration_input_and_score_containers_say_what_is_expected():
    import torch as _torch

    from icml25.antidote import antidote_prune
    from icml25.antidote.masks import harmful_mask
    from icml25.lora import inject_lora
    from icml25.toy import build_tokenizer, tiny_causal_lm

    tok = build_tokenizer(["a b c"], 300)
    model = tiny_causal_lm(tok, d_model=16, n_layers=1, max_positions=32)
    inject_lora(model, ["q_proj"], r=2, alpha=2.0)
    with pytest.raises(TypeError, match="iterable of batches"):
        antidote_prune(model, "some harmful text")
    with pytest.raises(TypeError, match="dict with 'input_ids'"):
        antidote_prune(model, [{"foo": 1}])
    with pytest.raises(TypeError, match="use row_mask"):
        harmful_mask(_torch.ones(2, 3), 0.5)
