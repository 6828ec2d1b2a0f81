"""``JsonlStore``: the append-only results file of every resumable batch pipeline, and
``run_resumable``, the loop that fills it.

One JSON object per line. The key fields of a record say which item it belongs to; the last
record of a key wins. A record with an ``"error"`` field (``{"type", "message"}``) is an error
row: the item failed, and a rerun retries it only when asked (``retry_errors``). Each record is
flushed as it is written (``fsync`` every ``fsync_every`` records and on close), so a crash loses
at most the items in flight; a torn last line (a kill mid-write) is skipped on reading and
cut off before the next append (the file stays strict JSONL); any other line that is not a JSON
record is skipped with a warning, and rows of another pipeline (without this store's key fields)
refuse the file. Non-finite floats (NaN, inf) are written as
``null``, so every line is strict JSON that any reader accepts.

**What made a row.** A store opened with ``settings=`` (a JSON-able dict of everything that
determines a row besides the item itself: the backend's identity, sampling settings, prompt
templates, the pipeline's config, the parameters of filters, detectors and judges) stamps each
record with the settings' fingerprint (``"_settings"``) and keeps the settings of each fingerprint
in ``<path>.settings.json`` beside the file. Reopened with settings it has not seen, it refuses
(:class:`SettingsMismatch`, naming the fields that differ) or, with ``on_mismatch="separate"``,
keeps both runs' rows under separate keys (a file that already keeps them apart reopens with
either run's settings); it never returns another run's rows. The item's own content belongs in its key (a file's content hash,
:func:`content_hash`, not its name).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icml25.llm.base import BackendUnavailableError
from icml25.llm.fingerprint import (
    backend_identity,
    content_hash,
    describe,
    describe_function,
    function_fingerprint,
    json_safe,
    settings_differences,
    settings_fingerprint,
    wrapped_function_identity,
)

__all__ = [
    "BatchFailed",
    "BatchReport",
    "ItemError",
    "JsonlStore",
    "SettingsMismatch",
    "backend_identity",
    "content_hash",
    "describe",
    "describe_function",
    "function_fingerprint",
    "json_safe",
    "run_resumable",
    "settings_differences",
    "settings_fingerprint",
    "settings_mismatch",
    "wrapped_function_identity",
]

#: the record field holding the fingerprint of the settings that made the row
SETTINGS_FIELD = "_settings"
#: the file beside a store that maps each fingerprint to its full settings
SETTINGS_SUFFIX = ".settings.json"


class SettingsMismatch(ValueError):
    """A store holds rows made with other settings than the ones it was opened with."""


def settings_mismatch(
    store: JsonlStore, fingerprint: str | None, n_rows: int, *, whose: str = ""
) -> SettingsMismatch:
    """The :class:`SettingsMismatch` for ``n_rows`` rows of ``store``'s file made with the settings
    ``fingerprint`` (``None``: written without any), naming the fields that differ from the
    store's own; ``whose`` says whose rows they are (e.g. ``"of 'gpt-x' "``)."""
    remedy = store.remedy or (
        "Write to a new file, or keep both runs' rows under separate keys "
        "(on_mismatch='separate', keep_both=True, CLI: --keep-both)"
    )
    if fingerprint is None:
        return SettingsMismatch(
            f"{store.path} holds {n_rows} rows {whose}written without a settings fingerprint (by "
            "an older icml25, or without settings=): what made them is unknown, so they are not "
            f"reused. {remedy}"
        )
    if fingerprint not in store.settings_in_file:
        problem = getattr(store, "settings_file_problem", None) or "does not list them"
        return SettingsMismatch(
            f"{store.path} holds {n_rows} rows {whose}made with other settings (fingerprint "
            f"{fingerprint}, now {store.fingerprint}), but the settings file "
            f"{store.settings_path} {problem}, so the fields that differ cannot be named. {remedy}"
        )
    diff = settings_differences(store.settings_in_file[fingerprint], store.settings or {})
    return SettingsMismatch(
        f"{store.path} holds {n_rows} rows {whose}made with other settings (fingerprint "
        f"{fingerprint}, now {store.fingerprint}); they differ in: "
        f"{'; '.join(diff[:8]) or 'unknown fields'}. {remedy}"
    )


@dataclass
class ItemError:
    """One failed item: its key, the exception's type name and message."""

    key: tuple
    error_type: str
    message: str


