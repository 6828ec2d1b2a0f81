"""Property tests at tpo's public boundary (issue 49): every config number as Python, numpy and
0-d torch scalars (stored back as Python numbers, so results serialise); NaN/inf, empty and
degenerate inputs; the text helpers against brute force; the best response against the cache's
maximum."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.llm import CallableChat, CallableReward
from icml25.tpo import PromptSet, TPOConfig, best_of_n, tpo_optimize
from icml25.tpo.prompts import extract_tagged, short_value

REALS = [float, np.float64, np.float32, torch.tensor]
INTS = [int, np.int64, np.int32, torch.tensor]
P = PromptSet.default()
SEEN: list[dict] = []


def policy(messages, *, n=1, sample_index=0, **kw):
    SEEN.append(kw)
    role = P.detect_role(list(messages))
    if role == "generate":
        return f"draft {sample_index} " + "x" * (3 * sample_index % 5)
    if role in ("loss", "gradient"):
        return "longer"
    chosen = P.parse_update(list(messages))["chosen"]
    return f"{P.start_tag}{chosen} y{P.end_tag}"


@settings(max_examples=25, deadline=None)
@given(
    width=st.integers(1, 3),
    depth=st.integers(0, 2),
    temp=st.sampled_from([0.0, 0.7, 1.5]),
    top_p=st.sampled_from([0.5, 1.0]),
    seed=st.integers(-3, 10),
    kind=st.sampled_from(range(len(REALS))),
)
def test_tpo_accepts_every_scalar_type_and_returns_the_cache_maximum(
    width, depth, temp, top_p, seed, kind
):
    cfg = TPOConfig(
        width=INTS[kind](width),
        depth=INTS[kind](depth),
        temperature=REALS[kind](temp),
        top_p=REALS[kind](top_p),
        seed=INTS[kind](seed),
        max_tokens_response=INTS[kind](64),
        truncate_tokens=INTS[kind](32),
    )
    SEEN.clear()
    res = tpo_optimize("q", CallableChat(policy), CallableReward(lambda q, r: float(len(r))), cfg)
    for name in ("width", "depth", "seed", "max_tokens_response", "truncate_tokens"):
        assert type(getattr(cfg, name)) is int
    assert type(cfg.temperature) is float and cfg.temperature == float(REALS[kind](temp))
    assert res.best_reward == max(e.reward for e in res.cache)
    assert res.best_response == max(res.cache, key=lambda e: e.reward).text
    assert len(res.iterations) == depth and len(res.cache) >= width
    assert all(res.best_reward_at(d) <= res.best_reward_at(d + 1) for d in range(depth))
    json.loads(res.to_json())  # serialisable whatever scalar type configured it
    assert any(k.get("seed") == seed for k in SEEN)  # the seed reached the backend as given


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"width": 0}, "width"),
        ({"width": 2.0}, "width"),
        ({"width": True}, "width"),
        ({"depth": -1}, "depth"),
        ({"depth": "2"}, "depth"),
        ({"seed": 1.5}, "seed"),
        ({"seed": "7"}, "seed"),
        ({"seed": True}, "seed"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": "0.7"}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_p": float("nan")}, "top_p"),
        ({"feedback_top_p": True}, "feedback_top_p"),
        ({"max_tokens_response": 0}, "max_tokens_response"),
        ({"truncate_tokens": 1.5}, "truncate_tokens"),
        ({"mode": "x"}, "mode"),
    ],
)
def test_config_refuses_bad_numbers_naming_them(kw, name):
    # fail-before: seed=1.5/"7"/True and temperature=inf were accepted and sent to the backend
    with pytest.raises(ValueError, match=name):
        TPOConfig(**kw).validate()


def test_none_sampling_settings_mean_the_backend_default():
    cfg = TPOConfig(temperature=None, top_p=None, seed=None, truncate_tokens=None)
    cfg.validate()
    assert cfg.temperature is None and cfg.seed is None and cfg.truncate_tokens is None


def test_best_of_n_and_best_reward_at_numbers():
    chat, reward = CallableChat(policy), CallableReward(lambda q, r: float(len(r)))
    res = best_of_n("q", chat, reward, np.int64(3))
    assert len(res.cache) == 3 and res.best_reward == max(e.reward for e in res.cache)
    with pytest.raises(ValueError, match="width"):
        best_of_n("q", chat, reward, 0)
    deep = tpo_optimize("q", chat, reward, TPOConfig(width=2, depth=2))
    assert deep.best_reward_at(np.int64(1)) == deep.best_reward_at(1)
    for bad in (True, 3, -1, 1.0):  # fail-before: True was read as depth 1
        with pytest.raises(ValueError, match="depth"):
            deep.best_reward_at(bad)


def test_nan_rewards_are_never_chosen_or_raise():
    chat = CallableChat(policy)
    nan_long = CallableReward(lambda q, r: math.nan if "x" in r else float(len(r)))
    res = tpo_optimize("q", chat, nan_long, TPOConfig(width=3, depth=1))
    assert "x" not in res.best_response and math.isfinite(res.best_reward)
    with pytest.raises(ValueError, match="nan"):
        tpo_optimize("q", chat, nan_long, TPOConfig(width=3, depth=1, nan_policy="raise"))
    with pytest.raises(ValueError, match="query"):
        tpo_optimize("", chat, nan_long)


@settings(max_examples=50, deadline=None)
@given(
    words=st.lists(st.text(alphabet="ab", max_size=3), max_size=30),
    n=st.integers(1, 8),
    kind=st.sampled_from(range(len(INTS))),
)
def test_short_value_is_textgrads_rule(words, n, kind):
    text = " ".join(words)
    pieces = text.split(" ")
    ref = text if len(pieces) <= 2 * n else " ".join(pieces[:n]) + " (...) " + " ".join(pieces[-n:])
    assert short_value(text, INTS[kind](n)) == ref


def test_short_value_refuses_bad_counts_and_non_text():
    # fail-before: n_words=0 returned " (...) " followed by the whole text
    for bad in (0, -1, 2.0, True, "10"):
        with pytest.raises(ValueError, match="n_words"):
            short_value("a b c", bad)
    with pytest.raises(TypeError, match="text"):
        short_value(None)
    assert short_value("") == ""


@settings(max_examples=50, deadline=None)
@given(text=st.text(alphabet="ab<>/ ", max_size=20))
def test_extract_tagged_against_a_regex(text):
    m = re.search(r"<a>(.*?)</a>", text, flags=re.S)
    got = extract_tagged(text, "<a>", "</a>")
    assert got == (m.group(1).strip() if m else None)
