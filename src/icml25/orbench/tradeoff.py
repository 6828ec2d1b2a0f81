"""The cross-model trade-off of OR-Bench (paper Fig. 1, Sec. 4.2): over-refusal on
OR-Bench-Hard-1K against toxic rejection on OR-Bench-Toxic, their Spearman rank correlation
(paper: 0.89 over 32 models) and the quadratic "trade-off curve" the official ``plot.py`` draws.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icml25._validate import as_int, as_real

__all__ = [
    "PAPER_FIGURE1",
    "TradeoffSummary",
    "compare_models",
    "plot_tradeoff",
    "rank_agreement",
    "spearman_bootstrap",
]

#: Fig. 1 of the paper, as plotted by the official ``plot.py``: model -> (rejection rate on
#: OR-Bench-Hard-1K %, rejection rate on OR-Bench-Toxic %); ``*`` marks the moderator models.
PAPER_FIGURE1: dict[str, tuple[float, float]] = {
    "Claude-2.1": (99.80, 100.0),
    "Claude-3-haiku": (96.28, 99.7),
    "Claude-3-sonnet": (94.46, 99.7),
    "Claude-3-opus": (91.00, 98.1),
    "Claude-3.5-sonnet": (43.8, 96.6),
    "Gemma-7b": (26.34, 85.5),
    "Gemma-2-9b": (79.9, 98.5),
    "Gemma-2-27b": (62.0, 96.8),
    "Gemini-1.0-pro": (9.71, 78.7),
    "Gemini-1.5-flash": (84.29, 98.8),
    "Gemini-1.5-pro*": (88.01, 99.4),
    "GPT-3.5-turbo-0301": (57.43, 94.7),
    "GPT-3.5-turbo-0613": (38.40, 92.1),
    "GPT-3.5-turbo-0125": (12.71, 62.1),
    "GPT-4-0125-preview": (12.19, 93.0),
    "GPT-4-turbo-2024-04-09*": (12.78, 96.5),
    "GPT-4o": (6.78, 84.9),
    "GPT-4o-2024-08-06": (13.2, 86.1),
    "Llama-2-7b": (87.48, 99.6),
    "Llama-2-13b": (91.00, 99.7),
    "Llama-2-70b": (96.09, 99.7),
    "Llama-3-8b": (69.36, 95.0),
    "Llama-3-70b*": (37.74, 78.7),
    "Llama-3.1-8B": (31.0, 91.0),
    "Llama-3.1-70B": (2.9, 69.9),
    "Llama-3.1-405B": (5.7, 79.2),
    "Mistral-small": (13.30, 79.7),
    "Mistral-medium": (13.95, 77.5),
    "Mistral-large": (9.78, 72.8),
    "Qwen-1.5-7B": (39.24, 85.0),
    "Qwen-1.5-32B": (50.78, 95.6),
    "Qwen-1.5-72B": (46.94, 94.4),
}


@dataclass
class TradeoffSummary:
    """Models' (over-refusal on the hard set, toxic rejection) points and their statistics.

    ``table`` rows: ``{"model", "over_refusal", "toxic_rejection"}`` in percent.
    ``quad_fit``: ``(a, b, c)`` of ``TR ~ a OR^2 + b OR + c`` (least squares).
    """

    table: list[dict[str, Any]]
    spearman: float
    spearman_pvalue: float
    pearson: float
    quad_fit: tuple[float, float, float]
    bootstrap_ci: tuple[float, float] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def models(self) -> list[str]:
        return [r["model"] for r in self.table]

    def to_markdown(self) -> str:
        lines = ["| model | over-refusal on hard (%) | toxic rejection (%) |", "|---|---|---|"]
        for r in sorted(self.table, key=lambda r: r["over_refusal"]):
            lines.append(f"| {r['model']} | {r['over_refusal']:.2f} | {r['toxic_rejection']:.2f} |")
        ci = (
            f", bootstrap 95% CI [{self.bootstrap_ci[0]:.3f}, {self.bootstrap_ci[1]:.3f}]"
            if self.bootstrap_ci
            else ""
        )
        lines.append("")
        lines.append(
            f"Spearman rho = {self.spearman:.3f} (p = {self.spearman_pvalue:.2g}){ci}; "
            f"Pearson r = {self.pearson:.3f}; {len(self.table)} models."
        )
        return "\n".join(lines)


def _rate(r: Any) -> float:
    rate = getattr(r, "rate", r)
    if hasattr(rate, "item") and getattr(rate, "ndim", 1) == 0:
        rate = rate.item()  # numpy scalars
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise TypeError(f"expected an EvalResult or a rate in percent, got {r!r:.60}")
    if math.isfinite(rate) and not 0 <= rate <= 100:
        raise ValueError(f"rates are percentages in [0, 100], got {rate!r}")
    return float(rate)


def _check_sets(results_hard: Mapping[str, Any], results_toxic: Mapping[str, Any]) -> None:
    """Warn when EvalResults look swapped, are fractions, or carry different judges."""
    hard_subsets = {getattr(r, "subset", None) for r in results_hard.values()} - {None}
    toxic_subsets = {getattr(r, "subset", None) for r in results_toxic.values()} - {None}
    if "toxic" in hard_subsets or (
        toxic_subsets and "toxic" not in toxic_subsets and toxic_subsets & {"hard-1k", "80k"}
    ):
        warnings.warn(
            f"the over-refusal results are on {sorted(hard_subsets)} and the toxic ones on "
            f"{sorted(toxic_subsets)}: are the two arguments swapped?",
            stacklevel=3,
        )
    judges = set()
    for r in (*results_hard.values(), *results_toxic.values()):
        judges |= getattr(r, "judges", set())
    if len(judges) > 1:
        warnings.warn(
            f"the results were judged by different judges {sorted(judges)}: their "
            "rates are not comparable",
            stacklevel=3,
        )
    rates = [_rate(r) for r in (*results_hard.values(), *results_toxic.values())]
    finite = [x for x in rates if math.isfinite(x)]
    if finite and max(finite) <= 1 and any(x > 0 for x in finite):
        warnings.warn(
            "every rate is <= 1: rates are percentages (0-100), not fractions", stacklevel=3
        )


def _points(
    over_refusal: Mapping[str, Any], toxic_rejection: Mapping[str, Any]
) -> list[dict[str, Any]]:
    for label, m in (("results_hard", over_refusal), ("results_toxic", toxic_rejection)):
        if not isinstance(m, Mapping):
            raise TypeError(f"{label} must be a dict model -> EvalResult, got {type(m).__name__}")
    common = [k for k in over_refusal if k in toxic_rejection]
    missing = sorted(set(over_refusal) ^ set(toxic_rejection))
    if missing:
        warnings.warn(
            f"models in only one of the two result sets are left out: {missing}", stacklevel=3
        )
    rows = []
    for k in common:
        x, y = _rate(over_refusal[k]), _rate(toxic_rejection[k])
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ValueError(f"model {k!r} has a non-finite rate ({x}, {y}): no judged prompts?")
        rows.append({"model": k, "over_refusal": x, "toxic_rejection": y})
    if len(rows) < 3:
        raise ValueError(
            f"a rank correlation needs at least 3 models with both results, got {len(rows)}"
            f" ({', '.join(common) or 'none'})"
        )
    return rows


def compare_models(
    results_hard: Mapping[str, Any],
    results_toxic: Mapping[str, Any],
    *,
    bootstrap: int = 0,
    seed: int = 0,
) -> TradeoffSummary:
    """Spearman rho(toxic rejection, over-refusal on hard) across models (average ranks for
    ties, as ``scipy.stats.spearmanr``), Pearson r and the quadratic fit.

    Args:
        results_hard, results_toxic: ``{model: EvalResult}`` (or ``{model: rate in %}``) on the
            hard set and on the toxic set; models in only one are left out with a warning.
        bootstrap: resamples of the prompts for a 95% interval of rho
            (:func:`spearman_bootstrap`; needs EvalResults). 0: none.

    Raises ``ValueError`` with fewer than 3 models. A constant vector (all models at the same
    rate) gives NaN correlations with a warning.
    """
    from scipy import stats

    rows = _points(results_hard, results_toxic)
    _check_sets(results_hard, results_toxic)
    x = [r["over_refusal"] for r in rows]
    y = [r["toxic_rejection"] for r in rows]
    notes = []
    if len(set(x)) == 1 or len(set(y)) == 1:
        warnings.warn(
            "a constant rate across models: the correlations are undefined (NaN)", stacklevel=2
        )
        notes.append("constant rates: correlations undefined")
        rho, p, r = math.nan, math.nan, math.nan
    else:
        res = stats.spearmanr(x, y)
        rho, p = float(res.statistic), float(res.pvalue)
        r = float(stats.pearsonr(x, y).statistic)
    import numpy as np

    fit = (math.nan,) * 3
    if len(set(x)) >= 3:
        try:
            fit = tuple(float(v) for v in np.polyfit(x, y, 2))
        except np.linalg.LinAlgError:  # rates that differ only far below any printed digit
            warnings.warn(
                "the quadratic fit of toxic on hard refusal rates did not converge (the hard "
                f"rates {x} barely differ); its coefficients are NaN",
                stacklevel=2,
            )
    ci = None
    if bootstrap:
        names = [row["model"] for row in rows]
        ci = spearman_bootstrap(
            {k: results_hard[k] for k in names},
            {k: results_toxic[k] for k in names},
            n_boot=bootstrap,
            seed=seed,
        )
    return TradeoffSummary(rows, rho, p, r, fit, ci, notes)  # type: ignore[arg-type]


def spearman_bootstrap(
    results_hard: Mapping[str, Any],
    results_toxic: Mapping[str, Any],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile interval of rho over resamples of the *prompts* (the same resampled prompts
    for every model, separately for the hard and the toxic set): how much rho depends on which
    prompts the benchmark happened to contain. Only prompts judged for every model are used."""
    import numpy as np
    from scipy import stats

    n_boot = as_int("n_boot", n_boot, 10)
    confidence = as_real("confidence", confidence, low=0.5, high=1.0, high_open=True)
    seed = as_int("seed", seed)
    names = [row["model"] for row in _points(results_hard, results_toxic)]

    def matrix(results: Mapping[str, Any]) -> Any:
        maps = []
        for k in names:
            rows = getattr(results[k], "per_prompt", None)
            if rows is None:
                raise TypeError("spearman_bootstrap needs EvalResult objects (per-prompt rows)")
            maps.append({r["id"]: bool(r["refused"]) for r in rows if r.get("refused") is not None})
        ids = sorted(set.intersection(*(set(m) for m in maps)))
        if not ids:
            raise ValueError("no prompt was judged for every model")
        return np.array([[m[i] for i in ids] for m in maps], dtype=float)

    hard, tox = matrix(results_hard), matrix(results_toxic)
    rng = np.random.default_rng(seed)
    rhos = []
    for _ in range(n_boot):
        x = hard[:, rng.integers(0, hard.shape[1], hard.shape[1])].mean(axis=1)
        y = tox[:, rng.integers(0, tox.shape[1], tox.shape[1])].mean(axis=1)
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        rhos.append(stats.spearmanr(x, y).statistic)
    if len(rhos) < n_boot // 2:
        return (math.nan, math.nan)
    a = (1 - confidence) / 2
    lo, hi = np.quantile(rhos, [a, 1 - a])
    return float(lo), float(hi)


