"""Offline text for the tiny-LLaMA reproduction: the Python standard library's own source files.

All ``*.py`` files directly in ``sysconfig.get_paths()["stdlib"]`` (no sub-directories), sorted by
name; every 10th file is the eval split (docs/swan.md). A byte-level BPE tokenizer is trained
locally; batches are random windows drawn from a seeded generator, identical for every optimizer.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["Corpus", "WindowSampler", "eval_windows", "load_stdlib_corpus", "train_tokenizer"]


@dataclass
class Corpus:
    """The reproduction's train and eval text, the number of source files they came from, and
    each text's SHA-256 (recorded in the report)."""

    train: str
    eval: str
    n_files: int

    @property
    def train_sha256(self) -> str:
        return hashlib.sha256(self.train.encode()).hexdigest()

    @property
    def eval_sha256(self) -> str:
        return hashlib.sha256(self.eval.encode()).hexdigest()


def load_stdlib_corpus(root: str | Path | None = None) -> Corpus:
    """Train/eval text from the ``*.py`` files directly in ``root`` (default: the stdlib)."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(
            f"no *.py files in {str(root)!r}; point the reproduction at a text corpus of your own"
        )
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    train = "\n".join(t for i, t in enumerate(texts) if i % 10 != 0)
    held = "\n".join(t for i, t in enumerate(texts) if i % 10 == 0)
    return Corpus(train=train, eval=held, n_files=len(files))


def train_tokenizer(text: str, vocab_size: int = 2048, min_frequency: int = 2):
    """Byte-level BPE trained on ``text`` (docs/swan.md: vocab 2048, min frequency 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([text[i : i + 10_000] for i in range(0, len(text), 10_000)], trainer)
    return tok


class WindowSampler:
    """Random windows of ``length + 1`` tokens; the same seed gives the same batches."""

    def __init__(self, ids: torch.Tensor, length: int, batch: int, seed: int) -> None:
        if ids.numel() <= length + 1:
            raise ValueError(
                f"the split has {ids.numel()} tokens, fewer than one window of {length + 1}"
            )
        self.ids, self.length, self.batch = ids, length, batch
        self.gen = torch.Generator().manual_seed(seed)

    def next(self) -> torch.Tensor:
        starts = torch.randint(
            self.ids.numel() - self.length - 1, (self.batch,), generator=self.gen
        )
        return torch.stack([self.ids[s : s + self.length + 1] for s in starts.tolist()])


def eval_windows(ids: torch.Tensor, length: int, count: int | None) -> torch.Tensor:
    """The first ``count`` non-overlapping windows of ``length + 1`` tokens (all when None)."""
    n = (ids.numel() - 1) // length
    if n < 1:
        raise ValueError(f"the eval split has {ids.numel()} tokens, fewer than one window")
    n = n if count is None else min(n, count)
    return torch.stack([ids[i * length : i * length + length + 1] for i in range(n)])