class JsonlStore:
    """Append-only JSONL records keyed by ``key`` (one field name or several).

    Args:
        path: the file (created with its folder when missing).
        key: the field(s) whose values identify an item, e.g. ``"index"`` or ``("stage", "id")``.
        fsync_every: records between two ``fsync`` calls (each record is flushed at once).
        settings: everything besides the key that makes a row (backend identity, sampling,
            prompts, filters' parameters; :func:`describe` builds it). Every row is stamped with
            its fingerprint and the full settings are kept in ``<path>.settings.json``; rows made
            with other settings are never returned.
        on_mismatch: ``"refuse"`` (a file holding rows of other settings raises
            :class:`SettingsMismatch`, naming the fields that differ) or ``"separate"`` (both
            runs' rows stay in the file, each under its own fingerprint).
        remedy: what the mismatch error tells the user to do, for a pipeline that cannot keep
            both runs (default: write to a new file or keep both).
    """

    def __init__(
        self,
        path: str | Path,
        key: str | Sequence[str],
        *,
        fsync_every: int = 64,
        settings: Mapping[str, Any] | None = None,
        on_mismatch: str = "refuse",
        remedy: str | None = None,
    ):
        fields = (key,) if isinstance(key, str) else tuple(key)
        if not fields or not all(isinstance(f, str) and f for f in fields):
            raise ValueError(f"key must be a field name or a tuple of field names, got {key!r}")
        if SETTINGS_FIELD in fields:
            raise ValueError(f"{SETTINGS_FIELD!r} is the store's own field; use another key name")
        if isinstance(fsync_every, bool) or not isinstance(fsync_every, int) or fsync_every < 1:
            raise ValueError(f"fsync_every must be a positive integer, got {fsync_every!r}")
        if on_mismatch not in ("refuse", "separate"):
            raise ValueError(f"on_mismatch must be 'refuse' or 'separate', got {on_mismatch!r}")
        self.path = Path(path)
        self.key_fields = fields
        self.fsync_every = fsync_every
        self.settings = None if settings is None else json_safe(dict(settings))
        self.fingerprint = None if settings is None else settings_fingerprint(settings)
        self.on_mismatch = on_mismatch
        #: what a :class:`SettingsMismatch` tells the user to do (default: a new file or keep both)
        self.remedy = remedy
        #: the settings of every fingerprint found in the file (its header lines)
        self.settings_in_file: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._last: dict[tuple, dict[str, Any]] = {}
        self.n_torn = 0
        self._file = None
        self._unsynced = 0
        self._header_written = False
        #: why the settings file cannot say what made the file's rows: ``None`` (it can),
        #: ``"is missing"`` or ``"is unreadable (...)"``
        self.settings_file_problem: str | None = None
        if self.fingerprint is not None:
            self._read_settings_file()
        self._load()
        if self.fingerprint is not None:
            self._check_settings()

    @property
    def settings_path(self) -> Path:
        """``<path>.settings.json``: the full settings of every fingerprint in the file."""
        return self.path.with_name(self.path.name + SETTINGS_SUFFIX)

    def _read_settings_file(self) -> None:
        if not self.settings_path.exists():
            self.settings_file_problem = "is missing"
            return
        try:
            known = json.loads(self.settings_path.read_text(encoding="utf-8"))
            if not isinstance(known, dict):
                raise ValueError(f"it holds a {type(known).__name__}, not a JSON object")
        except (OSError, ValueError) as exc:
            self.settings_file_problem = f"is unreadable ({type(exc).__name__}: {exc})"
            return
        self.settings_in_file.update(known)

    def _check_settings(self) -> None:
        others: dict[Any, int] = {}
        for k in self._last:
            if k[-1] != self.fingerprint:
                others[k[-1]] = others.get(k[-1], 0) + 1
        self._header_written = self.fingerprint in self.settings_in_file
        if not others or self.on_mismatch == "separate" or self._header_written:
            # nothing else, both kept on purpose, or a file already keeping these settings' rows
            # beside others (a run with keep-both made it so): every row is keyed apart
            return
        fp, n = next(iter(others.items()))
        raise settings_mismatch(self, fp, n)

    # -- reading -------------------------------------------------------------------------------
    def _load(self) -> None:
        """Read the file: a torn last line (a kill mid-write) is skipped; other lines that are
        not JSON objects are skipped with a warning; rows of another pipeline (JSON objects
        without this store's key fields, or stamped with settings the settings file does not
        know) refuse the file with a ``ValueError``."""
        if not self.path.exists():
            return
        bad: list[int] = []
        lacking: list[int] = []
        found: set[str] = set()
        unknown: dict[str, int] = {}
        check_fp = self.fingerprint is not None and self.settings_file_problem is None
        with open(self.path, encoding="utf-8", errors="surrogateescape") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    if line.endswith("\n"):
                        bad.append(n)
                    self.n_torn += 1  # a torn (last) line or a damaged one
                    continue
                if not isinstance(rec, dict):
                    bad.append(n)
                    self.n_torn += 1
                    continue
                if any(f not in rec for f in self.key_fields):
                    lacking.append(n)
                    found.update(str(x) for x in rec)
                    continue
                fp = rec.get(SETTINGS_FIELD)
                if (
                    check_fp
                    and fp is not None
                    and fp != self.fingerprint
                    and fp not in self.settings_in_file
                ):
                    unknown[str(fp)] = unknown.get(str(fp), 0) + 1
                    continue
                try:
                    k = self.key_of(rec)
                    if self.fingerprint is not None and SETTINGS_FIELD not in rec:
                        k = (*k[:-1], None)  # a row written without settings: made by unknown ones
                    hash(k)
                except (ValueError, KeyError, TypeError):
                    bad.append(n)
                    self.n_torn += 1
                    continue
                self._last[k] = rec
        if lacking or unknown:
            raise self._foreign(lacking, found, unknown)
        if bad:
            import warnings

            shown = ", ".join(map(str, bad[:10])) + (
                f" and {len(bad) - 10} more" if len(bad) > 10 else ""
            )
            warnings.warn(
                f"{self.path}: line{'s' if len(bad) > 1 else ''} {shown} "
                f"{'are' if len(bad) > 1 else 'is'} not a JSON record (damaged); skipped",
                stacklevel=3,
            )

    def _foreign(self, lacking: list[int], found: set[str], unknown: dict[str, int]) -> ValueError:
        parts = []
        if lacking:
            fields = ", ".join(repr(f) for f in sorted(found)[:12]) + (
                ", ..." if len(found) > 12 else ""
            )
            parts.append(
                f"{len(lacking)} rows (from line {lacking[0]}) lack the key field(s) "
                f"{self.key_fields} this store expects (fields found: {fields})"
            )
        if unknown:
            parts.append(
                f"{sum(unknown.values())} rows carry settings fingerprint(s) "
                f"{', '.join(sorted(unknown))} that {self.settings_path} does not know"
            )
        return ValueError(
            f"{self.path} holds rows that are not this store's: {'; '.join(parts)}. Another "
            "pipeline's file? Write to another file (nothing was read from or written to it)."
        )

    def key_of(self, record: Mapping[str, Any]) -> tuple:
        """The key tuple of ``record`` (``KeyError`` naming the missing field)."""
        if not isinstance(record, Mapping):
            raise TypeError(f"a record must be a dict, got {type(record).__name__}")
        missing = [f for f in self.key_fields if f not in record]
        if missing:
            raise KeyError(f"record lacks the key field(s) {missing}: {str(record)[:80]}")
        k = tuple(_hashable(record[f]) for f in self.key_fields)
        if self.fingerprint is None:
            return k
        # rows of other settings never match: the fingerprint is part of every key (a record
        # not yet stamped, e.g. an item's key fields, is one of these settings)
        return (*k, record.get(SETTINGS_FIELD, self.fingerprint))

    def _as_key(self, key: Any) -> tuple:
        if isinstance(key, Mapping):
            return self.key_of(key)
        k = key if isinstance(key, tuple) else (key,)
        n = len(self.key_fields)
        if self.fingerprint is not None and len(k) == n + 1 and k[-1] == self.fingerprint:
            k = k[:n]  # a full key, as key_of returns it
        if len(k) != n:
            raise ValueError(f"a key of {self.path} has fields {self.key_fields}, got {key!r}")
        k = tuple(_hashable(x) for x in k)
        return k if self.fingerprint is None else (*k, self.fingerprint)

    def get(self, key: Any) -> dict[str, Any] | None:
        """The last record of ``key`` (a value, a tuple or a dict holding the key fields)."""
        return self._last.get(self._as_key(key))

    def is_done(self, key: Any) -> bool:
        """True when the item's last record is a result (not an error row)."""
        rec = self.get(key)
        return rec is not None and "error" not in rec

    def is_failed(self, key: Any) -> bool:
        rec = self.get(key)
        return rec is not None and "error" in rec

    def is_transient_failure(self, key: Any) -> bool:
        """The item's last row is an error the transport caused (the server was down or did not
        answer in time): a rerun asks it again without ``retry_errors``."""
        rec = self.get(key)
        err = rec.get("error") if rec is not None else None
        return isinstance(err, Mapping) and bool(err.get("transient"))

    def __contains__(self, key: Any) -> bool:
        return self.get(key) is not None

    def __len__(self) -> int:
        return sum(1 for k in self._last if self._mine(k))

    def records(self) -> list[dict[str, Any]]:
        """The last result record of every done item, in first-written order (with ``settings``:
        the items made with these settings only)."""
        return [r for k, r in self._last.items() if "error" not in r and self._mine(k)]

    def _mine(self, key: tuple) -> bool:
        return self.fingerprint is None or key[-1] == self.fingerprint

    def errors(self) -> list[ItemError]:
        """The items whose last record is an error row."""
        n = len(self.key_fields)
        return [
            ItemError(k[:n], str(r["error"].get("type", "")), str(r["error"].get("message", "")))
            for k, r in self._last.items()
            if "error" in r and isinstance(r["error"], Mapping) and self._mine(k)
        ]

    def pending(self, keys: Iterable[Any], *, retry_errors: bool = False) -> list[Any]:
        """The keys not done yet: never seen, failed on the transport, or failed in any way when
        ``retry_errors``."""
        out = []
        for key in keys:
            rec = self.get(key)
            if rec is None or (retry_errors and "error" in rec) or self.is_transient_failure(key):
                out.append(key)
        return out

    # -- writing -------------------------------------------------------------------------------
    def _open(self):
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fence = self.path.exists() and _cut_torn_last_line(self.path)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open
            if fence:
                self._file.write("\n")
        return self._file

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record (it must hold the key fields) and flush it; with ``settings`` it
        is stamped with their fingerprint."""
        record = dict(record)
        if self.fingerprint is not None:
            if record.get(SETTINGS_FIELD, self.fingerprint) != self.fingerprint:
                raise ValueError(
                    f"the record carries {SETTINGS_FIELD}={record[SETTINGS_FIELD]!r}, but this "
                    f"store writes rows of {self.fingerprint}"
                )
            record[SETTINGS_FIELD] = self.fingerprint
        k = self.key_of(record)
        line = json.dumps(json_safe(record), ensure_ascii=False, allow_nan=False)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: keep it as a JSON escape, never drop it
            line = json.dumps(json_safe(record), ensure_ascii=True, allow_nan=False)
        with self._lock:
            f = self._open()
            if self.fingerprint is not None and not self._header_written:
                if self.settings_file_problem and self.settings_path.exists():
                    # an unreadable settings file is kept aside, never overwritten
                    aside = self.settings_path.with_name(self.settings_path.name + ".unreadable")
                    os.replace(self.settings_path, aside)
                self.settings_in_file[self.fingerprint] = self.settings
                tmp = self.settings_path.with_name(self.settings_path.name + ".tmp")
                tmp.write_text(json.dumps(self.settings_in_file, indent=1, default=repr))
                os.replace(tmp, self.settings_path)
                self._header_written = True
            f.write(line + "\n")
            f.flush()
            self._unsynced += 1
            if self._unsynced >= self.fsync_every:
                os.fsync(f.fileno())
                self._unsynced = 0
            self._last[k] = json.loads(line)

    def append_error(self, key: Any, exc: BaseException, **extra: Any) -> ItemError:
        """Write an error row for ``key`` (``extra`` fields, e.g. the input, go with it)."""
        k = self._as_key(key)
        rec = dict(zip(self.key_fields, k))
        rec.update(extra)
        k = k[: len(self.key_fields)]
        rec = {f: v for f, v in rec.items() if f != SETTINGS_FIELD}
        err = ItemError(k, type(exc).__name__, str(exc)[:2000])
        rec["error"] = {"type": err.error_type, "message": err.message}
        if getattr(exc, "transient", False) is True:  # the transport failed, not the item
            rec["error"]["transient"] = True
        self.append(rec)
        return err

    def sync(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._unsynced = 0

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None

    def __enter__(self) -> JsonlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cut_torn_last_line(path: Path) -> bool:
    """Make ``path`` end with a complete line before an append: a last line without its
    newline that is not JSON (a kill mid-write) is cut off, back to the end of the last complete
    line (complete lines are never touched); a complete JSON line that only lacks its newline is
    kept. True when the append must start with a newline."""
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return False
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return False
        pos, tail = end, b""
        while pos > 0 and b"\n" not in tail:  # back to the start of the last line
            step = min(1 << 16, pos)
            pos -= step
            f.seek(pos)
            tail = f.read(step) + tail
        cut = pos + tail.rfind(b"\n") + 1  # 0 when the file is one line
        f.seek(cut)
        last = f.read()
        try:
            json.loads(last.decode("utf-8"))
        except ValueError:
            f.truncate(cut)
            return False
        return True


def _hashable(v: Any) -> Any:
    return tuple(_hashable(x) for x in v) if isinstance(v, list) else v


@dataclass
class BatchReport:
    """What one :func:`run_resumable` call did."""

    n_items: int
    n_skipped: int  # done before this call (earlier failures count in ``failures`` only)
    n_ok: int  # finished in this call
    failures: list[ItemError] = field(default_factory=list)  # failed, in this call or before
    seconds: float = 0.0

    @property
    def n_failed(self) -> int:
        return len(self.failures)

    def summary(self) -> str:
        text = (
            f"{self.n_items} items: {self.n_ok} done now, {self.n_skipped} done before, "
            f"{self.n_failed} failed"
        )
        if self.failures:
            first = self.failures[0]
            text += f" (first: {first.key} {first.error_type}: {first.message[:120]})"
        return text


class BatchFailed(RuntimeError):
    """Raised by a pipeline run with ``errors="raise"`` after every item was tried and saved:
    ``report`` says what failed; ``results`` holds what succeeded (``None`` elsewhere)."""

    def __init__(self, report: BatchReport, results: list[Any]) -> None:
        super().__init__(
            report.summary() + "; the error rows are in the results file, rerun with "
            "retry_errors=True (CLI: --retry-errors) to retry them"
        )
        self.report, self.results = report, results


def run_resumable(
    items: Sequence[Any],
    work: Callable[[Any], Mapping[str, Any]],
    store: JsonlStore,
    *,
    key: Callable[[int, Any], Mapping[str, Any]],
    concurrency: int = 4,
    retry_errors: bool = False,
    progress: bool | None = None,
    desc: str = "items",
    redo: Callable[[Mapping[str, Any]], bool] | None = None,
) -> BatchReport:
    """Run ``work(item)`` for every item not yet done in ``store``, ``concurrency`` at a time.

    ``key(i, item)`` gives the key fields (and anything else to keep with the record, e.g. the
    input; every item needs its own key); ``work`` returns the rest of the record as a dict. A
    result that is not a dict, clashes with the key or cannot be written as JSON is an error row
    for that item, like an exception. A success is appended at once; an exception
    becomes an error row for that item only (the others go on). Items whose last record is an
    error are skipped unless ``retry_errors``, except an error the transport caused (an
    exception with ``transient=True``: the server was down), always run again; a done item is run again when ``redo(its last
    record)`` is true (e.g. it was made with other settings). Returns a :class:`BatchReport`.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be a positive integer, got {concurrency!r}")
    t0 = time.perf_counter()
    heads = _item_heads(items, key, store)
    todo = [
        i
        for i, h in enumerate(heads)
        if store.get(h) is None
        or (retry_errors and store.is_failed(h))
        or store.is_transient_failure(h)
        or (redo is not None and store.is_done(h) and redo(store.get(h)))
    ]
    todo_set = set(todo)
    n_skipped = sum(1 for i, h in enumerate(heads) if i not in todo_set and store.is_done(h))
    batch = _Batch(items, work, store, heads)
    batch.run(todo, concurrency, desc, progress)
    if batch.unavailable:
        raise batch.unavailable_error(len(todo)) from batch.unavailable[0]
    wanted = {store.key_of(h)[: len(store.key_fields)] for h in heads}
    failures = [e for e in store.errors() if e.key in wanted]
    return BatchReport(len(items), n_skipped, batch.n_ok, failures, time.perf_counter() - t0)


def _item_heads(
    items: Sequence[Any], key: Callable[[int, Any], Mapping[str, Any]], store: JsonlStore
) -> list[dict[str, Any]]:
    """``key(i, item)`` of every item, checked: a dict, and no two items with one key."""
    heads = []
    for i, item in enumerate(items):
        h = key(i, item)
        if not isinstance(h, Mapping):
            raise TypeError(
                f"key(i, item) must return a dict holding the key field(s) {store.key_fields}, "
                f"got {type(h).__name__}: {h!r:.60}"
            )
        heads.append(dict(h))
    keys = [store.key_of(h) for h in heads]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"two items share the key {dup}: every item needs its own key")
    return heads


@dataclass
class _Batch:
    """The items of one :func:`run_resumable` call in flight: each answer is written as it
    arrives (a record, or an error row for that item); a backend that goes down cancels the
    items not started, without error rows."""

    items: Sequence[Any]
    work: Callable[[Any], Mapping[str, Any]]
    store: JsonlStore
    heads: list[dict[str, Any]]
    n_ok: int = 0
    written: set[int] = field(default_factory=set)
    unavailable: list[BaseException] = field(default_factory=list)
    futures: list[Any] = field(default_factory=list)

    def one(self, i: int) -> tuple[int, dict[str, Any] | None, BaseException | None]:
        """Item ``i``'s record (its key fields added) or the exception it raised."""
        try:
            rec = self.work(self.items[i])
            if not isinstance(rec, Mapping):
                raise TypeError(f"work(item) must return a dict, got {type(rec).__name__}")
            head = self.heads[i]
            clash = [f for f in self.store.key_fields if f in rec and rec[f] != head[f]]
            if clash:
                raise ValueError(f"work(item) returned the key field(s) {clash} with other values")
            record = {**rec, **head}
            json.dumps(json_safe(record), allow_nan=False)  # refuse it here, not at write time
            return i, record, None
        except Exception as exc:  # noqa: BLE001 - recorded as this item's error row
            return i, None, exc

    def write(self, fut: Any) -> None:
        i, rec, exc = fut.result()
        self.written.add(i)
        if exc is None:
            self.store.append(rec)
            self.n_ok += 1
        elif isinstance(exc, BackendUnavailableError):
            # the backend is down (a circuit breaker opened): not this item's fault, so no error
            # row; the items not started are cancelled and a rerun asks them again
            self.unavailable.append(exc)
            for f in self.futures:
                f.cancel()
        else:
            head = self.heads[i]
            extra = {k: v for k, v in head.items() if k not in self.store.key_fields}
            self.store.append_error(head, exc, **extra)

    def run(self, todo: list[int], concurrency: int, desc: str, progress: bool | None) -> None:
        from icml25.progress import track

        pool = ThreadPoolExecutor(max_workers=min(concurrency, max(1, len(todo))))
        try:
            self.futures.extend(pool.submit(self.one, i) for i in todo)
            disable = None if progress is None else not progress
            for fut in track(as_completed(self.futures), desc, total=len(todo), disable=disable):
                if not fut.cancelled():
                    self.write(fut)
        except BaseException:
            # a kill (KeyboardInterrupt, a BaseException from work) stops sending requests at
            # once and keeps every answer that already arrived
            pool.shutdown(wait=False, cancel_futures=True)
            for fut, i in zip(self.futures, todo):
                if fut.done() and not fut.cancelled() and i not in self.written:
                    with contextlib.suppress(BaseException):  # the item that raised stays undone
                        self.write(fut)
            self.store.sync()
            raise
        pool.shutdown()
        self.store.sync()

    def unavailable_error(self, n_todo: int) -> BackendUnavailableError:
        """The error naming what a rerun asks again: the items never answered and those that
        failed on the transport (transient error rows); an item the server refused stays
        failed."""
        refused = sum(
            1
            for i in self.written
            if self.store.is_failed(self.heads[i])
            and not self.store.is_transient_failure(self.heads[i])
        )
        return BackendUnavailableError(
            f"{self.unavailable[0]} [{self.n_ok} of {n_todo} items done in this run were written; "
            f"{n_todo - self.n_ok - refused} not done are asked again by a rerun"
            + (f", {refused} refused by the server need retry_errors" if refused else "")
            + "]"
        )
