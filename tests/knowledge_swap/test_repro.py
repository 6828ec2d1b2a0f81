"""The reproduction at smoke size (structure and numbers: every metric present, finite, in range,
consistent with its definition and with the verdict), and the quick claim (slow)."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("sklearn")

ACC = ("acc_r", "acc_f", "acc_l", "S")


def _check_structure(r, strategies, n_seeds):
    assert r.slug == "knowledge_swap" and isinstance(r.held, bool) and r.claim and r.setup
    names = {m.name for m in r.metrics}
    want = {f"{s} {k}" for s in strategies for k in ACC} | {
        "S(L->F) - S(F->L)",
        "F->L relapse (Acc_f after learn - after forget)",
        "pretrained Acc_r",
        "pretrained Acc_f",
    }
    assert want <= names, sorted(want - names)
    for m in r.metrics:
        assert m.n == n_seeds and all(math.isfinite(v) for v in m.values), m.name
        lo, hi = (-100, 100) if m.unit == "points" else (0, 100)
        assert all(lo <= v <= hi for v in m.values), (m.name, m.values)
    # each S is the mean of Acc_r, Acc_l and 100 - Acc_f; the key metric is their difference
    get = {m.name: np.array(m.values) for m in r.metrics}
    for s in strategies:
        s_ = (get[f"{s} acc_r"] + get[f"{s} acc_l"] + 100 - get[f"{s} acc_f"]) / 3
        np.testing.assert_allclose(get[f"{s} S"], s_, atol=1e-9)
    np.testing.assert_allclose(get["S(L->F) - S(F->L)"], get["L->F S"] - get["F->L S"], atol=1e-9)
    # the verdict is the pre-registered rule applied to these numbers
    lf = {k: get[f"L->F {k}"].mean() for k in ACC}
    fl = {k: get[f"F->L {k}"].mean() for k in ACC}
    rule = (
        lf["S"] >= fl["S"] + 3
        and lf["acc_f"] <= fl["acc_f"]
        and lf["acc_l"] >= fl["acc_l"] - 5
        and lf["acc_f"] <= 20
        and lf["acc_l"] >= 80
    )
    assert r.held == rule
    table = r.tables[0]
    assert (
        table.startswith("| check | result |")
        and table.count("| PASS |") + table.count("| FAIL |") == 4
    )
    for f in r.figures:
        assert f.exists() and f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f


def test_quick_repro_smoke(tmp_path):
    from icml25.knowledge_swap import repro

    r = repro.run(quick=True, seed=0, out=tmp_path, smoke=True)
    _check_structure(r, ("L->F", "F->L"), 1)
    assert {f.name for f in r.figures} == {
        "swap_bars.png",
        "forget_trajectory.png",
        "lora_norm_profile.png",
    }


@pytest.mark.slow
def test_full_repro_smoke(tmp_path):
    from icml25.knowledge_swap import repro

    r = repro.run(quick=False, seed=0, out=tmp_path, smoke=True)
    _check_structure(r, ("L->F", "F->L", "simultaneous"), 1)
    assert "knock_on_probes.png" in {f.name for f in r.figures}
    sweep = [m for m in r.metrics if m.name.startswith("sweep S gap")]
    assert sweep and all(math.isfinite(v) for m in sweep for v in m.values)


@pytest.mark.slow
def test_quick_repro_meets_the_criteria(tmp_path):
    from icml25.knowledge_swap import repro

    r = repro.run(quick=True, seed=0, out=tmp_path)
    _check_structure(r, ("L->F", "F->L"), 3)
    assert r.held, r.notes
