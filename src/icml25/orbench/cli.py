"""``icml25 orbench``: build an OR-Bench-style dataset with your models, evaluate a model on it
(or on the released files), and compare models.

    icml25 orbench build --base-url URL --generator G --rewriter R --moderator M1 --moderator M2 \\
        --moderator M3 [--panel P1 --panel P2 --panel P3] --out DIR
    icml25 orbench eval --model NAME --base-url URL --data or-bench/ --subset hard-1k \\
        [--judge keyword|keyword:gpt-4|llm:NAME] --out results/
    icml25 orbench compare results/ --plot tradeoff.png

A model is ``NAME`` (served at ``--base-url``), ``NAME@URL`` (its own endpoint) or ``hf:PATH``
(a local Hugging Face model, loaded by :func:`icml25.llm.load_model` with ``--device`` and
``--dtype``; a prompt longer than its context is an error row). Every stage writes a resumable JSONL store: rerun the same command
after a crash and it goes on where it stopped. No torch import at module level.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

from icml25.llm.loading import add_model_args, model_kwargs


def add_parser(sub) -> None:
    p = sub.add_parser(
        "orbench",
        help="OR-Bench: build, evaluate, compare (paper 03)",
        description=__doc__.split("\n\n")[0],
    )
    osub = p.add_subparsers(dest="orbench_command", metavar="{build,eval,compare}")
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1], parser=p)

    def endpoint(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--base-url", default=None, help="OpenAI-compatible endpoint for NAME models"
        )
        q.add_argument("--api-key", default=None, help="API key (default $OPENAI_API_KEY)")
        q.add_argument("--cache", default=None, help="SQLite file caching every call (CachedChat)")
        q.add_argument("--concurrency", type=int, default=8, help="requests in flight (8)")
        q.add_argument("--retry-errors", action="store_true", help="retry items that failed before")
        q.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
        add_model_args(q)  # for hf:PATH models

    b = osub.add_parser("build", help="Algorithms 1-4: seeds, rewrites, moderation, subsets")
    b.add_argument(
        "--generator", required=True, help="toxic-seed generator G (paper: Mixtral-8x7B)"
    )
    b.add_argument("--rewriter", required=True, help="rewriter R (paper: Mixtral-8x7B)")
    b.add_argument(
        "--moderator",
        action="append",
        required=True,
        help="a moderator (repeat; paper: GPT-4-turbo, Llama-3-70b, Gemini-1.5-pro)",
    )
    b.add_argument(
        "--panel", action="append", default=[], help="a panel model for the hard subset (repeat)"
    )
    b.add_argument("--out", required=True, help="output folder (one JSONL store per stage)")
    b.add_argument(
        "--categories", default=None, help="comma-separated categories (default: all 10)"
    )
    b.add_argument("--n-seeds", type=int, default=2000, help="toxic seeds per category (2000)")
    b.add_argument(
        "--k-min", type=int, default=3, help="panel refusals that make a prompt hard (3)"
    )
    b.add_argument(
        "--toxic-per-category", type=int, default=66, help="toxic control prompts per category (66)"
    )
    b.add_argument(
        "--rule", default="majority", help="ensemble vote: majority, unanimous or an integer"
    )
    b.add_argument(
        "--no-remoderate",
        action="store_true",
        help="skip the unanimous re-moderation of hard prompts",
    )
    endpoint(b)
    b.set_defaults(func=_cmd_build, parser=b)

    e = osub.add_parser("eval", help="Algorithm 5: a model's refusal rate on a subset")
    e.add_argument("--model", required=True, help="NAME, NAME@URL or hf:PATH")
    e.add_argument(
        "--data", required=True, help="a CSV/JSONL/Parquet file or the folder of the official files"
    )
    e.add_argument("--subset", default="hard-1k", help="80k, hard-1k or toxic (default hard-1k)")
    e.add_argument(
        "--judge",
        default="keyword",
        help="keyword (default), keyword:FAMILY (official rules: gpt-3.5, gpt-4, claude, "
        "gemini, mistral, llama, qwen, or a model name such as mistral-7b; for mistral "
        "see --mistral-quirk), xstest, or llm:MODEL",
    )
    e.add_argument(
        "--mistral-quirk",
        action="store_true",
        help="with --judge keyword:mistral (or a mistral-* name): keep the official "
        "Mistral checker's quirk, which lower-cases the response but not the keywords "
        "and so never flags a refusal (default: both sides lower-cased)",
    )
    e.add_argument("--out", required=True, help="results folder (one JSONL per model and subset)")
    e.add_argument("--max-tokens", type=int, default=1000, help="answer length (paper: 1000)")
    e.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (paper: 0)")
    e.add_argument("--system-prompt", default=None, help="an optional system turn (paper: none)")
    e.add_argument("--limit", type=int, default=None, help="evaluate only the first N prompts")
    e.add_argument(
        "--name",
        default=None,
        help="the model's label in the results (keys the store and the file name; "
        "default: --model as given). Give distinct names to distinct servers that "
        "serve one model name",
    )
    e.add_argument(
        "--keep-both",
        action="store_true",
        help="the store holds this model's rows made with other settings (another "
        "judge, sampling or backend): keep both runs' rows apart instead of refusing; "
        "this run never reports the other run's verdicts",
    )
    endpoint(e)
    e.set_defaults(func=_cmd_eval, parser=e)

    c = osub.add_parser("compare", help="Fig. 1: over-refusal vs toxic rejection across models")
    c.add_argument("results", help="the --out folder of `icml25 orbench eval` runs")
    c.add_argument("--plot", default=None, help="write the trade-off figure (PNG)")
    c.add_argument("--hard-subset", default="hard-1k", help="subset read as over-refusal (hard-1k)")
    c.add_argument("--toxic-subset", default="toxic", help="subset read as toxic rejection (toxic)")
    c.add_argument("--bootstrap", type=int, default=0, help="prompt resamples for a CI of rho (0)")
    c.set_defaults(func=_cmd_compare, parser=c)


def slug(name: str) -> str:
    """A file-name-safe form of a model name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


def make_backend(choice: str, args: argparse.Namespace) -> Any:
    """``hf:PATH`` -> HFChat (on ``--device``, in ``--dtype``); ``NAME@URL`` -> OpenAIChat(URL,
    NAME); ``NAME`` -> at --base-url."""
    from icml25.llm import CachedChat, HFChat, OpenAIChat

    if not isinstance(choice, str) or not choice.strip():
        raise ValueError(f"a model must be NAME, NAME@URL or hf:PATH, got {choice!r}")
    if choice.startswith("hf:"):
        backend = HFChat(choice[3:], **model_kwargs(args))
    else:
        name, _, url = choice.rpartition("@") if "@http" in choice else (choice, "", None)
        url = url or args.base_url
        if not url:
            raise ValueError(
                f"model {choice!r} needs an endpoint: pass --base-url URL or write NAME@URL"
            )
        backend = OpenAIChat(url, name, api_key=args.api_key, concurrency=args.concurrency)
    if args.cache:
        backend = CachedChat(backend, args.cache)
    return backend


def _judge(choice: str, args: argparse.Namespace) -> Any:
    from icml25.orbench import KeywordRefusalDetector, LLMRefusalJudge
    from icml25.orbench.refusal import MISTRAL_QUIRK_WARNING, official_detector

    quirk = bool(getattr(args, "mistral_quirk", False))
    if quirk and not choice.startswith("keyword:"):
        raise ValueError(
            f"--mistral-quirk applies to --judge keyword:mistral (or keyword:mistral-*), "
            f"got --judge {choice!r}"
        )
    if choice == "keyword":
        return KeywordRefusalDetector.default()
    if choice == "xstest":
        return KeywordRefusalDetector.xstest()
    if choice.startswith("keyword:"):
        det = official_detector(choice.split(":", 1)[1], mistral_quirk=quirk)
        if quirk and not det.name.startswith("official:mistral"):
            raise ValueError(
                f"--mistral-quirk applies to --judge keyword:mistral (or keyword:mistral-*), "
                f"got --judge {choice!r} ({det.name})"
            )
        if quirk:
            print(f"WARNING: {MISTRAL_QUIRK_WARNING}", file=sys.stderr)
        return det
    if choice.startswith("llm:"):
        return LLMRefusalJudge(make_backend(choice[4:], args))
    raise ValueError(
        f"--judge must be keyword, keyword:FAMILY, xstest or llm:MODEL, got {choice!r}"
    )


def _check_common(args: argparse.Namespace) -> None:
    if args.concurrency < 1:
        raise ValueError(f"--concurrency must be a positive integer, got {args.concurrency}")


