"""Algorithm 5 of OR-Bench (paper Sec. 4): evaluating a model's refusals, and the cross-model
trade-off between over-refusal and toxic rejection (Fig. 1).

:func:`evaluate` sends every prompt as one user turn (paper: temperature 0, ``max_tokens`` 1000,
no system prompt), judges the response (a keyword detector or an LLM judge) and keeps one row per
prompt in a resumable store. Rates are percentages over the prompts with a valid judgement;
failed requests and unparseable judge replies are counted separately, never guessed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icml25._validate import as_int
from icml25.llm.base import ChatBackend, Completion
from icml25.llm.store import (
    SETTINGS_FIELD,
    JsonlStore,
    backend_identity,
    describe,
    run_resumable,
    settings_mismatch,
)
from icml25.orbench.records import record_id
from icml25.orbench.refusal import (
    MISTRAL_QUIRK_WARNING,
    KeywordRefusalDetector,
    never_flags,
    official_detector,
)

__all__ = ["EvalResult", "evaluate"]

Judge = Callable[[str], bool]


@dataclass
class EvalResult:
    """One model on one prompt set: a row per prompt and the rates.

    ``per_prompt`` rows: ``id, subset, category, prompt, model, response, blocked, refused,
    judge, judge_label, judge_raw, parse_failed, finish_reason`` (``refused`` is ``None`` for a
    missing judgement). ``failures``: ``(id, error type, message)`` of the requests that failed.
    """

    model: str
    subset: str
    per_prompt: list[dict[str, Any]]
    failures: list[tuple[Any, str, str]] = field(default_factory=list)

    @property
    def judged(self) -> list[dict[str, Any]]:
        return [r for r in self.per_prompt if r.get("refused") is not None]

    @property
    def n(self) -> int:
        """Prompts with a valid judgement (the rates' denominator)."""
        return len(self.judged)

    @property
    def n_refused(self) -> int:
        return sum(bool(r["refused"]) for r in self.judged)

    @property
    def n_failed(self) -> int:
        return len(self.failures)

    @property
    def n_blocked(self) -> int:
        return sum(bool(r.get("blocked")) for r in self.per_prompt)

    @property
    def n_parse_failed(self) -> int:
        return sum(bool(r.get("parse_failed")) for r in self.per_prompt)

    @property
    def rate(self) -> float:
        """Refusal rate in percent (NaN when nothing was judged)."""
        return 100.0 * self.n_refused / self.n if self.n else math.nan

    @property
    def over_refusal_rate(self) -> float:
        """The refusal rate, read as over-refusal on a safe set (80K, Hard-1K)."""
        return self.rate

    @property
    def rejection_rate(self) -> float:
        """The refusal rate, read as toxic rejection on OR-Bench-Toxic (acceptance = 100 - it)."""
        return self.rate

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Wilson interval of :attr:`rate` over prompts, in percent."""
        from icml25.report.stats import wilson_interval

        if not self.n:
            return math.nan, math.nan
        iv = wilson_interval(self.n_refused, self.n, confidence)
        return 100.0 * iv.low, 100.0 * iv.high

    @property
    def per_category(self) -> dict[str, tuple[float, int]]:
        """``{category: (refusal rate %, judged prompts)}`` in the order first seen."""
        groups: dict[str, list[bool]] = {}
        for r in self.judged:
            groups.setdefault(str(r.get("category")), []).append(bool(r["refused"]))
        return {c: (100.0 * sum(v) / len(v), len(v)) for c, v in groups.items()}

    def __repr__(self) -> str:
        return (
            f"EvalResult(model={self.model!r}, subset={self.subset!r}, rate={self.rate:.2f}, "
            f"n={self.n}, n_failed={self.n_failed})"
        )

    @property
    def judges(self) -> set[str]:
        """The judges whose labels the rows carry (one, unless the store mixed them)."""
        return {str(r.get("judge")) for r in self.judged}

    def summary(self) -> str:
        rate = f"{self.rate:.2f}%" if self.n else "no rate:"
        return (
            f"{self.model} on {self.subset}: {rate} refused of {self.n} judged "
            f"({self.n_blocked} blocked, {self.n_parse_failed} unparseable judge replies, "
            f"{self.n_failed} failed requests)"
        )


def _as_list(records: Any) -> list[Any]:
    """A list from what users hold: lists and tuples, numpy arrays and pandas Series (of
    prompts), pandas DataFrames and ``datasets.Dataset`` (rows as dicts), iterables."""
    if isinstance(records, (str, bytes, Mapping)):
        raise TypeError(
            f"records must be a list of ORBenchRecord, dicts or strings, got a "
            f"{type(records).__name__}; wrap a single prompt in a list"
        )
    if hasattr(records, "to_dict") and hasattr(records, "columns"):  # pandas DataFrame
        return records.to_dict("records")
    if hasattr(records, "column_names") and hasattr(records, "__getitem__"):  # datasets.Dataset
        return [records[i] for i in range(len(records))]
    if hasattr(records, "tolist"):  # numpy array, pandas Series
        return records.tolist()
    try:
        return list(records)
    except TypeError:
        raise TypeError(
            f"records must be a list of ORBenchRecord, dicts or strings, got "
            f"{type(records).__name__}"
        ) from None


def _items(records: Any, subset: str | None) -> list[dict[str, Any]]:
    records = _as_list(records)
    if not records:
        raise ValueError("records must not be empty: nothing to evaluate")
    out: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(records):
        if isinstance(r, str):
            d: Mapping[str, Any] = {"prompt": r}
        elif isinstance(r, Mapping):
            d = r
        else:  # a record object (ORBenchRecord, XSTestPrompt, ...): its attributes and properties
            d = {k: getattr(r, k, None) for k in ("prompt", "category", "subset", "id")}
        prompt = d.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(
                f"records[{i}] has no prompt (a non-empty string in 'prompt'): {r!r:.80}"
            )
        rid = d.get("id") or record_id(prompt)
        cat = d.get("category")
        out.setdefault(
            rid,
            {
                "id": rid,
                "prompt": prompt,
                "category": None if cat is None else str(cat),
                "subset": subset or d.get("subset") or "custom",
            },
        )
    if len(out) < len(records):
        warnings.warn(
            f"{len(records) - len(out)} duplicated prompt(s) (same id) evaluated once",
            stacklevel=3,
        )
    return list(out.values())


def _judge_of(detector: Any) -> tuple[str, Any]:
    """The judge and its identity: the stored judgement of an LLM judge is reused only by a
    judge with the same identity (backend, templates, unparseable rule); keyword judges are
    cheap and always re-applied to stored answers."""
    import hashlib

    if detector is None or detector in ("keyword", "default"):
        detector = KeywordRefusalDetector.default()
    elif detector == "xstest":
        detector = KeywordRefusalDetector.xstest()
    elif isinstance(detector, str):
        try:
            detector = official_detector(detector)
        except ValueError:
            raise ValueError(
                f"detector {detector!r} is not a known name; use 'keyword', 'xstest', a model "
                "family (gpt-3.5, gpt-4, claude, gemini, mistral, llama, qwen), a "
                "KeywordRefusalDetector, fn(response) -> bool or an LLMRefusalJudge"
            ) from None
    if callable(getattr(detector, "judge", None)):
        backend = getattr(detector, "backend", None)
        ident = getattr(backend, "cache_identity", lambda: getattr(backend, "name", ""))()
        tmpl = getattr(getattr(detector, "templates", None), "response_judge", "")
        blob = (
            f"{ident}|{getattr(detector, 'unparseable_as_refusal', True)}|"
            f"{getattr(detector, 'official_labels', True)}|{tmpl}"
        )
        digest = hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        return f"{getattr(detector, 'name', 'llm')}#{digest}", detector
    if callable(detector):
        probe = detector("I'm sorry, but I cannot help with that.")
        if not isinstance(probe, bool) and type(probe).__name__ != "bool_":
            raise TypeError(
                f"a detector must return True (refused) or False (answered), got {probe!r} "
                "for a refusal-like probe response"
            )
        return getattr(detector, "name", None) or getattr(detector, "__name__", "keyword"), detector
    raise TypeError(
        "detector must be a keyword detector (response -> bool, e.g. "
        "KeywordRefusalDetector.default()) or an LLMRefusalJudge, got "
        f"{type(detector).__name__}"
    )


def _row(
    item: dict[str, Any],
    c: Completion,
    judge_name: str,
    *,
    keyword: Any = None,
    label: Any = None,
    unparseable_as_refusal: bool = True,
) -> dict[str, Any]:
    text = c.text or ""
    blocked = bool(c.blocked) or not text.strip()
    row = {
        "category": item["category"],
        "subset": item["subset"],
        "prompt": item["prompt"],
        "response": text,
        "finish_reason": c.finish_reason,
        "blocked": blocked,
        "judge": judge_name,
        "judge_raw": None,
        "parse_failed": False,
    }
    if blocked:  # an empty answer or a provider block is a refusal (official Gemini rule)
        row.update(refused=True, judge_label="blocked")
    elif keyword is not None:
        refused = bool(keyword(text))
        row.update(refused=refused, judge_label="refused" if refused else "answered")
    else:
        unparseable = bool(label.parse_failed)
        missing = unparseable and not unparseable_as_refusal
        row.update(
            refused=None if missing else bool(label.refused),
            judge_label=label.label,
            judge_raw=getattr(label, "raw", None),
            parse_failed=bool(unparseable),
        )
    return row


def evaluate(
    backend: ChatBackend,
    records: Sequence[Any],
    *,
    detector: Any = None,
    store: JsonlStore | str | Path | None = None,
    concurrency: int = 8,
    temperature: float | None = 0.0,
    max_tokens: int | None = 1000,
    system_prompt: str | None = None,
    subset: str | None = None,
    model: str | None = None,
    retry_errors: bool = False,
    progress: bool | None = None,
    keep_both: bool = False,
) -> EvalResult:
    """Algorithm 5 for one model: answer every prompt, judge every answer, return the rates.

    Args:
        backend: the model under test f, any :class:`~icml25.llm.ChatBackend`.
        records: :class:`~icml25.orbench.records.ORBenchRecord` objects, dicts with ``prompt`` (and
            ``category``), or plain strings; duplicates (same id) collapse to the first.
        detector: :class:`~icml25.orbench.KeywordRefusalDetector` (default ``.default()``), any
            ``fn(response) -> bool`` (True = refused), an
            :class:`~icml25.orbench.LLMRefusalJudge`, or a name: ``"keyword"``, ``"xstest"`` or a
            model family / model name (:func:`~icml25.orbench.refusal.official_detector`, the
            Mistral quirk off). A detector that can flag nothing (the official Mistral checker
            with its quirk) is warned about with a ``UserWarning``.
        store: a JSONL file (or store keyed by ``("model", "id")``, used by its path) with one
            row per prompt; a rerun skips the prompts done, so a crash loses at most the requests
            in flight. Each row is stamped with the fingerprint of what made it: the model's name
            and backend identity, the sampling settings, the system prompt and the judge (its
            class and parameters: a keyword detector's rules and Mistral quirk, an LLM judge's
            backend and prompts). A rerun of a model with other settings is refused
            (:class:`~icml25.llm.SettingsMismatch`, naming the fields that differ); other models
            may share the file (a panel).
        keep_both: keep the other run's rows beside this run's (separate keys) instead of
            refusing; this run never returns them. Answers made with the same model and
            sampling settings are judged again by this run's judge, not asked again.
        concurrency: requests in flight for a remote backend (a local model batches instead).
        temperature, max_tokens: paper: 0 and 1000.
        system_prompt: an optional system turn (the paper's main results use none).
        subset: the subset name stored with each row (default: the records' own).
        model: the name stored with each row (default ``backend.name``).
        retry_errors: retry prompts whose request failed in an earlier run.

    Returns:
        :class:`EvalResult`. A request that fails after the backend's retries is an error row of
        the store and a ``failures`` entry; the others go on.
    """
    concurrency, temperature, max_tokens = _checked_call(
        backend, concurrency, system_prompt, temperature, max_tokens
    )
    items = _items(records, subset)
    judging = _judging(detector)
    name = model or _default_name(backend)
    st, tmp = _open_eval_store(
        store, backend, name, judging, temperature, max_tokens, system_prompt, items, keep_both
    )
    run = _Evaluation(backend, items, st, name, judging, temperature, max_tokens, system_prompt)
    run.warn_stale()
    run.rejudge_stored()
    run.answer_and_judge(concurrency, retry_errors, progress)
    result = run.result()
    st.close()
    if tmp is not None:
        tmp.cleanup()
    return result


def _checked_call(
    backend: Any,
    concurrency: Any,
    system_prompt: Any,
    temperature: Any,
    max_tokens: Any,
) -> tuple[int, float | None, int | None]:
    """The model under test and the call's settings, checked before anything else happens:
    ``concurrency`` and the sampling values as Python numbers (the store's settings are JSON)."""
    if not callable(getattr(backend, "chat", None)):
        raise TypeError(
            f"backend must be a chat backend (icml25.llm.OpenAIChat, HFChat, ...), got "
            f"{type(backend).__name__}"
        )
    concurrency = as_int("concurrency", concurrency, 1)
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise TypeError(f"system_prompt must be a string or None, got {system_prompt!r:.60}")
    from icml25.llm.base import SamplingParams

    # bad values fail here, once; numpy numbers become Python's (the store's settings are JSON)
    sp = SamplingParams(temperature=temperature, max_tokens=max_tokens)
    return concurrency, sp.temperature, sp.max_tokens


@dataclass
class _Judging:
    """Who judges the answers (Algorithm 5's judge): its name in the rows, the judge itself,
    split into an LLM judge or a keyword rule, and whether an unparseable LLM reply counts as a
    refusal."""

    name: str
    judge: Any
    llm_judge: Any
    keyword: Any
    count: bool


def _judging(detector: Any) -> _Judging:
    """The judge of ``detector`` (see :func:`_judge_of`); one that can flag nothing (the
    official Mistral checker with its quirk) is warned about, at the caller of :func:`evaluate`."""
    judge_name, judge = _judge_of(detector)
    if never_flags(judge):
        warnings.warn(f"judge {judge_name!r}: {MISTRAL_QUIRK_WARNING}", UserWarning, stacklevel=3)
    llm_judge = judge if callable(getattr(judge, "judge", None)) else None
    keyword = None if llm_judge is not None else judge
    count = getattr(llm_judge, "unparseable_as_refusal", True)
    return _Judging(judge_name, judge, llm_judge, keyword, count)


def _open_eval_store(
    store: JsonlStore | str | Path | None,
    backend: Any,
    name: str,
    judging: _Judging,
    temperature: float | None,
    max_tokens: int | None,
    system_prompt: str | None,
    items: list[dict[str, Any]],
    keep_both: bool,
) -> tuple[JsonlStore, Any]:
    """The run's store, stamped with its settings, and the temporary folder that holds it when
    the user gave none (else ``None``). A user's file is checked for this model's rows made with
    other settings (refused unless ``keep_both``), and with ``keep_both`` the answers that only
    another judge labelled are copied in to be judged again."""
    own_store = store is None
    if own_store:
        import tempfile

        tmp = tempfile.TemporaryDirectory()
    elif isinstance(store, JsonlStore) and store.key_fields != ("model", "id"):
        raise ValueError(f"the eval store is keyed by ('model', 'id'), got {store.key_fields}")
    settings_all = _eval_settings(
        backend, name, judging.name, judging.judge, temperature, max_tokens, system_prompt
    )
    if own_store:
        st = JsonlStore(Path(tmp.name) / "eval.jsonl", ("model", "id"), settings=settings_all)
        return st, tmp
    path = store.path if isinstance(store, JsonlStore) else Path(store)
    remedy = store.remedy if isinstance(store, JsonlStore) else None  # a pipeline's own advice
    st = JsonlStore(
        path, ("model", "id"), settings=settings_all, on_mismatch="separate", remedy=remedy
    )
    siblings = _other_runs(st, name, keep_both)
    _reuse_answers(items, st, name, siblings, settings_all)
    return st, None


class _Evaluation:
    """Algorithm 5 for one model over its store: re-judge the stored answers, ask the model
    for the prompts still to do and judge each answer, then read the rows back."""

    def __init__(
        self,
        backend: Any,
        items: list[dict[str, Any]],
        st: JsonlStore,
        name: str,
        judging: _Judging,
        temperature: float | None,
        max_tokens: int | None,
        system_prompt: str | None,
    ) -> None:
        self.backend = backend
        self.items = items
        self.st = st
        self.name = name
        self.judging = judging
        self.system_prompt = system_prompt
        self.sampling = {"temperature": temperature, "max_tokens": max_tokens}
        self.settings = {**self.sampling, "system_prompt": system_prompt}

    def messages(self, prompt: str) -> list[dict[str, str]]:
        """One user turn (after the system turn, when there is one)."""
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*head, {"role": "user", "content": prompt}]

    def stale(self, rec: Mapping[str, Any]) -> bool:
        """A stored answer made with other settings: the model is asked again."""
        return rec.get("settings") != self.settings

    def warn_stale(self) -> None:
        """Warn (at the caller of :func:`evaluate`) about the stored answers asked again."""
        st, name = self.st, self.name
        n_stale = sum(
            1
            for it in self.items
            if st.is_done((name, it["id"])) and self.stale(st.get((name, it["id"])))
        )
        if n_stale:
            warnings.warn(
                f"{n_stale} stored answer(s) of {name!r} were produced with other settings than "
                f"{self.settings}; asking the model again for them",
                stacklevel=3,
            )

    def rejudge_stored(self) -> None:
        """Judge the stored answers again where this run's judge says to (:func:`_rejudge`)."""
        j = self.judging
        _rejudge(
            self.items, self.st, self.name, j.name, j.llm_judge, j.keyword, j.count, self.stale
        )

    def answer_and_judge(self, concurrency: int, retry_errors: bool, progress: bool | None) -> None:
        """Ask the model for every prompt still to do and judge each answer: a local model in
        batches (:func:`_evaluate_batched`), any other backend ``concurrency`` requests at a
        time, each row written to the store as it arrives."""
        backend, j = self.backend, self.judging
        inner = getattr(backend, "backend", None)
        native = getattr(backend, "native_batching", False) or getattr(
            inner, "native_batching", False
        )
        if native:
            _evaluate_batched(
                backend,
                self.items,
                self.st,
                self.name,
                j.name,
                j.llm_judge,
                j.keyword,
                j.count,
                self.messages,
                self.sampling,
                self.settings,
                retry_errors,
                progress,
                self.stale,
            )
            return
        name = self.name
        run_resumable(
            self.items,
            self.answer_one,
            self.st,
            key=lambda i, it: {"model": name, "id": it["id"]},
            concurrency=concurrency,
            retry_errors=retry_errors,
            progress=progress,
            desc=f"evaluating {name}",
            redo=self.stale,
        )

    def answer_one(self, item: dict[str, Any]) -> dict[str, Any]:
        """One prompt: the model's answer and its judgement, as a store row."""
        j = self.judging
        c = _complete(self.backend, self.messages(item["prompt"]), self.sampling)
        label = None
        if j.llm_judge is not None and not (c.blocked or not (c.text or "").strip()):
            label = j.llm_judge.judge(item["prompt"], c.text)
        row = _row(item, c, j.name, keyword=j.keyword, label=label, unparseable_as_refusal=j.count)
        return {**row, "settings": self.settings}

    def result(self) -> EvalResult:
        """The judged rows and the failed requests, in the records' order."""
        rows, failures = [], []
        for it in self.items:
            rec = self.st.get((self.name, it["id"]))
            if rec is None:
                continue
            if "error" in rec:
                failures.append(
                    (it["id"], rec["error"].get("type", ""), rec["error"].get("message", ""))
                )
            else:
                rows.append(rec)
        return EvalResult(self.name, self.items[0]["subset"], rows, failures)


def _describe_judge(judge: Any) -> Any:
    """What a judge contributes to a row: :func:`~icml25.llm.describe` (a detector's class and
    parameters, an LLM judge's backend and prompts, a plain function's code, defaults and
    closure: two lambdas share a name but not a verdict)."""
    return describe(judge)


def _eval_settings(backend, name, judge_name, judge, temperature, max_tokens, system_prompt):
    """Everything besides the prompt that makes an evaluation row (its store's settings)."""
    return {
        "model": name,
        "backend": {**backend_identity(backend), "identity": describe(backend)},
        "sampling": {"temperature": temperature, "max_tokens": max_tokens},
        "system_prompt": system_prompt,
        "judge": {"name": judge_name, "detector": _describe_judge(judge)},
    }


def _other_runs(st: JsonlStore, name: str, keep_both: bool) -> dict[str | None, dict[str, Any]]:
    """The rows of model ``name`` in ``st``'s file made with other settings, by fingerprint
    (``None``: rows written without one). Without ``keep_both`` any such row is refused with a
    :class:`~icml25.llm.SettingsMismatch` naming the fields that differ."""
    import json

    others: dict[str | None, dict[str, Any]] = {}
    if st.path.exists():
        with open(st.path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn line
                if not isinstance(rec, dict) or rec.get("model") != name or "id" not in rec:
                    continue
                fp = rec.get(SETTINGS_FIELD)
                if fp != st.fingerprint:
                    others.setdefault(fp, {})[rec["id"]] = rec
    if not others or keep_both:
        return others
    fp, rows = next(iter(others.items()))
    raise settings_mismatch(st, fp, len(rows), whose=f"of {name!r} ")


def _reuse_answers(items, st, name, siblings, settings) -> None:
    """With ``keep_both``: the answers another run made with this run's model, backend,
    sampling and system prompt (only the judge differs) are copied into this run's rows
    (labelled by the judge they had); :func:`_rejudge` then judges them again, so the model is
    not asked again and no other judge's verdict is returned."""
    same = {k: v for k, v in settings.items() if k != "judge"}
    for fp, rows in siblings.items():
        known = st.settings_in_file.get(fp) if fp is not None else None
        if (
            not isinstance(known, Mapping)
            or {k: v for k, v in known.items() if k != "judge"} != same
        ):
            continue
        for it in items:
            rec = rows.get(it["id"])
            if rec is None or "error" in rec or st.get((name, it["id"])) is not None:
                continue
            copy = {k: v for k, v in rec.items() if k != SETTINGS_FIELD}
            st.append({**copy, "judge": f"{rec.get('judge')} (another run)"})


def _default_name(backend: Any) -> str:
    """``backend.name``, with the weights' fingerprint for a local model (two in-memory models
    of one architecture share a name, not a store row)."""
    name = str(getattr(backend, "name", "") or type(backend).__name__)
    ident = getattr(backend, "cache_identity", None)
    if callable(ident) and getattr(backend, "native_batching", False):
        return str(ident())
    return name


def _complete(backend: Any, messages: list[dict[str, str]], sampling: dict[str, Any]) -> Completion:
    """One completion; a backend with only ``chat`` (the bare protocol) gets a plain one."""
    if callable(getattr(backend, "complete", None)):
        return backend.complete(messages, **sampling)[0]
    return Completion(backend.chat(messages, **sampling)[0])


def _rejudge(items, st, name, judge_name, llm_judge, keyword, count, stale) -> None:
    """Stored answers made with the same settings: a keyword judge is re-applied to every one
    (it is cheap, and a function's name says nothing of what it does); an LLM judge judges again
    the answers another judge labelled. No new request reaches the model."""
    todo = []
    for it in items:
        rec = st.get((name, it["id"]))
        if rec is None or "error" in rec or stale(rec):
            continue
        if llm_judge is None or rec.get("judge") != judge_name:
            todo.append((it, rec))
    if not todo:
        return
    comps = [
        Completion(r.get("response") or "", r.get("finish_reason"), bool(r.get("blocked")))
        for _, r in todo
    ]
    labels: list[Any] = [None] * len(todo)
    if llm_judge is not None:
        idx = [j for j, c in enumerate(comps) if not c.blocked and c.text.strip()]
        for j, lab in zip(
            idx,
            llm_judge.judge_many([todo[j][0]["prompt"] for j in idx], [comps[j].text for j in idx]),
        ):
            labels[j] = lab
    for (it, rec), c, lab in zip(todo, comps, labels):
        key = {"model": name, "id": it["id"]}
        if isinstance(lab, BaseException):
            st.append_error(key, lab, prompt=it["prompt"], response=c.text)
            continue
        row = _row(it, c, judge_name, keyword=keyword, label=lab, unparseable_as_refusal=count)
        new = {**key, **row, "settings": rec.get("settings")}
        if any(new.get(k) != rec.get(k) for k in new):  # only a changed judgement is written
            st.append(new)


def _evaluate_batched(
    backend,
    items,
    st,
    name,
    judge_name,
    llm_judge,
    keyword,
    count,
    messages,
    sampling,
    settings,
    retry_errors,
    progress,
    stale,
) -> None:
    """A local model: send the pending prompts in chunks through ``complete_many`` (one batched
    forward per chunk) and write each chunk's rows; a chunk is what a crash can lose."""
    from icml25.progress import track

    def todo(it: dict[str, Any]) -> bool:
        k = (name, it["id"])
        return (
            st.get(k) is None
            or (retry_errors and st.is_failed(k))
            or (st.is_done(k) and stale(st.get(k)))
        )

    pending = [it for it in items if todo(it)]
    chunk = max(
        1,
        int(
            getattr(backend, "batch_size", 0)
            or getattr(getattr(backend, "backend", None), "batch_size", 16)
        ),
    )
    chunk *= 4
    starts = range(0, len(pending), chunk)
    disable = None if progress is None else not progress
    for s in track(starts, f"evaluating {name}", total=len(starts), disable=disable):
        part = pending[s : s + chunk]
        results = backend.complete_many(
            [messages(it["prompt"]) for it in part], **sampling, errors="return"
        )
        labels: list[Any] = [None] * len(part)
        if llm_judge is not None:
            todo = [
                j
                for j, r in enumerate(results)
                if not isinstance(r, BaseException) and not r[0].blocked and r[0].text.strip()
            ]
            judged = llm_judge.judge_many(
                [part[j]["prompt"] for j in todo], [results[j][0].text for j in todo]
            )
            for j, lab in zip(todo, judged):
                labels[j] = lab
        for it, r, lab in zip(part, results, labels):
            key = {"model": name, "id": it["id"]}
            if isinstance(r, BaseException):
                st.append_error(key, r, prompt=it["prompt"])
            elif isinstance(lab, BaseException):
                st.append_error(key, lab, prompt=it["prompt"], response=r[0].text)
            else:
                row = _row(
                    it, r[0], judge_name, keyword=keyword, label=lab, unparseable_as_refusal=count
                )
                st.append({**key, **row, "settings": settings})
    st.sync()
