"""The sentences and tables every report repeats (``icml25.report.text``)."""

from __future__ import annotations

import pytest

from icml25.report import Criterion, mean_sd, not_held_notes, power_summary, table

GAIN = Criterion("gain > 0", "paired", above=0.0, unit="pt", paper_effect=0.5)
MEAN = Criterion("mean > 0", "mean", above=0.0)
EXACT = Criterion("bytes <= 10", "exact", below=10.0)


def test_table_pads_short_rows_escapes_pipes_and_refuses_long_ones():
    text = table(["a", "b"], [[1, "x|y"], [2]], caption="Caption:")
    assert text.splitlines() == [
        "Caption:",
        "",
        "| a | b |",
        "|---|---|",
        "| 1 | x\\|y |",
        "| 2 |  |",
    ]
    with pytest.raises(ValueError, match=r"row 0 has 3 cells for 2 columns"):
        table(["a", "b"], [[1, 2, 3]])
    with pytest.raises(ValueError, match="at least one column"):
        table([], [])


def test_mean_sd_is_the_sample_sd_and_the_mean_alone_for_one_value():
    assert mean_sd([1, 2, 3]) == "2.000 ± 1.000"
    assert mean_sd([0.5], digits=2) == "0.50"
    with pytest.raises(ValueError, match="at least one value"):
        mean_sd([])
    with pytest.raises(ValueError, match="digits must be a non-negative integer, got -1"):
        mean_sd([1.0], digits=-1)


def test_power_summary_groups_checks_by_sample_size_and_names_the_underpowered():
    big = GAIN.check([1.0, 1.2, 0.9, 1.1], [0.0, 0.1, 0.0, 0.2])  # n = 4, detects < 0.5
    noisy = GAIN.check([3.0, -2.0, 1.0], [0.0, 0.0, 0.0]).renamed("gain > 0 (noisy)")  # n = 3
    text = power_summary([big, noisy, EXACT.check(4.0)])
    assert text.startswith("With 4 seeds, the smallest distance")
    assert "With 3 seeds" in text and "(paper: 0.5)" in text
    assert f"gain > 0: {big.detectable:.4g} pt" in text
    assert big.detectable < 0.5 < noisy.detectable
    assert text.endswith(
        "Underpowered for the paper's own effect: gain > 0 (noisy): a check there that is not "
        "held says little against the paper."
    )
    assert power_summary([EXACT.check(4.0)]) == ""


def test_power_summary_names_each_criterion_s_own_units():
    batches = Criterion("mc > 0", "mean", above=0.0, over="MC batches")
    text = power_summary([batches.check([0.1, 0.2, 0.15]), MEAN.check([1.0, 2.0, 1.5])])
    assert text.startswith("With 3 MC batches, the smallest distance")
    assert "With 3 seeds, the smallest distance" in text


def test_not_held_notes_lists_every_check_that_is_not_held_with_its_interval():
    held = MEAN.check([1.0, 1.1, 0.9, 1.0])
    unsure = MEAN.check([1.0, -1.0, 0.5]).renamed("mean > 0 (b)")
    assert not_held_notes([held]) == ""
    note = not_held_notes([held, unsure, EXACT.check(12.0)])
    assert note == (
        f"Not held: mean > 0 (b): {unsure.interval_text()} (inconclusive); "
        "bytes <= 10: 12 (did not hold)."
    )


def test_the_sentences_refuse_what_is_not_a_check():
    for f in (power_summary, not_held_notes):
        with pytest.raises(TypeError, match=r"takes icml25.report.Check objects .* got dict"):
            f([{"name": "gain", "verdict": "held"}])
