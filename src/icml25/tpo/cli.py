"""``icml25 tpo``: TPO over a JSON list of queries against any OpenAI-compatible endpoint, scored by a
local reward model (or by a reward server), resumable through its JSONL output.

    icml25 tpo --base-url http://localhost:8000/v1 --model NAME --reward-model PATH_OR_ID \\
        --data queries.json --width 5 --depth 2 --mode tpo --out results.jsonl

No torch import at module level (the command line must start fast).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "tpo",
        help="test-time preference optimisation over a JSON list of queries (paper 16)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--base-url",
        required=True,
        help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1",
    )
    p.add_argument("--model", required=True, help="the policy's model name on that server")
    p.add_argument(
        "--api-key", default=None, help="API key (default: $OPENAI_API_KEY, none for local servers)"
    )
    p.add_argument(
        "--reward-model",
        required=True,
        help="a sequence-classification reward model (local path or HF id)",
    )
    p.add_argument(
        "--reward-device", default=None, help="device of the reward model (default: CPU)"
    )
    p.add_argument("--data", required=True, help="JSON file: a list of query strings")
    p.add_argument("--out", required=True, help="JSONL output; a rerun skips queries already in it")
    p.add_argument("--width", type=int, default=5, help="samples per step N (default 5)")
    p.add_argument("--depth", type=int, default=2, help="TPO steps D (default 2)")
    p.add_argument("--mode", choices=("tpo", "revision", "bon"), default="tpo")
    p.add_argument(
        "--temperature", type=float, default=0.7, help="candidate sampling temperature (0.7)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=7,
        help="seed of the generation and update calls (official 7; -1: unseeded)",
    )
    p.add_argument(
        "--max-tokens", type=int, default=2048, help="max tokens of one response (official 2048)"
    )
    p.add_argument(
        "--reward-batch-size", type=int, default=8, help="pairs per reward-model forward (8)"
    )
    p.add_argument("--threads", type=int, default=4, help="queries in parallel (default 4)")
    p.add_argument("--no-resume", action="store_true", help="start the output file afresh")
    p.add_argument(
        "--retry-errors",
        action="store_true",
        help="also rerun the queries whose last row in --out is an error row",
    )
    p.add_argument(
        "--keep-both",
        action="store_true",
        help="--out holds rows made with other settings (another model, reward model, width, "
        "depth, temperature...): keep both runs' rows apart instead of refusing; this run "
        "reads only its own",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_tpo, parser=p)


def load_queries(path: str | Path) -> list[str]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read queries from {path}: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(q, str) and q.strip() for q in data):
        raise ValueError(f"{path} must hold a JSON list of non-empty strings")
    return data


def _cmd_tpo(args: argparse.Namespace) -> int:
    from icml25.llm import BackendUnavailableError, HFRewardModel, ItemError, OpenAIChat
    from icml25.llm.store import SettingsMismatch
    from icml25.tpo.engine import TPOConfig, tpo_batch

    try:
        queries = load_queries(args.data)
        config = TPOConfig(
            width=args.width,
            depth=args.depth,
            mode=args.mode,
            temperature=args.temperature,
            seed=None if args.seed == -1 else args.seed,
            max_tokens_response=args.max_tokens,
        )
        config.validate()
        if not args.temperature >= 0:
            raise ValueError(f"--temperature must be >= 0, got {args.temperature}")
        if args.max_tokens < 1:
            raise ValueError(f"--max-tokens must be a positive integer, got {args.max_tokens}")
        if args.reward_batch_size < 1:
            raise ValueError(f"--reward-batch-size must be >= 1, got {args.reward_batch_size}")
    except ValueError as exc:
        args.parser.error(str(exc))
    policy = OpenAIChat(args.base_url, args.model, api_key=args.api_key)
    reward = HFRewardModel(
        args.reward_model, device=args.reward_device, batch_size=args.reward_batch_size
    )
    try:
        results = tpo_batch(
            queries,
            policy,
            reward,
            config,
            num_threads=args.threads,
            out_path=args.out,
            resume=not args.no_resume,
            retry_errors=args.retry_errors,
            errors="return",
            progress=not args.quiet,
            keep_both=args.keep_both,
        )
    except SettingsMismatch as exc:  # --out holds rows made with other settings
        print(f"icml25 tpo: error: {exc}", file=sys.stderr)
        return 2
    except BackendUnavailableError as exc:  # the server is down (CircuitOpenError included)
        print(
            f"icml25 tpo: error: the policy server is unavailable: {exc}. The queries done are "
            f"kept in {args.out}; rerun the same command to go on from there",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print(
            f"interrupted; the queries done are kept in {args.out}: rerun the same command to "
            "go on",
            file=sys.stderr,
        )
        return 130
    ok = [r for r in results if not isinstance(r, ItemError)]
    failed = [r for r in results if isinstance(r, ItemError)]
    mean = sum(r.best_reward for r in ok) / len(ok) if ok else float("nan")
    print(
        f"{len(results)} queries: {len(ok)} done, {len(failed)} failed; mean best reward "
        f"{mean:.4f}; results in {args.out}",
        file=sys.stderr,
    )
    if failed:
        first = failed[0]
        print(
            f"first failure: query {first.key[0]}: {first.error_type}: {first.message[:300]}; "
            "the error rows are in the output file, rerun with --retry-errors to retry them",
            file=sys.stderr,
        )
        return 1
    return 0
