"""The RLTHF loop: budget accounting, overrides, resume, edge cases and mislabel detection."""

import dataclasses

import numpy as np
import pytest

from icml25.rlthf import (
    CallbackHumanLabeler,
    EmbeddingRewardModel,
    HumanOracle,
    PreferencePairs,
    RewardDistribution,
    RLTHFConfig,
    make_textworld,
    run_rlthf,
)
from icml25.rlthf.baselines import run_random, run_self_confidence, run_self_improvement
from icml25.rlthf.selection import select_targets


@pytest.fixture(scope="module")
def world():
    return make_textworld(500, 200, seed=0)


def _rm():
    return EmbeddingRewardModel(encoder="hashing", epochs=2)


def test_budget_accounting_and_overrides(world):
    human = HumanOracle(world.train.human_labels)
    cfg = RLTHFConfig(iterations=3, budget_per_iter=0.02)
    res = run_rlthf(
        world.train, world.ai_labels, world.ai_conf, human, _rm(), cfg, world.test, progress=False
    )
    assert human.calls == 3 * 10 == len(res.human_indices) == len(set(res.human_indices.tolist()))
    h = res.human_indices
    assert (res.labels[h] == world.train.human_labels[h]).all()  # human overrides AI
    assert (res.weights[h] == 5.0).all()
    ai_kept = res.kept_mask & ~np.isin(np.arange(500), h)
    assert (res.labels[ai_kept] == world.ai_labels[ai_kept]).all()
    assert (res.weights[ai_kept] == 1.0).all()
    assert [r["iteration"] for r in res.history] == [0, 1, 2, 3]
    assert res.history[-1]["human_fraction"] == pytest.approx(0.06)
    assert 0 < res.history[-1]["kept_fraction"] < 1
    assert all(0 <= r["test_accuracy"] <= 1 for r in res.history)
    rows = res.curated_trl()
    assert len(rows) == res.kept_mask.sum() and {r["weight"] for r in rows} == {1.0, 5.0}


def test_front_loaded_schedule(world):
    cfg = RLTHFConfig(iterations=3, budget_per_iter=0.02, schedule="front_loaded")
    assert np.allclose(cfg.fractions(), [0.03, 0.02, 0.01])
    human = HumanOracle(world.train.human_labels)
    run_rlthf(world.train, world.ai_labels, None, human, _rm(), cfg, progress=False)
    assert human.calls == 15 + 10 + 5


def test_resume_reproduces_the_same_labels(world, tmp_path):
    cfg = RLTHFConfig(iterations=3, budget_per_iter=0.02)
    ref = run_rlthf(
        world.train,
        world.ai_labels,
        None,
        HumanOracle(world.train.human_labels),
        _rm(),
        cfg,
        progress=False,
    )

    def crash(t, row):
        if t == 2:
            raise KeyboardInterrupt

    human = HumanOracle(world.train.human_labels)
    with pytest.raises(KeyboardInterrupt):
        run_rlthf(
            world.train,
            world.ai_labels,
            None,
            human,
            _rm(),
            cfg,
            checkpoint_dir=tmp_path,
            callback=crash,
            progress=False,
        )
    assert human.calls == 20
    human2 = HumanOracle(world.train.human_labels)
    res = run_rlthf(
        world.train,
        world.ai_labels,
        None,
        human2,
        _rm(),
        cfg,
        checkpoint_dir=tmp_path,
        progress=False,
    )
    assert human2.calls == 10  # only the third iteration asks again
    np.testing.assert_array_equal(res.labels, ref.labels)
    np.testing.assert_array_equal(res.weights, ref.weights)
    assert res.human_indices.tolist() == ref.human_indices.tolist()
    other = dataclasses.replace(cfg, amplification=2.0)
    with pytest.raises(ValueError, match="another config"):
        run_rlthf(
            world.train,
            world.ai_labels,
            None,
            human2,
            _rm(),
            other,
            checkpoint_dir=tmp_path,
            progress=False,
        )


def test_ties_spend_budget_and_leave_training(world):
    fn = lambda p, a, b: [-1] * len(p)  # noqa: E731 - every answer is a tie
    human = CallbackHumanLabeler(fn)
    res = run_rlthf(
        world.train, world.ai_labels, None, human, _rm(), RLTHFConfig(iterations=1), progress=False
    )
    assert human.calls == 10 and (res.labels[res.human_indices] == -1).all()
    assert not res.kept_mask[res.human_indices].any()
    assert res.history[-1]["n_invalid"] == 10


