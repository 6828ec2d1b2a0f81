"""Property-based tests of the sampling arguments every chat backend takes (SamplingParams,
``icml25.llm.sampling.sample``) and of the numbers of the moderators, reward models and local
backends: Python, numpy and 0-d torch numbers are read alike and reach the backend as Python's
own; NaN, infinities, bools and out-of-range values are refused naming the argument."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.llm import CallableChat, CallableModerator, ChatModerator, SamplingParams
from icml25.llm.sampling import sample

FAST = settings(max_examples=40, deadline=None)
USER = [{"role": "user", "content": "hi"}]

FLOAT_KINDS = (float, np.float32, np.float64, lambda v: torch.tensor(v, dtype=torch.float64))
INT_KINDS = (int, np.int64, np.int32, lambda v: torch.tensor(v))


def _exact(kind, v):
    """``kind(v)`` read back as Python's float (float32 rounds)."""
    return float(np.float32(v)) if kind is np.float32 else float(v)


@FAST
@given(
    t=st.floats(0, 2),
    p=st.floats(1e-6, 1),
    m=st.integers(1, 4096),
    n=st.integers(1, 4),
    seed=st.integers(-(2**31), 2**31 - 1),
    fk=st.sampled_from(FLOAT_KINDS),
    ik=st.sampled_from(INT_KINDS),
)
def test_sampling_params_read_every_number_kind_as_python_numbers(t, p, m, n, seed, fk, ik):
    sp = SamplingParams(n=ik(n), temperature=fk(t), top_p=fk(p), max_tokens=ik(m), seed=ik(seed))
    assert (sp.n, sp.max_tokens, sp.seed) == (n, m, seed)
    assert sp.temperature == pytest.approx(_exact(fk, t), rel=1e-7)
    assert sp.top_p == pytest.approx(_exact(fk, p), rel=1e-7)
    for v in sp.as_dict().values():
        assert type(v) in (int, float, list, type(None))
    json.dumps(sp.as_dict())  # what a request body and a cache key hold
    same = SamplingParams(n=n, temperature=sp.temperature, top_p=sp.top_p, max_tokens=m, seed=seed)
    assert sp == same


def test_numpy_sampling_numbers_reach_the_backend_as_python_numbers_fail_before():
    """Before: np.float32(0.7) was refused as "temperature must be a finite number >= 0 ...,
    got np.float32(0.7)" (a message contradicting its value)."""
    seen = {}
    chat = CallableChat(lambda m, **kw: seen.update(kw) or "ok")
    assert chat.chat(
        USER,
        temperature=np.float32(0.5),
        top_p=np.float64(0.9),
        max_tokens=np.int64(7),
        seed=np.int32(3),
        n=np.int64(1),
    ) == ["ok"]
    assert seen["temperature"] == 0.5 and type(seen["temperature"]) is float
    assert seen["max_tokens"] == 7 and type(seen["max_tokens"]) is int
    assert type(seen["seed"]) is int and type(seen["top_p"]) is float


@FAST
@given(
    name=st.sampled_from(["temperature", "top_p"]),
    bad=st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.5, True, "0.5", [0.5]]),
    fk=st.sampled_from((float, np.float32, np.float64)),
)
def test_bad_sampling_floats_are_refused_naming_the_argument(name, bad, fk):
    if isinstance(bad, float):
        bad = fk(bad)
    with pytest.raises(ValueError, match=rf"^{name} must be a finite number"):
        SamplingParams(**{name: bad})


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"top_p": 0.0}, r"top_p must be a finite number in \(0, 1\], got 0.0"),
        ({"top_p": 1.0000001}, r"top_p must be a finite number in \(0, 1\]"),
        ({"n": np.int64(0)}, r"n must be an integer >= 1, got np.int64\(0\)"),
        ({"n": 2.0}, "n must be an integer >= 1, got 2.0"),
        ({"max_tokens": np.float64(3.0)}, "max_tokens must be an integer >= 1"),
        ({"seed": np.float32(1.0)}, "seed must be an integer"),
        ({"seed": False}, "seed must be an integer"),
        ({"top_logprobs": 21}, r"top_logprobs must be an integer in \[0, 20\], got 21"),
        ({"logprobs": 1}, "logprobs must be True or False, got 1"),
        ({"logprobs": "no"}, "logprobs must be True or False"),
    ],
)
def test_bad_sampling_values_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kw)


def test_none_is_the_provider_default_and_edge_values_are_kept():
    sp = SamplingParams()
    assert (sp.temperature, sp.top_p, sp.max_tokens, sp.seed) == (None, None, None, None)
    edge = SamplingParams(temperature=0, top_p=1, seed=-1, top_logprobs=np.int64(0))
    assert edge.temperature == 0.0 and type(edge.temperature) is float and not edge.sampled
    assert edge.top_p == 1.0 and edge.seed == -1 and edge.logprobs and edge.top_logprobs == 0
    assert SamplingParams(logprobs=np.bool_(True)).logprobs is True


def test_empty_replies_and_empty_request_lists():
    chat = CallableChat(lambda m, **kw: "")
    assert chat.chat(USER) == [""]
    assert chat.chat_many([]) == []
    assert chat.chat_many([USER, USER], n=np.int64(2)) == [["", ""], ["", ""]]


