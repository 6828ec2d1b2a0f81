"""TWA: training machine translation with span-level error annotations (Zhang, Dadkhahi,
Finkelstein, Trabelsi, Luo, Freitag, ICML 2025, arXiv:2410.16509; docs/twa.md).

    >>> data = load_mqm_tsv("mqm_newstest2021_ende.tsv")
    >>> train_twa(model, tokenizer, data, TWAConfig(lr=1e-5))   # one process; TWAHFTrainer scales
    >>> out = twa_loss(logits, labels, positive, span_ids, span_weights)   # your own loop
"""

from icml25.twa.align import TokenRoles, build_token_roles, char_spans_to_token_spans
from icml25.twa.annotations import (
    DEFAULT_SEVERITY_WEIGHTS,
    AnnotatedTranslation,
    ErrorSpan,
    from_records,
    load_jsonl,
    load_mqm_tsv,
    parse_marked_text,
    save_jsonl,
    severity_weight,
    to_records,
)
from icml25.twa.baselines import (
    build_dpo_pairs,
    dpo_loss,
    filter_sft_examples,
    sft_loss,
    train_dpo,
    twa_seq_roles,
)
from icml25.twa.collate import (
    TWACollator,
    chat_prompt_fn,
    twa_loss_denominator,
    twa_loss_on_batch,
)
from icml25.twa.loss import (
    TWALossOutput,
    log1mexp,
    span_unlikelihood,
    token_unlikelihood,
    twa_loss,
)
from icml25.twa.metrics import chrf, translate_with_backend
from icml25.twa.train import TrainHistory, TWAConfig, TWAHFTrainer, train_twa

__all__ = [
    "DEFAULT_SEVERITY_WEIGHTS",
    "AnnotatedTranslation",
    "ErrorSpan",
    "TWACollator",
    "TWAConfig",
    "TWAHFTrainer",
    "TWALossOutput",
    "TokenRoles",
    "TrainHistory",
    "build_dpo_pairs",
    "build_token_roles",
    "char_spans_to_token_spans",
    "chat_prompt_fn",
    "chrf",
    "dpo_loss",
    "filter_sft_examples",
    "from_records",
    "load_jsonl",
    "load_mqm_tsv",
    "log1mexp",
    "parse_marked_text",
    "save_jsonl",
    "severity_weight",
    "sft_loss",
    "span_unlikelihood",
    "to_records",
    "token_unlikelihood",
    "train_dpo",
    "train_twa",
    "twa_loss",
    "twa_loss_denominator",
    "twa_loss_on_batch",
    "twa_seq_roles",
    "translate_with_backend",
]
