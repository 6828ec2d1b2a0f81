"""``icml25 safety_reasoning`` (alias ``safety-reasoning``): SRG on your own models and data.

    icml25 safety_reasoning synthesize --teacher openai:MODEL --base-url URL --queries q.jsonl --out syn.jsonl
    icml25 safety_reasoning train --model PATH --data syn.jsonl --out DIR
    icml25 safety_reasoning eval --model PATH --queries harmful.jsonl --attacks cipher,template --templates t.txt --judge keyword
    icml25 safety_reasoning bon --model PATH --queries prompts.jsonl --n 1,4,16,64 --judge guard:hf:PATH

Models are ``openai:NAME`` (an OpenAI-compatible server at ``--base-url``), ``hf:PATH`` or a
local path (a Hugging Face causal LM with a chat template). Judges are ``keyword`` (a refusal is
safe), ``guard:openai:NAME`` or ``guard:hf:PATH`` (Llama-Guard-3). Every local model (the model,
teacher, judge and rewriter) loads through ``icml25.llm.load_model`` with ``--device`` and
``--dtype`` (default: the GPU when there is one, in the checkpoint's own precision). Synthesis
resumes from ``<out>.records.jsonl``. No torch import at module level.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_parser(sub) -> None:
    from icml25.llm.loading import add_model_args

    top = sub.add_parser(
        "safety_reasoning",
        aliases=["safety-reasoning"],
        help="Safety Reasoning with Guidelines: synthesize, train, eval, bon (paper 11)",
    )
    inner = top.add_subparsers(dest="srg_command", required=True)

    def model_args(p: argparse.ArgumentParser, flag: str = "--model") -> None:
        p.add_argument(
            flag, required=True, help="openai:NAME (with --base-url), hf:PATH or a local path"
        )
        p.add_argument(
            "--base-url", default=None, help="OpenAI-compatible endpoint for openai:NAME"
        )
        p.add_argument("--api-key", default=None, help="API key (default $OPENAI_API_KEY)")

    s = inner.add_parser(
        "synthesize", help="guideline-following reasoning from a teacher, with rejection sampling"
    )
    model_args(s, "--teacher")
    s.add_argument(
        "--queries",
        required=True,
        help="JSONL/JSON/CSV/Parquet with a text column and 'kind' (harmful|helpful)",
    )
    s.add_argument(
        "--kind",
        default=None,
        choices=["harmful", "helpful"],
        help="kind of every query (when there is no kind column)",
    )
    s.add_argument(
        "--out", required=True, help="accepted examples (JSONL); records in <out>.records.jsonl"
    )
    s.add_argument(
        "--keep-both",
        action="store_true",
        help="the records file holds rows of other settings (teacher, filters...): keep both runs "
        "apart instead of refusing",
    )
    s.add_argument("--k", type=int, default=4, help="candidates per query and round (4)")
    s.add_argument("--temperature", type=float, default=0.8, help="teacher temperature (0.8)")
    s.add_argument(
        "--max-rounds", type=int, default=1, help="rounds for a query with no accepted candidate"
    )
    s.add_argument(
        "--guideline-judge",
        default="teacher",
        help="'teacher' (the same backend), 'none', or openai:NAME/hf:PATH",
    )
    s.add_argument("--min-guidelines", type=int, default=1)
    s.add_argument("--tags", default="<think>,</think>", help="reasoning tags OPEN,CLOSE")
    s.add_argument("--max-tokens", type=int, default=1024)
    s.add_argument("--concurrency", type=int, default=8)
    s.add_argument("--seed", type=int, default=0)
    add_model_args(s)
    s.set_defaults(func=_cmd_synthesize)

    t = inner.add_parser(
        "train", help="SFT on synthesised examples (SRG) or (query, target) rows (RT)"
    )
    t.add_argument(
        "--model", required=True, help="local path of a Hugging Face causal LM with a chat template"
    )
    t.add_argument(
        "--data", required=True, help="synthesize's output, or JSONL rows with 'query' and 'target'"
    )
    t.add_argument("--out", required=True, help="folder for the trained model (save_pretrained)")
    t.add_argument("--tags", default="<think>,</think>")
    t.add_argument("--lr", type=float, default=1e-5)
    t.add_argument("--epochs", type=float, default=3.0)
    t.add_argument("--batch-size", type=int, default=8)
    t.add_argument("--max-length", type=int, default=2048)
    t.add_argument("--lora-r", type=int, default=0, help="LoRA rank (0: full fine-tuning)")
    t.add_argument("--seed", type=int, default=0)
    add_model_args(t)
    t.set_defaults(func=_cmd_train)

    for name, helptext in (("eval", "greedy ASR per attack"), ("bon", "Best-of-N ASR curve")):
        e = inner.add_parser(name, help=helptext)
        model_args(e)
        e.add_argument(
            "--queries",
            required=True,
            help=(
                "plain harmful requests (JSONL/JSON/CSV; with a kind column only the harmful rows)"
                if name == "eval"
                else "attack prompts: a JailbreakBench artifact, HarmBench test cases, rows with "
                "'prompt', or plain harmful requests"
            ),
        )
        e.add_argument(
            "--judge", default="keyword", help="keyword, guard:openai:NAME or guard:hf:PATH"
        )
        e.add_argument("--judge-base-url", default=None)
        e.add_argument("--tags", default="<think>,</think>")
        e.add_argument("--max-tokens", type=int, default=512)
        e.add_argument("--seed", type=int, default=0)
        e.add_argument("--out", default=None, help="write the results as JSON here")
        add_model_args(e)
        if name == "eval":
            e.add_argument(
                "--attacks",
                default="plain,cipher",
                help="comma list of plain, cipher, atbash, ascii, selfcipher, template, past, persuasion",
            )
            e.add_argument(
                "--templates",
                default=None,
                help="template file (one per blank-line-separated block, with {query})",
            )
            e.add_argument(
                "--rewriter",
                default=None,
                help="openai:NAME/hf:PATH for past/persuasion (default: --model)",
            )
            e.set_defaults(func=_cmd_eval)
        else:
            e.add_argument(
                "--n",
                default="1,2,4,8,16,32,64,128",
                help="comma list of N (max = samples per prompt)",
            )
            e.add_argument("--temperature", type=float, default=1.0)
            e.add_argument("--estimator", default="prefix", choices=["prefix", "unbiased"])
            e.set_defaults(func=_cmd_bon)


# -- helpers ----------------------------------------------------------------------------------------
def backend_of(
    choice: str,
    base_url: str | None = None,
    api_key: str | None = None,
    model_kw: dict[str, Any] | None = None,
) -> Any:
    """A chat backend from ``openai:NAME``, ``hf:PATH`` or a local path; a local model loads
    through ``icml25.llm.load_model`` with ``model_kw`` (``device``/``dtype``/``device_map``,
    from :func:`icml25.llm.model_kwargs`)."""
    kind, _, name = choice.partition(":")
    if kind == "openai" and name:
        from icml25.llm import OpenAIChat

        if not base_url:
            raise ValueError(f"{choice}: openai:NAME needs --base-url")
        return OpenAIChat(base_url, name, api_key=api_key)
    path = name if kind == "hf" and name else choice
    if not Path(path).exists():
        raise ValueError(
            f"model {choice!r}: give openai:NAME (with --base-url), hf:PATH or an existing local path"
        )
    from icml25.llm import HFChat, load_model, load_tokenizer

    tok = load_tokenizer(path)
    if not getattr(tok, "chat_template", None):  # before loading the weights
        raise ValueError(
            f"model {choice!r}: its tokenizer has no chat template; set one in the folder's "
            "tokenizer_config.json (the model's own) before evaluating or sampling it"
        )
    return HFChat(load_model(path, **(model_kw or {})), tok, require_template=True)


def judge_of(choice: str, base_url: str | None, model_kw: dict[str, Any] | None = None) -> Any:
    from icml25.safety_reasoning.evaluation import LlamaGuardJudge, RefusalKeywordJudge

    if choice == "keyword":
        return RefusalKeywordJudge()
    if choice.startswith("guard:"):
        return LlamaGuardJudge(backend_of(choice.removeprefix("guard:"), base_url, None, model_kw))
    raise ValueError(f"--judge {choice!r}: use keyword, guard:openai:NAME or guard:hf:PATH")


def fmt_of(tags: str) -> Any:
    from icml25.safety_reasoning.formats import ReasoningFormat

    parts = tags.split(",")
    if len(parts) != 2:
        raise ValueError(f"--tags must be OPEN,CLOSE, got {tags!r}")
    return ReasoningFormat(parts[0].strip(), parts[1].strip())


def _fail(exc: BaseException) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return 2


def _write(path: str | None, data: Any) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=2))
        print(f"wrote {path}")


# -- commands ---------------------------------------------------------------------------------------
def _cmd_synthesize(args: argparse.Namespace) -> int:
    from icml25.llm import BackendUnavailableError, KeywordRefusalDetector, model_kwargs
    from icml25.safety_reasoning import (
        FormatFilter,
        GuidelineFilter,
        OutcomeFilter,
        load_queries,
        synthesize,
    )

    try:
        mkw = model_kwargs(args)
        teacher = backend_of(args.teacher, args.base_url, args.api_key, mkw)
        queries = load_queries(args.queries, kind=args.kind)
        fmt = fmt_of(args.tags)
        filters: list[Any] = [FormatFilter(), OutcomeFilter(KeywordRefusalDetector.default())]
        if args.guideline_judge != "none":
            if args.guideline_judge == "teacher":
                judge = teacher
            else:
                try:
                    judge = backend_of(args.guideline_judge, args.base_url, args.api_key, mkw)
                except ValueError as exc:
                    raise ValueError(
                        f"--guideline-judge: use teacher, none, openai:NAME or hf:PATH ({exc})"
                    ) from None
            filters.append(GuidelineFilter(judge, min_guidelines=args.min_guidelines))
        out = Path(args.out)
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as exc:
        return _fail(exc)
    records = out.with_name(out.name + ".records.jsonl")
    try:
        rep = synthesize(
            teacher,
            queries,
            k=args.k,
            temperature=args.temperature,
            filters=filters,
            store=records,
            concurrency=args.concurrency,
            fmt=fmt,
            max_rounds=args.max_rounds,
            max_tokens=args.max_tokens,
            seed=args.seed,
            keep_both=args.keep_both,
        )
    except (ValueError, TypeError, FileNotFoundError) as exc:  # bad settings, SettingsMismatch
        return _fail(exc)
    except BackendUnavailableError as exc:  # the teacher's server is down (a breaker opened)
        print(f"error: the teacher's server is unavailable: {exc}", file=sys.stderr)
        print(
            f"synthesis stopped: the queries done are kept in {records}; rerun the same "
            "command to ask the others",
            file=sys.stderr,
        )
        return 1
    except RuntimeError as exc:  # the run's requests failed (every query failed)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"interrupted; the queries done are kept in {records}: rerun the same command to go on",
            file=sys.stderr,
        )
        return 130
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for ex in rep.examples:
            f.write(json.dumps(ex.to_dict()) + "\n")
    print(rep.summary())
    for qid, err in list(rep.errors.items())[:3]:
        print(f"  failed {qid}: {err}", file=sys.stderr)
    print(f"wrote {len(rep.examples)} examples to {out}")
    if rep.failed:
        print(
            f"error: {len(rep.failed)} of {len(queries)} queries failed (first: "
            f"{next(iter(rep.errors.values()), '?')}); rerun the same command to ask them "
            f"again, their error rows are in {records}",
            file=sys.stderr,
        )
        return 1
    if not rep.examples:
        print("error: no candidate was accepted; see the rejects above", file=sys.stderr)
        return 1
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from icml25.llm import load_model, load_tokenizer, model_kwargs
    from icml25.safety_reasoning import build_srg_dataset, sft
    from icml25.safety_reasoning.data import SRGExample

    try:
        mkw = model_kwargs(args)
        rows = [
            json.loads(line)
            for line in Path(args.data).read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        if not rows:
            raise ValueError(f"{args.data} holds no rows")
        if all("reasoning" in r for r in rows):
            pairs = build_srg_dataset([SRGExample.from_dict(r) for r in rows], fmt_of(args.tags))
        elif all("query" in r and "target" in r for r in rows):
            pairs = [(str(r["query"]), str(r["target"])) for r in rows]
        else:
            raise ValueError(
                f"{args.data}: rows need synthesize's fields (query, kind, reasoning, answer) or query + target"
            )
        if not Path(args.model).exists():
            raise ValueError(f"--model {args.model!r} is not a local folder")
        tok = load_tokenizer(args.model)
        model = load_model(args.model, **mkw)
        dtype = next(model.parameters()).dtype  # saved in it (sft trains fp32 master weights)
        lora = None
        if args.lora_r > 0:
            from peft import LoraConfig

            lora = LoraConfig(
                r=args.lora_r,
                lora_alpha=2 * args.lora_r,
                target_modules="all-linear",
                task_type="CAUSAL_LM",
            )
        model = sft(
            model,
            tok,
            pairs,
            lr=args.lr,
            epochs=args.epochs,
            batch_size=args.batch_size,
            max_length=args.max_length,
            lora=lora,
            seed=args.seed,
        )
    except (ValueError, TypeError, FileNotFoundError, json.JSONDecodeError) as exc:
        return _fail(exc)
    if lora is None:  # the checkpoint in the precision it was loaded in (LoRA adapters stay fp32)
        model.to(dtype)
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    print(f"trained on {len(pairs)} examples; saved to {args.out}")
    return 0


def _plain_prompts(path: str) -> list[str]:
    """The harmful requests of a query file: with a ``kind`` column only the harmful rows (the
    others are reported and left out); without one every row."""
    from icml25.safety_reasoning.data import _rows, load_queries

    rows = _rows(path)
    if rows and "kind" in rows[0]:
        qs = load_queries(rows)
        harmful = [q.text for q in qs if q.kind == "harmful"]
        if len(harmful) < len(qs):
            print(
                f"note: {len(qs) - len(harmful)} helpful rows of {path} left out (attacks use harmful requests)",
                file=sys.stderr,
            )
        if not harmful:
            raise ValueError(f"{path} has no harmful rows")
        return harmful
    return [q.text for q in load_queries(rows, kind="harmful")]


def _attack_prompts(path: str) -> list[Any]:
    """Attack prompts for ``bon``: a JailbreakBench artifact or HarmBench test-case JSON, or rows
    with a ``prompt`` column, through ``load_attack_prompts``; else the harmful requests."""
    from icml25.safety_reasoning import load_attack_prompts

    try:
        return load_attack_prompts(path)
    except ValueError:
        return _plain_prompts(path)


def _cmd_eval(args: argparse.Namespace) -> int:
    from icml25.llm import model_kwargs
    from icml25.safety_reasoning import (
        CipherAttack,
        PastTenseAttack,
        PersuasionAttack,
        TemplateAttack,
        apply_attack,
        asr,
    )

    try:
        mkw = model_kwargs(args)
        backend = backend_of(args.model, args.base_url, args.api_key, mkw)
        judge = judge_of(args.judge, args.judge_base_url or args.base_url, mkw)
        fmt = fmt_of(args.tags)
        plain = _plain_prompts(args.queries)
        attacks: dict[str, Any] = {}
        for a in [x.strip() for x in args.attacks.split(",") if x.strip()]:
            if a == "plain":
                attacks[a] = None
            elif a in ("cipher", "caesar", "atbash", "ascii", "selfcipher"):
                attacks[a] = CipherAttack({"cipher": "caesar", "selfcipher": "self"}.get(a, a))
            elif a == "template":
                if not args.templates:
                    raise ValueError("--attacks template needs --templates FILE")
                blocks = [
                    b.strip()
                    for b in Path(args.templates).read_text(encoding="utf-8").split("\n\n")
                    if b.strip()
                ]
                attacks[a] = TemplateAttack(blocks, seed=args.seed)
            elif a in ("past", "persuasion"):
                rw = (
                    backend_of(args.rewriter, args.base_url, args.api_key, mkw)
                    if args.rewriter
                    else backend
                )
                attacks[a] = (PastTenseAttack if a == "past" else PersuasionAttack)(
                    rw, seed=args.seed
                )
            else:
                raise ValueError(
                    f"unknown attack {a!r}: use plain, cipher, atbash, ascii, selfcipher, template, past, persuasion"
                )
        results = {}
        for name, attack in attacks.items():
            prompts = plain if attack is None else apply_attack(attack, plain)
            items = [{"prompt": p, "goal": g} for p, g in zip(prompts, plain)]
            res = asr(
                backend,
                items,
                judge,
                fmt=fmt,
                max_tokens=args.max_tokens,
                judge_on="goal",
                judge_full_text=True,
            )
            print(f"{name:12s} {res.summary()}")
            results[name] = {
                "asr": res.asr,
                "n": res.n,
                "unknown": res.n_unknown,
                "truncated": res.n_truncated,
                "leaked": res.leaked,
                "records": res.records,
            }
    except (ValueError, TypeError, FileNotFoundError, RuntimeError) as exc:
        return _fail(exc)
    _write(args.out, results)
    return 0


def _cmd_bon(args: argparse.Namespace) -> int:
    from icml25.llm import model_kwargs
    from icml25.safety_reasoning import best_of_n

    try:
        try:
            ns = [int(x) for x in args.n.split(",") if x.strip()]
        except ValueError:
            raise ValueError(
                f"--n must be a comma list of integers, e.g. 1,4,16,64; got {args.n!r}"
            ) from None
        mkw = model_kwargs(args)
        backend = backend_of(args.model, args.base_url, args.api_key, mkw)
        judge = judge_of(args.judge, args.judge_base_url or args.base_url, mkw)
        res = best_of_n(
            backend,
            _attack_prompts(args.queries),
            judge,
            ns,
            temperature=args.temperature,
            estimator=args.estimator,
            max_tokens=args.max_tokens,
            seed=args.seed,
            fmt=fmt_of(args.tags),
            greedy=True,
        )
    except (ValueError, TypeError, FileNotFoundError) as exc:
        return _fail(exc)
    print(res.summary())
    _write(
        args.out,
        {
            "estimator": res.estimator,
            "asr": res.asr,
            "asr_other": res.asr_other,
            "greedy": res.greedy.asr if res.greedy else None,
            "matrix": res.matrix.tolist(),
        },
    )
    return 0
