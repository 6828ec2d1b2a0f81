"""The reproduction at smoke size (structure, criteria, the arms each check uses) and, marked
slow, the quick mode's claims."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    from icml25.fpo import repro

    return repro.run(quick=True, seed=0, out=tmp_path_factory.mktemp("fpo"), smoke=True)


def test_criteria_are_preregistered():
    from icml25.fpo import repro
    from icml25.registry import get

    assert [(c.design, c.above, c.below) for c in repro.CRITERIA] == [
        ("bootstrap", 0.55, None),
        ("bootstrap", None, 0.0),
        ("bootstrap", 0.0, None),
        ("mean", 0.7, None),
    ]
    assert repro.run.preregistered_seeds == {"quick": 3, "full": 9}
    assert get("fpo").repro == "icml25.fpo.repro:run"


def test_smoke_result_structure(smoke, check_smoke):
    # check_smoke also asserts that every check names its independent units (unit_problems)
    check_smoke(
        smoke,
        "fpo",
        metrics=("win rate fpo vs SFT", "median step fpo", "SAE FVE"),
        ranges={"win rate": (0, 1), "SAE FVE": (-1, 1)},
    )
    assert len(smoke.checks) == 4
    names = [c.name for c in smoke.checks]
    assert names[0].startswith("(a)") and names[1].startswith("(b)") and names[2].startswith("(c)")
    win, kl, step, fve = smoke.checks
    # per-prompt outcomes of both smoke seeds, each 0, 0.5 or 1, clustered by seed (quick mode:
    # one SFT model, so each seed's trained models are one unit)
    vals = np.array(win.data["values"])
    assert len(vals) == 2 * 40 and set(np.unique(vals)) <= {0.0, 0.5, 1.0}
    assert win.data["clusters"] == ["seed 0"] * 40 + ["seed 1"] * 40 and win.n == 2
    assert kl.data["clusters"] == ["seed 0"] * 30 + ["seed 1"] * 30 and kl.n == 2
    assert step.data["clusters"] == ["seed 0"] * 21 + ["seed 1"] * 21  # steps 5-25 of each seed
    # a single SAE fit is no evidence: one SAE per seed, a t-interval over them
    assert fve.criterion.design == "mean" and len(fve.data["values"]) == 2
    assert len(set(fve.data["values"])) == 2  # two SAE fits, not one value repeated
    assert {p.name for p in smoke.figures} == {"winrates.png", "kl.png", "step_time.png"}
    metric = {m.name: m for m in smoke.metrics}
    assert 0 <= metric["win rate fpo vs SFT"].mean <= 1
    assert metric["median step fpo"].mean > 0


def _planted_seed(model_seed: int, win: float, dkl: float, dt: float, n: int = 10) -> dict:
    half = n // 2
    return {
        "model_seed": model_seed,
        "win_vs_sft": {"fpo": [1.0] * round(win * n) + [0.0] * (n - round(win * n))},
        "kl_l": {"fpo": [1.0 + dkl + 0.01 * (i - half) for i in range(n)], "fpo_alpha0": [1.0] * n},
        "step_ms": {"tdpo2": [20.0 + dt + 0.1 * i for i in range(5)], "fpo": [20.0] * 5},
    }


def test_full_mode_checks_cluster_by_sft_model():
    """Three seeds share each SFT model and SAE in full mode: (a) and (b) have 3 units, (c) one
    timing session per seed, the FVE one value per SAE; no unit is counted twice."""
    from icml25.fpo import repro
    from icml25.report.checks import unit_problems

    seeds = list(range(9))
    per_seed = [_planted_seed(s % 3, 0.7 + 0.1 * (s % 3 == 1), -0.1, 3.0) for s in seeds]
    saes = {m: {"sae_info": {"fve": 0.98 + 0.001 * m}} for m in range(3)}
    checks = repro.fpo_checks(per_seed, seeds, saes, quick=False)
    win, kl, step, fve = checks
    assert win.n == kl.n == 3 and step.n == 9 and fve.n == 3
    assert set(win.data["clusters"]) == {"SFT model 0", "SFT model 1", "SFT model 2"}
    assert fve.data["units"] == ["SFT model 0", "SFT model 1", "SFT model 2"]
    assert not [p for c in checks for p in unit_problems(c, seeds)]
    # the interval is over the 3 SFT models' means (cluster-robust t, 2 df), not 90 prompts
    means = [np.mean(win.data["values"][i * 30 : (i + 1) * 30]) for i in range(3)]
    assert np.isclose(win.estimate, np.mean(means))
    assert win.high - win.low > 2 * 4.30 * np.std(means, ddof=1) / np.sqrt(3) * 0.99
    # quick mode: the same data would be clustered by seed
    q = repro.fpo_checks(per_seed[:3], seeds[:3], {s: saes[s] for s in range(3)}, quick=True)
    assert q[0].n == 3 and set(q[0].data["clusters"]) == {"seed 0", "seed 1", "seed 2"}


def test_checks_follow_the_planted_direction():
    from icml25.fpo import repro

    seeds = [0, 1, 2]
    good = [_planted_seed(0, 0.7 + 0.1 * s, -0.2 - 0.02 * s, 3.0 + 0.2 * s) for s in seeds]
    saes = {s: {"sae_info": {"fve": 0.95 + 0.01 * s}} for s in seeds}
    assert [c.verdict for c in repro.fpo_checks(good, seeds, saes, quick=True)] == ["held"] * 4
    bad = [_planted_seed(0, 0.2 + 0.1 * s, 0.2 + 0.02 * s, -3.0 - 0.2 * s) for s in seeds]
    bad_sae = {s: {"sae_info": {"fve": 0.5 + 0.01 * s}} for s in seeds}
    verdicts = [c.verdict for c in repro.fpo_checks(bad, seeds, bad_sae, quick=True)]
    assert verdicts == ["did not hold"] * 4


@pytest.mark.slow
def test_quick_mode_verdicts_are_the_recorded_ones(tmp_path, check_smoke, assert_recorded_verdicts):
    from icml25.fpo import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    check_smoke(r, "fpo", metrics=("SAE FVE",))
    assert_recorded_verdicts(r, "fpo", "quick")
