"""Span-level MQM annotations (paper §2 "data"; MQM format of ``google/wmt-mqm-human-evaluation``).

An :class:`ErrorSpan` holds character offsets into the CLEAN string (``<v>``/``</v>`` tags
removed), a severity, an MQM category and the side it marks (target, or source for errors such as
omissions, which cannot be located in the translation). :func:`load_mqm_tsv` reads the released
TSV files (one row per error; ``No-error`` rows for clean translations) into
:class:`AnnotatedTranslation` records, one per (system, segment, rater).

Severity weights (docs/twa.md, "Decisions"): Major 5 (the paper's footnote, as quoted by a
review), Minor 1 (MQM), Minor ``Fluency/Punctuation`` 0.1 (MQM), ``Non-translation!`` 5 (MQM uses
25; capped at the Major weight, our reading of the footnote), Neutral 0 (not an error).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from icml25._validate import as_int, as_real

__all__ = [
    "DEFAULT_SEVERITY_WEIGHTS",
    "AnnotatedTranslation",
    "ErrorSpan",
    "from_records",
    "load_jsonl",
    "load_mqm_tsv",
    "parse_marked_text",
    "save_jsonl",
    "severity_weight",
    "to_records",
]

#: severity (and "severity:category") -> weight; see the module docstring for the sources
DEFAULT_SEVERITY_WEIGHTS: dict[str, float] = {
    "Major": 5.0,
    "Minor": 1.0,
    "Minor:Fluency/Punctuation": 0.1,
    "Non-translation!": 5.0,
    "Neutral": 0.0,
}

NON_TRANSLATION = "Non-translation!"
NO_ERROR = "no-error"


def severity_weight(
    severity: str,
    category: str | None = None,
    weights: Mapping[str, float] | str = DEFAULT_SEVERITY_WEIGHTS,
) -> float:
    """The weight of one error: ``weights["Non-translation!"]`` for that category (any
    severity), else ``weights["<Severity>:<category>"]`` when present, else
    ``weights["<Severity>"]``. Severities match case-insensitively. ``weights="uniform"``: 1 for
    every error, 0 for Neutral (the ablation without severity weighting)."""
    if not isinstance(severity, str) or not severity.strip():
        raise ValueError(f"severity must be a non-empty string, got {severity!r}")
    sev = severity.strip()
    if isinstance(weights, str):
        if weights != "uniform":
            raise ValueError(f"weights must be a dict or 'uniform', got {weights!r}")
        # the severities the default table knows, each error weighing 1
        w = severity_weight(severity, category, DEFAULT_SEVERITY_WEIGHTS)
        return 1.0 if w > 0 else 0.0
    table = {k.lower(): as_real(f"severity weight {k!r}", v, low=0) for k, v in weights.items()}
    cat = (category or "").strip()
    if cat.lower() == NON_TRANSLATION.lower() and NON_TRANSLATION.lower() in table:
        return table[NON_TRANSLATION.lower()]
    key = f"{sev}:{cat}".lower()
    if cat and key in table:
        return table[key]
    if sev.lower() in table:
        return table[sev.lower()]
    valid = sorted({k.split(":")[0] for k in weights})
    raise ValueError(f"unknown severity {severity!r}; the weights know {valid}")


@dataclass(frozen=True)
class ErrorSpan:
    """One annotated error: character offsets ``[start, end)`` into the clean target (or source,
    ``side="source"``); ``weight`` as resolved at load time (None: resolve later)."""

    start: int
    end: int
    severity: str
    category: str | None = None
    side: Literal["target", "source"] = "target"
    weight: float | None = None

    def __post_init__(self) -> None:
        for name in ("start", "end"):  # numpy and 0-d torch integers too, stored as int
            object.__setattr__(self, name, as_int(f"ErrorSpan.{name}", getattr(self, name)))
        if self.weight is not None:  # (frozen dataclass: object.__setattr__)
            object.__setattr__(self, "weight", as_real("ErrorSpan.weight", self.weight, low=0))
        if self.start < 0 or self.end < self.start:
            raise ValueError(
                f"an ErrorSpan needs 0 <= start <= end, got [{self.start}, {self.end})"
            )
        if self.side not in ("target", "source"):
            raise ValueError(f"side must be 'target' or 'source', got {self.side!r}")

    @property
    def is_non_translation(self) -> bool:
        return (self.category or "").strip().lower() == NON_TRANSLATION.lower()

    def resolved_weight(
        self, weights: Mapping[str, float] | str = DEFAULT_SEVERITY_WEIGHTS
    ) -> float:
        """``weight`` if set at load time, else :func:`severity_weight`."""
        return (
            self.weight
            if self.weight is not None
            else severity_weight(self.severity, self.category, weights)
        )


@dataclass
class AnnotatedTranslation:
    """A translation with its error spans (character offsets into ``target``)."""

    source: str
    target: str
    spans: list[ErrorSpan] = field(default_factory=list)
    system: str | None = None
    seg_id: str | None = None
    rater: str | None = None
    reference: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not isinstance(self.target, str):
            raise TypeError("source and target must be strings")
        for s in self.spans:
            if not isinstance(s, ErrorSpan):
                raise TypeError(f"spans must be ErrorSpan objects, got {type(s).__name__}")
            text = self.target if s.side == "target" else self.source
            if s.end > len(text):
                raise ValueError(
                    f"span [{s.start}, {s.end}) is outside the {s.side} string of length {len(text)}"
                )

    def mqm_penalty(self, weights: Mapping[str, float] | str = DEFAULT_SEVERITY_WEIGHTS) -> float:
        """Sum of the error weights; several Non-translation records count once."""
        total, nt = 0.0, 0.0
        for s in self.spans:
            w = s.resolved_weight(weights)
            if s.is_non_translation:
                nt = max(nt, w)
            else:
                total += w
        return total + nt

    @property
    def has_error(self) -> bool:
        """True when some span has a positive weight (Neutral records are not errors)."""
        return any(s.resolved_weight() > 0 for s in self.spans)


def parse_marked_text(
    text: str, open_tag: str = "<v>", close_tag: str = "</v>"
) -> tuple[str, list[tuple[int, int]]]:
    """``(clean text, [(start, end), ...])``: the text without the tags and the marked character
    ranges in it. ``ValueError`` on unbalanced or nested tags."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    if not open_tag or not close_tag or open_tag == close_tag:
        raise ValueError("open_tag and close_tag must be two different non-empty strings")
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    i, n, start = 0, 0, None
    while i < len(text):
        if text.startswith(open_tag, i):
            if start is not None:
                raise ValueError(f"nested {open_tag} at character {i} of {text!r:.80}")
            start, i = n, i + len(open_tag)
        elif text.startswith(close_tag, i):
            if start is None:
                raise ValueError(f"{close_tag} without {open_tag} at character {i} of {text!r:.80}")
            spans.append((start, n))
            start, i = None, i + len(close_tag)
        else:
            out.append(text[i])
            n += 1
            i += 1
    if start is not None:
        raise ValueError(f"unclosed {open_tag} in {text!r:.80}")
    return "".join(out), spans


