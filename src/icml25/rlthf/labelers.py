"""Who labels the pairs: the AI labeller of the coarse alignment and the human of the targeted
annotation (RLTHF, arXiv:2502.13417, §3.1 and §3.3).

A :class:`Labeler` returns, for the pairs at ``indices``, labels in {1, 0, -1} (1 = response A
preferred, -1 = tie/invalid: the budget is spent and the pair leaves training) and confidences in
[1/2, 1].

* :class:`ChatLabeler`: any ``icml25.llm`` chat backend (an OpenAI-compatible server, or a local
  Hugging Face model, where the label comes from the next-token probabilities of "A" and "B"),
  with a swap check and a resumable JSONL record of every answer.
* :class:`HumanOracle`: stored human labels (e.g. the dataset's own), with budget accounting.
* :class:`CallbackHumanLabeler`: a function (an annotation UI, a queue) answering for a batch.
* :class:`CSVHumanLabeler`: a CSV round trip for a real annotator: the pairs to label are written
  to a file, the run stops with :class:`AnnotationPending`, and the rerun reads the answers.
* :class:`SyntheticLabeler`: a Bradley-Terry labeller over a utility function (simulations).
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from icml25._validate import as_int, as_real
from icml25.rlthf.data import PreferencePairs, check_binary_labels, check_indices

__all__ = [
    "AnnotationPending",
    "BudgetExceeded",
    "CSVHumanLabeler",
    "CallbackHumanLabeler",
    "ChatLabeler",
    "HumanOracle",
    "Labeler",
    "SyntheticLabeler",
    "parse_choice",
]


class BudgetExceeded(RuntimeError):
    """A human labeller was asked for more labels than its budget allows."""


class AnnotationPending(RuntimeError):
    """The pairs to annotate were written to a file; fill in the answers and run again."""


@runtime_checkable
class Labeler(Protocol):
    """A preference labeler: ``label(pairs, indices)`` gives labels in {1, 0, -1} and confidences
    in [0.5, 1]."""

    def label(self, pairs: PreferencePairs, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(labels int8 in {1, 0, -1}, confidences float32 in [0.5, 1])`` for ``indices``."""
        ...


def _pairs_and_indices(pairs: Any, indices: Any) -> np.ndarray:
    if not isinstance(pairs, PreferencePairs):
        raise TypeError(f"pairs must be a PreferencePairs, got {type(pairs).__name__}")
    return check_indices(indices, len(pairs))


