"""The record every OR-Bench stage reads and writes, and its stable id.

One prompt is one :class:`ORBenchRecord`. ``id = sha1(prompt)[:16]`` (the same prompt always
has the same id, across runs and machines, so duplicates collapse). Prompts are stored as given:
control characters and non-UTF-8 text (lone surrogates) are kept, never stripped; the id hashes
lone surrogates with ``surrogatepass`` so every Python string has one.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

from icml25.orbench.categories import normalize_category

__all__ = ["SUBSETS", "ORBenchRecord", "record_id"]

#: the three released subsets (``bench-llm/or-bench`` configs ``or-bench-<subset>``)
SUBSETS = ("80k", "hard-1k", "toxic")


def record_id(prompt: str) -> str:
    """``sha1(prompt)[:16]``, hex; lone surrogates are hashed with ``surrogatepass``."""
    if not isinstance(prompt, str):
        raise TypeError(f"a prompt must be a string, got {type(prompt).__name__} {prompt!r:.60}")
    return hashlib.sha1(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass
class ORBenchRecord:
    """One prompt of OR-Bench.

    Attributes:
        prompt: the text sent to the model under test, as a single user turn.
        category: one of :data:`~icml25.orbench.CATEGORIES` (normalised on creation).
        subset: ``"80k"``, ``"hard-1k"``, ``"toxic"``, or a free name for a user's own set.
        id: :func:`record_id` of the prompt when left empty.
        toxic_seed: the toxic seed the prompt was rewritten from (pipeline output only).
    """

    prompt: str
    category: str
    subset: str = "80k"
    id: str = ""
    toxic_seed: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(
                f"a record's prompt must be a non-empty string, got {self.prompt!r:.60}"
            )
        self.category = normalize_category(self.category)
        if not isinstance(self.subset, str) or not self.subset:
            raise ValueError(f"subset must be a non-empty string, got {self.subset!r}")
        if not self.id:
            self.id = record_id(self.prompt)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ORBenchRecord:
        return cls(
            prompt=data["prompt"],
            category=data["category"],
            subset=data.get("subset") or "80k",
            id=data.get("id") or "",
            toxic_seed=data.get("toxic_seed"),
        )
