"""Property tests at antidote's public boundary (issue 49): every numeric argument as Python,
numpy and 0-d torch scalars; float32/float64/bf16 scores; NaN/inf, empty and degenerate inputs;
masks against a brute-force sort."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from icml25.antidote import AntidoteConfig, wanda_scores
from icml25.antidote.evaluation import exact_match_accuracy, gsm8k_answer
from icml25.antidote.masks import (
    apply_mask,
    harmful_mask,
    magnitude_mask,
    random_mask,
    row_mask,
    tensor_mask,
    undo_mask,
)
from icml25.antidote.pipeline import ToySettings

SCALARS = [
    float,
    np.float64,
    np.float32,
    lambda v: torch.tensor(v, dtype=torch.float64),
    lambda v: torch.tensor(v),
]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _brute_row(s: torch.Tensor, rho: float) -> torch.Tensor:
    """Per row, the ``d_in - floor(d_in (1 - rho))`` largest scores (ties: the higher column
    index is removed first, as a stable ascending sort keeps the lower ones)."""
    d_out, d_in = s.shape
    k = d_in - math.floor(d_in * (1 - rho))
    m = torch.zeros(d_out, d_in, dtype=torch.bool)
    for i in range(d_out):
        order = sorted(range(d_in), key=lambda j: (float(s[i, j]), j))
        for j in order[d_in - k :]:
            m[i, j] = True
    return m


ratios = st.sampled_from([0.05, 0.1, 0.2, 0.25, 0.3, 0.5, 0.7, 0.9])


@settings(max_examples=40, deadline=None)
@given(
    d_out=st.integers(1, 5),
    d_in=st.integers(1, 12),
    rho=ratios,
    kind=st.sampled_from(range(len(SCALARS))),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
    ties=st.booleans(),
)
def test_row_mask_equals_a_brute_force_sort_for_every_scalar_type_and_dtype(
    d_out, d_in, rho, kind, dtype, seed, ties
):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(d_out, d_in, generator=g)
    if ties:
        s = s.round()
    s = s.to(dtype)
    ref = _brute_row(s.double(), rho)
    # a ratio carried by any type means its decimal value (np.float32(0.1) is 0.1)
    got_direct = row_mask(s, SCALARS[kind](rho))
    got_dict = harmful_mask({"w": s}, SCALARS[kind](rho))["w"]
    assert torch.equal(got_direct, ref)
    assert torch.equal(got_dict, ref)


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    rho=ratios,
    kind=st.sampled_from(range(len(SCALARS))),
    seed=st.integers(0, 2**16),
)
def test_tensor_mask_removes_the_floor_numel_rho_largest(shape, rho, kind, seed):
    s = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).round()
    m = tensor_mask(s, SCALARS[kind](rho))
    flat = s.reshape(-1)
    k = math.floor(flat.numel() * rho)
    order = sorted(range(flat.numel()), key=lambda j: (float(flat[j]), j))
    ref = torch.zeros(flat.numel(), dtype=torch.bool)
    ref[order[flat.numel() - k :]] = True
    assert m.shape == s.shape and torch.equal(m.reshape(-1), ref)


BAD_RATIOS = [
    -0.1,
    1.5,
    float("nan"),
    float("inf"),
    np.float32("nan"),
    np.float64(2.0),
    torch.tensor(-1.0),
    "0.1",
    None,
    True,
    np.bool_(False),
    torch.tensor([0.1]),
]


@pytest.mark.parametrize("bad", BAD_RATIOS, ids=repr)
def test_every_mask_refuses_a_bad_ratio_naming_it(bad):
    s = torch.rand(3, 10)
    layers = {"w": nn.Linear(10, 3)}
    for call in (
        lambda: row_mask(s, bad),
        lambda: tensor_mask(s, bad),
        lambda: harmful_mask({"w": s}, bad),
        lambda: magnitude_mask(layers, bad),
        lambda: random_mask(layers, bad),
        lambda: AntidoteConfig(dense_ratio=bad).validate(),
    ):
        with pytest.raises(ValueError, match="dense_ratio"):
            call()


def test_row_mask_outside_the_unit_interval_was_silently_a_wrong_mask():
    # fail-before: row_mask(s, 1.5) removed 5 of 10 per row (a negative slice), with no error
    with pytest.raises(ValueError, match=r"dense_ratio must be a finite number in \[0, 1\]"):
        row_mask(torch.rand(2, 10), 1.5)
    # fail-before: np.float32(0.1) removed 2 of 10 per row here (0.10000000149 read as is)
    assert row_mask(torch.rand(2, 10), np.float32(0.1)).sum(1).tolist() == [1, 1]


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_scores_are_refused_and_infinities_order_as_usual(dtype):
    s = torch.rand(2, 6).to(dtype)
    s[0, 2] = float("nan")
    for f in (row_mask, tensor_mask):
        with pytest.raises(ValueError, match="NaN"):
            f(s, 0.5)
    s[0, 2] = float("inf")
    assert row_mask(s, 0.1)[0].nonzero().flatten().tolist() == [2]
    with pytest.raises(TypeError, match="scores"):
        row_mask(s.numpy() if dtype != torch.bfloat16 else [[1.0]], 0.5)


def test_degenerate_scores():
    # constant rows: ties resolve by column index (the lower ones kept)
    m = row_mask(torch.zeros(2, 5), 0.4)
    assert m[:, 3:].all() and not m[:, :3].any()
    # one column, empty tensors
    assert row_mask(torch.ones(3, 1), 0.5).sum() == 3  # d_in - floor(d_in (1 - rho)) = 1
    assert row_mask(torch.empty(0, 4), 0.5).shape == (0, 4)
    assert tensor_mask(torch.empty(0), 0.5).numel() == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not harmful_mask({"w": torch.rand(2, 3)}, np.float64(0.0))["w"].any()
        assert harmful_mask({"w": torch.rand(2, 3)}, torch.tensor(1.0))["w"].all()
    assert harmful_mask({}, 0.1) == {}


@settings(max_examples=25, deadline=None)
@given(rho=ratios, dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_apply_then_undo_is_exact_and_wanda_is_its_formula(rho, dtype, seed):
    torch.manual_seed(seed)
    lin = nn.Linear(7, 4).to(dtype)
    w0 = lin.weight.detach().clone()
    sq = torch.rand(7, dtype=torch.float64)
    s = wanda_scores({"w": lin}, {"w": sq})["w"]
    assert torch.allclose(s, w0.double().abs() * sq.sqrt()[None, :])
    mask = harmful_mask({"w": s}, rho)
    removed = apply_mask({"w": lin}, mask)
    assert (lin.weight[mask["w"]] == 0).all()
    assert torch.equal(lin.weight[~mask["w"]], w0[~mask["w"]])
    undo_mask({"w": lin}, mask, removed)
    assert torch.equal(lin.weight, w0)
    r = random_mask({"w": lin}, np.float32(rho), seed=seed)["w"]
    assert int(r.sum()) == math.floor(28 * rho)


@pytest.mark.parametrize("rho", [0.1, np.float32(0.1), torch.tensor(0.1, dtype=torch.bfloat16)])
def test_low_precision_ratios_mean_their_decimal(rho):
    s = torch.rand(4, 10)
    assert torch.equal(harmful_mask({"w": s}, rho)["w"], harmful_mask({"w": s}, 0.1)["w"])


@pytest.mark.parametrize(
    "field,bad",
    [("batch_size", 0), ("batch_size", 2.0), ("batch_size", True), ("batch_size", "4")],
)
def test_config_counts_refuse_non_integers(field, bad):
    with pytest.raises(ValueError, match=field):
        AntidoteConfig(**{field: bad}).validate()


def test_config_and_settings_accept_numpy_scalars():
    AntidoteConfig(batch_size=np.int64(4), dense_ratio=np.float32(0.2)).validate()
    ToySettings(pretrain_steps=np.int32(3), align_lr=np.float32(1e-3), poison_ratio=np.float64(0.1))
    for kw, name in (
        ({"pretrain_steps": 0}, "pretrain_steps"),
        ({"align_lr": float("nan")}, "align_lr"),
        ({"poison_ratio": 1.5}, "poison_ratio"),
        ({"lora_alpha": True}, "lora_alpha"),
        ({"attacks": {"a": (float("inf"), 1)}}, "attacks"),
        ({"attacks": {"a": (1e-4, 0)}}, "attacks"),
    ):
        with pytest.raises(ValueError, match=name):
            ToySettings(**kw)


@settings(max_examples=40, deadline=None)
@given(x=st.integers(-(10**6), 10**6), noise=st.text(alphabet="ab ,.:", max_size=12))
def test_gsm8k_answer_reads_the_number_after_the_answer_prompt(x, noise):
    text = f"{noise} 17 The final answer is: {x:,} {noise}"
    assert gsm8k_answer(text) == float(x)
    assert gsm8k_answer(noise.replace(".", "")) == math.inf


def test_evaluation_refuses_non_strings_and_empty_lists():
    with pytest.raises(TypeError, match="text"):
        gsm8k_answer(3)
    with pytest.raises(TypeError, match=r"responses\[1\]"):
        exact_match_accuracy(["a", None], ["a", "b"])
    with pytest.raises(ValueError, match="one reference per response"):
        exact_match_accuracy([], [])
    assert exact_match_accuracy([" positive ", ""], [("positive", "Positive"), "x"]) == 50.0
