"""Translation quality for real runs: chrF (sacrebleu, pure Python) beside the MQM-style penalty
of the synthetic task; COMET and MetricX are the user's to add (their models are downloads)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["chrf", "translate_with_backend"]


def chrf(hypotheses: Sequence[str], references: Sequence[str], *, word_order: int = 0) -> float:
    """Corpus chrF (``word_order=2``: chrF++) with sacrebleu's defaults, 0-100."""
    try:
        import sacrebleu
    except ImportError as exc:  # pragma: no cover - the `mt` extra
        raise ImportError("chrf needs sacrebleu: pip install 'icml25[mt]'") from exc
    if isinstance(hypotheses, str) or isinstance(references, str):
        raise TypeError("hypotheses and references are lists of strings")
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(
            f"need as many hypotheses as references, at least one; got {len(hypotheses)} and "
            f"{len(references)}"
        )
    return float(
        sacrebleu.corpus_chrf(list(hypotheses), [list(references)], word_order=word_order).score
    )


def translate_with_backend(
    backend,
    sources: Sequence[str],
    *,
    prompt_template: str = "Translate into the target language. Reply with the translation "
    "only.\n\n{source}",
    store=None,
    concurrency: int = 4,
    max_tokens: int | None = 256,
    retry_errors: bool = False,
    progress: bool | None = None,
) -> list[str | None]:
    """Greedy (temperature 0) translations of ``sources`` from any :class:`icml25.llm`
    backend: an OpenAI-compatible server (vLLM, llama.cpp, ``transformers serve``, OpenAI) or a
    local Hugging Face model. ``store`` (a JSONL path or :class:`~icml25.llm.JsonlStore`) makes
    the run resumable: a killed run loses at most the requests in flight, and a failing item is
    an error row (``None`` in the result) without losing the others. A path's rows are keyed by
    the index and the source, stamped with the backend's identity, the prompt and ``max_tokens``
    (another model or prompt into the same file raises ``SettingsMismatch``, naming it). Feed the outputs to
    :func:`chrf` or to an annotator."""
    from pathlib import Path

    from icml25.llm import JsonlStore
    from icml25.llm.store import describe, run_resumable

    if isinstance(sources, str) or not all(isinstance(s, str) for s in sources):
        raise TypeError("sources must be a list of strings")
    if "{source}" not in prompt_template:
        raise ValueError(f"prompt_template must contain {{source}}, got {prompt_template!r}")
    import tempfile

    tmp = None
    if isinstance(store, JsonlStore):
        st = store
    else:
        if store is None:  # no resume asked for: a scratch file, removed at the end
            tmp = tempfile.TemporaryDirectory()
            store = Path(tmp.name) / "translations.jsonl"
        # a row is the translation of this source by this backend with this prompt: another
        # model, prompt or source list into the same file is refused, never served
        settings = {
            "pipeline": "twa.translate_with_backend",
            "backend": describe(backend),
            "prompt_template": prompt_template,
            "max_tokens": max_tokens,
        }
        st = JsonlStore(Path(store), ("index", "source"), settings=settings)

    def work(item):
        i, src = item
        msg = [{"role": "user", "content": prompt_template.format(source=src)}]
        (text,) = backend.chat(msg, temperature=0.0, max_tokens=max_tokens)
        return {"translation": text.strip()}

    items = list(enumerate(sources))
    run_resumable(
        items,
        work,
        st,
        key=lambda i, it: {"index": it[0], "source": it[1]},
        concurrency=concurrency,
        retry_errors=retry_errors,
        progress=progress,
        desc="translating",
    )
    out: list[str | None] = []
    for i in range(len(sources)):
        rec = st.get((i, sources[i]) if len(st.key_fields) == 2 else i)
        out.append(None if rec is None or "error" in rec else rec["translation"])
    if tmp is not None:
        st.close()
        tmp.cleanup()
    else:
        st.sync()
    return out
