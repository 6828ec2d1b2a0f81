"""Preference data in TRL's format (``prompt`` / ``chosen`` / ``rejected``) and its collator.

A record's ``prompt`` is a string or a list of chat messages; ``chosen`` / ``rejected`` are strings
or lists of assistant messages (TRL's "conversational" format, rendered with the tokenizer's chat
template). :func:`load_preferences` reads the files users have: JSONL, JSON, CSV, Parquet, a
``datasets`` directory saved with ``save_to_disk``, a ``datasets.Dataset`` or a list of dicts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from icml25._validate import as_int
from icml25.preference import IGNORE_INDEX, PREFERENCE_COLUMNS, load_preferences
from icml25.preference import check_preference_record as _check_record

COLUMNS = PREFERENCE_COLUMNS

__all__ = ["COLUMNS", "PreferenceCollator", "as_records", "load_preferences"]


def as_records(dataset: Any) -> Any:
    """``dataset`` itself when it is a list/tuple of records or a ``datasets.Dataset`` (indexed
    lazily), else :func:`load_preferences` of it (paths, DataFrames, DatasetDicts, ...)."""
    if isinstance(dataset, (list, tuple)) and dataset and isinstance(dataset[0], dict):
        return dataset
    names = getattr(dataset, "column_names", None)
    if isinstance(names, list) and hasattr(dataset, "__getitem__"):
        missing = [c for c in COLUMNS if c not in names]
        if missing:
            raise ValueError(
                f"the Dataset lacks columns {missing} (has {names}); TRL's columns are {COLUMNS}"
            )
        return dataset
    return load_preferences(dataset)


@dataclass
class PreferenceCollator:
    """Records -> a padded batch of ``2B`` rows: the ``B`` chosen sequences, then the ``B``
    rejected ones (TRL's layout).

    The batch holds ``input_ids``, ``attention_mask``, ``labels`` (the token id on response
    tokens, -100 on prompt and padding; unshifted), ``completion_mask`` (1 on response tokens),
    ``index`` (the records' ``idx`` field, else their position in the list) and
    ``fingerprint`` (one hex digest per pair of its token ids, for :class:`ReferenceCache`).

    Prompts longer than ``max_prompt_length`` keep their last tokens (``truncation="keep_end"``);
    responses are cut to ``max_length`` minus the prompt. A response left empty raises
    ``ValueError`` naming the record. An EOS is appended to plain-string responses that lack it
    (as TRL does; so an empty string is an EOS-only response, as in TRL); chat-format responses
    get the template's end-of-turn.
    """

    tokenizer: Any
    max_length: int = 1024  # official config
    max_prompt_length: int = 512  # TRL's former default; the prompt's left part is cut first
    truncation: Literal["keep_end", "keep_start"] = "keep_end"
    padding_side: Literal["right", "left"] = "right"

    def __post_init__(self) -> None:
        for n in ("max_length", "max_prompt_length"):
            setattr(self, n, as_int(n, getattr(self, n), 1))
        if self.max_prompt_length >= self.max_length:
            raise ValueError(
                f"max_prompt_length={self.max_prompt_length} must be below "
                f"max_length={self.max_length} (room for the response)"
            )
        if self.truncation not in ("keep_end", "keep_start"):
            raise ValueError(
                f"truncation must be 'keep_end' or 'keep_start', got {self.truncation!r}"
            )
        if self.padding_side not in ("right", "left"):
            raise ValueError(f"padding_side must be 'right' or 'left', got {self.padding_side!r}")
        tok = self.tokenizer
        if tok is None or not callable(tok):
            raise TypeError("tokenizer must be a Hugging Face tokenizer")
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if pad is None:
            raise ValueError("the tokenizer has neither a pad nor an EOS token")
        self.pad_id = pad

    @property
    def identity(self) -> dict[str, Any]:
        return {
            "tokenizer": getattr(self.tokenizer, "name_or_path", "")
            or type(self.tokenizer).__name__,
            "vocab": len(self.tokenizer),
            "max_length": self.max_length,
            "max_prompt_length": self.max_prompt_length,
            "truncation": self.truncation,
        }

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(self, record: dict[str, Any], i: int = 0) -> tuple[list[int], list[int], list[int]]:
        """``(prompt_ids, chosen_ids, rejected_ids)`` after truncation."""
        r = _check_record(i, record)
        tok = self.tokenizer
        conv = isinstance(r["prompt"], list)
        if conv:
            if not getattr(tok, "chat_template", None):
                raise ValueError(
                    f"record {i} is in chat format but the tokenizer has no chat template"
                )

            def msgs(v: Any) -> list[dict]:
                return v if isinstance(v, list) else [{"role": "assistant", "content": v}]

            def render(m: list[dict], gen: bool) -> list[int]:
                out = tok.apply_chat_template(m, add_generation_prompt=gen, tokenize=True)
                if isinstance(out, dict) or hasattr(out, "keys"):
                    out = out["input_ids"]
                return list(out)

            p = render(r["prompt"], True)
            resp = []
            for side in ("chosen", "rejected"):
                full = render(r["prompt"] + msgs(r[side]), False)
                n = 0
                while n < min(len(p), len(full)) and p[n] == full[n]:
                    n += 1
                if n < len(p):
                    p = p[:n]  # the template renders the prompt differently alone (TRL does this)
                resp.append(full)
            c, rj = resp[0][len(p) :], resp[1][len(p) :]
        else:
            if not all(isinstance(r[c], str) for c in COLUMNS):
                raise TypeError(
                    f"record {i}: prompt is a string, so chosen and rejected must be strings too"
                )
            p = list(tok(r["prompt"])["input_ids"])
            eos = tok.eos_token_id
            c, rj = self._ids(r["chosen"]), self._ids(r["rejected"])
            if eos is not None:
                c = c if c[-1:] == [eos] else c + [eos]
                rj = rj if rj[-1:] == [eos] else rj + [eos]
        if len(p) > self.max_prompt_length:
            p = (
                p[-self.max_prompt_length :]
                if self.truncation == "keep_end"
                else p[: self.max_prompt_length]
            )
        room = self.max_length - len(p)
        c, rj = c[:room], rj[:room]
        for side, ids in (("chosen", c), ("rejected", rj)):
            if not ids:
                raise ValueError(
                    f"record {i}: the {side} response is empty after tokenization "
                    f"and truncation (max_length={self.max_length})"
                )
        return p, c, rj

    def __call__(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if isinstance(records, dict):
            raise TypeError(
                "the collator takes a LIST of records; got a dict (a single record, "
                "or a dict of columns such as dataset[:8]: use [dataset[i] for i in "
                "...] or dataset.select(...).to_list())"
            )
        if not records:
            raise ValueError("cannot collate an empty list of records")
        rows, masks, index, fps = [], [], [], []
        enc = []
        for j, r in enumerate(records):
            pos = r.get("idx", j) if isinstance(r, dict) else j
            enc.append(self.encode(r, pos))
            index.append(int(pos))
        for side in (1, 2):
            for p, *resp in enc:
                rows.append(p + resp[side - 1])
                masks.append([0] * len(p) + [1] * len(resp[side - 1]))
        for p, c, rj in enc:
            h = hashlib.sha1(json.dumps([p, c, rj]).encode()).hexdigest()[:16]
            fps.append(h)
        T = max(len(x) for x in rows)
        n = len(rows)
        ids = torch.full((n, T), self.pad_id, dtype=torch.long)
        att = torch.zeros((n, T), dtype=torch.long)
        comp = torch.zeros((n, T), dtype=torch.long)
        for b, (x, m) in enumerate(zip(rows, masks)):
            sl = slice(0, len(x)) if self.padding_side == "right" else slice(T - len(x), T)
            ids[b, sl] = torch.tensor(x)
            att[b, sl] = 1
            comp[b, sl] = torch.tensor(m)
        labels = ids.masked_fill(comp == 0, IGNORE_INDEX)
        return {
            "input_ids": ids,
            "attention_mask": att,
            "labels": labels,
            "completion_mask": comp,
            "index": torch.tensor(index),
            "fingerprint": fps,
        }
