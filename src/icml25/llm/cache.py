"""``CachedChat``: a persistent response cache, so a killed pipeline resumes without repeating calls.

Each request is keyed by the backend's identity, the messages and every sampling argument. The
identity is the backend's ``cache_identity()`` where it has one (a local model adds a fingerprint
of its weights, so a retrained model never replays another's answers), else its ``name``. Identical
sampled requests (``temperature > 0`` or the provider's default) are distinct samples, not repeats: the k-th identical sampled
request of a process gets the k-th cached answer, so a re-run replays the same answers in the same
places and only new requests reach the backend. Answers are committed to SQLite (standard library)
as each one arrives: a crash loses at most the requests in flight.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from icml25.llm.base import BaseChat, ChatBackend, Completion, RequestResult, SamplingParams

__all__ = ["CachedChat"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    request TEXT NOT NULL,
    completions TEXT NOT NULL,
    created REAL NOT NULL DEFAULT (julianday('now'))
)
"""


class CachedChat(BaseChat):
    """Wrap ``backend`` with a SQLite cache at ``path`` (created if missing).

    Attributes:
        hits / misses: requests answered from the cache / sent to the backend by this instance.
    """

    def __init__(self, backend: ChatBackend, path: str | Path) -> None:
        if not hasattr(backend, "chat"):
            raise TypeError(f"CachedChat needs a chat backend, got {type(backend).__name__}")
        self.backend = backend
        self.name = getattr(backend, "name", type(backend).__name__)
        self.concurrency = int(getattr(backend, "concurrency", 16))
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)
        self._lock = threading.Lock()
        self._occurrences: Counter[str] = Counter()
        self.hits = 0
        self.misses = 0

    def identity(self) -> str:
        """The backend identity in the cache keys (see the module docstring)."""
        ident = getattr(self.backend, "cache_identity", None)
        return ident() if callable(ident) else self.name

    def cache_identity(self) -> str:
        return self.identity()

    def _key(self, messages: list[dict[str, Any]], params: SamplingParams) -> tuple[str, str]:
        request = json.dumps(
            {"backend": self.identity(), "messages": messages, **params.as_dict()},
            sort_keys=True,
            ensure_ascii=False,
        )
        base = hashlib.sha256(request.encode()).hexdigest()
        if params.sampled:
            with self._lock:
                k = self._occurrences[base]
                self._occurrences[base] += 1
            return f"{base}#{k}", request
        return base, request

    def _lookup(self, key: str) -> list[Completion] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT completions FROM responses WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            self.hits += 1
        return [Completion.from_dict(c) for c in json.loads(row[0])]

    def _store(self, key: str, request: str, completions: list[Completion]) -> None:
        stored = json.dumps([c.to_dict() for c in completions], allow_nan=False)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses (key, backend, request, completions) "
                "VALUES (?, ?, ?, ?)",
                (key, self.name, request, stored),
            )
            self.misses += 1

    def _complete(self, messages: list[dict[str, Any]], params: SamplingParams) -> list[Completion]:
        key, request = self._key(messages, params)
        cached = self._lookup(key)
        if cached is not None:
            return cached
        completions = _completions_of(self.backend, messages, params)
        self._store(key, request, completions)
        return completions

    def _complete_many(
        self, requests: list[list[dict[str, Any]]], params: SamplingParams
    ) -> list[RequestResult]:
        if not getattr(self.backend, "native_batching", False):
            # threads, each answer stored on arrival, each failure returned in its place
            return super()._complete_many(requests, params)
        # A local model batches: look everything up, send the misses in chunks, store each chunk.
        keyed = [self._key(m, params) for m in requests]
        out: list[RequestResult | None] = [self._lookup(key) for key, _ in keyed]
        misses = [i for i, r in enumerate(out) if r is None]
        chunk = max(1, int(getattr(self.backend, "batch_size", 16)))
        for start in range(0, len(misses), chunk):
            idx = misses[start : start + chunk]
            answers = self.backend._complete_many([requests[i] for i in idx], params)
            for i, completions in zip(idx, answers):
                if not isinstance(completions, BaseException):
                    self._store(*keyed[i], completions)
                out[i] = completions
        return out  # type: ignore[return-value]

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> CachedChat:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _completions_of(
    backend: ChatBackend, messages: list[dict[str, Any]], params: SamplingParams
) -> list[Completion]:
    kwargs = params.as_dict()
    if hasattr(backend, "complete"):
        return list(backend.complete(messages, **kwargs))
    kwargs.pop("logprobs", None), kwargs.pop("top_logprobs", None)
    return [Completion(t) for t in backend.chat(messages, **kwargs)]