# -- the local sampler ------------------------------------------------------------------------------
class _FixedLogits:
    """A decoder whose next-token logits are always ``row`` (no model)."""

    def __init__(self, row: torch.Tensor) -> None:
        self.row = row

    def prefill(self, ids, mask):
        return self.row.expand(ids.shape[0], -1).clone(), None

    def step(self, next_ids, state):
        return self.row.expand(next_ids.shape[0], -1).clone(), state


def _sample(row, **kw):
    args = {
        "max_new_tokens": 3,
        "temperature": 0.0,
        "top_p": 1.0,
        "eos_ids": [],
        "pad_id": 0,
        "device": torch.device("cpu"),
    }
    args.update(kw)
    n = len(kw.pop("prompts", [[1], [2]]))
    gens = [torch.Generator().manual_seed(i) for i in range(n)]
    return sample(_FixedLogits(row), [[1], [2]][:n], generators=gens, **args)


@FAST
@given(
    logits=st.lists(st.integers(-20, 20), min_size=2, max_size=8, unique=True),  # no ties
    m=st.integers(1, 5),
    ik=st.sampled_from(INT_KINDS),
    fk=st.sampled_from(FLOAT_KINDS),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.bfloat16]),
)
def test_greedy_and_tiny_top_p_pick_the_argmax(logits, m, ik, fk, dtype):
    row = torch.tensor(logits, dtype=dtype)
    best = int(row.float().argmax())
    greedy = _sample(row, max_new_tokens=ik(m), temperature=fk(0.0))
    assert greedy == [[best] * m, [best] * m]
    # a top_p below the largest probability keeps only the first-sorted token
    nucleus = _sample(row, max_new_tokens=m, temperature=fk(1.0), top_p=fk(1e-9))
    first = int(torch.softmax(row.float(), -1).sort(descending=True).indices[0])
    assert nucleus == [[first] * m, [first] * m]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0, got nan"),
        ({"temperature": -1.0}, "temperature must be a finite number >= 0"),
        ({"top_p": float("nan")}, r"top_p must be a finite number in \(0, 1\], got nan"),
        ({"top_p": 0.0}, r"top_p must be a finite number in \(0, 1\]"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1, got 0"),
        ({"max_new_tokens": 2.5}, "max_new_tokens must be an integer >= 1, got 2.5"),
        ({"max_new_tokens": [3, 0]}, r"max_new_tokens\[1\] must be an integer >= 1, got 0"),
        ({"max_new_tokens": [3]}, "max_new_tokens has 1 entries for 2 prompts"),
        ({"logprobs": -1}, "logprobs must be an integer >= 0"),
    ],
)
def test_sample_refuses_bad_settings_naming_them_fail_before(kw, match):
    """Before: NaN temperature sampled from NaN probabilities, top_p = NaN kept nothing but the
    first token, and ``max_new_tokens=2.5`` or a numpy integer raised a raw TypeError."""
    with pytest.raises(ValueError, match=match):
        _sample(torch.zeros(4), **kw)


def test_sample_takes_numpy_per_row_limits():
    got = _sample(torch.tensor([0.0, 5.0, 1.0]), max_new_tokens=np.array([1, 3]))
    assert got == [[1], [1, 1, 1]]


# -- moderators ---------------------------------------------------------------------------------------
@FAST
@given(
    p=st.lists(st.floats(0, 1), min_size=0, max_size=6),
    thr=st.floats(0, 1),
    fk=st.sampled_from(FLOAT_KINDS),
)
def test_callable_moderator_flags_exactly_the_probabilities_above_threshold(p, thr, fk):
    probs = iter(p)
    mod = CallableModerator(lambda q, r: fk(next(probs)), threshold=fk(thr))
    got = mod([f"q{i}" for i in range(len(p))], ["r"] * len(p))
    t = _exact(fk, thr)
    assert got == [_exact(fk, v) > t for v in p]


@pytest.mark.parametrize("thr", [float("nan"), float("inf"), True, "0.5", None])
def test_callable_moderator_refuses_bad_thresholds(thr):
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        CallableModerator(lambda q, r: 0.1, threshold=thr)


def test_callable_moderator_refuses_nan_from_the_function():
    with pytest.raises(ValueError, match="NaN for pair 0"):
        CallableModerator(lambda q, r: math.nan)(["q"], ["r"])


@FAST
@given(m=st.sampled_from([1, 4, np.int64(2), np.int32(8)]))
def test_chat_moderator_passes_max_tokens_as_python_int(m):
    seen = {}
    backend = CallableChat(lambda msgs, **kw: seen.update(kw) or "unsafe\nS1")
    assert ChatModerator(backend, max_tokens=m)(["q"], ["r"]) == [True]
    assert seen["max_tokens"] == int(m) and type(seen["max_tokens"]) is int


@pytest.mark.parametrize("m", [0, 2.0, True, float("nan")])
def test_chat_moderator_refuses_bad_max_tokens(m):
    with pytest.raises(ValueError, match="max_tokens must be an integer >= 1"):
        ChatModerator(CallableChat(lambda msgs, **kw: "safe"), max_tokens=m)


# -- local backends: numbers are checked before any model loads ---------------------------------------
@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"batch_size": 2.0}, "batch_size must be an integer >= 1, got 2.0"),
        ({"max_new_tokens": True}, "max_new_tokens must be an integer >= 1, got True"),
    ],
)
def test_hf_chat_checks_numbers_before_loading(kw, match, tmp_path):
    from icml25.llm import HFChat

    with pytest.raises(ValueError, match=match):
        HFChat(str(tmp_path / "no-such-model"), **kw)