def test_identical_pairs_dropped_with_warning():
    w = make_textworld(60, 0, seed=2)
    a = list(w.train.responses_a)
    a[5] = w.train.responses_b[5]
    pairs = PreferencePairs(w.train.prompts, a, w.train.responses_b, w.train.human_labels)
    with pytest.warns(UserWarning, match="identical responses"):
        res = run_rlthf(
            pairs,
            w.ai_labels,
            None,
            HumanOracle(pairs.human_labels),
            _rm(),
            RLTHFConfig(iterations=1, budget_per_iter=0.1),
            progress=False,
        )
    assert res.labels[5] == -1 and not res.kept_mask[5] and 5 not in res.human_indices


def test_budget_larger_than_pool_annotates_all_and_stops():
    w = make_textworld(40, 0, seed=3)
    human = HumanOracle(w.train.human_labels)
    with pytest.warns(UserWarning, match="covers the"):
        res = run_rlthf(
            w.train,
            w.ai_labels,
            None,
            human,
            _rm(),
            RLTHFConfig(iterations=3, budget_per_iter=0.6),
            progress=False,
        )
    assert human.calls == 40 and len(res.history) == 3  # iterations 0, 1, 2; then nothing left
    assert (res.labels == w.train.human_labels).all()


def test_diverged_reward_model_names_the_iteration(world):
    class NaNRM:
        def fit(self, *a, **k):
            pass

        def margins(self, pairs, indices, labels):
            return np.full(len(indices), np.nan)

    with pytest.raises(FloatingPointError, match="iteration 1"):
        run_rlthf(
            world.train,
            world.ai_labels,
            None,
            HumanOracle(world.train.human_labels),
            NaNRM(),
            RLTHFConfig(),
            progress=False,
        )


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"budget_per_iter": 0.0}, "budget_per_iter"),
        ({"amplification": 0.5}, "amplification"),
        ({"backoff_ratio": 1.5}, "backoff_ratio"),
        ({"iterations": 0}, "iterations"),
        ({"amplify_mode": "replicate", "amplification": 2.5}, "integer"),
        ({"selection": "knee"}, "selection"),
        ({"sanitize": "elbow"}, "sanitize"),
        ({"schedule": "fast"}, "schedule"),
    ],
)
def test_config_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        RLTHFConfig(**kw)


def test_config_choices_are_typed_as_the_values_they_accept():
    """The ``Literal`` types of the string choices list exactly what the checks accept."""
    from typing import get_args, get_type_hints

    from icml25.rlthf.loop import _SCHEDULES
    from icml25.rlthf.selection import SANITIZE_RULES, SELECTIONS, backoff_drop_mask, drop_position

    hints = get_type_hints(RLTHFConfig)
    literal, fractions = get_args(hints["schedule"])
    assert get_args(literal) == _SCHEDULES and fractions == tuple[float, ...]
    assert get_args(hints["selection"]) == SELECTIONS
    assert get_args(hints["sanitize"]) == SANITIZE_RULES
    assert get_args(get_type_hints(select_targets)["strategy"]) == SELECTIONS
    for f in (drop_position, backoff_drop_mask):
        assert get_args(get_type_hints(f)["rule"]) == SANITIZE_RULES
    for name in ("schedule", "selection", "sanitize", "amplify_mode", "retrain"):
        choices = get_args(hints[name])
        choices = get_args(choices[0]) if name == "schedule" else choices
        for choice in choices:
            assert getattr(RLTHFConfig(**{name: choice}), name) == choice
        with pytest.raises(ValueError, match=f"{name} must be"):
            RLTHFConfig(**{name: "other"})


def test_run_bad_input(world):
    with pytest.raises(ValueError, match="human is required"):
        run_rlthf(world.train, world.ai_labels, None, None, _rm(), progress=False)
    with pytest.raises(ValueError, match=r"ai_labels\[0\]"):
        run_rlthf(world.train, np.full(500, 2), None, HumanOracle(world.train.human_labels), _rm())
    with pytest.raises(ValueError, match="shape"):
        run_rlthf(world.train, world.ai_labels[:10], None, HumanOracle(world.train.human_labels))


def test_replicate_mode_runs_and_counts(world):
    cfg = RLTHFConfig(iterations=1, amplify_mode="replicate", amplification=3)
    res = run_rlthf(
        world.train,
        world.ai_labels,
        None,
        HumanOracle(world.train.human_labels),
        _rm(),
        cfg,
        progress=False,
    )
    assert (res.weights[res.human_indices] == 3).all()


