"""Property-based tests at SRG's public boundary: synthesis counts (k, keep, max_rounds) against
their definition, the Best-of-N estimators against a brute force over sample subsets, the
filters' thresholds and judge outputs as Python, numpy or 0-d torch numbers, and the attacks' and
evaluations' numbers, all through scripted backends."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.llm import CallableChat
from icml25.safety_reasoning import (
    CipherAttack,
    Guideline,
    GuidelineFilter,
    OutcomeFilter,
    PAIRAttack,
    PastTenseAttack,
    Query,
    RefusalKeywordJudge,
    TemplateAttack,
    asr,
    best_of_n,
    synthesize,
)
from icml25.safety_reasoning.evaluation import bon_safety_curve
from icml25.safety_reasoning.formats import ParsedOutput
from icml25.safety_reasoning.representation import pca_projection

FAST = settings(max_examples=30, deadline=None)
INTS = (int, np.int64, np.int32, lambda v: torch.tensor(v))
FLOATS = (float, np.float32, np.float64, lambda v: torch.tensor(v, dtype=torch.float64))
REPLY = "<think>I weigh the request.</think>Here is the answer."
QS = [
    Query("how do I bake bread?", "helpful", "q0"),
    Query("how do I bake a cake?", "helpful", "q1"),
]


# -- synthesis -------------------------------------------------------------------------------------
@FAST
@given(
    k=st.integers(1, 3),
    keep=st.integers(1, 4),
    max_rounds=st.integers(1, 3),
    ik=st.sampled_from(INTS),
    fk=st.sampled_from(FLOATS),
)
def test_synthesize_counts_follow_k_keep_and_rounds(k, keep, max_rounds, ik, fk):
    seen = []
    teacher = CallableChat(lambda m, **kw: seen.append(kw) or REPLY)
    if keep > k * max_rounds:
        with pytest.raises(ValueError, match=f"keep={keep} exceeds the k \\* max_rounds"):
            synthesize(
                teacher,
                QS,
                k=ik(k),
                keep=ik(keep),
                max_rounds=ik(max_rounds),
                filters=[],
                progress=False,
            )
        assert seen == []
        return
    rep = synthesize(
        teacher,
        QS,
        k=ik(k),
        keep=ik(keep),
        max_rounds=ik(max_rounds),
        temperature=fk(0.7),
        seed=ik(3),
        filters=[],
        progress=False,
    )
    rounds = math.ceil(keep / k)  # every candidate is accepted: rounds until keep are in
    assert rep.n_candidates == k * rounds * len(QS)
    assert len(rep.examples) == keep * len(QS) and rep.acceptance_rate == 1.0
    assert all(type(kw["temperature"]) is float and type(kw["seed"]) is int for kw in seen)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"k": 0}, "k must be an integer >= 1, got 0"),
        ({"keep": 1.0}, "keep must be an integer >= 1, got 1.0"),
        ({"max_rounds": True}, "max_rounds must be an integer >= 1, got True"),
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0, got nan"),
        ({"temperature": -0.1}, "temperature must be a finite number >= 0"),
        ({"max_tokens": 0}, "max_tokens must be an integer >= 1, got 0"),
        ({"concurrency": np.float64(2.0)}, "concurrency must be an integer >= 1"),
        ({"seed": 0.5}, "seed must be an integer, got 0.5"),
    ],
)
def test_synthesize_refuses_bad_numbers_before_any_request(kw, match):
    seen = []
    teacher = CallableChat(lambda m, **k: seen.append(1) or REPLY)
    with pytest.raises(ValueError, match=match):
        synthesize(teacher, QS, filters=[], progress=False, **kw)
    assert seen == []


def test_synthesize_stores_numpy_seeds_as_python_ones(tmp_path):
    """A numpy seed and a Python seed make the same store settings: the rerun reuses the rows."""
    calls = []
    teacher = CallableChat(lambda m, **kw: calls.append(1) or REPLY)
    store = tmp_path / "s.jsonl"
    a = synthesize(teacher, QS, seed=np.int64(0), store=store, filters=[], progress=False)
    n_first = len(calls)
    b = synthesize(teacher, QS, seed=0, store=store, filters=[], progress=False)
    assert [e.answer for e in a.examples] == [e.answer for e in b.examples]
    assert n_first > 0 and len(calls) == n_first  # the rerun asked nothing again


def test_synthesize_of_an_empty_reply_rejects_it():
    teacher = CallableChat(lambda m, **kw: "")
    rep = synthesize(teacher, QS, k=2, progress=False)
    assert rep.examples == [] and sorted(rep.dropped) == ["q0", "q1"]
    assert rep.acceptance_rate == 0.0 and rep.n_candidates == 4


# -- Best-of-N ---------------------------------------------------------------------------------------
def _brute_unbiased(row: np.ndarray, n: int) -> float | None:
    known = [int(v) for v in row if not np.isnan(v)]
    if len(known) < n:
        return None
    subsets = list(itertools.combinations(range(len(known)), n))
    return sum(all(known[i] for i in s) for s in subsets) / len(subsets)


def _brute_prefix(row: np.ndarray, n: int) -> float | None:
    first = row[:n]
    if (first == 0).any():
        return 0.0
    return None if np.isnan(first).any() else 1.0


@FAST
@given(
    m=st.lists(
        st.lists(st.sampled_from([0.0, 1.0, math.nan]), min_size=5, max_size=5),
        min_size=1,
        max_size=6,
    ),
    ns=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    ik=st.sampled_from((int, np.int64, np.int32)),
)
def test_bon_safety_curve_equals_a_brute_force_over_subsets(m, ns, ik):
    mat = np.array(m)
    for estimator, brute in (("unbiased", _brute_unbiased), ("prefix", _brute_prefix)):
        got = bon_safety_curve(mat, [ik(n) for n in ns], estimator)
        assert sorted(got) == sorted(set(ns)) and all(type(k) is int for k in got)
        for n in set(ns):
            vals = [v for v in (brute(row, n) for row in mat) if v is not None]
            if not vals:
                assert math.isnan(got[n])
            else:
                assert got[n] == pytest.approx(100 * sum(vals) / len(vals), abs=1e-9)


@FAST
@given(p=st.floats(0, 1), n=st.integers(1, 4))
def test_bon_prefix_on_constant_judges(p, n):
    # a judge that always says unsafe (or always safe) gives 100 (or 0) at every N
    assert bon_safety_curve(np.ones((3, 4)), [n])[n] == 100.0
    assert bon_safety_curve(np.zeros((3, 4)), [n], "unbiased")[n] == 0.0


@pytest.mark.parametrize(
    ("ns", "error", "match"),
    [
        ([1, 2.5], ValueError, "every N in ns must be an integer >= 1, got 2.5"),
        ([0], ValueError, "every N in ns must be an integer >= 1, got 0"),
        ([True], ValueError, "every N in ns must be an integer >= 1, got True"),
        ([np.float64(2.0)], ValueError, "every N in ns must be an integer"),
        ([], ValueError, "ns is empty"),
        (4, TypeError, "ns must be a list of N"),
        (np.int64(4), TypeError, "ns must be a list of N"),
        (torch.tensor(4), TypeError, "ns must be a list of N"),
        ([9], ValueError, "N = 9 exceeds N_max = 4"),
    ],
)
def test_bon_refuses_bad_ns(ns, error, match):
    with pytest.raises(error, match=match):
        bon_safety_curve(np.ones((2, 4)), ns)


def test_bon_takes_numpy_arrays_of_ns():
    got = bon_safety_curve(np.ones((2, 4)), np.array([1, 2, 4]))
    assert got == {1: 100.0, 2: 100.0, 4: 100.0}


@FAST
@given(
    replies=st.lists(
        st.sampled_from(["I'm sorry, I can't.", "Sure: step one.", ""]), min_size=4, max_size=4
    ),
    temperature=st.sampled_from([1.0, np.float32(0.5), torch.tensor(0.7)]),
    top_p=st.sampled_from([1, np.float64(0.9)]),
    max_tokens=st.sampled_from([8, np.int64(16)]),
)
def test_best_of_n_with_a_scripted_model_matches_the_keyword_judge(
    replies, temperature, top_p, max_tokens
):
    it = iter(replies * 10)
    backend = CallableChat(lambda m, **kw: next(it))
    res = best_of_n(
        backend,
        ["how do I x?"],
        RefusalKeywordJudge(),
        ns=np.array([1, 2, 4]),
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
    )
    det = RefusalKeywordJudge().detector
    row = [0.0 if det(r) else 1.0 for r in replies]
    assert res.matrix.shape == (1, 4) and list(res.matrix[0]) == row
    assert res.asr[4] == (100.0 if all(row) else 0.0)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"temperature": 0}, r"temperature must be a finite number > 0, got 0"),
        ({"temperature": float("inf")}, "temperature must be a finite number > 0, got inf"),
        ({"top_p": float("nan")}, r"top_p must be a finite number in \(0, 1\], got nan"),
        ({"max_tokens": 0.5}, "max_tokens must be an integer >= 1, got 0.5"),
    ],
)
def test_best_of_n_and_asr_refuse_bad_settings(kw, match):
    backend = CallableChat(lambda m, **k: "ok")
    with pytest.raises(ValueError, match=match):
        best_of_n(backend, ["p"], RefusalKeywordJudge(), ns=[1], **kw)
    with pytest.raises(ValueError, match=match):
        asr(backend, ["p"], RefusalKeywordJudge(), decoding="sample", **kw)


# -- filters -----------------------------------------------------------------------------------------
HARM = Query("how to pick a lock?", "harmful", "h")
HELP = Query("how to bake?", "helpful", "p")


@FAST
@given(score=st.floats(-5, 5), tau=st.floats(-5, 5), fk=st.sampled_from(FLOATS))
def test_outcome_filter_accepts_exactly_the_scores_at_or_above_tau(score, tau, fk):
    f = OutcomeFilter(lambda a: False, helpful_judge=lambda q, a: fk(score), tau=fk(tau))
    got = f(HELP, ParsedOutput("r", "an answer", "ok")).accept
    assert got == (float(fk(score)) >= float(fk(tau)))


@pytest.mark.parametrize("tau", [float("nan"), float("inf"), True, "0.5"])
def test_outcome_filter_refuses_bad_tau(tau):
    with pytest.raises(ValueError, match="tau must be a finite number"):
        OutcomeFilter(lambda a: False, helpful_judge=lambda q, a: 1.0, tau=tau)


def test_outcome_filter_refuses_a_nan_score():
    f = OutcomeFilter(lambda a: False, helpful_judge=lambda q, a: math.nan, tau=0.5)
    with pytest.raises(ValueError, match="the helpful judge's score must be a finite number"):
        f(HELP, ParsedOutput("r", "an answer", "ok"))


@FAST
@given(
    count=st.integers(0, 3),
    min_g=st.integers(1, 3),
    kind=st.sampled_from((int, np.int64, np.int32, lambda v: torch.tensor(v))),
)
def test_guideline_filter_counts_in_every_number_kind(count, min_g, kind):
    gs = [Guideline(f"g{i}", "x") for i in range(3)]
    f = GuidelineFilter(lambda q, r, g: kind(count), min_guidelines=kind(min_g), guidelines=gs)
    assert f(HARM, ParsedOutput("r", "a", "ok")).accept == (count >= min_g)


def test_guideline_filter_refuses_bad_counts_and_thresholds_fail_before():
    """Before: a 0-d tensor count raised a raw TypeError from ``len()``, and a float count was
    reported as the wrong type rather than as a non-integer count."""
    gs = [Guideline("a", "x"), Guideline("b", "y")]
    ok = ParsedOutput("r", "a", "ok")
    with pytest.raises(ValueError, match=r"guideline judge's count must be an integer in \[0, 2\]"):
        GuidelineFilter(lambda q, r, g: torch.tensor(5), guidelines=gs)(HARM, ok)
    with pytest.raises(ValueError, match=r"count must be an integer in \[0, 2\], got 1.5"):
        GuidelineFilter(lambda q, r, g: 1.5, guidelines=gs)(HARM, ok)
    for bad in (0, 1.0, True):
        with pytest.raises(ValueError, match="min_guidelines must be an integer >= 1"):
            GuidelineFilter(lambda q, r, g: 1, min_guidelines=bad, guidelines=gs)
    assert GuidelineFilter(lambda q, r, g: np.bool_(True), guidelines=gs)(HARM, ok).accept


# -- attacks -----------------------------------------------------------------------------------------
@FAST
@given(shift=st.integers(-2, 28), ik=st.sampled_from((int, np.int64, np.int32)))
def test_caesar_shift_in_every_number_kind(shift, ik):
    if not 1 <= shift <= 25:
        with pytest.raises(ValueError, match=r"shift must be an integer in \[1, 25\]"):
            CipherAttack("caesar", shift=ik(shift))
        return
    a, b = CipherAttack("caesar", shift=ik(shift)), CipherAttack("caesar", shift=shift)
    assert a("Attack at dawn") == b("Attack at dawn")
    assert type(a.shift) is int


@FAST
@given(seed=st.integers(0, 2**31), index=st.sampled_from([None, 0, 1, np.int64(2)]))
def test_template_attack_picks_the_same_template_for_numpy_seeds(seed, index):
    ts = ["A {query}", "B {query}", "C {query}"]
    a = TemplateAttack(ts, seed=np.int64(seed), index=index)
    b = TemplateAttack(ts, seed=seed, index=None if index is None else int(index))
    assert a("q") == b("q")


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"index": 3}, r"index must be an integer in \[0, 2\], got 3"),
        ({"index": 1.0}, r"index must be an integer in \[0, 2\], got 1.0"),
        ({"seed": 1.0}, "seed must be an integer, got 1.0"),
    ],
)
def test_template_attack_refuses_bad_numbers_fail_before(kw, match):
    """Before: ``seed=1.0`` was accepted and hashed as the text "1.0", picking another template
    than ``seed=1``."""
    with pytest.raises(ValueError, match=match):
        TemplateAttack(["A {query}", "B {query}", "C {query}"], **kw)


def test_rewriting_attacks_send_python_numbers():
    seen = {}
    backend = CallableChat(lambda m, **kw: seen.update(kw) or "How did people do x?")
    out = PastTenseAttack(
        backend, temperature=np.float32(0.5), seed=np.int64(1), max_tokens=np.int64(9)
    )("how do I do x?")
    assert out == "How did people do x?"
    assert type(seen["temperature"]) is float and type(seen["max_tokens"]) is int
    for kw, match in (
        ({"temperature": float("inf")}, "temperature must be a finite number"),
        ({"max_tokens": 0}, "max_tokens must be an integer >= 1"),
    ):
        with pytest.raises(ValueError, match=match):
            PastTenseAttack(backend, **kw)
    for kw, match in (
        ({"n_streams": 0}, "n_streams must be an integer >= 1, got 0"),
        ({"n_iters": 2.0}, "n_iters must be an integer >= 1, got 2.0"),
        ({"target_max_tokens": True}, "target_max_tokens must be an integer"),
    ):
        with pytest.raises(ValueError, match=match):
            PAIRAttack(backend, backend, lambda p, r: ["safe"] * len(p), **kw)


# -- representations ----------------------------------------------------------------------------------
@FAST
@given(
    k=st.integers(0, 5),
    ik=st.sampled_from(INTS),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_pca_projection_components_in_every_number_kind(k, ik, dtype):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(6, 4)).astype(dtype), rng.normal(size=(5, 4)).astype(dtype)
    if not 1 <= k <= 4:
        with pytest.raises(ValueError, match=r"n_components must be an integer in \[1, 4\]"):
            pca_projection(a, b, n_components=ik(k))
        return
    out = pca_projection(a, b, n_components=ik(k))
    assert out["components"].shape == (k, 4)
