"""Tokenizers trained locally in milliseconds, returned as ``transformers`` fast tokenizers."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CHAT_TEMPLATE", "SPECIAL_TOKENS", "build_tokenizer"]

#: pad, begin-of-text, end-of-turn (the EOS), and the three role markers of the chat template
SPECIAL_TOKENS = ("<pad>", "<|bos|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>")

#: ``<|role|>content<|end|>`` per turn, then ``<|assistant|>`` when a reply is wanted.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 512,
    *,
    kind: str = "bpe",
    min_frequency: int = 1,
):
    """Train a tokenizer on ``texts`` and wrap it as a ``PreTrainedTokenizerFast``.

    Args:
        texts: training text (for a chat model: prompts and responses).
        vocab_size: upper bound on the vocabulary, special tokens included. Byte-level BPE needs at
            least 256 + 6 entries (every byte stays encodable); a word vocabulary stops at the
            number of distinct words.
        kind: ``"bpe"`` (byte-level BPE: any string round-trips exactly) or ``"word"`` (one token
            per whitespace-separated word; unseen words become ``<unk>``).
        min_frequency: minimum count for a merge (BPE) or a word (word level).

    Returns:
        A ``transformers.PreTrainedTokenizerFast`` with ``pad_token="<pad>"``,
        ``bos_token="<|bos|>"``, ``eos_token="<|end|>"`` and :data:`CHAT_TEMPLATE`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = list(texts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a non-empty list of strings")
    if kind not in ("bpe", "word"):
        raise ValueError(f"kind must be 'bpe' or 'word', got {kind!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise ValueError(f"vocab_size must be an integer, got {vocab_size!r}")
    special = list(SPECIAL_TOKENS)
    if kind == "bpe":
        alphabet = pre_tokenizers.ByteLevel.alphabet()
        if vocab_size < len(alphabet) + len(special):
            raise ValueError(
                f"vocab_size={vocab_size} is too small for byte-level BPE: it needs at least "
                f"{len(alphabet) + len(special)} (256 bytes + {len(special)} special tokens)"
            )
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=special,
            initial_alphabet=alphabet,
            show_progress=False,
        )
    else:
        special.append("<unk>")
        if vocab_size < len(special) + 1:
            raise ValueError(f"vocab_size={vocab_size} is too small: at least {len(special) + 1}")
        tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
        # Metaspace keeps the spaces inside the tokens, so decoding restores the text exactly.
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.WordLevelTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=special,
            show_progress=False,
        )
    tok.train_from_iterator(texts, trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<|bos|>",
        eos_token="<|end|>",
        unk_token="<unk>" if kind == "word" else None,
        additional_special_tokens=["<|system|>", "<|user|>", "<|assistant|>"],
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped
