"""Behaviours and prompt sources from the files users have (AdvBench's CSV, JSONL, JSON, Parquet,
a ``datasets`` folder or ``Dataset``, a list of dicts or strings)."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["load_texts"]


def _rows(source: Any) -> list[Any]:
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        if not p.exists():
            raise FileNotFoundError(f"no such file or folder: {p}")
        if p.is_dir():
            import datasets

            return list(datasets.load_from_disk(str(p)))
        suffix = p.suffix.lower()
        if suffix == ".csv":
            with open(p, newline="", encoding="utf-8-sig") as f:
                return list(csv.DictReader(f))
        if suffix == ".jsonl":
            out = []
            for n, line in enumerate(p.read_text(encoding="utf-8-sig").splitlines(), 1):
                if line.strip():
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"{p}, line {n}: not valid JSON ({exc.msg})") from None
            return out
        if suffix == ".json":
            data = json.loads(p.read_text(encoding="utf-8-sig"))
            return data if isinstance(data, list) else list(data.get("data", []))
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(p).to_pylist()
        raise ValueError(f"{p}: use .csv, .jsonl, .json, .parquet or a datasets folder")
    if hasattr(source, "to_list") and not isinstance(source, list):
        return list(source.to_list())
    if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
        return list(source)
    raise TypeError(f"source must be a path, a Dataset or a list, got {type(source).__name__}")


def load_texts(source: Any, column: str | None = None) -> list[str]:
    """The strings of one column (or of a list of strings). For AdvBench's
    ``harmful_behaviors.csv`` the string-elicitation behaviours are ``column="target"`` ("Sure,
    here is ...") and the requests ``column="goal"``. Default column: the first of ``behavior``,
    ``target``, ``prompt``, ``text``."""
    rows = _rows(source)
    if not rows:
        raise ValueError(f"{source!r:.80} holds no rows")
    if all(isinstance(r, str) for r in rows):
        out = rows
    else:
        if not all(isinstance(r, dict) for r in rows):
            raise TypeError("rows must be all strings or all dicts")
        cols = list(rows[0])
        col = column or next(
            (c for c in ("behavior", "target", "prompt", "text") if c in cols), None
        )
        if col is None or col not in cols:
            raise ValueError(
                f"no column {column or '(behavior/target/prompt/text)'}; the rows have {cols}"
            )
        out = []
        for i, r in enumerate(rows):
            v = r.get(col)
            if not isinstance(v, str):
                raise ValueError(f"row {i}: {col}={v!r} is not a string")
            out.append(v)
    empty = [i for i, t in enumerate(out) if not t.strip()]
    if empty:
        raise ValueError(f"row {empty[0]} is an empty string")
    return out
