"""Property-based tests at OR-Bench's public boundary: numpy and Python numbers for every count,
threshold and temperature; empty and degenerate inputs; the voting rule, the hard selection, the
rates and the trade-off's rank correlation against brute-force counts and their formulas."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from icml25.llm import CallableChat
from icml25.orbench import CATEGORIES, EvalResult, KeywordRefusalDetector, compare_models, evaluate
from icml25.orbench.generation import generate_toxic_seeds, rewrite_seeds
from icml25.orbench.moderation import ModerationResult, vote_threshold
from icml25.orbench.records import ORBenchRecord, record_id
from icml25.orbench.selection import select_hard, select_toxic
from icml25.orbench.tradeoff import spearman_bootstrap

FAST = settings(max_examples=40, deadline=None)
AS_NUMPY = (int, np.int64, np.int32, np.uint8)


def _pool(n: int) -> list[ORBenchRecord]:
    return [ORBenchRecord(f"prompt number {i}", CATEGORIES[i % len(CATEGORIES)]) for i in range(n)]


# -- the voting rule --------------------------------------------------------------------------------
@FAST
@given(m=st.integers(1, 9), k=st.integers(-2, 11), wrap=st.sampled_from(AS_NUMPY))
def test_vote_threshold_integer_rule_against_its_definition(m, k, wrap):
    if wrap is np.uint8 and k < 0:
        return
    if 1 <= k <= m:
        assert vote_threshold(wrap(k), wrap(m)) == k
        assert type(vote_threshold(wrap(k), m)) is int
    else:
        with pytest.raises(ValueError, match=rf"rule must be .* 1\.\.{m} .*got"):
            vote_threshold(wrap(k), m)


@FAST
@given(m=st.integers(1, 9), votes=st.data())
def test_vote_threshold_named_rules_decide_as_a_brute_force_count(m, votes):
    toxic = votes.draw(st.lists(st.booleans(), min_size=m, max_size=m))
    n_toxic = sum(toxic)
    # majority: more toxic votes than safe ones, ties flag (ceil((m + 1) / 2))
    assert (n_toxic >= vote_threshold("majority", m)) == (n_toxic >= math.ceil((m + 1) / 2))
    assert (n_toxic >= vote_threshold("unanimous", np.int64(m))) == (n_toxic > 0)


@pytest.mark.parametrize("m", [0, -1, 2.5, float("nan"), True, "3"])
def test_vote_threshold_refuses_a_bad_panel_size(m):
    with pytest.raises(ValueError, match="n_moderators must be an integer >= 1"):
        vote_threshold("majority", m)


@pytest.mark.parametrize("rule", [True, 2.0, float("nan"), "2", None])
def test_vote_threshold_refuses_other_rules(rule):
    with pytest.raises(ValueError, match="rule must be 'majority', 'unanimous' or an integer"):
        vote_threshold(rule, 3)


# -- the hard selection -----------------------------------------------------------------------------
@FAST
@given(
    data=st.data(),
    n=st.integers(1, 12),
    n_models=st.integers(1, 4),
    wrap=st.sampled_from(AS_NUMPY),
)
def test_select_hard_equals_a_brute_force_count(data, n, n_models, wrap):
    pool = _pool(n)
    panel = {
        f"m{j}": data.draw(st.lists(st.booleans(), min_size=n, max_size=n)) for j in range(n_models)
    }
    k = data.draw(st.integers(1, n_models))
    sel = select_hard(pool, panel, k_min=wrap(k), remoderate=False, seed=wrap(0))
    counts = [sum(panel[m][i] for m in panel) for i in range(n)]
    assert [r.id for r in sel] == [pool[i].id for i in range(n) if counts[i] >= k]
    assert sel.rejections == {pool[i].id: counts[i] for i in range(n)}
    assert sel.k_min == k and type(sel.k_min) is int


@FAST
@given(per=st.integers(1, 4), seed=st.integers(0, 2**31 - 1), wrap=st.sampled_from(AS_NUMPY))
def test_select_hard_per_category_keeps_at_most_that_many_of_each(per, seed, wrap):
    if wrap is np.uint8:
        seed %= 256
    pool = _pool(30)
    panel = {"a": [True] * 30}
    sel = select_hard(
        pool, panel, k_min=1, per_category=wrap(per), remoderate=False, seed=wrap(seed)
    )
    again = select_hard(pool, panel, k_min=1, per_category=per, remoderate=False, seed=int(seed))
    assert [r.id for r in sel] == [r.id for r in again]  # numpy and Python seeds agree
    for c in CATEGORIES:
        have = sum(r.category == c for r in pool)
        assert sum(r.category == c for r in sel) == min(per, have)


def test_select_hard_accepts_numpy_seeds_fail_before():
    """Before: random.Random(np.int64(0)) raised a raw TypeError from inside the sampler."""
    pool = _pool(20)
    sel = select_hard(
        pool, {"a": [True] * 20}, k_min=1, per_category=1, remoderate=False, seed=np.int64(3)
    )
    assert len(sel) == len(CATEGORIES)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"k_min": 0}, r"k_min must be an integer in \[1, 2\], got 0"),
        ({"k_min": 3}, r"k_min must be an integer in \[1, 2\], got 3"),
        ({"k_min": 1.0}, r"k_min must be an integer in \[1, 2\], got 1.0"),
        ({"k_min": True}, r"k_min must be an integer"),
        ({"per_category": 0}, r"per_category must be an integer >= 1, got 0"),
        ({"per_category": float("nan")}, r"per_category must be an integer >= 1, got nan"),
        ({"seed": 1.5}, r"seed must be an integer, got 1.5"),
    ],
)
def test_select_hard_refuses_bad_numbers_naming_them(kw, match):
    with pytest.raises(ValueError, match=match):
        select_hard(
            _pool(3), {"a": [True] * 3, "b": [False] * 3}, remoderate=False, **{"k_min": 1, **kw}
        )


def test_select_hard_of_an_empty_panel_is_refused():
    with pytest.raises(ValueError, match="panel_results must be a non-empty"):
        select_hard(_pool(3), {}, k_min=1, remoderate=False)


def _moderated(n: int) -> list[ModerationResult]:
    out = []
    for i in range(n):
        c = CATEGORIES[i % len(CATEGORIES)]
        p = f"toxic prompt {i}"
        out.append(ModerationResult(record_id(p), p, [True] * 3, [c] * 3, [f"[{c}]"] * 3, True, c))
    return out


def test_select_toxic_accepts_numpy_numbers_and_refuses_bad_ones_fail_before():
    """Before: ``per_category=np.int64(2)`` was refused with a message showing 2, and a numpy
    seed raised a raw TypeError inside random.Random."""
    mod = _moderated(40)
    got = select_toxic(mod, per_category=np.int64(2), seed=np.int32(1))
    same = select_toxic(mod, per_category=2, seed=1)
    assert [r.id for r in got] == [r.id for r in same]
    assert all(sum(r.category == c for r in got) == 2 for c in CATEGORIES)
    for bad, match in (
        (0, "per_category must be an integer >= 1, got 0"),
        (2.5, "per_category must be an integer >= 1, got 2.5"),
    ):
        with pytest.raises(ValueError, match=match):
            select_toxic(mod, per_category=bad)
    with pytest.raises(ValueError, match="moderated must be a non-empty list"):
        select_toxic([], per_category=1)


# -- rates -------------------------------------------------------------------------------------------
def _result(refused: list[bool | None]) -> EvalResult:
    rows = [{"id": str(i), "refused": r, "category": "c"} for i, r in enumerate(refused)]
    return EvalResult("m", "hard-1k", rows)


@FAST
@given(
    refused=st.lists(st.one_of(st.booleans(), st.none()), max_size=40),
    conf=st.floats(0.5, 0.999),
)
def test_rate_and_wilson_interval_against_their_formulas(refused, conf):
    r = _result(refused)
    judged = [x for x in refused if x is not None]
    n, k = len(judged), sum(judged)
    if n == 0:
        assert math.isnan(r.rate) and all(math.isnan(v) for v in r.interval(conf))
        return
    assert r.rate == pytest.approx(100 * k / n, abs=1e-12)
    z = stats.norm.ppf(0.5 + conf / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = r.interval(np.float32(conf))
    assert lo == pytest.approx(100 * (0.0 if k == 0 else max(0.0, centre - half)), abs=2e-4)
    assert hi == pytest.approx(100 * (1.0 if k == n else min(1.0, centre + half)), abs=2e-4)
    assert 0 <= lo <= r.rate <= hi <= 100


# -- the keyword judge -------------------------------------------------------------------------------
@FAST
@given(
    text=st.text(max_size=30),
    prefix=st.sampled_from(["I'm sorry", "I cannot", "As an AI", "Sure", "Here is"]),
)
def test_keyword_detector_equals_a_direct_prefix_check(text, prefix):
    prefixes = ("I'm sorry", "I cannot", "As an AI")
    det = KeywordRefusalDetector(prefixes=prefixes, case_sensitive=False)
    for reply in (prefix + text, text, "  " + prefix.upper() + text):
        stripped = reply.strip().lower()
        want = not stripped or any(stripped.startswith(p.lower()) for p in prefixes)
        assert det(reply) is want


@FAST
@given(text=st.text(max_size=30), word=st.sampled_from(["cannot help", "won't", "fine"]))
def test_keyword_detector_contains_equals_a_direct_substring_check(text, word):
    det = KeywordRefusalDetector(
        contains=("cannot help", "won't"), case_sensitive=True, strip=False
    )
    reply = text + word + text
    want = reply == "" or reply.strip() == "" or any(k in reply for k in ("cannot help", "won't"))
    assert det(reply) is want


# -- evaluation through a scripted backend -------------------------------------------------------------
@FAST
@given(
    replies=st.lists(
        st.sampled_from(["I'm sorry, I can't.", "Sure, here it is.", ""]), min_size=1, max_size=6
    ),
    temperature=st.sampled_from([0.0, np.float32(0.0), np.float64(0.7), 1]),
    max_tokens=st.sampled_from([1000, np.int64(5), np.int32(1)]),
)
def test_evaluate_counts_refusals_like_the_detector(replies, temperature, max_tokens):
    prompts = [f"how do I do thing {i}?" for i in range(len(replies))]
    answer = dict(zip(prompts, replies))
    backend = CallableChat(lambda m, **kw: answer[m[-1]["content"]], name="scripted")
    res = evaluate(
        backend,
        prompts,
        temperature=temperature,
        max_tokens=max_tokens,
        concurrency=np.int64(2),
        progress=False,
    )
    det = KeywordRefusalDetector.default()
    assert res.n == len(prompts)
    assert res.n_refused == sum(det(r) for r in replies)
    assert res.rate == pytest.approx(100 * res.n_refused / res.n)


def test_evaluate_of_no_prompts_and_bad_settings():
    backend = CallableChat(lambda m, **kw: "Sure.")
    for kw, match in (
        ({"temperature": float("nan")}, "temperature must be a finite number >= 0"),
        ({"temperature": -1}, "temperature must be a finite number >= 0, got -1"),
        ({"max_tokens": 0}, "max_tokens must be an integer >= 1, got 0"),
        ({"max_tokens": 2.5}, "max_tokens must be an integer >= 1, got 2.5"),
        ({"concurrency": 0}, "concurrency must be an integer >= 1, got 0"),
        ({"concurrency": True}, "concurrency must be an integer >= 1, got True"),
    ):
        with pytest.raises(ValueError, match=match):
            evaluate(backend, ["a prompt"], progress=False, **kw)
    try:
        res = evaluate(backend, [], progress=False)
    except ValueError as e:
        assert "empty" in str(e) or "no prompt" in str(e)
    else:
        assert res.n == 0 and math.isnan(res.rate)


# -- generation -------------------------------------------------------------------------------------
@FAST
@given(
    n_seeds=st.sampled_from([1, 3, np.int64(2), np.int32(4)]),
    per_call=st.sampled_from([1, 2, np.int64(5)]),
    temperature=st.sampled_from([0, 1.0, np.float32(0.5)]),
)
def test_generate_toxic_seeds_takes_numpy_numbers(n_seeds, per_call, temperature):
    calls = iter(range(10**6))
    backend = CallableChat(
        lambda m, **kw: "\n".join(f"[[seed number {next(calls)}]]" for _ in range(8))
    )
    out = generate_toxic_seeds(
        backend,
        CATEGORIES[0],
        n_seeds,
        per_call=per_call,
        temperature=temperature,
        seed=np.int64(0),
    )
    assert len(out) == int(n_seeds)
    assert len({s.prompt for s in out}) == len(out)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"n_seeds": 0}, "n_seeds must be an integer >= 1, got 0"),
        ({"n_seeds": 2.0}, "n_seeds must be an integer >= 1, got 2.0"),
        ({"per_call": True}, "per_call must be an integer >= 1, got True"),
        ({"temperature": float("inf")}, "temperature must be a finite number >= 0, got inf"),
        ({"max_calls": 0}, "max_calls must be an integer >= 1, got 0"),
        ({"seed": 0.5}, "seed must be an integer, got 0.5"),
    ],
)
def test_generate_toxic_seeds_refuses_bad_numbers_before_any_call(kw, match):
    calls = []
    backend = CallableChat(lambda m, **k: calls.append(1) or "[x]")
    with pytest.raises(ValueError, match=match):
        generate_toxic_seeds(backend, CATEGORIES[0], **{"n_seeds": 1, **kw})
    assert calls == []


def test_generation_refuses_nan_temperature_fail_before():
    """Before: temperature=NaN reached the backend, every call failed and the run stopped with
    an empty result and a warning; now it is refused up front."""
    calls = []
    backend = CallableChat(lambda m, **k: calls.append(1) or "[x]")
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0, got nan"):
        generate_toxic_seeds(backend, CATEGORIES[0], 1, temperature=float("nan"))
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0, got nan"):
        rewrite_seeds(
            backend, [{"prompt": "p", "category": CATEGORIES[0]}], temperature=float("nan")
        )
    assert calls == []


@FAST
@given(n=st.sampled_from([1, np.int64(3), np.int32(2)]))
def test_rewrite_seeds_takes_numpy_counts(n):
    backend = CallableChat(
        lambda m, **kw: "\n".join(f"[[rewrite number {i}]]" for i in range(int(n)))
    )
    seeds = [{"prompt": "a toxic seed", "category": CATEGORIES[0]}]
    out = rewrite_seeds(backend, seeds, n_rewrites=n, concurrency=np.int64(1), progress=False)
    assert len(out) == int(n)


# -- the trade-off -----------------------------------------------------------------------------------
@FAST
@given(
    hard=st.lists(st.floats(0, 100), min_size=3, max_size=8),
    data=st.data(),
    as_np=st.booleans(),
)
def test_compare_models_spearman_equals_scipy(hard, data, as_np):
    toxic = data.draw(st.lists(st.floats(0, 100), min_size=len(hard), max_size=len(hard)))
    wrap = np.float32 if as_np else float
    names = [f"m{i}" for i in range(len(hard))]
    h = {k: wrap(v) for k, v in zip(names, hard)}
    t = {k: wrap(v) for k, v in zip(names, toxic)}
    xs, ys = [float(v) for v in h.values()], [float(v) for v in t.values()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = compare_models(h, t)
    if len(set(xs)) == 1 or len(set(ys)) == 1:
        assert math.isnan(s.spearman)  # undefined: scipy gives NaN as well
        return
    want = stats.spearmanr(xs, ys).statistic
    assert s.spearman == pytest.approx(want, abs=1e-12)


def test_compare_models_refuses_rates_out_of_range_and_too_few_models():
    with pytest.raises(ValueError, match=r"percentages in \[0, 100\]"):
        compare_models({"a": 1.5e2, "b": 1, "c": 2}, {"a": 1, "b": 2, "c": 3})
    with pytest.raises(ValueError, match="at least 3 models"):
        compare_models({"a": 1, "b": 2}, {"a": 1, "b": 2})
    with pytest.raises(ValueError, match="non-finite rate"):
        compare_models({"a": float("nan"), "b": 1, "c": 2}, {"a": 1, "b": 2, "c": 3})


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"n_boot": 9}, "n_boot must be an integer >= 10, got 9"),
        ({"n_boot": 10.0}, "n_boot must be an integer >= 10, got 10.0"),
        ({"confidence": 1.0}, r"confidence must be a finite number in \[0.5, 1\), got 1.0"),
        ({"confidence": float("nan")}, "confidence must be a finite number"),
        ({"seed": 0.5}, "seed must be an integer, got 0.5"),
    ],
)
def test_spearman_bootstrap_refuses_bad_numbers(kw, match):
    rs = {f"m{i}": _result([True] * i + [False] * 3) for i in range(3)}
    with pytest.raises(ValueError, match=match):
        spearman_bootstrap(rs, rs, **kw)


def test_spearman_bootstrap_takes_numpy_numbers():
    hard = {f"m{i}": _result([True] * i + [False] * (5 - i)) for i in range(4)}
    toxic = {f"m{i}": _result([True] * (i + 1) + [False] * (5 - i)) for i in range(4)}
    a = spearman_bootstrap(
        hard, toxic, n_boot=np.int64(20), seed=np.int64(1), confidence=np.float32(0.9)
    )
    b = spearman_bootstrap(hard, toxic, n_boot=20, seed=1, confidence=0.8999999761581421)
    assert a == b


def test_compare_models_with_rates_that_barely_differ_gives_a_nan_fit_not_a_raw_error():
    """Found by the property test above: hard rates [0, 1.3e-133, 5e-324] made np.polyfit raise
    a raw LinAlgError; the rank statistics are still defined, the quadratic fit is NaN, warned."""
    names = ["a", "b", "c"]
    hard = dict(zip(names, [0.0, 1.299765418503804e-133, 5e-324]))
    toxic = dict(zip(names, [10.0, 20.0, 30.0]))
    with pytest.warns(UserWarning, match="did not converge"):
        s = compare_models(hard, toxic)
    assert all(math.isnan(v) for v in s.quad_fit)
    assert s.spearman == pytest.approx(stats.spearmanr(list(hard.values()), [10, 20, 30]).statistic)
