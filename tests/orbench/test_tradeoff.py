"""The cross-model trade-off (paper Fig. 1): Spearman against scipy (ties included), the paper's
32 official points, the quadratic fit against numpy, the bootstrap over prompts, the figure and
the table, and the documented behaviour on too few models, constant rates and unmatched models."""

from __future__ import annotations

import math
import random
import warnings

import pytest

np = pytest.importorskip("numpy")
stats = pytest.importorskip("scipy.stats")

from icml25.orbench import (  # noqa: E402
    PAPER_FIGURE1,
    EvalResult,
    TradeoffSummary,
    compare_models,
    plot_tradeoff,
)
from icml25.orbench.tradeoff import spearman_bootstrap  # noqa: E402

# over-refusal on hard, toxic rejection; ties in both coordinates (average ranks)
HARD = {"a": 10.0, "b": 20.0, "c": 20.0, "d": 35.5, "e": 50.0, "f": 50.0, "g": 80.0}
TOXIC = {"a": 70.0, "b": 90.0, "c": 75.0, "d": 90.0, "e": 88.0, "f": 97.5, "g": 99.0}


def test_spearman_and_pearson_equal_scipy_with_ties():
    s = compare_models(HARD, TOXIC)
    x, y = [HARD[m] for m in s.models], [TOXIC[m] for m in s.models]
    ref = stats.spearmanr(x, y)
    assert s.spearman == pytest.approx(ref.statistic, abs=1e-12)
    assert s.spearman_pvalue == pytest.approx(ref.pvalue, rel=1e-9)
    assert s.pearson == pytest.approx(stats.pearsonr(x, y).statistic, abs=1e-12)
    # average ranks, by hand: Pearson correlation of the tie-averaged ranks
    rx, ry = stats.rankdata(x, method="average"), stats.rankdata(y, method="average")
    assert s.spearman == pytest.approx(float(np.corrcoef(rx, ry)[0, 1]), abs=1e-12)
    assert s.spearman != pytest.approx(
        float(np.corrcoef(stats.rankdata(x, "ordinal"), stats.rankdata(y, "ordinal"))[0, 1])
    )  # ordinal ranks would give another value: the ties matter here


def test_eval_results_and_rates_give_the_same_summary():
    def result(model: str, rate: float, n: int = 200) -> EvalResult:
        k = round(rate * n / 100)
        rows = [{"id": str(i), "refused": i < k, "category": "hate"} for i in range(n)]
        return EvalResult(model, "x", rows)

    hard = {m: result(m, v) for m, v in HARD.items()}
    toxic = {m: result(m, v) for m, v in TOXIC.items()}
    s = compare_models(hard, toxic)
    assert [r["over_refusal"] for r in s.table] == [HARD[m] for m in s.models]
    assert s.spearman == pytest.approx(compare_models(HARD, TOXIC).spearman)


def test_the_32_official_points_reproduce_rho_0893():
    assert len(PAPER_FIGURE1) == 32
    hard = {m: v[0] for m, v in PAPER_FIGURE1.items()}
    toxic = {m: v[1] for m, v in PAPER_FIGURE1.items()}
    s = compare_models(hard, toxic)
    assert s.spearman == pytest.approx(0.893, abs=1e-3)
    assert s.pearson == pytest.approx(0.79, abs=0.01)
    assert len(s.table) == 32 and s.spearman_pvalue < 1e-6
    assert PAPER_FIGURE1["GPT-3.5-turbo-0125"] == (12.71, 62.1)  # spot checks against Fig. 1
    assert PAPER_FIGURE1["Llama-3-70b*"] == (37.74, 78.7)


def test_quad_fit_equals_numpy_polyfit():
    s = compare_models(HARD, TOXIC)
    x, y = [HARD[m] for m in s.models], [TOXIC[m] for m in s.models]
    np.testing.assert_allclose(s.quad_fit, np.polyfit(x, y, 2), rtol=1e-9, atol=1e-12)
    a, b, c = s.quad_fit
    residual = sum((a * xi**2 + b * xi + c - yi) ** 2 for xi, yi in zip(x, y))
    for da in (1e-4, -1e-4):  # least squares: a perturbed curve fits worse
        assert residual < sum(((a + da) * xi**2 + b * xi + c - yi) ** 2 for xi, yi in zip(x, y))


@pytest.mark.parametrize("n", [0, 1, 2])
def test_fewer_than_3_models_raise_naming_the_count(n):
    names = list(HARD)[:n]
    with pytest.raises(ValueError, match=rf"at least 3 models.*got {n}"):
        compare_models({m: HARD[m] for m in names}, {m: TOXIC[m] for m in names})


def test_constant_rates_give_nan_with_a_warning():
    with pytest.warns(UserWarning, match="constant"):
        s = compare_models(HARD, dict.fromkeys(TOXIC, 100.0))
    assert math.isnan(s.spearman) and math.isnan(s.pearson) and math.isnan(s.spearman_pvalue)
    assert s.notes and "constant" in s.notes[0]
    with pytest.warns(UserWarning, match="constant"):
        flat = compare_models(dict.fromkeys(HARD, 5.0), TOXIC)
    assert math.isnan(flat.spearman) and all(math.isnan(v) for v in flat.quad_fit)
    assert "nan" in flat.to_markdown()


