"""KnowledgeSwapConfig (issue 51): the swapper's hyper-parameters as one frozen, checked
dataclass, beside the keywords it replaces; and the warnings of the split ``fit`` still point at
the caller's line."""

from __future__ import annotations

import dataclasses
import inspect
import typing
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset, WeightedRandomSampler

from icml25.knowledge_swap import KnowledgeSwapConfig, KnowledgeSwapper, inject_lora


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 6))
    inject_lora(m, ["0"], r=2, alpha=2.0)
    return m


def _pair(classes, n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n * len(classes), 4, generator=g)
    return x, torch.tensor([c for c in classes for _ in range(n)])


class _NoTargets(Dataset):
    """Labels only inside the items: the swapper cannot read them up front."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input": self.x[i], "label": int(self.y[i])}


def _fit(sw: KnowledgeSwapper):
    return sw.fit(_pair([0, 1, 2]), _pair([3], seed=1), _pair([4, 5], seed=2))


def test_every_field_is_a_keyword_of_the_swapper_with_the_same_default():
    params = inspect.signature(KnowledgeSwapper).parameters
    for f in dataclasses.fields(KnowledgeSwapConfig):
        assert params[f.name].default == f.default, f.name
    assert params["config"].kind is inspect.Parameter.KEYWORD_ONLY
    assert KnowledgeSwapper(_model()).config == KnowledgeSwapConfig()


def test_choices_are_literal():
    hints = typing.get_type_hints(KnowledgeSwapConfig)
    assert typing.get_args(hints["strategy"]) == (
        "learn_then_forget",
        "forget_then_learn",
        "simultaneous",
    )
    assert typing.get_args(hints["optimizer"]) == ("adamw", "adam", "sgd")
    assert typing.get_args(hints["schedule"]) == ("cosine", "constant")
    assert typing.get_args(hints["schedule_step"]) == ("epoch", "iteration")


def test_a_config_trains_exactly_as_the_same_keywords():
    kw = dict(strategy="forget_then_learn", epochs_per_stage=1, batch_size=8, lr=3e-2, seed=4)
    by_kw = _fit(KnowledgeSwapper(_model(), **kw))
    by_cfg = _fit(KnowledgeSwapper(_model(), config=KnowledgeSwapConfig(**kw)))
    assert by_kw.steps == by_cfg.steps and by_kw.stage_norms == by_cfg.stage_norms
    assert len(by_cfg.steps) > 0


def test_the_config_is_checked_with_the_keywords_messages():
    for kw, message in [
        (dict(alpha=-1), "alpha must be a finite number >= 0, got -1"),
        (dict(strategy="both"), "strategy must be one of"),
        (dict(min_lr=1.0), "min_lr=1.0 is above lr=0.01"),
        (dict(lr=1e-6), "min_lr=1e-05 is above lr=1e-06"),
    ]:
        with pytest.raises(ValueError) as by_cfg:
            KnowledgeSwapConfig(**kw)
        with pytest.raises(ValueError) as by_kw:
            KnowledgeSwapper(_model(), **kw)
        assert message in str(by_cfg.value)
        assert str(by_cfg.value) == str(by_kw.value)
    cfg = KnowledgeSwapConfig(lr=np.float32(0.5), batch_size=np.int64(4))
    assert type(cfg.lr) is float and type(cfg.batch_size) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        dataclasses.replace(cfg, batch_size=0)


def test_a_keyword_that_contradicts_the_config_is_refused():
    cfg = KnowledgeSwapConfig(lr=0.05, batch_size=16)
    with pytest.raises(TypeError, match=r"lr=0\.1 \(config\.lr=0\.05\)") as err:
        KnowledgeSwapper(_model(), lr=0.1, seed=3, config=cfg)
    assert "seed=3 (config.seed=0)" in str(err.value)
    # the same value twice, or a keyword at its default, is no contradiction
    sw = KnowledgeSwapper(_model(), lr=0.05, strategy="learn_then_forget", config=cfg)
    assert sw.config is cfg and sw.lr == 0.05 and sw.batch_size == 16
    with pytest.raises(TypeError, match="config must be a KnowledgeSwapConfig, got dict"):
        KnowledgeSwapper(_model(), config={"lr": 0.1})


def test_the_warnings_of_fit_point_at_the_callers_line():
    x, y = _pair([0, 1, 2])
    sampler = WeightedRandomSampler(torch.ones(len(x)), len(x))
    cases = [
        (
            "the forget data is empty",
            lambda: (_pair([0, 1, 2]), (torch.zeros(0, 4), torch.zeros(0).long()), _pair([4])),
        ),
        (
            "cannot be read without loading every input",
            lambda: (_pair([0, 1, 2]), _NoTargets(*_pair([3])), _pair([4])),
        ),
        (
            "does not carry over",
            lambda: (
                (DataLoader(TensorDataset(x, y), batch_size=8, sampler=sampler), _pair([3]))
                + (_pair([4]),)
            ),
        ),
    ]
    for text, data in cases:
        sw = KnowledgeSwapper(_model(), epochs_per_stage=1, steps_per_epoch=1, batch_size=8)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            line = inspect.currentframe().f_lineno + 1
            sw.fit(*data())
        hits = [w for w in caught if text in str(w.message)]
        assert hits, text
        assert (hits[0].filename, hits[0].lineno) == (__file__, line), text
