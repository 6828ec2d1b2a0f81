"""Property tests at elicitation's public boundary (issue 49): numbers as Python, numpy and 0-d
torch scalars; float32/float64/bf16 log-probs; NaN/inf, empty and degenerate inputs; the DPO
loss against its formula in float64, the Frank-Wolfe step and the mixture weights against their
closed forms, the pair sampler against a sort."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from icml25.elicitation import InvestigatorMixture
from icml25.elicitation.dpo import dpo_loss, sample_preference_pairs
from icml25.elicitation.frank_wolfe import fw_step_size
from icml25.elicitation.metrics import distinct_n, pairwise_jaccard, trigger_coverage
from icml25.elicitation.rewards import PenalizedReward

REALS = [float, np.float64, np.float32, torch.tensor]
INTS = [int, np.int64, np.int32, torch.tensor]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    beta=st.sampled_from([0.01, 0.1, 0.5, 2.0]),
    kind=st.sampled_from(range(len(REALS))),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_dpo_loss_is_its_formula_in_float64(n, beta, kind, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    pc, pr, rc, rr = [(-10 * torch.rand(n, generator=g)).to(dtype) for _ in range(4)]
    loss, info = dpo_loss(pc, pr, rc, rr, REALS[kind](beta))
    b = float(REALS[kind](beta))  # the value the scalar type carries
    u = b * ((pc.double() - rc.double()) - (pr.double() - rr.double()))
    ref = -torch.nn.functional.logsigmoid(u).mean()
    assert loss.dtype == torch.promote_types(dtype, torch.float32)
    assert math.isclose(float(loss), float(ref), rel_tol=1e-5, abs_tol=1e-6)
    if float(u.abs().min()) > 1e-5:  # no pair on the boundary, where float32 may round either way
        assert info["reward_accuracy"] == pytest.approx(float((u > 0).double().mean()), abs=1e-6)
    assert math.isclose(info["margin"], float(u.mean()), rel_tol=1e-4, abs_tol=1e-5)


@pytest.mark.parametrize(
    "bad", [0.0, -0.1, float("nan"), float("inf"), np.float32("nan"), True, "0.1", None]
)
def test_dpo_loss_refuses_a_bad_beta_naming_it(bad):
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(x, x, x, x, bad)


def test_dpo_loss_nan_log_probs_are_an_error_and_minus_inf_its_limit():
    # fail-before: a NaN log-prob gave loss nan silently
    x = torch.zeros(3)
    bad = torch.tensor([0.0, float("nan"), 0.0])
    with pytest.raises(ValueError, match="pr holds NaN"):
        dpo_loss(x, bad, x, x)
    # the rejected prompt has probability 0: the pair's loss is its limit, 0
    loss, _ = dpo_loss(x, torch.tensor([float("-inf")] * 3), x, x)
    assert float(loss) == 0.0
    with pytest.raises(ValueError, match="non-empty"):
        dpo_loss(*(torch.empty(0),) * 4)


@settings(max_examples=30, deadline=None)
@given(t=st.integers(1, 500), kind=st.sampled_from(range(len(INTS))))
def test_fw_step_size_is_its_closed_form_for_every_integer_type(t, kind):
    assert fw_step_size(INTS[kind](t)) == 1.0 / t
    assert fw_step_size(INTS[kind](t), "classic") == min(1.0, 2.0 / (t + 1))


@pytest.mark.parametrize("bad", [0, -1, 1.0, 2.5, True, "1", float("nan"), None])
def test_fw_step_size_refuses_non_positive_integers_naming_t(bad):
    with pytest.raises(ValueError, match="t must be an integer >= 1"):
        fw_step_size(bad)


# the investigator is only read (the mixture keeps references), so one per test is enough
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    etas=st.lists(st.sampled_from([0.1, 0.25, 0.5, 1.0]), min_size=1, max_size=5),
    kind=st.sampled_from(range(len(REALS))),
)
def test_mixture_weights_follow_the_frank_wolfe_update(inv, etas, kind):
    mix = InvestigatorMixture([inv])
    ref = [1.0]
    for eta in etas:
        mix.append(inv, REALS[kind](eta))
        e = float(REALS[kind](eta))
        ref = [w * (1 - e) for w in ref] + [e]
    total = sum(ref)
    assert mix.weights == pytest.approx([w / total for w in ref], abs=1e-12)
    assert all(isinstance(w, float) for w in mix.weights)


def test_mixture_refuses_bad_weights_and_eta_naming_them(inv):
    for bad in (0.0, 1.5, float("nan"), True, "0.5"):
        with pytest.raises(ValueError, match="eta"):
            InvestigatorMixture([inv]).append(inv, bad)
    for ws, name in (
        ([float("nan")], r"weights\[0\]"),
        ([1.0, -1.0], r"weights\[1\]"),
        ([True], r"weights\[0\]"),
        ([0.0], "sum to > 0"),
    ):
        with pytest.raises(ValueError, match=name):
            InvestigatorMixture([inv] * len(ws), ws)
    with pytest.raises(TypeError, match="weights"):
        InvestigatorMixture([inv], "1")
    m = InvestigatorMixture([inv, inv], [np.float32(1.0), torch.tensor(3.0)])
    assert m.weights == [0.25, 0.75]


def _brute_pairs(cands, scores, k, gap):
    """Rank a paired with rank n + 1 - a over the distinct non-empty candidates, while the
    scores differ by at least the gap (and at all)."""
    seen = {}
    for c, s in zip(cands, scores):
        if c.strip() and c not in seen:
            seen[c] = s
    ranked = sorted(seen.items(), key=lambda kv: -kv[1])
    out = []
    for a in range(min(k, len(ranked) // 2)):
        hi, lo = ranked[a], ranked[len(ranked) - 1 - a]
        if hi[1] - lo[1] < gap or hi[1] == lo[1]:  # a tie carries no preference
            break
        out.append((hi[1], lo[1]))
    return out


@settings(max_examples=40, deadline=None)
@given(
    scores=st.lists(st.integers(0, 5).map(float), min_size=0, max_size=6),
    k=st.integers(1, 3),
    gap=st.sampled_from([0.0, 0.5, 2.0]),
    kind=st.sampled_from(range(3)),
)
def test_sample_preference_pairs_pairs_ranks_from_both_ends(scores, k, gap, kind):
    cands = [f"p{i}" for i in range(len(scores))]
    pairs, without = sample_preference_pairs(
        ["b"], [cands], [scores], pairs_per_behavior=INTS[kind](k), min_gap=REALS[kind](gap)
    )
    ref = _brute_pairs(cands, scores, k, gap)
    assert [(p.score_chosen, p.score_rejected) for p in pairs] == ref
    assert without == (0 if ref else 1)
    assert all(p.score_chosen - p.score_rejected >= gap for p in pairs)


def test_sample_preference_pairs_refuses_bad_numbers_and_nan_scores():
    for kw, name in (
        ({"min_gap": -1.0}, "min_gap"),
        ({"min_gap": float("nan")}, "min_gap"),
        ({"pairs_per_behavior": 0}, "pairs_per_behavior"),
        ({"pairs_per_behavior": 1.0}, "pairs_per_behavior"),
        ({"seed": np.int64(3), "min_gap": "0"}, "min_gap"),
    ):
        with pytest.raises(ValueError, match=name):
            sample_preference_pairs(["b"], [["x", "y"]], [[1.0, 0.0]], **kw)
    with pytest.raises(ValueError, match="nan"):
        sample_preference_pairs(["b"], [["x", "y"]], [[1.0, float("nan")]])
    # one candidate, constant scores, duplicates: no pair, counted
    for cands, sc in ((["x"], [1.0]), (["x", "y"], [1.0, 1.0]), (["x", "x"], [2.0, 0.0])):
        assert sample_preference_pairs(["b"], [cands], [sc], min_gap=0.5) == ([], 1)


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(st.text(alphabet="ab c", max_size=8), max_size=5),
    n=st.integers(1, 3),
    kind=st.sampled_from(range(3)),
)
def test_diversity_metrics_against_brute_force(texts, n, kind):
    grams = [tuple(w[i : i + n]) for t in texts for w in [t.split()] for i in range(len(w) - n + 1)]
    assert distinct_n(texts, INTS[kind](n)) == (len(set(grams)) / len(grams) if grams else 0.0)
    if len(texts) >= 2:
        sims = []
        for a, b in itertools.combinations([set(t.split()) for t in texts], 2):
            sims.append(len(a & b) / len(a | b) if a | b else 1.0)
        assert pairwise_jaccard(texts) == pytest.approx(sum(sims) / len(sims), abs=1e-12)


def test_diversity_metrics_refuse_a_string_and_bad_n():
    with pytest.raises(TypeError, match="texts"):
        pairwise_jaccard("ab cd")  # fail-before: scored the characters as texts
    with pytest.raises(TypeError, match="texts"):
        distinct_n("ab cd")
    for bad in (0, 1.0, True, "2"):
        with pytest.raises(ValueError, match="n must be an integer"):
            distinct_n(["a b"], bad)


@settings(max_examples=30, deadline=None)
@given(
    credited=st.lists(
        st.lists(st.one_of(st.none(), st.integers(0, 3)), max_size=8), min_size=1, max_size=4
    ),
    threshold=st.sampled_from([0.05, 0.25, 0.5, 1.0]),
    kind=st.sampled_from(range(len(REALS))),
)
def test_trigger_coverage_counts_strategies_over_the_threshold(credited, threshold, kind):
    got = trigger_coverage(credited, REALS[kind](threshold))
    t = float(REALS[kind](threshold))
    per = []
    for ks in credited:
        ks = [k for k in ks if k is not None]
        per.append(sum(ks.count(v) / len(ks) >= t for v in set(ks)) if ks else 0)
    assert got == pytest.approx(sum(per) / len(per))


@pytest.mark.parametrize("bad", [0.0, 1.5, float("nan"), True, "0.1"])
def test_trigger_coverage_refuses_a_bad_threshold_naming_it(bad):
    # fail-before: "0.1" gave a raw TypeError from the comparison
    with pytest.raises(ValueError, match="threshold"):
        trigger_coverage([[0]], bad)


def test_penalized_reward_numbers():
    base = lambda prompts, behaviors: torch.zeros(len(prompts))  # noqa: E731
    r = PenalizedReward(base, None, lam=np.float32(0.5), warn_ratio=np.int64(2))
    assert r.lam == 0.5 and r.warn_ratio == 2.0 and type(r.lam) is float
    for kw, name in (
        ({"lam": -1.0}, "lam"),
        ({"lam": float("inf")}, "lam"),
        ({"lam": True}, "lam"),
        ({"lam": 0.1, "warn_ratio": float("nan")}, "warn_ratio"),
    ):
        with pytest.raises(ValueError, match=name):
            PenalizedReward(base, None, **kw)
