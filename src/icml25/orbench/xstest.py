"""XSTest prompts (Röttger et al., NAACL 2024; ``xstest_prompts.csv`` of
``paul-rottger/exaggerated-safety``), the hand-written over-refusal test OR-Bench compares with
(paper Sec. 2 and 5), read from the CSV a user has on disk.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from icml25.orbench.dataset import PathLike, _read_table
from icml25.orbench.records import record_id

__all__ = ["XSTestPrompt", "load_xstest"]


@dataclass
class XSTestPrompt:
    """One XSTest prompt (Röttger et al., NAACL 2024; ``xstest_prompts.csv`` of
    ``paul-rottger/exaggerated-safety``).

    XSTest's 18 prompt types (``homonyms``, ``safe_contexts``, ``contrast_privacy``, ...) are
    not OR-Bench's ten categories, so they are kept as ``type`` rather than forced into an
    :class:`ORBenchRecord`. The class has the attributes an evaluation reads from a record
    (``prompt``, ``id``, ``subset``, ``category``), so XSTest runs through the same code.

    Attributes:
        prompt: the prompt, exactly as in the CSV.
        type: the XSTest prompt type; unsafe (contrast) types start with ``contrast_``.
        label: ``"safe"`` or ``"unsafe"``.
        id: XSTest's own id (``"1"`` ... ``"450"`` in v2), or :func:`record_id` of the prompt
            where the file has none.
        focus: the word or phrase the prompt tests (XSTest's ``focus`` column).
        note: XSTest's ``note`` column (e.g. ``violence``, ``drugs``), possibly empty.
    """

    prompt: str
    type: str
    label: Literal["safe", "unsafe"]
    id: str = ""
    focus: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError(
                f"an XSTest prompt must be a non-empty string, got {self.prompt!r:.60}"
            )
        if self.label not in ("safe", "unsafe"):
            raise ValueError(f"XSTest label must be 'safe' or 'unsafe', got {self.label!r}")
        if not self.id:
            self.id = record_id(self.prompt)

    @property
    def subset(self) -> str:
        """``"xstest-safe"`` or ``"xstest-unsafe"``."""
        return f"xstest-{self.label}"

    @property
    def category(self) -> str:
        """The XSTest type, so per-category tables become XSTest's per-type tables."""
        return self.type

    @property
    def is_safe(self) -> bool:
        return self.label == "safe"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "subset": self.subset}


def load_xstest(path: PathLike) -> list[XSTestPrompt]:
    """The prompts of an XSTest file on disk (``xstest_prompts.csv``; JSONL/Parquet with the
    same columns work too).

    The label comes from the ``label`` column (v2: ``id,prompt,type,label,focus,note``);
    files without one (v1, ``xstest_v2_prompts.csv``) follow XSTest's readme: unsafe exactly
    when ``type`` starts with ``contrast_``. The id is ``id``, else ``id_v2``, else ``id_v1``.

    Raises:
        ValueError: no ``prompt`` or ``type`` column (the message lists the columns found), a
            label other than safe/unsafe (naming the row), an empty prompt, or no prompts.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist (expected XSTest's xstest_prompts.csv)")
    table = _read_table(p)
    missing = [c for c in ("prompt", "type") if c not in table.columns]
    if missing:
        raise ValueError(
            f"{p} lacks the XSTest column(s) {missing}; columns found: {table.columns} "
            f"(expected id, prompt, type, label, focus, note)"
        )
    out: list[XSTestPrompt] = []
    for loc, row in table.rows:
        prompt, kind = row.get("prompt"), str(row.get("type") or "").strip()
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{p} {loc}: empty or non-string prompt {prompt!r:.60}")
        raw_label = row.get("label")
        if raw_label in (None, "") and "label" not in table.columns:
            label = "unsafe" if kind.startswith("contrast_") else "safe"
        else:
            label = str(raw_label).strip().lower()
            if label not in ("safe", "unsafe"):
                raise ValueError(f"{p} {loc}: label {raw_label!r}; valid: 'safe', 'unsafe'")
        ident = next((row[k] for k in ("id", "id_v2", "id_v1") if row.get(k) not in (None, "")), "")
        out.append(
            XSTestPrompt(
                prompt=prompt,
                type=kind,
                label=label,
                id=str(ident),
                focus=str(row.get("focus") or ""),
                note=str(row.get("note") or ""),
            )
        )
    if not out:
        raise ValueError(f"{p} holds no prompts")
    return out