class HumanOracle:
    """The stored human labels of the pool (``labels``: ``N`` values in {1, 0, -1}), answered on
    request and counted: ``calls`` is the number of labels handed out. Asking past ``budget``
    raises :class:`BudgetExceeded` before any label is given."""

    def __init__(self, labels: Any, budget: int | None = None) -> None:
        arr = np.asarray(labels)
        self.labels = check_binary_labels(arr, len(arr), "labels", allow_invalid=True)
        self.budget = None if budget is None else as_int("budget", budget, 0)
        self.calls = 0

    def label(self, pairs: PreferencePairs, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        idx = _pairs_and_indices(pairs, indices)
        if len(self.labels) != len(pairs):
            raise ValueError(
                f"the oracle holds {len(self.labels)} labels, the pool {len(pairs)} pairs"
            )
        if self.budget is not None and self.calls + len(idx) > self.budget:
            raise BudgetExceeded(
                f"{len(idx)} labels asked with {self.budget - self.calls} of the budget "
                f"{self.budget} left"
            )
        self.calls += len(idx)
        return self.labels[idx].copy(), np.ones(len(idx), dtype=np.float32)


class CallbackHumanLabeler:
    """``fn(prompts, responses_a, responses_b) -> labels`` (1 = A, 0 = B, -1 = tie/invalid)
    answered by a person or a UI; ``calls`` counts the labels."""

    def __init__(self, fn: Callable[[list[str], list[str], list[str]], Any]) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn = fn
        self.calls = 0

    def label(self, pairs: PreferencePairs, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        idx = _pairs_and_indices(pairs, indices)
        sub = pairs.subset(idx)
        raw = self.fn(sub.prompts, sub.responses_a, sub.responses_b)
        labels = check_binary_labels(raw, len(idx), "the callback's labels", allow_invalid=True)
        self.calls += len(idx)
        return labels, np.ones(len(idx), dtype=np.float32)


class CSVHumanLabeler:
    """A CSV round trip for a real annotator.

    The first call writes ``path`` with columns ``index, prompt, response_a, response_b, label``
    (label empty) for the pairs asked and raises :class:`AnnotationPending`. The annotator fills
    ``label`` with ``A``/``B`` (or 1/0; ``tie`` or ``invalid`` for neither) and the same call
    then returns the answers; an RLTHF run with a ``checkpoint_dir`` resumes where it stopped.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.calls = 0

    _MAP = {"a": 1, "1": 1, "b": 0, "0": 0, "tie": -1, "invalid": -1, "-1": -1}

    def label(self, pairs: PreferencePairs, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        idx = _pairs_and_indices(pairs, indices)
        answers = self._read() if self.path.exists() else {}
        missing = [int(i) for i in idx if int(i) not in answers]
        if missing:
            if not self.path.exists() or set(self._indices()) != {int(i) for i in idx}:
                self._write(pairs, idx, answers)
            raise AnnotationPending(
                f"{len(missing)} of {len(idx)} pairs await labels in {self.path} (fill the "
                "'label' column with A, B or tie, then run again)"
            )
        self.calls += len(idx)
        return (
            np.array([answers[int(i)] for i in idx], dtype=np.int8),
            np.ones(len(idx), dtype=np.float32),
        )

    def _indices(self) -> list[int]:
        with open(self.path, newline="", encoding="utf-8-sig") as f:
            return [_csv_index(r, self.path, n) for n, r in enumerate(csv.DictReader(f), 2)]

    def _read(self) -> dict[int, int]:
        out: dict[int, int] = {}
        # utf-8-sig: spreadsheet programs save CSV with a byte-order mark
        with open(self.path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or not {"index", "label"} <= set(reader.fieldnames):
                raise ValueError(f"{self.path} needs the columns 'index' and 'label'")
            for line, row in enumerate(reader, 2):
                value = (row.get("label") or "").strip().lower()
                if not value:
                    continue
                if value not in self._MAP:
                    raise ValueError(
                        f"{self.path}:{line}: label {row['label']!r}; use A, B, tie or invalid"
                    )
                out[_csv_index(row, self.path, line)] = self._MAP[value]
        return out

    def _write(self, pairs: PreferencePairs, idx: np.ndarray, answers: dict[int, int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        inv = {1: "A", 0: "B", -1: "tie"}
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["index", "prompt", "response_a", "response_b", "label"])
            for i in idx.tolist():
                w.writerow(
                    [
                        i,
                        pairs.prompts[i],
                        pairs.responses_a[i],
                        pairs.responses_b[i],
                        inv.get(answers.get(i), ""),
                    ]
                )
        os.replace(tmp, self.path)


def _csv_index(row: dict[str, Any], path: Path, line: int) -> int:
    try:
        return int(str(row.get("index")).strip())
    except ValueError:
        raise ValueError(
            f"{path}:{line}: index {row.get('index')!r} is not an integer (keep the 'index' "
            "column as written)"
        ) from None


class SyntheticLabeler:
    """Bradley-Terry labels from a utility: ``P(A wins) = sigma(beta (u(x, a) - u(x, b)))``.

    ``utility(prompt, response) -> float``; ``beta = inf`` gives the deterministic comparison
    (ties -> -1). Confidence is ``max(p, 1 - p)``."""

    def __init__(
        self,
        utility: Callable[[str, str], float],
        beta: float = 3.0,
        rng: np.random.Generator | int | None = 0,
    ) -> None:
        if not callable(utility):
            raise TypeError("utility must be callable: utility(prompt, response) -> float")
        beta = as_real("beta (or inf)", beta, low=0, low_open=True, finite=False)
        self.utility, self.beta = utility, beta
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

    def label(self, pairs: PreferencePairs, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        idx = _pairs_and_indices(pairs, indices)
        d = np.array(
            [
                self.utility(pairs.prompts[i], pairs.responses_a[i])
                - self.utility(pairs.prompts[i], pairs.responses_b[i])
                for i in idx
            ]
        )
        if np.isinf(self.beta):
            z = np.where(d > 0, 1, np.where(d < 0, 0, -1)).astype(np.int8)
            return z, np.ones(len(idx), dtype=np.float32)
        p = 1.0 / (1.0 + np.exp(-self.beta * d))
        z = (self.rng.random(len(idx)) < p).astype(np.int8)
        return z, np.maximum(p, 1 - p).astype(np.float32)


# -- the AI labeller ----------------------------------------------------------------------------------
SYSTEM = "You compare two assistant responses for the user's request and follow the guidelines."
QUESTION = "Which response is better? Answer with the single letter A or B."
_CHOICE = re.compile(r"\b([AB])\b", re.IGNORECASE)


def parse_choice(text: Any) -> str | None:
    """``"A"``/``"B"`` from a judge's answer (``"A"``, ``" b."``, ``"Response B"``, ...), or
    ``None`` when it names neither or both."""
    if not isinstance(text, str):
        return None
    found = {m.upper() for m in _CHOICE.findall(text.strip())}
    return found.pop() if len(found) == 1 else None


class ChatLabeler:
    """The AI labeller of RLTHF's coarse alignment through any ``icml25.llm`` chat backend.

    Args:
        backend: an ``icml25.llm`` chat backend (``OpenAIChat``, ``HFChat``, ``CachedChat``, ...).
        guidelines: task guidelines placed before the request (e.g. the annotation rules).
        swap_check: ask again with A and B swapped; disagreeing answers make the pair
            uncertain (label of the first answer, confidence 1/2).
        max_retries: re-asks when an answer names neither letter (then: uncertain, label by a
            coin seeded by the pair; never silently "A").
        cache_path: JSONL file the answers are appended to as they arrive; a rerun asks only
            for the pairs not in it (a kill loses at most the requests in flight).
        use_logprobs: for a backend with ``logprobs`` (``HFChat``): label and confidence from
            the next-token probabilities of "A" and "B", ``c = max(p_A, p_B) / (p_A + p_B)``
            (default: when the backend has them).
        concurrency: requests in flight.
    """

    def __init__(
        self,
        backend: Any,
        guidelines: str = "",
        swap_check: bool = True,
        max_retries: int = 1,
        cache_path: str | os.PathLike | None = None,
        *,
        use_logprobs: bool | None = None,
        concurrency: int = 4,
        progress: bool | None = None,
    ) -> None:
        if not hasattr(backend, "chat"):
            raise TypeError(
                f"backend must be an icml25.llm chat backend, got {type(backend).__name__}"
            )
        if not isinstance(guidelines, str):
            raise TypeError(f"guidelines must be a string, got {type(guidelines).__name__}")
        max_retries = as_int("max_retries", max_retries, 0)
        concurrency = as_int("concurrency", concurrency, 1)
        has_lp = callable(getattr(backend, "logprobs", None))
        if use_logprobs and not has_lp:
            raise ValueError(f"use_logprobs=True but {type(backend).__name__} has no logprobs()")
        self.backend, self.guidelines, self.swap_check = backend, guidelines, bool(swap_check)
        self.max_retries, self.concurrency, self.progress = max_retries, concurrency, progress
        self.use_logprobs = has_lp if use_logprobs is None else bool(use_logprobs)
        self.cache_path = None if cache_path is None else Path(cache_path)
        self.calls = 0  # backend requests made (0 on a rerun served from the cache)

    def messages(self, prompt: str, a: str, b: str) -> list[dict[str, str]]:
        guide = f"Guidelines:\n{self.guidelines}\n\n" if self.guidelines else ""
        user = (
            f"{guide}User request:\n{prompt}\n\nResponse A:\n{a}\n\nResponse B:\n{b}\n\n{QUESTION}"
        )
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def _ask(self, prompt: str, a: str, b: str) -> tuple[str | None, float | None, list[str]]:
        msgs = self.messages(prompt, a, b)
        if self.use_logprobs:
            import math

            self.calls += 2
            la = float(self.backend.logprobs(msgs, "A").sum())
            lb = float(self.backend.logprobs(msgs, "B").sum())
            pa, pb = math.exp(la), math.exp(lb)
            tot = pa + pb
            if tot <= 0 or not math.isfinite(tot):
                return None, None, [f"logprobs A={la:.3g} B={lb:.3g}"]
            return ("A" if pa >= pb else "B"), max(pa, pb) / tot, [f"pA={pa / tot:.4f}"]
        answers = []
        for _ in range(1 + self.max_retries):
            self.calls += 1
            text = self.backend.chat(msgs, temperature=0.0, max_tokens=4)[0]
            answers.append(text)
            choice = parse_choice(text)
            if choice is not None:
                return choice, None, answers
        return None, None, answers

    def _one(self, item: tuple[int, str, str, str]) -> dict[str, Any]:
        _, prompt, a, b = item
        first, conf, ans1 = self._ask(prompt, a, b)
        record: dict[str, Any] = {"answers": ans1}
        if self.swap_check:
            second, conf2, ans2 = self._ask(prompt, b, a)
            record["answers_swapped"] = ans2
            second = {"A": "B", "B": "A"}.get(second) if second else None
        else:
            second, conf2 = first, conf
        if first is None and second is None:
            coin = int(hashlib.sha256(f"{prompt}\0{a}\0{b}".encode()).hexdigest(), 16) % 2
            record.update(label=coin, confidence=0.5, status="unparsed")
        elif first is None or second is None or first != second:
            pick = first or second
            record.update(label=int(pick == "A"), confidence=0.5, status="uncertain")
        else:
            c = 1.0 if conf is None else 0.5 * (conf + (conf2 if conf2 is not None else conf))
            record.update(label=int(first == "A"), confidence=float(c), status="ok")
        return record

    def label(self, pairs: PreferencePairs, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """AI labels (1 = A) and confidences for ``indices``; with ``cache_path`` the answers are
        kept on disk and a rerun asks only for the missing pairs. ``BatchFailed`` (after every
        pair was tried and saved) when some requests failed; rerun to retry them."""
        from icml25.llm import BatchFailed, JsonlStore, run_resumable
        from icml25.llm.store import backend_identity, describe

        idx = _pairs_and_indices(pairs, indices)
        items = [
            (int(i), pairs.prompts[i], pairs.responses_a[i], pairs.responses_b[i]) for i in idx
        ]
        keys = {it: self._key(it) for it in items}
        results: dict[str, dict[str, Any]] = {}
        if self.cache_path is not None:
            # each row is stamped with the labeller that made it (backend identity incl. its
            # extra_body, prompt, sampling): another labeller sharing the file asks afresh, its
            # rows kept apart (docs/rlthf.md)
            store = JsonlStore(
                self.cache_path,
                key="item",
                settings=self._settings(describe, backend_identity),
                on_mismatch="separate",
            )
        else:
            store = JsonlStore(_memory_path(), key="item")
        try:
            report = run_resumable(
                items,
                self._one,
                store,
                key=lambda _j, it: {"item": keys[it], "index": it[0]},
                concurrency=self.concurrency,
                retry_errors=True,
                progress=self.progress,
                desc="AI labels",
            )
            for it in items:
                rec = store.get({"item": keys[it]})
                if rec is not None and "label" in rec:
                    results[keys[it]] = rec
        finally:
            store.close()
            if self.cache_path is None:
                Path(store.path).unlink(missing_ok=True)
        if report.n_failed:
            exc = BatchFailed(report, [results.get(keys[it]) for it in items])
            kept = (
                f" are kept in {self.cache_path}"
                if self.cache_path is not None
                else (" are in this exception's .results (pass cache_path= to keep them on disk)")
            )
            exc.args = (
                f"{report.summary()}; the answers received{kept}; call label() again "
                "(or rerun) to ask only for the failed pairs",
            )
            raise exc
        labels = np.array([results[keys[it]]["label"] for it in items], dtype=np.int8)
        conf = np.array([results[keys[it]]["confidence"] for it in items], dtype=np.float32)
        return labels, conf

    def _settings(self, describe: Callable, backend_identity: Callable) -> dict[str, Any]:
        """What makes a label besides the pair: the labeller's identity and how it is asked."""
        return {
            "backend": {**backend_identity(self.backend), "identity": describe(self.backend)},
            "judge": self._judge,
            "prompt": {"system": SYSTEM, "question": QUESTION, "guidelines": self.guidelines},
            "sampling": {"temperature": 0.0, "max_tokens": 4},
            "use_logprobs": self.use_logprobs,
            "max_retries": self.max_retries,
            "swap_check": self.swap_check,
        }

    def _key(self, item: tuple[int, str, str, str]) -> str:
        """The record key: the judge (its cache identity, e.g. the model name and for a local
        model a fingerprint of its weights), how it is asked, and the pair. Another judge
        sharing ``cache_path`` asks afresh instead of reusing these answers."""
        _, p, a, b = item
        text = (
            f"{self._judge}\0{self.use_logprobs}\0{self.max_retries}\0{self.guidelines}"
            f"\0{p}\0{a}\0{b}\0{self.swap_check}"
        )
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]

    @property
    def _judge(self) -> str:
        ident = getattr(self.backend, "cache_identity", None)
        name = ident() if callable(ident) else getattr(self.backend, "name", None)
        return f"{type(self.backend).__name__}:{name if name is not None else ''}"


def _memory_path() -> str:
    import tempfile

    fd, path = tempfile.mkstemp(prefix="icml25-labels-", suffix=".jsonl")
    os.close(fd)
    os.unlink(path)
    return path