_COLUMNS = (
    "system",
    "doc",
    "doc_id",
    "seg_id",
    "rater",
    "source",
    "target",
    "category",
    "severity",
)


def _rows(path_or_buffer) -> Iterable[tuple[int, dict[str, str]]]:
    if isinstance(path_or_buffer, (str, os.PathLike)):
        with open(path_or_buffer, encoding="utf-8", newline="") as f:
            yield from _rows(io.StringIO(f.read()))
        return
    reader = csv.reader(path_or_buffer, delimiter="\t", quoting=csv.QUOTE_NONE)
    header = next(reader, None)
    if header is None:
        raise ValueError("the MQM file is empty (no header row)")
    header = [h.strip() for h in header]
    missing = [c for c in _COLUMNS if c not in header]
    if missing:
        raise ValueError(f"the MQM file lacks the column(s) {missing}; its header is {header}")
    idx = {c: header.index(c) for c in header}
    for line, row in enumerate(reader, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) < len(_COLUMNS):
            raise ValueError(f"line {line}: {len(row)} columns, expected at least {len(_COLUMNS)}")
        yield line, {c: (row[i] if i < len(row) else "") for c, i in idx.items()}


def load_mqm_tsv(
    path_or_buffer,
    *,
    merge_raters: bool = False,
    weights: Mapping[str, float] | str = DEFAULT_SEVERITY_WEIGHTS,
    keep_neutral: bool = False,
    strip_spans: bool = True,
) -> list[AnnotatedTranslation]:
    """Read an MQM TSV file (columns ``system, doc, doc_id, seg_id, rater, source, target,
    category, severity[, comment]``; one row per error, ``<v>...</v>`` marking the span in the
    target or, for source-side errors, in the source).

    One :class:`AnnotatedTranslation` per (system, seg_id, rater), or per (system, seg_id) with
    ``merge_raters=True`` (the union of the raters' spans, an identical span kept once with its
    largest weight). ``No-error`` rows add no span; Neutral rows are dropped unless
    ``keep_neutral``. A ``Non-translation!`` record covers the whole target (weight 5 by default,
    not MQM's 25: an untranslated copy then weighs like one Major error, which DPO pairs built
    from such data can prefer over a translation with two errors; pass weights to change it). A row whose error is
    marked nowhere, or marked in the source, becomes an unlocalizable span (``side="source"`` or
    zero length). With ``strip_spans``, whitespace at the ends of a span is trimmed (MQM spans
    often include a trailing space). Errors name the file line: rows of one translation whose
    clean targets differ, unknown severities, broken tags."""
    groups: dict[tuple, dict] = {}
    order: list[tuple] = []
    for line, r in _rows(path_or_buffer):
        key = (r["system"], r["seg_id"]) if merge_raters else (r["system"], r["seg_id"], r["rater"])
        try:
            tgt, tspans = parse_marked_text(r["target"])
            src, sspans = parse_marked_text(r["source"])
        except ValueError as exc:
            raise ValueError(f"line {line}: {exc}") from None
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"source": src, "target": tgt, "spans": {}, "row": r, "line": line}
            order.append(key)
        elif g["target"] != tgt or g["source"] != src:
            what = "target" if g["target"] != tgt else "source"
            raise ValueError(
                f"line {line}: the clean {what} differs from line {g['line']}'s for system "
                f"{r['system']!r}, segment {r['seg_id']!r}: {tgt!r:.60} vs {g['target']!r:.60}"
            )
        sev, cat = r["severity"].strip(), r["category"].strip()
        if sev.lower() == NO_ERROR or cat.lower() == NO_ERROR:
            continue
        try:
            w = severity_weight(sev, cat, weights)
        except ValueError as exc:
            raise ValueError(f"line {line}: {exc}") from None
        if sev.lower() == "neutral" and not keep_neutral:
            continue
        found: list[ErrorSpan] = []
        if cat.lower() == NON_TRANSLATION.lower():
            found.append(ErrorSpan(0, len(tgt), sev, cat, "target", w))
        else:
            for a, b in tspans:
                if strip_spans:
                    while a < b and tgt[a].isspace():
                        a += 1
                    while b > a and tgt[b - 1].isspace():
                        b -= 1
                found.append(ErrorSpan(a, b, sev, cat, "target", w))
            for a, b in sspans:
                found.append(ErrorSpan(a, b, sev, cat, "source", w))
            if not found:  # marked nowhere: an unlocalizable target error
                found.append(ErrorSpan(0, 0, sev, cat, "target", w))
        for s in found:
            k = (s.start, s.end, s.side) if merge_raters else (id(s),)
            old = g["spans"].get(k)
            if old is None or (s.weight or 0) > (old.weight or 0):
                g["spans"][k] = s
    out = []
    for key in order:
        g = groups[key]
        r = g["row"]
        out.append(
            AnnotatedTranslation(
                source=g["source"],
                target=g["target"],
                spans=list(g["spans"].values()),
                system=r["system"],
                seg_id=r["seg_id"],
                rater=None if merge_raters else r["rater"],
            )
        )
    return out