def _cmd_build(args: argparse.Namespace) -> int:
    from icml25.llm.store import SettingsMismatch
    from icml25.orbench import CATEGORIES, build_orbench
    from icml25.orbench.categories import normalize_category

    try:
        _check_common(args)
        cats = (
            [normalize_category(c) for c in args.categories.split(",")]
            if args.categories
            else CATEGORIES
        )
        rule: Any = int(args.rule) if args.rule.isdigit() else args.rule
        gen, rw = make_backend(args.generator, args), make_backend(args.rewriter, args)
        mods = [make_backend(m, args) for m in args.moderator]
        panel = {m: make_backend(m, args) for m in args.panel} or None
    except ValueError as exc:
        args.parser.error(str(exc))
    try:
        report = build_orbench(
            gen,
            rw,
            mods,
            out_dir=args.out,
            categories=cats,
            n_seeds=args.n_seeds,
            panel=panel,
            k_min=min(args.k_min, len(args.panel)) if panel else args.k_min,
            toxic_per_category=args.toxic_per_category,
            rule=rule,
            remoderate=None if args.no_remoderate else "unanimous",
            concurrency=args.concurrency,
            retry_errors=args.retry_errors,
            progress=not args.quiet,
        )
    except SettingsMismatch as exc:  # a store in --out holds rows made with other settings
        print(f"icml25 orbench build: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"interrupted; rerun the same command to go on from {args.out}", file=sys.stderr)
        return 130
    print(report.summary(), file=sys.stderr)
    if report.n_failed:
        first = json.loads(Path(report.files["failed"]).read_text(encoding="utf-8").split("\n")[0])
        print(
            f"first failure: {first['stage']} {first['key']}: {first['type']}: "
            f"{first['message'][:300]}; rerun with --retry-errors to retry the failed "
            "rewrite/moderation items (failed generator calls are always retried)",
            file=sys.stderr,
        )
    return 1 if report.n_failed else 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from icml25.llm.base import BackendUnavailableError
    from icml25.llm.store import SettingsMismatch
    from icml25.orbench import evaluate, load_orbench

    try:
        _check_common(args)
        if args.max_tokens < 1:
            raise ValueError(f"--max-tokens must be a positive integer, got {args.max_tokens}")
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit must be a positive integer, got {args.limit}")
        if not args.temperature >= 0:
            raise ValueError(f"--temperature must be >= 0, got {args.temperature}")
        records = load_orbench(args.data, args.subset)
        if args.limit:
            records = records[: args.limit]
        judge = _judge(args.judge, args)
        backend = make_backend(args.model, args)
    except (ValueError, FileNotFoundError) as exc:
        args.parser.error(str(exc))
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        args.parser.error(f"cannot create --out {str(out)!r}: {exc}")
    subset = records[0].subset
    label = args.name or args.model
    store = out / f"{slug(label)}__{subset}.jsonl"
    try:
        with warnings.catch_warnings():  # the Mistral quirk was warned about above, once
            warnings.filterwarnings("ignore", message=".*never flags a refusal")
            res = evaluate(
                backend,
                records,
                detector=judge,
                store=store,
                concurrency=args.concurrency,
                temperature=args.temperature,
                max_tokens=args.max_tokens,
                system_prompt=args.system_prompt,
                subset=subset,
                model=label,
                retry_errors=args.retry_errors,
                progress=not args.quiet,
                keep_both=args.keep_both,
            )
    except SettingsMismatch as exc:
        print(f"icml25 orbench eval: error: {exc}", file=sys.stderr)
        return 2
    except BackendUnavailableError as exc:  # the server is down (a circuit breaker opened)
        res = _stored_result(backend, records, judge, label, subset, args, store)
        _print_eval(res, subset, store, error=f"{type(exc).__name__}: {exc}")
        print(
            f"icml25 orbench eval: error: the model's server is unavailable: {exc}. The "
            f"answers so far are kept in {store}; rerun the same command to go on",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(
            f"interrupted; the answers so far are in {store}: rerun the same command to go on",
            file=sys.stderr,
        )
        return 130
    _print_eval(res, subset, store)
    return 1 if res.n_failed else 0


def _first_failure(res: Any) -> str | None:
    """``"ID: TYPE: MESSAGE"`` of the first failed request of ``res`` (``None``: none failed)."""
    if not res.failures:
        return None
    first = res.failures[0]
    return f"{first[0]}: {first[1]}: {first[2][:300]}"


def _print_eval(res: Any, subset: str, store: Path, *, error: str | None = None) -> None:
    """The JSON summary on stdout (strict JSON: an undefined rate is null, never NaN; with the
    first failure's cause when a request failed, and ``error`` when the run stopped early), the
    summary line and the first failure's cause on stderr."""
    from icml25.llm.store import json_safe

    summary = {
        "model": res.model,
        "subset": subset,
        "rate": res.rate,
        "n": res.n,
        "n_blocked": res.n_blocked,
        "n_parse_failed": res.n_parse_failed,
        "n_failed": res.n_failed,
        "per_category": res.per_category,
        "store": str(store),
        "first_failure": _first_failure(res),
    }
    if error is not None:
        summary["error"] = error
    print(json.dumps(json_safe(summary), indent=1, allow_nan=False))
    print(res.summary(), file=sys.stderr)
    if res.n_failed:
        print(
            f"first failure: {_first_failure(res)}; rerun with --retry-errors to retry the "
            "failed prompts",
            file=sys.stderr,
        )


def _stored_result(backend, records, judge, label, subset, args, store) -> Any:
    """What ``store`` holds of this run (its model, backend, sampling and judge): an
    :class:`~icml25.orbench.evaluation.EvalResult` of the rows written before the run stopped."""
    from icml25.llm.store import JsonlStore
    from icml25.orbench.evaluation import EvalResult, _eval_settings, _items, _judge_of

    items = _items(records, subset)
    judge_name, judge_obj = _judge_of(judge)
    settings = _eval_settings(
        backend, label, judge_name, judge_obj, args.temperature, args.max_tokens, args.system_prompt
    )
    rows, failures = [], []
    with JsonlStore(store, ("model", "id"), settings=settings, on_mismatch="separate") as st:
        for it in items:
            rec = st.get((label, it["id"]))
            if rec is None:
                continue
            if "error" in rec:
                err = rec["error"]
                failures.append((it["id"], err.get("type", ""), err.get("message", "")))
            else:
                rows.append(rec)
    return EvalResult(label, subset, rows, failures)


def read_results(folder: str | Path) -> dict[str, dict[str, Any]]:
    """``{subset: {model: EvalResult}}`` from the JSONL stores of ``icml25 orbench eval``."""
    from icml25.llm.store import SETTINGS_FIELD
    from icml25.orbench.evaluation import EvalResult

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"results folder {str(folder)!r} does not exist")
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        # one run per (model, settings fingerprint): a store kept with --keep-both holds two
        # runs of a model, reported apart (the later run under the model's name), never mixed
        last: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn line
                if isinstance(rec, dict) and "model" in rec and "id" in rec:
                    last[(rec["model"], rec["id"], rec.get(SETTINGS_FIELD))] = rec
        by_run: dict[tuple[str, str, Any], list[dict[str, Any]]] = {}
        for (model, _, run), rec in last.items():
            if "error" not in rec:
                by_run.setdefault((model, rec.get("subset", ""), run), []).append(rec)
        runs: dict[tuple[str, str], list[Any]] = {}
        for model, subset, run in by_run:
            runs.setdefault((model, subset), []).append(run)
        for (model, subset, run), rows in by_run.items():
            label = model if run == runs[(model, subset)][-1] else f"{model}#{run}"
            out.setdefault(subset, {})[label] = EvalResult(label, subset, rows)
    if not out:
        raise ValueError(
            f"no evaluation results (*.jsonl from `icml25 orbench eval`) in {str(folder)!r}"
        )
    return out


def _cmd_compare(args: argparse.Namespace) -> int:
    from icml25.orbench import compare_models, plot_tradeoff

    try:
        if args.plot and not args.plot.lower().endswith(".png"):
            raise ValueError(f"--plot writes a PNG file; got {args.plot!r} (use a .png name)")
        results = read_results(args.results)
        for s in (args.hard_subset, args.toxic_subset):
            if s not in results:
                raise ValueError(
                    f"no results for subset {s!r} in {args.results}; found: {', '.join(results)}"
                )
        summary = compare_models(
            results[args.hard_subset], results[args.toxic_subset], bootstrap=args.bootstrap
        )
    except (ValueError, FileNotFoundError) as exc:
        args.parser.error(str(exc))
    print(summary.to_markdown())
    if args.plot:
        plot_tradeoff(summary, args.plot)
        print(f"figure: {args.plot}", file=sys.stderr)
    return 0
