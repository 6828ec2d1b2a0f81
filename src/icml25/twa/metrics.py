"""Translation quality for real runs: chrF (sacrebleu, pure Python) beside the MQM-style penalty
of the synthetic task; COMET and MetricX are the user's to add (their models are downloads)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["chrf"]


def chrf(hypotheses: Sequence[str], references: Sequence[str], *, word_order: int = 0) -> float:
    """Corpus chrF (``word_order=2``: chrF++) with sacrebleu's defaults, 0-100."""
    try:
        import sacrebleu
    except ImportError as exc:  # pragma: no cover - the `mt` extra
        raise ImportError("chrf needs sacrebleu: pip install 'icml25[mt]'") from exc
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references are lists of strings")
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(
            f"need as many hypotheses as references, at least one; got {len(hypotheses)} and "
            f"{len(references)}"
        )
    return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)],
                                       word_order=word_order).score)  # fmt: skip