def to_records(data: Iterable[AnnotatedTranslation]) -> list[dict]:
    """Plain dicts (JSON-ready): ``source, target, spans: [{start, end, severity, category, side,
    weight}], system, seg_id, rater, reference``."""
    out = []
    for d in data:
        if not isinstance(d, AnnotatedTranslation):
            raise TypeError(f"expected AnnotatedTranslation records, got {type(d).__name__}")
        out.append(
            {
                "source": d.source,
                "target": d.target,
                "spans": [
                    {
                        "start": s.start,
                        "end": s.end,
                        "severity": s.severity,
                        "category": s.category,
                        "side": s.side,
                        "weight": s.weight,
                    }
                    for s in d.spans
                ],
                "system": d.system,
                "seg_id": d.seg_id,
                "rater": d.rater,
                "reference": d.reference,
            }
        )
    return out


def from_records(rows: Iterable[Mapping]) -> list[AnnotatedTranslation]:
    """The inverse of :func:`to_records` (also for rows of a ``datasets.Dataset``, a pandas
    frame's ``to_dict("records")`` or a JSONL file read with :func:`load_jsonl`)."""
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping) or "source" not in r or "target" not in r:
            raise ValueError(f"row {i} needs 'source' and 'target', got {r!r:.80}")
        try:
            spans = [
                ErrorSpan(**{k: v for k, v in s.items() if k in ErrorSpan.__dataclass_fields__})
                for s in (r.get("spans") or [])
            ]
        except TypeError as exc:
            raise ValueError(
                f"row {i}: a span needs start, end and severity ({exc}); got {r.get('spans')!r:.80}"
            ) from None
        out.append(
            AnnotatedTranslation(
                r["source"],
                r["target"],
                spans,
                r.get("system"),
                r.get("seg_id"),
                r.get("rater"),
                r.get("reference"),
            )
        )
    return out


def save_jsonl(data: Iterable[AnnotatedTranslation], path) -> None:
    """One JSON record per line (:func:`to_records`), written atomically."""
    import json
    import tempfile

    rows = to_records(data)
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=d, delete=False, suffix=".tmp"
    ) as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        tmp = f.name
    os.replace(tmp, path)


def load_jsonl(path) -> list[AnnotatedTranslation]:
    """Records written by :func:`save_jsonl` (errors name the line)."""
    import json

    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{path}, line {n}: not JSON ({exc})") from None
    try:
        return from_records(rows)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{path}: {exc} (rows count the non-empty lines from 0)") from None
