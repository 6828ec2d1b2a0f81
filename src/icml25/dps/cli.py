"""``icml25 dps run``: DPS on your own images and questions, against any OpenAI-compatible
vision model, resumable.

    icml25 dps run --model openai:Qwen2-VL-7B-Instruct --base-url http://localhost:8000/v1 \\
        --images imgs/ --questions q.jsonl --out dps.jsonl [--crop auto] [--helper openai:gpt-4o-mini]
    icml25 dps run --model hf:./Qwen2-VL-2B-Instruct --device cuda --dtype bf16 ...

A local model (``hf:PATH``, a ``save_pretrained`` folder) loads through ``icml25.llm.load_model``
on ``--device`` in ``--dtype``: a vision-language model for ``--model``
(:class:`~icml25.dps.backends.HFVisionChat`), a causal LM for ``--helper`` (``HFChat``).

``q.jsonl`` rows: ``{"image": "cat.png", "question": "...", "id": "optional"}`` (images relative
to ``--images``). Each answer (final, initial, weak answers, observations, trace) is appended to
``--out`` as it arrives, keyed by the item's id and ``content`` (a hash of the image file's bytes
and the question) and stamped with ``_settings``, the fingerprint of the model name and the
defence's settings (not the server URL, so a restarted server on another port resumes). A rerun skips what is done and retries failed rows; other settings, or
an edited question under the same id, are answered afresh, so two configurations never mix. A
failing item (including an empty final answer) is an error row and the others go on. No torch
import at module level.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from icml25.llm.loading import add_model_args, model_kwargs


def add_parser(sub) -> None:
    top = sub.add_parser("dps", help="DPS defence for vision-language models (paper 08)")
    inner = top.add_subparsers(dest="dps_command", required=True)
    p = inner.add_parser("run", help="defended answers for images + questions (resumable JSONL)")
    p.add_argument(
        "--model",
        required=True,
        help="openai:NAME (an OpenAI-compatible vision server at --base-url) or hf:PATH "
        "(a local vision-language model folder)",
    )
    p.add_argument("--base-url", default=None)
    p.add_argument("--api-key", default=None, help="API key (default $OPENAI_API_KEY)")
    p.add_argument(
        "--images", required=True, help="folder of the images named in the questions file"
    )
    p.add_argument(
        "--questions", required=True, help="JSONL rows with 'image' and 'question' (and 'id')"
    )
    p.add_argument("--out", required=True, help="results JSONL (resumable)")
    p.add_argument("--crop", default="center", choices=["center", "random", "auto"])
    p.add_argument("--agents", type=int, default=1, help="weak agents K (auto uses 3)")
    p.add_argument(
        "--helper",
        default="rule",
        help="'rule' (offline), openai:NAME (same --base-url unless --helper-url) or hf:PATH "
        "(a local chat model)",
    )
    p.add_argument("--helper-url", default=None)
    p.add_argument("--workers", type=int, default=4, help="queries in flight")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-tokens", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--image-once",
        action="store_true",
        help="send the image once per conversation (a server limited to 1 image per request)",
    )
    p.add_argument(
        "--crop-format",
        default="png",
        choices=["png", "jpeg"],
        help="encoding of the crops (jpeg: re-encoded as the official code does)",
    )
    p.add_argument(
        "--jpeg-quality",
        type=int,
        default=None,
        help="with --crop-format jpeg only (default 75); an error with png crops",
    )
    p.add_argument(
        "--keep-both",
        action="store_true",
        help="--out holds rows of other settings: keep both runs' rows instead of refusing",
    )
    p.add_argument("-q", "--quiet", action="store_true")
    add_model_args(p)  # for hf:PATH models
    p.set_defaults(func=_cmd_run)


def _backend(
    choice: str,
    base_url: str | None,
    api_key: str | None,
    *,
    vision: bool = True,
    model_kw: dict[str, Any] | None = None,
) -> Any:
    kind, name = _parse_choice(choice, base_url)
    if kind == "hf":
        if vision:
            from icml25.dps.backends import HFVisionChat

            return HFVisionChat(name, **(model_kw or {}))
        from icml25.llm import HFChat

        return HFChat(name, **(model_kw or {}))
    from icml25.llm import OpenAIChat

    return OpenAIChat(base_url, name, api_key=api_key)


def _parse_choice(choice: str, base_url: str | None) -> tuple[str, str]:
    """``("hf", PATH)`` or ``("openai", NAME)``; ``ValueError`` for anything else (cheap: nothing
    loads)."""
    kind, _, name = choice.partition(":")
    if kind == "hf" and name:
        return kind, name
    if kind != "openai" or not name:
        raise ValueError(
            f"{choice!r}: use openai:NAME with --base-url (an OpenAI-compatible server)"
            " or hf:PATH (a local model folder)"
            " (for --helper: 'rule' for the offline helper)"
        )
    if not base_url:
        raise ValueError(f"{choice}: needs --base-url")
    return kind, name


def _cmd_run(args: argparse.Namespace) -> int:
    from icml25.llm import BackendUnavailableError, JsonlStore, SettingsMismatch, run_resumable

    try:
        model_kw = model_kwargs(args)
        _parse_choice(args.model, args.base_url)
        if args.helper != "rule":
            _parse_choice(args.helper, args.helper_url or args.base_url)
        folder = Path(args.images)
        if not folder.is_dir():
            raise ValueError(f"--images {folder} is not a folder")
        rows = _read_questions(Path(args.questions), folder)
        _check_run_args(args)
        # Models load last: a bad questions file fails before minutes of loading.
        lvlm, helper, dps = _build_defense(args, model_kw)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    local = any(str(s).startswith("hf:") for s in (args.model, args.helper))
    workers = 1 if local else args.workers  # one local model answers one query at a time

    def work(row: dict[str, Any]) -> dict[str, Any]:
        res = dps.respond(folder / row["image"], row["question"], seed=args.seed)
        if not res.final.strip():
            raise ValueError("the model's final answer is empty")
        return res.to_dict()

    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        print(f"error: two rows of {args.questions} share the id {dup!r}", file=sys.stderr)
        return 2
    try:
        store = JsonlStore(
            args.out,
            key=("id", "content"),
            settings=_run_settings(args, lvlm, helper, local),
            on_mismatch="separate" if args.keep_both else "refuse",
        )
    except (SettingsMismatch, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        with store:
            report = run_resumable(
                rows,
                work,
                store,
                key=lambda i, r: _row_key(folder, r),
                concurrency=workers,
                retry_errors=True,
                progress=not args.quiet,
                desc="DPS",
            )
    except BackendUnavailableError as exc:  # the server is down (a circuit breaker opened)
        print(
            f"error: the model's server is unavailable: {exc}. The answers so far are kept in "
            f"{args.out}; rerun the same command to resume",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(
            f"interrupted: the answers so far are in {args.out}; rerun the same command to resume",
            file=sys.stderr,
        )
        return 130
    _print_run_report(report, rows)
    return 0 if report.n_failed == 0 else 1


def _read_questions(path: Path, folder: Path) -> list[dict[str, str]]:
    """The rows of a ``--questions`` JSONL file (``image``, ``question``, optional ``id``, the
    line number by default), each image checked to exist under ``folder``."""
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}, line {n}: not valid JSON ({exc.msg})") from None
        if (
            not isinstance(r, dict)
            or not isinstance(r.get("image"), str)
            or not isinstance(r.get("question"), str)
        ):
            raise ValueError(f"{path}, line {n}: needs string 'image' and 'question' fields")
        if not (folder / r["image"]).exists():
            raise ValueError(f"{path}, line {n}: no image {folder / r['image']}")
        rid = r.get("id", n)
        if (
            isinstance(rid, bool)
            or not isinstance(rid, (str, int))
            or (isinstance(rid, str) and not rid.strip())
        ):
            raise ValueError(
                f"{path}, line {n}: 'id' must be a non-empty string or an integer, got {rid!r}"
            )
        rows.append({"id": str(rid), "image": r["image"], "question": r["question"]})
    if not rows:
        raise ValueError(f"{path} holds no rows")
    return rows


def _check_run_args(args: argparse.Namespace) -> None:
    """Refuse option combinations that cannot run, and fill in the defaults that depend on
    others (the JPEG quality, three agents under ``--crop auto``)."""
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    if Path(args.out).is_dir():
        raise ValueError(
            f"--out {args.out} is a folder; give the results file, e.g. {Path(args.out) / 'dps.jsonl'}"
        )
    if args.jpeg_quality is not None and args.crop_format != "jpeg":
        raise ValueError(
            f"--jpeg-quality {args.jpeg_quality} applies only with --crop-format jpeg "
            f"(got --crop-format {args.crop_format}): add --crop-format jpeg or drop "
            "--jpeg-quality"
        )
    if args.jpeg_quality is None:
        args.jpeg_quality = 75  # the official code's JPEG quality
    if args.crop == "auto":  # auto always runs three views
        if args.agents not in (1, 3):
            print(
                f"note: --crop auto runs 3 agents; --agents {args.agents} ignored",
                file=sys.stderr,
            )
        args.agents = 3


def _build_defense(args: argparse.Namespace, model_kw: dict[str, Any]) -> tuple[Any, Any, Any]:
    """The LVLM, the helper (rule-based or a text model) and the defence around them."""
    from icml25.dps import DPSDefense, LLMHelper, RuleHelper

    lvlm = _backend(args.model, args.base_url, args.api_key, model_kw=model_kw)
    if args.helper == "rule":
        helper = RuleHelper()
    else:
        url = args.helper_url or args.base_url
        helper = LLMHelper(
            _backend(args.helper, url, args.api_key, vision=False, model_kw=model_kw)
        )
    dps = DPSDefense(
        lvlm,
        helper,
        crop=args.crop,
        n_agents=args.agents,
        seed=args.seed,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        image_once=args.image_once,
        crop_format=args.crop_format,
        jpeg_quality=args.jpeg_quality,
    )
    return lvlm, helper, dps


def _run_settings(args: argparse.Namespace, lvlm: Any, helper: Any, local: bool) -> dict[str, Any]:
    """Everything that makes a row besides the item: the models, the defence's settings."""
    from icml25.llm.store import describe

    return {
        "pipeline": "dps run",
        "model": args.model,
        # a local model: its name and a fingerprint of its weights; a server's model is named by
        # --model (its URL may change between runs: a restarted server resumes)
        "backend": describe(lvlm) if local else None,
        "helper": args.helper,
        "helper_backend": describe(helper.backend) if str(args.helper).startswith("hf:") else None,
        "crop": args.crop,
        "agents": args.agents,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "image_once": args.image_once,
        "crop_format": args.crop_format,
        "jpeg_quality": args.jpeg_quality if args.crop_format == "jpeg" else None,
        # a local model's answers depend on its precision: other dtypes, other rows
        "dtype": str(args.dtype) if local else None,
    }


def _row_key(folder: Path, row: dict[str, str]) -> dict[str, str]:
    """A row's key: its id and its own content (the image file's bytes, not its name, and the
    question), with the image name and question kept beside them."""
    from icml25.llm.store import content_hash

    content = content_hash(content_hash(folder / row["image"]).encode() + row["question"].encode())
    return {"id": row["id"], "content": content, "image": row["image"], "question": row["question"]}


def _print_run_report(report: Any, rows: list[dict[str, str]]) -> None:
    print(
        f"{report.n_items} items: {report.n_ok} done now, {report.n_skipped} done before, "
        f"{report.n_failed} failed"
    )
    if report.failures:
        # the item's id and image name, and the cause in full (not the row's content hash)
        first = report.failures[0]
        row = next((r for r in rows if r["id"] == first.key[0]), {})
        print(
            f"first failure: id {first.key[0]!r} (image {row.get('image')!r}): "
            f"{first.error_type}: {first.message}; a rerun retries the failed items",
            file=sys.stderr,
        )
