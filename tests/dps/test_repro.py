"""The DPS reproduction at smoke size (quick and full mode), its independent units and its recorded
verdicts (docs/dps.md, "Reproduction")."""

from __future__ import annotations

import pytest

from icml25.dps import repro

ACCURACIES = ("vanilla clean accuracy", "DPS centre clean accuracy", "crop vote clean accuracy")


def _counts_each_image_once(result, valid_ids) -> None:
    """Every check has one value per test image, labelled by its id (a label may not repeat): an
    image drawn in several seeds is one unit, never several independent values."""
    for c in result.checks:
        ids = c.data["units"]
        assert ids is not None and c.data["clusters"] is None, c.name
        assert len(ids) == len(set(ids)) == len(c.data["values"]), c.name
        assert set(ids) <= set(valid_ids), c.name


def test_quick_smoke_counts_each_image_once(tmp_path, check_smoke, monkeypatch, capsys):
    monkeypatch.setenv("ICML25_QUIET", "0")
    result = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    # a nohup run (stderr not a terminal) prints the start and end of each long stage
    err = capsys.readouterr().err
    for label in ("training or loading the attacker", "seed 0: defences on", "seed 1: defences on"):
        assert f"dps: {label}" in err, err
    assert "done in" in err
    check_smoke(result, "dps", metrics=ACCURACIES, ranges={"": (0.0, 100.0)})
    assert [c.name for c in result.checks] == [c.name for c in repro.CRITERIA[:5]]
    _counts_each_image_once(result, range(540))
    # the two smoke seeds draw 40 images each from 540, overlapping: fewer than 80 units
    valid = result.checks[0]
    assert len(set(valid.data["units"])) < 80
    assert f"over {len(valid.data['units'])} images" in valid.test
    assert result.key_check == repro.DPS_ROBUST.name


@pytest.mark.slow
def test_full_smoke_counts_each_image_once_and_reports_seed_clusters(tmp_path, check_smoke):
    result = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    check_smoke(result, "dps", metrics=ACCURACIES, prefixes=("SmoothVLM accuracy under",))
    assert [c.name for c in result.checks] == [c.name for c in repro.CRITERIA]
    # full mode: the same images in every seed, each one unit (the mean of its 2 seeds' outcomes)
    n = repro.SMOKE_FULL_N_TEST
    for c in result.checks:
        if c.name != repro.DPS_ASR.name:
            assert c.data["units"] == list(range(n)), c.name
    _counts_each_image_once(result, range(n))
    # the sensitivity to the trained model: the seed-clustered intervals, reported beside
    (table,) = [t for t in result.tables if "seeds as clusters" in t]
    assert all(c.name in table for c in result.checks)


def _fake_seed(seed: int, images: list[int], rng) -> dict:
    n = len(images)
    res = {"seed": seed, "image": images}
    for k in (
        "van_clean",
        "van_adv",
        "dps_clean",
        "dps_adv",
        "vote_clean",
        "smooth_clean",
        "smooth_adv",
        "dps_adv_misled",
        "van_adv_misled",
    ):
        res[k] = [float(v) for v in rng.integers(0, 2, n)]
    res["van_clean"] = [1.0] * (n - 3) + [0.0] * 3
    return res


def test_checks_count_repeated_images_once():
    """An image drawn by three seeds is one value (its mean over those seeds) in every check, also
    in (b2), which keeps the (image, seed) pairs the vanilla model answers correctly when clean;
    the estimate weighs every image equally."""
    import numpy as np

    rng = np.random.default_rng(0)
    per_seed = [
        _fake_seed(s, [int(i) for i in sorted(rng.choice(60, 40, replace=False))], rng)
        for s in range(3)
    ]
    checks = repro.build_checks(per_seed, full=False)
    pairs = [(i, s) for p in per_seed for i, s in zip(p["image"], [p["seed"]] * len(p["image"]))]

    def want(key_a, key_b, scale, only_correct=False):
        vals: dict = {}
        for p in per_seed:
            for j, i in enumerate(p["image"]):
                if only_correct and p["van_clean"][j] != 1.0:
                    continue
                vals.setdefault(i, []).append(p[key_a][j] - scale * p[key_b][j])
        return list(vals), [float(np.mean(v)) for v in vals.values()]

    expected = {
        repro.VALID.name: want("van_clean", "van_adv", 1.0),
        repro.DPS_ROBUST.name: want("dps_adv", "van_adv", 1.0),
        repro.DPS_ASR.name: want("dps_adv_misled", "van_adv_misled", 0.75, only_correct=True),
        repro.DPS_CLEAN.name: want("dps_clean", "van_clean", 1.0),
        repro.VS_VOTE.name: want("dps_clean", "vote_clean", 1.0),
    }
    assert len({i for i, _ in pairs}) < len(pairs)  # some image is in several seeds
    for c in checks:
        ids, means = expected[c.name]
        assert c.data["units"] == ids, c.name
        scale = 1.0 if c.name == repro.DPS_ASR.name else 100.0
        assert np.allclose(c.data["values"], [scale * m for m in means]), c.name
        assert c.estimate == pytest.approx(scale * np.mean(means))


def test_full_mode_checks_and_seed_cluster_sensitivity():
    """Full mode: every seed evaluates the same images, so each check has one value per image (the
    mean over the seeds); the sensitivity table recomputes each check with the seeds as clusters,
    which for equal cluster sizes is the t-interval of the per-seed means."""
    import numpy as np
    from scipy import stats

    rng = np.random.default_rng(3)
    per_seed = [_fake_seed(s, list(range(30)), rng) for s in range(4)]
    checks = repro.build_checks(per_seed, full=True)
    assert [c.name for c in checks] == [c.name for c in repro.CRITERIA]
    for c in checks:
        if c.name != repro.DPS_ASR.name:
            assert c.data["units"] == list(range(30)), c.name
    table = repro.seed_cluster_table(per_seed)
    means = [100 * (np.mean(p["dps_adv"]) - np.mean(p["van_adv"])) for p in per_seed]
    half = stats.t.ppf(0.975, 3) * np.std(means, ddof=1) / 2
    lo, hi = np.mean(means) - half, np.mean(means) + half
    (row,) = [r for r in table.splitlines() if r.startswith(f"| {repro.DPS_ROBUST.name} |")]
    assert f"[{lo:.3g}, {hi:.3g}]" in row
    assert all(f"| {c.name} |" in table for c in checks)


def test_too_few_qualifying_images_is_unmeasured():
    import numpy as np

    rng = np.random.default_rng(2)
    p = _fake_seed(0, list(range(40)), rng)
    p["van_clean"] = [1.0] * 5 + [0.0] * 35  # (b2) has only 5 images
    checks = {c.name: c for c in repro.build_checks([p], full=False)}
    asr = checks[repro.DPS_ASR.name]
    assert not asr.measured and asr.verdict == "inconclusive"
    assert checks[repro.VALID.name].measured


def test_checks_refuse_misaligned_image_ids():
    import numpy as np

    rng = np.random.default_rng(1)
    p = _fake_seed(0, list(range(40)), rng)
    p["image"] = p["image"][:-1]
    with pytest.raises(ValueError, match="image ids"):
        repro.build_checks([p], full=False)


@pytest.mark.slow
def test_quick_reproduction_matches_recorded_verdicts(tmp_path, assert_recorded_verdicts):
    """The quick reproduction (about 3 minutes on 2 cores) gives the verdicts docs/dps.md
    records."""
    result = repro.run(quick=True, seed=0, out=tmp_path)
    assert result.error is None
    assert_recorded_verdicts(result, "dps", mode="quick")
