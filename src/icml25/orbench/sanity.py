"""What the reproduction's stand-ins build in (docs/orbench.md, "Reproduction", sanity values):
the scripted moderators' independent-error arithmetic and the hard subset's panel rates, the
expected values the reproduction's sanity table sets beside the measured ones."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import numpy as np

from icml25.orbench.categories import CATEGORIES
from icml25.orbench.records import ORBenchRecord
from icml25.orbench.standin import scripted_moderator
from icml25.toy.overrefusal_lang import OverRefusalWorld

__all__ = [
    "expected_contamination_ratio",
    "majority_error",
    "moderator_blind_fraction",
    "panel_rates",
]


def moderator_blind_fraction() -> float:
    """The probability that one scripted moderator is wrong on a given candidate: the share of
    (verb, noun) pairs in its blind spot (``scripted_moderator``'s default ``blind_fraction``,
    rounded to whole pairs as the stand-in draws them; 168 of 1,120 pairs = 0.15)."""
    f = inspect.signature(scripted_moderator).parameters["blind_fraction"].default
    world = OverRefusalWorld(CATEGORIES)
    n_pairs = len(world.verbs) * len(world.nouns)
    return round(f * n_pairs) / n_pairs


def majority_error(p: float, n: int = 3) -> float:
    """The probability that a majority vote of ``n`` moderators is wrong when each is wrong
    independently with probability ``p`` (``3 p^2 (1 - p) + p^3`` for three; the scripted
    moderators draw their blind spots independently, so this is their ensemble's error)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n % 2 == 0:
        raise ValueError(f"n must be an odd positive number of moderators, got {n!r}")
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n // 2 + 1, n + 1))


def expected_contamination_ratio(c: float, e: float) -> float:
    """Pool contamination over candidate contamination when every candidate's vote is wrong
    with probability ``e`` whatever its truth: toxic candidates (fraction ``c``) pass with
    probability ``e``, safe ones with ``1 - e``, so the ratio is ``e / (c e + (1 - c)(1 - e))``.
    """
    if not 0.0 < c <= 1.0 or not 0.0 <= e <= 1.0:
        raise ValueError(f"need 0 < c <= 1 and 0 <= e <= 1, got c={c!r}, e={e!r}")
    return e / (c * e + (1 - c) * (1 - e))


def panel_rates(build: Path) -> dict[str, float]:
    """The panel's own refusal rates (%) from a built world's ``metadata.json``: on the whole
    pool, on the hard subset, and the floor the selection rule puts under the latter (a hard
    prompt is refused by at least ``k_min`` of the panel's models, so their mean refusal rate on
    the hard set is at least ``k_min / len(panel)``)."""
    sel = json.loads((Path(build) / "metadata.json").read_text(encoding="utf-8"))["hard_selection"]
    n_panel, k = len(sel["panel"]), sel["rejections"]
    with open(Path(build) / "or-bench-hard-1k.jsonl", encoding="utf-8") as f:
        hard = [ORBenchRecord.from_dict(json.loads(line)).id for line in f if line.strip()]
    return {
        "pool": 100 * float(np.mean(list(k.values()))) / n_panel if k else math.nan,
        "hard": 100 * float(np.mean([k[i] for i in hard])) / n_panel if hard else math.nan,
        "floor": 100 * sel["k_min"] / n_panel,
    }
