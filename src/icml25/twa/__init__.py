"""TWA: training machine translation with span-level error annotations (Zhang, Dadkhahi,
Finkelstein, Trabelsi, Luo, Freitag, ICML 2025, arXiv:2410.16509; docs/twa.md).

    >>> data = load_mqm_tsv("mqm_newstest2021_ende.tsv")
    >>> train_twa(model, tokenizer, data, TWAConfig(lr=1e-5))   # one process; TWAHFTrainer scales
    >>> out = twa_loss(logits, labels, positive, span_ids, span_weights)   # your own loop
"""

from icml25._moved import moved as _moved
from icml25.twa.annotations import AnnotatedTranslation, ErrorSpan, load_mqm_tsv
from icml25.twa.baselines import build_dpo_pairs, filter_sft_examples, train_dpo
from icml25.twa.collate import TWACollator, twa_loss_on_batch
from icml25.twa.loss import TWALossOutput, twa_loss
from icml25.twa.metrics import translate_with_backend
from icml25.twa.train import TrainHistory, TWAConfig, TWAHFTrainer, train_twa

__all__ = [
    "AnnotatedTranslation",
    "ErrorSpan",
    "TWACollator",
    "TWAConfig",
    "TWAHFTrainer",
    "TWALossOutput",
    "TrainHistory",
    "build_dpo_pairs",
    "filter_sft_examples",
    "load_mqm_tsv",
    "train_dpo",
    "train_twa",
    "twa_loss",
    "twa_loss_on_batch",
    "translate_with_backend",
]

# moved out of the package namespace (CHANGELOG.md, 0.2.0); removed in 0.3.0
__getattr__ = _moved(
    __name__,
    {
        "DEFAULT_SEVERITY_WEIGHTS": "annotations",
        "TokenRoles": "align",
        "build_token_roles": "align",
        "char_spans_to_token_spans": "align",
        "chat_prompt_fn": "collate",
        "chrf": "metrics",
        "dpo_loss": "icml25.preference",
        "from_records": "annotations",
        "load_jsonl": "annotations",
        "log1mexp": "loss",
        "parse_marked_text": "annotations",
        "save_jsonl": "annotations",
        "severity_weight": "annotations",
        "sft_loss": "baselines",
        "span_unlikelihood": "loss",
        "to_records": "annotations",
        "token_unlikelihood": "loss",
        "twa_loss_denominator": "collate",
        "twa_seq_roles": "baselines",
    },
)