def test_models_in_only_one_dict_are_left_out_with_a_warning():
    hard = {**HARD, "only-hard": 1.0}
    toxic = {**TOXIC, "only-toxic": 2.0}
    with pytest.warns(UserWarning, match="only-hard.*only-toxic"):
        s = compare_models(hard, toxic)
    assert s.models == list(HARD)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compare_models(HARD, TOXIC).models == list(HARD)  # no warning when they match


def test_bad_inputs_raise():
    with pytest.raises(TypeError, match="results_hard"):
        compare_models([1, 2, 3], TOXIC)
    with pytest.raises(TypeError, match="rate"):
        compare_models({**HARD, "a": "10%"}, TOXIC)
    with pytest.raises(ValueError, match="non-finite"):
        compare_models({**HARD, "a": math.nan}, TOXIC)
    empty = EvalResult("a", "hard-1k", [])
    with pytest.raises(ValueError, match="non-finite"):
        compare_models({**HARD, "a": empty}, TOXIC)


# -- the bootstrap over prompts ------------------------------------------------------------------


def population(n_models: int = 6, n_hard: int = 120, n_toxic: int = 80, seed: int = 0):
    """Models whose per-prompt refusal probability grows on both sets together."""
    rng = random.Random(seed)
    hard, toxic = {}, {}
    for j in range(n_models):
        p = 0.1 + 0.8 * j / (n_models - 1)
        q = 0.5 + 0.45 * j / (n_models - 1)
        name = f"model-{j}"
        hard[name] = EvalResult(
            name, "hard-1k", [{"id": f"h{i}", "refused": rng.random() < p} for i in range(n_hard)]
        )
        toxic[name] = EvalResult(
            name, "toxic", [{"id": f"t{i}", "refused": rng.random() < q} for i in range(n_toxic)]
        )
    return hard, toxic


def test_bootstrap_interval_contains_the_point_estimate():
    hard, toxic = population()
    s = compare_models(hard, toxic, bootstrap=200, seed=1)
    lo, hi = s.bootstrap_ci
    assert -1 <= lo <= s.spearman <= hi <= 1 and lo < hi
    assert s.spearman > 0.8  # the population is built correlated
    assert spearman_bootstrap(hard, toxic, n_boot=200, seed=1) == (lo, hi)  # seeded
    assert "bootstrap 95% CI" in s.to_markdown()
    wide = spearman_bootstrap(hard, toxic, n_boot=200, seed=1, confidence=0.99)
    assert wide[0] <= lo and hi <= wide[1]


def test_bootstrap_uses_prompts_judged_for_every_model():
    hard, toxic = population(n_models=4)
    # a prompt judged by one model only is left out; missing judgements (None) too
    hard["model-0"].per_prompt.append({"id": "extra", "refused": True})
    hard["model-1"].per_prompt[0]["refused"] = None
    assert spearman_bootstrap(hard, toxic, n_boot=50) == spearman_bootstrap(
        {
            k: EvalResult(k, "h", [r for r in v.per_prompt if r["id"] not in ("extra", "h0")])
            for k, v in hard.items()
        },
        toxic,
        n_boot=50,
    )


@pytest.mark.parametrize("n_boot", [0, 5, -1, 10.5, True, "100"])
def test_bootstrap_rejects_bad_n_boot(n_boot):
    hard, toxic = population(n_models=4, n_hard=20, n_toxic=20)
    with pytest.raises(ValueError, match="n_boot"):
        spearman_bootstrap(hard, toxic, n_boot=n_boot)


def test_bootstrap_needs_per_prompt_rows():
    with pytest.raises(TypeError, match="EvalResult"):
        spearman_bootstrap(HARD, TOXIC, n_boot=20)
    with pytest.raises(TypeError, match="EvalResult"):
        compare_models(HARD, TOXIC, bootstrap=20)


# -- figure and table ----------------------------------------------------------------------------


def test_plot_tradeoff_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    s = compare_models(HARD, TOXIC)
    path = tmp_path / "fig" / "tradeoff.png"
    plot_tradeoff(s, path, groups={"a": "fam1", "b": "fam1", "c": "fam2"})
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_to_markdown_lists_every_model_sorted_by_over_refusal():
    hard = {m: v[0] for m, v in PAPER_FIGURE1.items()}
    toxic = {m: v[1] for m, v in PAPER_FIGURE1.items()}
    s = compare_models(hard, toxic)
    assert isinstance(s, TradeoffSummary)
    text = s.to_markdown()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    names = [line.split("|")[1].strip() for line in rows[1:]]
    assert sorted(names) == sorted(PAPER_FIGURE1)
    assert names[0] == "Llama-3.1-70B" and names[-1] == "Claude-2.1"  # 2.9 % ... 99.8 %
    assert "| GPT-4o | 6.78 | 84.90 |" in text
    assert "Spearman rho = 0.893" in text and "32 models" in text


def test_rank_agreement_is_kendall_tau_b_over_common_models():
    from scipy import stats

    from icml25.orbench.tradeoff import rank_agreement

    ours = {"a": 10.0, "b": 20.0, "c": 30.0, "d": 30.0, "only-ours": 5.0}
    theirs = {"a": 1.0, "b": 3.0, "c": 2.0, "d": 4.0}
    tau, p = rank_agreement(ours, theirs)
    ref = stats.kendalltau([10, 20, 30, 30], [1, 3, 2, 4])
    assert tau == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue)
    with pytest.raises(ValueError, match="at least 3 models"):
        rank_agreement({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0})
