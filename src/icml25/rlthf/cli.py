"""``icml25 rlthf curate``: RLTHF on your own preference data (TRL's prompt/chosen/rejected rows).

    icml25 rlthf curate --pairs prefs.jsonl --labeler openai:MODEL --base-url URL \\
        --human dataset --rm minilm --out runs/rlthf

The AI labeller answers every pair (resumable JSONL in ``--out``); the human is the dataset's
own preference (``--human dataset``, as the paper uses HH-RLHF's and TL;DR's labels) or a real
annotator through a CSV round trip (``--human csv:FILE``: the run stops, you fill the file, you
rerun). The curated set is written as TRL rows with a ``weight`` column. Everything resumes.

No torch import at module level (the command line must start fast).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(sub) -> None:
    top = sub.add_parser("rlthf", help="RLTHF data curation on your own preference data (paper 18)")
    inner = top.add_subparsers(dest="rlthf_command", required=True)
    p = inner.add_parser(
        "curate",
        help="AI labels + targeted human feedback -> curated TRL rows",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--pairs",
        required=True,
        help="TRL preference rows: .jsonl/.json/.csv/.parquet "
        "or a datasets folder; 'chosen' is the human preference",
    )
    p.add_argument(
        "--labeler",
        required=True,
        help="AI labeller: openai:MODEL (with --base-url) or hf:PATH (a local chat "
        "model; labels from the next-token probabilities of A and B)",
    )
    p.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint for openai:MODEL")
    p.add_argument("--api-key", default=None, help="API key (default: $OPENAI_API_KEY)")
    p.add_argument("--guidelines", default="", help="task guidelines for the AI labeller")
    p.add_argument(
        "--human",
        default="dataset",
        help="'dataset' (the rows' own chosen side) or csv:FILE (a real annotator)",
    )
    p.add_argument(
        "--rm",
        default="minilm",
        help="reward model: minilm, hashing, or a path to a sequence-classification "
        "checkpoint (fine-tuned from it each iteration)",
    )
    p.add_argument("--iterations", type=int, default=3, help="RLTHF iterations (3)")
    p.add_argument("--budget", type=float, default=0.02, help="human fraction per iteration (0.02)")
    p.add_argument("--amplification", type=float, default=5.0, help="human-label weight (5)")
    p.add_argument("--backoff-ratio", type=float, default=0.5, help="back-off ratio rho (0.5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=4, help="AI-labeller requests in flight")
    p.add_argument("--out", required=True, help="output folder (resumable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    _add_model_args(p)
    p.set_defaults(func=_cmd_curate, parser=p)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """``--device``/``--dtype``/``--device-map`` for the models the command loads (an hf:PATH
    labeller, a checkpoint --rm, the MiniLM encoder); imported lazily (no torch at start-up)."""
    from icml25.llm.loading import add_model_args

    add_model_args(p)


def _reward_model(args: argparse.Namespace, out: Path):
    """The reward model of ``--rm``: the MiniLM or hashing embedding model (MiniLM on the CPU in
    float32 unless ``--device``/``--dtype`` say otherwise), or a sequence-classification
    checkpoint loaded with ``--device``/``--dtype``."""
    from icml25.llm import model_kwargs
    from icml25.rlthf import EmbeddingRewardModel, TrainableHFRewardModel

    kw = model_kwargs(args)
    if args.rm in ("minilm", "hashing"):
        encoder = args.rm
        if args.rm == "minilm" and (args.device != "auto" or args.dtype != "auto"):
            from icml25.rlthf.reward_model import minilm_encoder

            encoder = minilm_encoder(device=kw["device"], dtype=kw["dtype"])
            encoder.name = f"minilm-{args.device}-{args.dtype}"  # its own embedding cache
        return EmbeddingRewardModel(encoder=encoder, cache_dir=out / "cache")
    if kw["device_map"] is not None:
        raise ValueError("--device-map: the reward model is retrained on one device; use --device")
    try:
        return TrainableHFRewardModel(args.rm, device=kw["device"], dtype=kw["dtype"])
    except OSError as exc:  # a name transformers could not resolve offline
        raise ValueError(
            f"--rm {args.rm!r}: {exc}. Pass minilm, hashing or a local folder holding a "
            "sequence-classification checkpoint (save_pretrained output)"
        ) from None


def _cmd_curate(args: argparse.Namespace) -> int:
    from icml25.rlthf import (
        ChatLabeler,
        CSVHumanLabeler,
        HumanOracle,
        PreferencePairs,
        RLTHFConfig,
        run_rlthf,
    )
    from icml25.rlthf.labelers import AnnotationPending

    out = Path(args.out)
    try:
        if args.concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {args.concurrency}")
        pairs = PreferencePairs.from_trl(args.pairs, seed=args.seed)
        config = RLTHFConfig(
            iterations=args.iterations,
            budget_per_iter=args.budget,
            amplification=args.amplification,
            backoff_ratio=args.backoff_ratio,
            seed=args.seed,
        )
        kind, _, name = args.labeler.partition(":")
        if kind == "openai" and name:
            from icml25.llm import OpenAIChat

            if not args.base_url:
                raise ValueError("--labeler openai:MODEL needs --base-url")
            backend = OpenAIChat(args.base_url, name, api_key=args.api_key)
        elif kind == "hf" and name:
            from icml25.llm import HFChat, load_model, load_tokenizer, model_kwargs

            model = load_model(name, "causal_lm", **model_kwargs(args))
            backend = HFChat(model, load_tokenizer(name))
        else:
            raise ValueError(f"--labeler must be openai:MODEL or hf:PATH, got {args.labeler!r}")
        if args.human == "dataset":
            human = HumanOracle(pairs.human_labels)
        elif args.human.startswith("csv:") and len(args.human) > 4:
            human = CSVHumanLabeler(args.human[4:])
        else:
            raise ValueError(f"--human must be 'dataset' or csv:FILE, got {args.human!r}")
        rm = _reward_model(args, out)
    except (ValueError, TypeError, OSError) as exc:
        args.parser.error(str(exc))
    labeler = ChatLabeler(
        backend,
        args.guidelines,
        cache_path=out / "ai_labels.jsonl",
        concurrency=args.concurrency,
        progress=not args.quiet,
    )
    ai, conf = labeler.label(pairs, None)
    try:
        result = run_rlthf(
            pairs, ai, conf, human, rm, config, checkpoint_dir=out, progress=not args.quiet
        )
    except AnnotationPending as exc:
        print(f"waiting for the annotator: {exc}")
        return 3
    except ValueError as exc:  # e.g. --out holds the checkpoint of a run with other settings
        args.parser.error(str(exc))
    rows = result.curated_trl()
    with open(out / "curated.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    (out / "history.json").write_text(json.dumps(result.history, indent=1), encoding="utf-8")
    last = result.history[-1]
    print(
        f"curated {len(rows)} of {len(pairs)} pairs ({last['human_fraction']:.1%} human) -> "
        f"{out / 'curated.jsonl'}"
    )
    return 0