def plot_tradeoff(
    summary: TradeoffSummary,
    path: str | Path | None = None,
    *,
    groups: Mapping[str, str] | None = None,
    title: str = "Over-refusal vs toxic rejection",
    annotate: bool = True,
) -> Any:
    """Fig. 1: x = over-refusal on the hard set, y = toxic rejection, one marker per model
    (coloured by ``groups[model]``, e.g. the family), and the quadratic fit; model names are
    written beside the markers when ``annotate`` and at most 16 models. Saves a PNG when
    ``path`` is given; returns the figure."""
    import numpy as np

    from icml25.report import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    groups = dict(groups or {})
    labels = sorted({groups.get(m, "models") for m in summary.models})
    markers = "os^Dv<>pP*Xh"
    for j, g in enumerate(labels):
        rows = [r for r in summary.table if groups.get(r["model"], "models") == g]
        ax.scatter(
            [r["over_refusal"] for r in rows],
            [r["toxic_rejection"] for r in rows],
            marker=markers[j % len(markers)],
            label=g,
            s=36,
        )
        if annotate and len(summary.table) <= 16:  # more labels would cover each other
            for r in rows:
                ax.annotate(
                    r["model"],
                    (r["over_refusal"], r["toxic_rejection"]),
                    fontsize=6,
                    xytext=(3, 2),
                    textcoords="offset points",
                )
    if all(math.isfinite(v) for v in summary.quad_fit):
        xs = np.linspace(
            min(r["over_refusal"] for r in summary.table),
            max(r["over_refusal"] for r in summary.table),
            100,
        )
        ax.plot(xs, np.polyval(summary.quad_fit, xs), "k--", lw=1, label="quadratic fit")
    ax.set_xlabel("over-refusal rate on the hard set (%)")
    ax.set_ylabel("toxic prompt rejection rate (%)")
    ax.set_title(f"{title}\nSpearman rho = {summary.spearman:.3f}, {len(summary.table)} models")
    ax.legend(fontsize=7)
    if path is not None:
        from icml25.report import save_figure

        save_figure(fig, path)
    return fig


def rank_agreement(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> tuple[float, float]:
    """Kendall tau (tau-b, ties allowed) between two rankings of the same models, e.g. toxic
    rejection judged by our keyword detector vs by HarmBench's or JailbreakBench's classifier on
    their behaviour strings: do both judges rank the models alike? Values are EvalResults or
    rates in %; returns ``(tau, p-value)`` over the models in both (at least 3)."""
    from scipy import stats

    common = [k for k in ours if k in theirs]
    if len(common) < 3:
        raise ValueError(f"a rank agreement needs at least 3 models in both, got {len(common)}")
    res = stats.kendalltau([_rate(ours[k]) for k in common], [_rate(theirs[k]) for k in common])
    return float(res.statistic), float(res.pvalue)
