"""Reading and writing OR-Bench data (Cui et al., ICML 2025).

- :func:`load_orbench`: the released ``bench-llm/or-bench`` subsets (``or-bench-80k``,
  ``or-bench-hard-1k``, ``or-bench-toxic``; columns ``prompt``, ``category``) from a local CSV,
  JSONL or Parquet file, a directory holding the official file names, a ``datasets.save_to_disk``
  directory, or, only with ``hub=True``, the Hugging Face Hub.
- :func:`save_records`: ``.jsonl``, ``.parquet`` or ``.csv``, read back by :func:`load_orbench`.

XSTest prompts are read by :mod:`icml25.orbench.xstest`; an lm-evaluation-harness task is
written by :mod:`icml25.orbench.lm_eval_task`.

Prompts are kept exactly as stored: control characters and lone surrogates (JSON ``\\ud800``
escapes) are never stripped. Only JSONL (written with ``ensure_ascii=True``) can hold a lone
surrogate; CSV and Parquet need UTF-8 and refuse such a prompt with an error naming it.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from icml25.orbench.categories import CATEGORIES, normalize_category
from icml25.orbench.records import SUBSETS, ORBenchRecord

__all__ = [
    "HUB_DATASET",
    "SUBSET_ALIASES",
    "load_orbench",
    "normalize_subset",
    "official_file_name",
    "save_records",
]

PathLike = str | os.PathLike

#: the Hugging Face dataset of the paper's released data (configs ``or-bench-<subset>``)
HUB_DATASET = "bench-llm/or-bench"

#: accepted spellings of the three subsets (after lower-casing, ``_``/space -> ``-`` and dropping
#: a leading ``or-bench-``), mapped to the canonical names of :data:`SUBSETS`
SUBSET_ALIASES: dict[str, str] = {
    "80k": "80k",
    "hard-1k": "hard-1k",
    "hard1k": "hard-1k",
    "hard": "hard-1k",
    "toxic": "toxic",
}

_READ_SUFFIXES = (".csv", ".jsonl", ".json", ".parquet")
_WRITE_SUFFIXES = (".jsonl", ".parquet", ".csv")
_COLUMNS = ("id", "prompt", "category", "subset", "toxic_seed")
_PYARROW_HINT = "Parquet needs pyarrow: `pip install pyarrow` (or use .jsonl / .csv)"


def normalize_subset(name: object) -> str:
    """The canonical subset name (``"80k"``, ``"hard-1k"``, ``"toxic"``) of ``name``.

    Case, ``_``/space for ``-`` and the ``or-bench-`` prefix of the Hub configs are forgiven
    (``"or-bench-hard-1k"``, ``"Hard_1K"``, ``"hard1k"``, ``"hard"`` all give ``"hard-1k"``).

    Raises:
        ValueError: an unknown name; the message lists the valid ones.
    """
    if not isinstance(name, str):
        raise TypeError(f"subset must be a string, got {type(name).__name__} {name!r}")
    key = re.sub(r"[\s_]+", "-", name.strip().lower())
    key = key.removeprefix("or-bench-")
    if key not in SUBSET_ALIASES:
        raise ValueError(
            f"unknown OR-Bench subset {name!r}; valid: {', '.join(SUBSETS)} "
            f"(also {', '.join(a for a in SUBSET_ALIASES if a not in SUBSETS)}, "
            f"with or without the 'or-bench-' prefix)"
        )
    return SUBSET_ALIASES[key]


def official_file_name(subset: str, suffix: str = ".csv") -> str:
    """The released file name of ``subset``: ``or-bench-80k.csv``, ``or-bench-hard-1k.csv``,
    ``or-bench-toxic.csv`` (with ``suffix`` replacing ``.csv``)."""
    return f"or-bench-{normalize_subset(subset)}{suffix}"


# -- reading rows ---------------------------------------------------------------------------------


@dataclass
class _Table:
    columns: list[str]
    rows: Iterable[tuple[str, dict[str, Any]]]  # (location such as "row 3" / "line 3", row)


def _read_csv(path: Path) -> _Table:
    # utf-8-sig: a spreadsheet's byte-order mark must not become part of the first column name
    try:
        # newline="": no universal-newline translation, so a "\r" inside a prompt survives
        with path.open(encoding="utf-8-sig", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 ({e}); re-encode it as UTF-8") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = list(reader.fieldnames or [])
    return _Table(columns, ((f"row {i}", row) for i, row in enumerate(reader, start=1)))


def _read_jsonl(path: Path) -> _Table:
    raw = path.read_bytes()
    if raw.lstrip()[:1] == b"[":  # a .json file holding one array of objects
        try:
            items = json.loads(raw.decode("utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} is not valid UTF-8 JSON: {e}") from None
        if not isinstance(items, list):
            raise ValueError(
                f"{path}: expected a JSON array of objects, got {type(items).__name__}"
            )
        rows = [(f"item {i}", item) for i, item in enumerate(items, start=1)]
    else:
        rows = []
        # split at b"\n" only: U+2028, U+0085 and friends may appear raw inside a string
        for i, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                rows.append(
                    (f"line {i}", json.loads(line.decode("utf-8-sig" if i == 1 else "utf-8")))
                )
            except UnicodeDecodeError as e:
                raise ValueError(f"{path} line {i} is not UTF-8 ({e}); re-encode it") from None
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {i} is not valid JSON: {e}") from None
    for loc, row in rows:
        if not isinstance(row, dict):
            raise ValueError(f"{path} {loc}: expected a JSON object, got {type(row).__name__}")
    columns = list(dict.fromkeys(k for _, row in rows for k in row))
    return _Table(columns, rows)


def _import_pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise ImportError(_PYARROW_HINT) from e
    return pq


def _read_parquet(path: Path) -> _Table:
    table = _import_pyarrow_parquet().read_table(path)
    return _Table(
        list(table.column_names),
        ((f"row {i}", row) for i, row in enumerate(table.to_pylist(), start=1)),
    )


def _is_saved_dataset(path: Path) -> bool:
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def _read_saved_dataset(path: Path) -> _Table:
    try:
        import datasets
    except ImportError as e:
        raise ImportError(
            f"{path} is a `datasets.save_to_disk` directory; reading it needs `pip install datasets`"
        ) from e
    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds)
        if "train" in ds:
            ds = ds["train"]
        elif len(splits) == 1:
            ds = ds[splits[0]]
        else:
            raise ValueError(f"{path} holds splits {splits}; expected 'train' or a single split")
    return _Table(list(ds.column_names), ((f"row {i}", r) for i, r in enumerate(ds, start=1)))


def _read_table(path: Path) -> _Table:
    if path.is_dir():
        if _is_saved_dataset(path):
            return _read_saved_dataset(path)
        raise ValueError(f"{path} is a directory but not a `datasets.save_to_disk` one")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path)
    if suffix in (".jsonl", ".json"):
        return _read_jsonl(path)
    if suffix == ".parquet":
        return _read_parquet(path)
    raise ValueError(
        f"cannot read {path}: unsupported suffix {path.suffix!r}; "
        f"supported: {', '.join(_READ_SUFFIXES)}, or a directory"
    )


def _resolve_in_directory(directory: Path, subset: str) -> Path:
    stem = f"or-bench-{subset}"
    for candidate in [directory / f"{stem}{s}" for s in _READ_SUFFIXES] + [directory / stem]:
        if candidate.is_file() or (candidate.is_dir() and _is_saved_dataset(candidate)):
            return candidate
    found = sorted(p.name for p in directory.iterdir())[:20]
    raise FileNotFoundError(
        f"no {subset!r} subset in {directory}: expected one of "
        f"{', '.join(stem + s for s in _READ_SUFFIXES)} or a save_to_disk folder {stem}/; "
        f"found {found}"
    )


def _stem_subset(path: Path) -> str | None:
    name = path.name.lower()
    for subset in SUBSETS:
        stem = f"or-bench-{subset}"
        if name == stem or any(name == stem + s for s in _READ_SUFFIXES):
            return subset
    return None


# -- OR-Bench -------------------------------------------------------------------------------------


def _records_from_table(table: _Table, source: str, subset: str) -> list[ORBenchRecord]:
    if not table.columns:
        raise ValueError(f"{source} is empty (no header row, no records): no prompts to load")
    if "prompt" not in table.columns or "category" not in table.columns:
        missing = [c for c in ("prompt", "category") if c not in table.columns]
        raise ValueError(
            f"{source} lacks the column(s) {missing} of the released OR-Bench files "
            f"(prompt, category); columns found: {table.columns}"
        )
    records: list[ORBenchRecord] = []
    first_category: dict[str, str] = {}
    empty: list[str] = []
    n_dup = n_dup_other_category = 0
    for loc, row in table.rows:
        prompt = row.get("prompt")
        if prompt is None or (isinstance(prompt, str) and not prompt.strip()):
            empty.append(loc)
            continue
        if not isinstance(prompt, str):
            raise ValueError(
                f"{source} {loc}: the prompt must be a string, got {type(prompt).__name__} "
                f"{prompt!r:.60}"
            )
        raw_category = row.get("category")
        try:
            category = normalize_category(raw_category)
        except (TypeError, ValueError):
            raise ValueError(
                f"{source} {loc}: unknown category {raw_category!r}; valid categories: "
                f"{', '.join(CATEGORIES)}"
            ) from None
        if prompt in first_category:
            n_dup += 1
            n_dup_other_category += first_category[prompt] != category
            continue
        first_category[prompt] = category
        records.append(
            ORBenchRecord(
                prompt=prompt,
                category=category,
                subset=row.get("subset") or subset,
                id=str(row.get("id") or ""),
                toxic_seed=row.get("toxic_seed") or None,
            )
        )
    if empty:
        shown = ", ".join(empty[:5]) + (", ..." if len(empty) > 5 else "")
        warnings.warn(
            f"{source}: skipped {len(empty)} row(s) with an empty prompt ({shown})",
            stacklevel=3,
        )
    if n_dup:
        warnings.warn(
            f"{source}: {n_dup} duplicate prompt(s) dropped, keeping the first occurrence "
            f"({n_dup_other_category} of them had a different category)",
            stacklevel=3,
        )
    if not records:
        raise ValueError(f"{source} holds no prompts")
    return records


def _load_from_hub(subset: str, cache_dir: Path | None) -> list[ORBenchRecord]:
    config = f"or-bench-{subset}"
    try:
        import datasets
    except ImportError as e:
        raise ImportError(
            f"load_orbench(hub=True) needs the `datasets` package (`pip install datasets`); "
            f"or download {official_file_name(subset)} from https://huggingface.co/datasets/"
            f"{HUB_DATASET} and pass its path"
        ) from e
    kwargs: dict[str, Any] = {"split": "train"}
    if cache_dir is not None:
        kwargs["cache_dir"] = str(cache_dir)
    try:
        ds = datasets.load_dataset(HUB_DATASET, config, **kwargs)
    except Exception as e:
        raise RuntimeError(
            f"could not load {HUB_DATASET} config {config!r} from the Hugging Face Hub "
            f"({type(e).__name__}: {e}). Offline (no network, or HF_HUB_OFFLINE / "
            f"HF_DATASETS_OFFLINE set)? Download {official_file_name(subset)} and pass its path."
        ) from e
    columns = list(getattr(ds, "column_names", None) or (ds[0].keys() if len(ds) else []))
    table = _Table(columns, ((f"row {i}", dict(r)) for i, r in enumerate(ds, start=1)))
    return _records_from_table(table, f"{HUB_DATASET}:{config}", subset)


def load_orbench(
    path: PathLike | None, subset: str = "hard-1k", *, hub: bool = False
) -> list[ORBenchRecord]:
    """The prompts of one OR-Bench subset (paper Sec. 3: OR-Bench-80K, -Hard-1K, -Toxic).

    Args:
        path: a ``.csv``, ``.jsonl``/``.json`` or ``.parquet`` file with the released columns
            ``prompt`` and ``category`` (other columns are ignored, except ``id``,
            ``toxic_seed`` and ``subset``, which are kept when present); a directory holding
            the released file names (``or-bench-hard-1k.csv`` etc., or the ``.jsonl``/
            ``.json``/``.parquet`` variant, or a ``datasets.save_to_disk`` folder
            ``or-bench-hard-1k/``; first found in that order); or a ``save_to_disk`` directory
            itself. With ``hub=True``: the Hub cache directory, or ``None``.
        subset: ``"80k"``, ``"hard-1k"`` or ``"toxic"``, or an alias in
            :data:`SUBSET_ALIASES` (``"or-bench-hard-1k"``, ``"hard"``, ...). It picks the file
            of a directory or the Hub config, and labels rows without a ``subset`` column.
        hub: download ``datasets.load_dataset("bench-llm/or-bench", f"or-bench-{subset}")``.
            Nothing is downloaded unless this is ``True``.

    Returns:
        One :class:`ORBenchRecord` per distinct prompt, in file order, prompts exactly as stored.
        Rows with an empty prompt are skipped with a warning giving their count and rows;
        a prompt repeated keeps its first row (and category), with a warning counting the
        dropped repeats (collisions across categories counted separately).

    Raises:
        ValueError: an unknown subset; a file lacking ``prompt`` or ``category`` (the message
            lists the columns found); a row with an unknown category (naming the row, the
            value and the ten valid categories); a file name of the released data that belongs
            to another subset than ``subset``; no prompts at all.
        FileNotFoundError: ``path`` does not exist, or a directory lacks the subset's file.
        ImportError: Parquet without pyarrow, ``hub=True`` without ``datasets``.
        RuntimeError: ``hub=True`` and the Hub cannot be reached.
    """
    subset = normalize_subset(subset)
    if hub:
        return _load_from_hub(subset, Path(path) if path is not None else None)
    if path is None:
        raise ValueError(
            f"load_orbench needs the path of a local file or directory, or hub=True to download "
            f"{HUB_DATASET}"
        )
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist (expected an OR-Bench file or directory)")
    if p.is_dir() and not _is_saved_dataset(p):
        p = _resolve_in_directory(p, subset)
    else:
        named = _stem_subset(p)
        if named is not None and named != subset:
            raise ValueError(
                f"{p.name} is the released {named!r} subset but subset={subset!r} was passed; "
                f"pass subset={named!r}"
            )
    return _records_from_table(_read_table(p), str(p), subset)


# -- writing --------------------------------------------------------------------------------------


def _check_utf8(records: Sequence[ORBenchRecord], fmt: str) -> None:
    for r in records:
        for name in ("prompt", "toxic_seed"):
            value = getattr(r, name)
            if value is None:
                continue
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ValueError(
                    f"record {r.id}: its {name} holds {value[e.start : e.end]!r} (a lone "
                    f"surrogate), which {fmt} cannot store (it needs UTF-8); save as .jsonl, "
                    f"which keeps it as a JSON escape"
                ) from None


def save_records(records: Iterable[ORBenchRecord], path: PathLike) -> Path:
    """Write ``records`` to ``path`` by its suffix, so :func:`load_orbench` reads them back equal.

    - ``.jsonl``: one JSON object per line with ``ensure_ascii=True``, so every Python string,
      lone surrogates included, survives.
    - ``.parquet``: string columns via pyarrow (a lazy import).
    - ``.csv``: the released files' format, plus the ``id``/``subset``/``toxic_seed`` columns
      (an absent ``toxic_seed`` is an empty cell).

    Columns: ``id, prompt, category, subset, toxic_seed``. The file is written beside its
    destination and renamed into place, so a crash never leaves half a file.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: no records, an unsupported suffix, or (Parquet, CSV) a prompt with a lone
            surrogate, which only JSONL can store.
        TypeError: an item is not an :class:`ORBenchRecord`.
    """
    records = list(records)
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in _WRITE_SUFFIXES:
        raise ValueError(
            f"cannot write {p}: unsupported suffix {p.suffix!r}; supported: {', '.join(_WRITE_SUFFIXES)}"
        )
    if not records:
        raise ValueError("save_records got no records")
    for r in records:
        if not isinstance(r, ORBenchRecord):
            raise TypeError(f"save_records takes ORBenchRecord items, got {type(r).__name__}")
    rows = [{c: getattr(r, c) for c in _COLUMNS} for r in records]
    tmp = p.with_name(p.name + ".tmp")
    p.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".jsonl":
        with tmp.open("w", encoding="ascii", newline="\n") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=True) + "\n")
    elif suffix == ".parquet":
        _check_utf8(records, "Parquet")
        pq = _import_pyarrow_parquet()
        import pyarrow as pa

        schema = pa.schema([(c, pa.string()) for c in _COLUMNS])
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    else:
        _check_utf8(records, "CSV")
        with tmp.open("w", encoding="utf-8", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(_COLUMNS))
            writer.writeheader()
            writer.writerows({**row, "toxic_seed": row["toxic_seed"] or ""} for row in rows)
    os.replace(tmp, p)
    return p
