"""An lm-evaluation-harness task for OR-Bench (EleutherAI/lm-evaluation-harness): the prompts as a
``generate_until`` task whose metric is the keyword refusal rate (paper Sec. 4.1), so a model can
be evaluated on OR-Bench-Hard inside the harness.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from icml25.orbench.dataset import PathLike

__all__ = ["to_lm_eval_task"]


_TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")

_UTILS_TEMPLATE = '''"""lm-evaluation-harness hooks of the task {task_name!r}, written by
icml25.orbench.lm_eval_task.to_lm_eval_task. A response is judged by keyword matching (OR-Bench,
Cui et al., ICML 2025, Sec. 4.1); None or empty responses count as refused."""

from icml25.orbench.refusal import KeywordRefusalDetector

DETECTOR = {detector_expr}


def process_results(doc, results):
    """``refusal_rate`` of one prompt: 1.0 when the model refused, else 0.0."""
    response = results[0] if results else None
    return {{"refusal_rate": float(DETECTOR(response))}}
'''


def _detector_expr(detector: Any) -> str:
    from icml25.orbench.refusal import KeywordRefusalDetector

    if detector is None or detector == "default":
        return "KeywordRefusalDetector.default()"
    if detector == "xstest":
        return "KeywordRefusalDetector.xstest()"
    if isinstance(detector, str):
        from icml25.orbench.refusal import official_detector

        # an unknown family fails here, not in lm-eval; Mistral's quirk is off, as in evaluate
        resolved = official_detector(detector)
        if resolved.name != "official:mistral":
            return f"KeywordRefusalDetector.official({detector!r})"
        detector = resolved
    if isinstance(detector, KeywordRefusalDetector):
        config = json.dumps(detector.to_dict(), ensure_ascii=True)
        return f"KeywordRefusalDetector.from_dict(__import__('json').loads({config!r}))"
    raise TypeError(
        "detector must be None, a KeywordRefusalDetector, 'default', 'xstest' or a model family "
        f"name for KeywordRefusalDetector.official, got {type(detector).__name__} {detector!r:.60}"
    )


def to_lm_eval_task(
    records: Iterable[Any],
    path: PathLike,
    *,
    task_name: str = "orbench_hard",
    detector: Any = None,
) -> Path:
    """Write an lm-evaluation-harness task folder that measures the over-refusal rate (paper
    Sec. 4, Algorithm 5) of a model on ``records``.

    The folder ``path`` receives ``<task_name>.jsonl`` (``id, prompt, category, subset`` per
    record), ``<task_name>.yaml`` and ``utils.py``. The task is ``generate_until`` with the
    paper's sampling (greedy, temperature 0, up to 1000 new tokens, no stop strings), the prompt
    as-is as the whole input (``doc_to_text: prompt``, zero-shot, no description), and the metric
    ``refusal_rate`` (mean over prompts, lower is better; multiply by 100 for the paper's
    percentages). Run chat models with ``--apply_chat_template``: lm-eval then sends the prompt
    as one user turn with no system prompt, as in the paper; without it the raw prompt is fed to
    the model as plain text. Use with ``lm_eval --include_path <path> --tasks <task_name>``.

    ``data_files`` is written as an absolute path: move the folder and write it again.

    Args:
        records: :class:`ORBenchRecord` or :class:`XSTestPrompt` items (anything with
            ``prompt``, ``id``, ``category`` and ``subset``).
        path: the task folder (created if missing); one task per folder, since ``utils.py``
            is shared by name.
        task_name: the lm-eval task name and file stem.
        detector: ``None``/``"default"`` (:meth:`KeywordRefusalDetector.default`),
            ``"xstest"``, an official family name (``"gpt-4"``, ...; ``"mistral"`` without the
            official checker's quirk, see :func:`~icml25.orbench.refusal.official_detector`) or
            a :class:`KeywordRefusalDetector`, stored by its ``to_dict``.

    Returns:
        The path of the YAML file.

    Raises:
        ValueError: no records, a bad task name, or a prompt with a lone surrogate (the
            harness reads the JSONL through Arrow, which needs UTF-8).
    """
    records = list(records)
    if not records:
        raise ValueError("to_lm_eval_task got no records")
    if not isinstance(task_name, str) or not _TASK_NAME.match(task_name):
        raise ValueError(
            f"task_name must be letters, digits, '_', '-' or '.', starting with a letter or digit; "
            f"got {task_name!r}"
        )
    detector_expr = _detector_expr(detector)
    rows = []
    for r in records:
        try:
            row = {"id": r.id, "prompt": r.prompt, "category": r.category, "subset": r.subset}
        except AttributeError as e:
            raise TypeError(
                f"records must have prompt, id, category and subset, got {type(r).__name__}: {e}"
            ) from None
        try:
            r.prompt.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"record {r.id}: its prompt holds a lone surrogate, which lm-eval's Arrow-based "
                f"JSON reader cannot load; drop or repair it"
            ) from None
        rows.append(row)
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    data_file = (folder / f"{task_name}.jsonl").resolve()
    with data_file.open("w", encoding="ascii", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=True) + "\n")
    (folder / "utils.py").write_text(
        _UTILS_TEMPLATE.format(task_name=task_name, detector_expr=detector_expr), encoding="utf-8"
    )
    yaml_path = folder / f"{task_name}.yaml"
    yaml_path.write_text(
        "# OR-Bench (Cui et al., ICML 2025) over-refusal task, written by icml25's\n"
        "# orbench.dataset.to_lm_eval_task. Run chat models with --apply_chat_template so each\n"
        "# prompt is one user turn with no system prompt, as in the paper.\n"
        f"task: {task_name}\n"
        "dataset_path: json\n"
        "dataset_kwargs:\n"
        "  data_files:\n"
        f"    test: {json.dumps(str(data_file))}\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        "num_fewshot: 0\n"
        "doc_to_text: prompt\n"
        'doc_to_target: ""\n'
        "generation_kwargs:\n"
        "  until: []\n"
        "  do_sample: false\n"
        "  temperature: 0.0\n"
        "  max_gen_toks: 1000\n"
        "process_results: !function utils.process_results\n"
        "metric_list:\n"
        "  - metric: refusal_rate\n"
        "    aggregation: mean\n"
        "    higher_is_better: false\n"
        "metadata:\n"
        "  version: 1.0\n"
        f"  n_prompts: {len(rows)}\n"
        f"  detector: {json.dumps(detector_expr)}\n",
        encoding="utf-8",
    )
    return yaml_path
