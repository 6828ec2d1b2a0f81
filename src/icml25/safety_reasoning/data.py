"""Training data of refusal training (RT) and of SRG (arXiv:2502.04040, §3 and §4).

Both use the *same* in-distribution queries; only the supervision differs. RT's target is a direct
refusal for a harmful query and a helpful answer otherwise. SRG's target is the guideline-following
reasoning ``T`` and the answer ``y`` in one reasoning format (``T ⊕ y``), and the student's input is
the bare query: the guidelines the teacher saw are left out (context distillation, §4.3).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from icml25._validate import as_int
from icml25.safety_reasoning.formats import ReasoningFormat

__all__ = [
    "KINDS",
    "Query",
    "SRGExample",
    "build_rt_dataset",
    "build_srg_dataset",
    "load_queries",
    "to_chat_sft",
]

KINDS = ("harmful", "helpful")


@dataclass(frozen=True)
class Query:
    """A training or evaluation query: ``text``, ``kind`` (``"harmful"`` or ``"helpful"``) and
    an ``id`` (default: a hash of the text), the key of resumable pipelines."""

    text: str
    kind: Literal["harmful", "helpful"]
    id: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError(f"Query.text must be a non-empty string, got {self.text!r}")
        if self.kind not in KINDS:
            raise ValueError(f"Query.kind must be one of {KINDS}, got {self.kind!r}")
        if not isinstance(self.id, str):
            raise TypeError(f"Query.id must be a string, got {type(self.id).__name__}")
        if not self.id:
            import hashlib

            object.__setattr__(self, "id", hashlib.sha256(self.text.encode()).hexdigest()[:16])


@dataclass
class SRGExample:
    """An accepted synthesis: the query, the teacher's reasoning and final answer, and which
    candidate of the ``k`` it was (``meta`` keeps the filters' notes)."""

    query: Query
    reasoning: str
    answer: str
    candidate: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def target(self, fmt: ReasoningFormat | None = None) -> str:
        """``T ⊕ y`` in ``fmt`` (default ``<think>`` tags)."""
        return (fmt or ReasoningFormat()).format_target(self.reasoning, self.answer)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.query.id,
            "query": self.query.text,
            "kind": self.query.kind,
            "reasoning": self.reasoning,
            "answer": self.answer,
            "candidate": self.candidate,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> SRGExample:
        q = Query(row["query"], row["kind"], row.get("id", ""))
        return cls(
            q,
            row["reasoning"],
            row["answer"],
            int(row.get("candidate", 0)),
            dict(row.get("meta") or {}),
        )


def _queries(queries: Any) -> list[Query]:
    if isinstance(queries, (str, bytes)) or not isinstance(queries, Iterable):
        raise TypeError(f"queries must be a list of Query, got {type(queries).__name__}")
    out = list(queries)
    if not out:
        raise ValueError("queries is empty: give at least one Query")
    for i, q in enumerate(out):
        if not isinstance(q, Query):
            raise TypeError(f"queries[{i}] must be a Query, got {type(q).__name__}")
    return out


def load_queries(
    source: Any,
    *,
    text_column: str | None = None,
    kind_column: str = "kind",
    kind: Literal["harmful", "helpful"] | None = None,
) -> list[Query]:
    """Queries from a JSONL/JSON/CSV/Parquet file, a ``datasets`` folder or ``Dataset``, or a list of
    dicts: the text from ``text_column`` (default the first of ``query``, ``prompt``,
    ``instruction``, ``goal``, ``text``), the kind from ``kind_column`` or ``kind`` for all rows
    (e.g. JailbreakBench's harmful behaviours: ``kind="harmful"``)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS} or None, got {kind!r}")
    rows = _rows(source)
    if not rows:
        raise ValueError(f"{source!r:.80} holds no rows")
    cols = list(rows[0].keys())
    col = text_column or next(
        (c for c in ("query", "prompt", "instruction", "goal", "text") if c in cols), None
    )
    if col is None or col not in cols:
        raise ValueError(
            f"no text column {text_column or '(query/prompt/instruction/goal/text)'}; "
            f"the rows have {cols}"
        )
    out = []
    for i, r in enumerate(rows):
        if kind is not None and r.get(kind_column) not in (None, "", kind):
            raise ValueError(
                f"row {i}: kind={kind!r} was given but the row's {kind_column!r} column says "
                f"{r.get(kind_column)!r}; drop kind= (CLI: --kind) to use the column"
            )
        k = kind if kind is not None else r.get(kind_column)
        if k not in KINDS:
            raise ValueError(
                f"row {i}: {kind_column}={k!r}; use {KINDS} or pass kind= (CLI: --kind)"
            )
        text = r.get(col)
        if not isinstance(text, str):
            raise ValueError(f"row {i}: {col}={text!r} is not a string")
        out.append(Query(text, k, str(r.get("id", "") or "")))
    return out


def _rows(source: Any) -> list[dict[str, Any]]:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"no such file or folder: {path}")
        suffix = path.suffix.lower()
        if path.is_dir():
            import datasets

            return list(datasets.load_from_disk(str(path)))
        if suffix == ".jsonl":
            rows = []
            with open(path, encoding="utf-8-sig") as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError as exc:
                            raise ValueError(
                                f"{path}, line {n}: not valid JSON ({exc.msg})"
                            ) from None
            return rows
        if suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8-sig"))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: not valid JSON ({exc})") from None
            return data if isinstance(data, list) else list(data.get("data", []))
        if suffix == ".csv":
            import csv

            with open(path, newline="", encoding="utf-8-sig") as f:
                return list(csv.DictReader(f))
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        raise ValueError(f"{path}: use .jsonl, .json, .csv, .parquet or a datasets folder")
    if hasattr(source, "to_list") and not isinstance(source, list):
        return list(source.to_list())
    if isinstance(source, Sequence) and all(isinstance(r, dict) for r in source):
        return list(source)
    raise TypeError(
        f"source must be a path, a Dataset or a list of dicts, got {type(source).__name__}"
    )


def build_rt_dataset(
    queries: Sequence[Query], refusal_fn: Callable[[Query], str], answer_fn: Callable[[Query], str]
) -> list[tuple[str, str]]:
    """Refusal training's ``(query, target)`` pairs: ``refusal_fn(q)`` for harmful queries
    (a teacher-written refusal), ``answer_fn(q)`` for helpful ones (§3, the RT baseline)."""
    qs = _queries(queries)
    if not callable(refusal_fn) or not callable(answer_fn):
        raise TypeError("refusal_fn and answer_fn must be callables Query -> str")
    out = []
    for q in qs:
        y = refusal_fn(q) if q.kind == "harmful" else answer_fn(q)
        if not isinstance(y, str) or not y.strip():
            raise ValueError(f"the target for query {q.id!r} is {y!r}; expected a non-empty string")
        out.append((q.text, y))
    return out


def build_srg_dataset(
    examples: Sequence[SRGExample], fmt: ReasoningFormat | None = None
) -> list[tuple[str, str]]:
    """SRG's ``(query, T ⊕ y)`` pairs from accepted syntheses. The input is the bare query: no
    guideline text reaches the student (context distillation)."""
    if not examples:
        raise ValueError("examples is empty: synthesis accepted no candidate")
    out = []
    for i, ex in enumerate(examples):
        if not isinstance(ex, SRGExample):
            raise TypeError(f"examples[{i}] must be an SRGExample, got {type(ex).__name__}")
        out.append((ex.query.text, ex.target(fmt)))
    return out


def to_chat_sft(
    pairs: Sequence[Any],
    tokenizer: Any,
    *,
    max_length: int = 1024,
    system: str | None = None,
    include_guidelines: Any = False,
    fmt: ReasoningFormat | None = None,
) -> list[dict[str, list[int]]]:
    """Token ids and labels for SFT (§4.3: the loss on ``s = T ⊕ y`` given the bare query), built
    exactly as TRL's ``SFTTrainer`` builds them from the same conversational prompt/completion row
    (:func:`~icml25.safety_reasoning.training.to_trl_rows`), through
    :func:`icml25.llm.tokenize_prompt_completion`: the prompt is the user message (after
    ``system``, if given) rendered with the generation prompt; the whole conversation (prompt +
    assistant target) is rendered by the chat template, so the target ends with the template's
    own end of turn (``<|im_end|>`` for ChatML, ``<|eot_id|>`` for Llama-3, ``<end_of_turn>`` for
    Gemma), not with ``tokenizer.eos_token``. ``labels`` are ``-100`` on every prompt token (the
    loss covers the target only). Rows longer than ``max_length`` are cut at the end (TRL's
    ``truncation_mode="keep_start"``), with a warning. ``ValueError`` for a tokenizer without a chat
    template (we do not guess one), for a prompt that alone fills ``max_length``, and for a
    ``system`` message the template cannot render (Gemma's has no system role).

    ``pairs``: ``(query, target)`` string pairs or :class:`SRGExample` objects (their target in
    ``fmt``, default ``<think>`` tags). ``include_guidelines``: ``False`` (SRG: the student sees
    the bare query), ``True`` (the default guidelines as the system message, as the teacher saw
    them: an ablation without context distillation) or a list of guidelines.
    """
    system = _system_message(system, include_guidelines, fmt)
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise TypeError(
            f"pairs must be a list of (query, target) pairs or SRGExample, got {type(pairs).__name__}"
        )
    pairs = [(p.query.text, p.target(fmt)) if isinstance(p, SRGExample) else p for p in pairs]
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "the tokenizer has no chat template; set tokenizer.chat_template to the model's own "
            "template (a base model's SFT needs one chosen explicitly)"
        )
    max_length = as_int("max_length", max_length, 2)
    if not pairs:
        raise ValueError("pairs is empty")
    rows = [_tokenize_pair(tokenizer, i, item, system, max_length) for i, item in enumerate(pairs)]
    cut = sum(len(row["input_ids"]) > max_length for row in rows)
    out = [
        {"input_ids": row["input_ids"][:max_length], "labels": row["labels"][:max_length]}
        for row in rows
    ]
    if cut:
        import warnings

        warnings.warn(
            f"{cut} of {len(out)} rows were cut at max_length={max_length}: their targets lose "
            "their end (and the end of turn)",
            stacklevel=2,
        )
    return out


def _system_message(system: str | None, include_guidelines: Any, fmt: Any) -> str | None:
    """The system message of every prompt: ``system``, or the teacher's guidelines message when
    ``include_guidelines`` asks for it (``True``: the default guidelines; a list: those)."""
    if include_guidelines is False or include_guidelines is None:
        return system
    from icml25.safety_reasoning.guidelines import DEFAULT_GUIDELINES, teacher_messages

    if system is not None:
        raise ValueError("give system or include_guidelines, not both")
    gs = DEFAULT_GUIDELINES if include_guidelines is True else include_guidelines
    return teacher_messages("x", gs, fmt)[0]["content"]


def _tokenize_pair(
    tokenizer: Any, i: int, item: Any, system: str | None, max_length: int
) -> dict[str, list[int]]:
    """``pairs[i]`` rendered as TRL renders a prompt/completion row, before the cut at
    ``max_length``; ``ValueError`` when the prompt alone leaves no target token."""
    from icml25.llm import tokenize_prompt_completion

    if not (
        isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(s, str) for s in item)
    ):
        raise TypeError(f"pairs[{i}] must be a (query, target) pair of strings, got {item!r:.80}")
    query, target = item
    prompt = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": query}
    ]
    try:
        row = tokenize_prompt_completion(
            tokenizer, prompt, [{"role": "assistant", "content": target}]
        )
    except Exception as exc:
        if system and "system" in str(exc).lower():
            raise ValueError(
                f"the chat template cannot render a system message ({exc}); this model's "
                "template has no system role (Gemma's): leave system=None / "
                "include_guidelines=False, or put the text in the user message"
            ) from exc
        raise
    n_prompt = next((k for k, t in enumerate(row["labels"]) if t != -100), len(row["labels"]))
    if n_prompt >= max_length:
        raise ValueError(
            f"pairs[{i}]: the prompt alone has {n_prompt} tokens, max_length={max_length} "
            "leaves no target token; raise max_length"
        )
    return row
