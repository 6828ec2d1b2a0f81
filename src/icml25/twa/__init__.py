"""TWA: training machine translation with span-level error annotations (Zhang, Dadkhahi,
Finkelstein, Trabelsi, Luo, Freitag, ICML 2025, arXiv:2410.16509). Work in progress (issue 23):
the annotations (MQM TSV), the character-to-token span mapping, the token roles, the loss and
the collator are in place; the trainer, baselines and the reproduction follow.

    >>> data = load_mqm_tsv("mqm_newstest2021_ende.tsv")
    >>> out = twa_loss(logits, labels, positive, span_ids, span_weights)   # out.loss.backward()
"""

from icml25.twa.align import TokenRoles, build_token_roles, char_spans_to_token_spans
from icml25.twa.annotations import (
    DEFAULT_SEVERITY_WEIGHTS,
    AnnotatedTranslation,
    ErrorSpan,
    load_mqm_tsv,
    parse_marked_text,
    severity_weight,
)
from icml25.twa.collate import TWACollator, twa_loss_on_batch
from icml25.twa.loss import (
    TWALossOutput,
    log1mexp,
    span_unlikelihood,
    token_unlikelihood,
    twa_loss,
)

__all__ = [
    "DEFAULT_SEVERITY_WEIGHTS",
    "AnnotatedTranslation",
    "ErrorSpan",
    "TWACollator",
    "TWALossOutput",
    "TokenRoles",
    "build_token_roles",
    "char_spans_to_token_spans",
    "load_mqm_tsv",
    "log1mexp",
    "parse_marked_text",
    "severity_weight",
    "span_unlikelihood",
    "token_unlikelihood",
    "twa_loss",
    "twa_loss_on_batch",
]