def test_baselines_share_the_loop(world):
    human = HumanOracle(world.train.human_labels)
    res = run_random(
        world.train, world.ai_labels, human, _rm(), RLTHFConfig(iterations=2), progress=False
    )
    assert human.calls == 20 and res.kept_mask.sum() == 500  # no sanitization
    human = HumanOracle(world.train.human_labels)
    res = run_self_confidence(
        world.train,
        world.ai_labels,
        human,
        _rm(),
        budget=0.06,
        config=RLTHFConfig(cv_folds=3),
        progress=False,
    )
    assert human.calls == 30 and len(res.history) == 2
    res = run_self_improvement(
        world.train, world.ai_labels, _rm(), RLTHFConfig(iterations=2), progress=False
    )
    assert res.history[-1]["n_human"] == 0 and res.history[-1]["n_flipped"] > 0


def test_bottom_of_curve_finds_random_flips():
    """A linearly separable world with 20 % uniformly flipped AI labels: the bottom 10 % of the
    AI-trained reward model's in-sample margins are mostly the flipped pairs."""
    rng = np.random.default_rng(0)
    n, d = 2000, 16
    vecs = rng.normal(size=(2 * n + 1, d)).astype(np.float32)
    texts = [f"t{i}" for i in range(2 * n + 1)]
    table = dict(zip(texts, vecs))
    prompts = [texts[-1]] * n
    a, b = texts[:n], texts[n : 2 * n]
    w_true = rng.normal(size=d)
    human = (vecs[:n] @ w_true > vecs[n : 2 * n] @ w_true).astype(np.int8)
    flip = rng.random(n) < 0.2
    ai = np.where(flip, 1 - human, human).astype(np.int8)
    pairs = PreferencePairs(prompts, a, b, human)
    rm = EmbeddingRewardModel(encoder=lambda ts: np.stack([table[t] for t in ts]), epochs=8)
    rm.fit(pairs, np.arange(n), ai, None, seed=0)
    dist = RewardDistribution(rm.margins(pairs, np.arange(n), ai))
    bottom = select_targets(dist, n // 10)
    assert flip[bottom].mean() >= 0.8


def test_empty_test_set_reports_none(world):
    from icml25.rlthf.loop import preference_accuracy

    rm = _rm()
    rm.fit(world.train, np.arange(50), world.ai_labels[:50], None)
    assert preference_accuracy(rm, PreferencePairs([], [], [], np.zeros(0))) is None
    assert preference_accuracy(rm, None) is None


def test_crash_after_annotation_asks_no_one_again(world, tmp_path):
    """The human's answers are on disk before the retraining: a crash there re-asks nobody."""
    cfg = RLTHFConfig(iterations=2, budget_per_iter=0.02)
    ref = run_rlthf(
        world.train,
        world.ai_labels,
        None,
        HumanOracle(world.train.human_labels),
        _rm(),
        cfg,
        progress=False,
    )

    class CrashOnSecondFit(EmbeddingRewardModel):
        fits = 0

        def fit(self, *a, **k):
            type(self).fits += 1
            if type(self).fits == 3:  # fit 0 = AI only, 1 = iteration 1, 2 = iteration 2
                raise MemoryError("killed while retraining")
            return super().fit(*a, **k)

    human = HumanOracle(world.train.human_labels)
    with pytest.raises(MemoryError):
        run_rlthf(
            world.train,
            world.ai_labels,
            None,
            human,
            CrashOnSecondFit(encoder="hashing", epochs=2),
            cfg,
            checkpoint_dir=tmp_path,
            progress=False,
        )
    assert human.calls == 20  # both iterations were answered
    human2 = HumanOracle(world.train.human_labels)
    res = run_rlthf(
        world.train,
        world.ai_labels,
        None,
        human2,
        CrashOnSecondFit(encoder="hashing", epochs=2),
        cfg,
        checkpoint_dir=tmp_path,
        progress=False,
    )
    assert human2.calls == 0
    assert res.human_indices.tolist() == ref.human_indices.tolist()
    np.testing.assert_array_equal(res.labels, ref.labels)


def test_resume_extends_iterations_and_checks_the_reward_model(world, tmp_path):
    human = HumanOracle(world.train.human_labels)
    run_rlthf(
        world.train,
        world.ai_labels,
        None,
        human,
        _rm(),
        RLTHFConfig(iterations=1),
        checkpoint_dir=tmp_path,
        progress=False,
    )
    human2 = HumanOracle(world.train.human_labels)
    res = run_rlthf(
        world.train,
        world.ai_labels,
        None,
        human2,
        _rm(),
        RLTHFConfig(iterations=2),
        checkpoint_dir=tmp_path,
        progress=False,
    )
    assert human2.calls == 10 and len(res.history) == 3
    with pytest.raises(ValueError, match="reward model"):
        run_rlthf(
            world.train,
            world.ai_labels,
            None,
            human2,
            EmbeddingRewardModel(encoder="hashing", hidden=16, epochs=1),
            RLTHFConfig(iterations=2),
            checkpoint_dir=tmp_path,
            progress=False,
        )
    with pytest.raises(ValueError, match="AI labels"):
        run_rlthf(
            world.train,
            1 - world.ai_labels,
            None,
            human2,
            _rm(),
            RLTHFConfig(iterations=2),
            checkpoint_dir=tmp_path,
            progress=False,
        )
    with pytest.raises(ValueError, match="iterations >= 2"):
        run_rlthf(
            world.train,
            world.ai_labels,
            None,
            human2,
            _rm(),
            RLTHFConfig(iterations=1),
            checkpoint_dir=tmp_path,
            progress=False,
        )


def test_budget_rounding_has_no_float_noise():
    w = make_textworld(100, 0, seed=3)
    human = HumanOracle(w.train.human_labels)
    run_rlthf(
        w.train,
        w.ai_labels,
        None,
        human,
        _rm(),
        RLTHFConfig(iterations=1, budget_per_iter=0.07),
        progress=False,
    )
    assert human.calls == 7  # 0.07 * 100 = 7.000000000000001 in floating point


@pytest.mark.parametrize("T", [1, 2, 3, 4, 5])
def test_front_loaded_total_equals_constant(T):
    fr = RLTHFConfig(iterations=T, budget_per_iter=0.02, schedule="front_loaded").fractions()
    assert sum(fr) == pytest.approx(T * 0.02) and fr == sorted(fr, reverse=True)


def test_config_accepts_numpy_numbers_and_refuses_nan():
    cfg = RLTHFConfig(
        iterations=np.int64(2),
        amplification=np.int32(3),
        seed=np.int64(1),
        budget_per_iter=np.float32(0.05),
        self_improvement=np.bool_(False),
    )
    assert cfg.iterations == 2 and type(cfg.iterations) is int and cfg.amplification == 3.0
    with pytest.raises(ValueError, match="budget_per_iter must be a finite number, got nan"):
        RLTHFConfig(budget_per_iter=float("nan"))
    with pytest.raises(TypeError, match="self_improvement"):
        RLTHFConfig(self_improvement="yes")
    with pytest.raises(ValueError, match="seed"):
        RLTHFConfig(seed=0.5)
    with pytest.raises(TypeError, match="seed"):
        RLTHFConfig(seed="0")
    with pytest.warns(UserWarning, match="no effect"):
        RLTHFConfig(backoff_ratio=0.3, sanitize=None)


def test_result_repr_ai_conf_and_curated_rows(world):
    conf = np.full(len(world.train), 0.75)
    cfg = RLTHFConfig(iterations=1, amplify_mode="replicate", amplification=3)
    res = run_rlthf(
        world.train,
        world.ai_labels,
        conf,
        HumanOracle(world.train.human_labels),
        _rm(),
        cfg,
        progress=False,
    )
    assert len(repr(res)) < 200 and "human=10" in repr(res)
    assert res.ai_conf is not None and res.history[1]["ai_conf_selected"] == pytest.approx(0.75)
    rows = res.curated_trl()
    n_kept = int(res.kept_mask.sum())
    assert len(rows) == n_kept + 2 * 10 - 2 * int((res.labels[res.human_indices] < 0).sum())
    assert all(r["weight"] == 1.0 for r in rows)
    assert "weight" not in res.curated_trl(weights=False)[0]
    assert "weight" not in res.curated_trl(weights=None)[0]
    with pytest.raises(ValueError, match=r"ai_conf\[3\] = 0.2"):
        conf[3] = 0.2
        run_rlthf(
            world.train,
            world.ai_labels,
            conf,
            HumanOracle(world.train.human_labels),
            _rm(),
            cfg,
            progress=False,
        )


def test_baseline_bad_input(world):
    with pytest.raises(ValueError, match=r"budget \(a fraction of the pool"):
        run_self_confidence(
            world.train, world.ai_labels, HumanOracle(world.train.human_labels), _rm(), budget=0
        )
    from icml25.rlthf.loop import cross_fit_margins

    with pytest.raises(ValueError, match="folds must be an integer >= 2"):
        cross_fit_margins(_rm(), world.train, np.arange(20), world.ai_labels[:20], folds=1)
