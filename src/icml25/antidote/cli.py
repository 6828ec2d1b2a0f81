"""``icml25 antidote prune``: Antidote on a saved Hugging Face causal LM and its (unmerged) PEFT
adapter, calibrated on a JSONL file of harmful ``{"prompt", "response"}`` rows; writes the pruned
adapter (or, with ``--merge``, the merged pruned model) and the mask.

    icml25 antidote prune --model BASE --adapter USER_ADAPTER --realign harmful.jsonl \\
        --dense-ratio 0.1 --out pruned_adapter

The official two-adapter flow (``train.py``: the alignment adapter is merged into the base with
``merge_and_unload``, then the user's adapter is loaded on top and pruned; the evaluation merges
both) is ``--align-adapter ALIGN --adapter USER --merge``.

No torch import at module level (the command line must start fast).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "antidote",
        help="post-fine-tuning pruning of a harmful fine-tune (paper 17)",
        description=__doc__.split("\n\n")[0],
    )
    s = p.add_subparsers(dest="antidote_cmd", required=True)
    q = s.add_parser("prune", help="prune a PEFT adapter (or q/k/v weights) by Antidote's score")
    q.add_argument("--model", required=True, help="base model: local path or HF id")
    q.add_argument(
        "--adapter", default=None, help="the user's PEFT adapter (omit with --target qkv)"
    )
    q.add_argument(
        "--align-adapter",
        default=None,
        help="an alignment PEFT adapter merged into the base before --adapter is loaded "
        "(official two-adapter flow); never pruned",
    )
    q.add_argument(
        "--merge",
        action="store_true",
        help="merge the pruned adapter into the weights and save the full model and tokenizer",
    )
    q.add_argument("--realign", required=True, help="JSONL with harmful prompt/response rows")
    q.add_argument("--dense-ratio", type=float, default=0.1, help="fraction of each row removed")
    q.add_argument("--target", choices=("lora", "qkv"), default="lora")
    q.add_argument(
        "--score", choices=("wanda", "magnitude", "random", "grad_magnitude"), default="wanda"
    )
    q.add_argument(
        "--granularity",
        choices=("row", "tensor"),
        default="row",
        help="mask per output row (default, Wanda's) or per tensor (official prune_with_FI)",
    )
    q.add_argument("--batch-size", type=int, default=1, help="calibration batch (official 1)")
    q.add_argument("--max-length", type=int, default=None)
    q.add_argument("--template", choices=("alpaca", "none"), default="alpaca")
    q.add_argument("--out", required=True, help="output directory")
    from icml25.llm.loading import add_model_args  # no torch import: the CLI starts fast

    add_model_args(q)  # --device (default: the GPU when there is one), --dtype, --device-map
    q.set_defaults(func=_cmd_prune, parser=q)


def load_pairs(path: str | Path) -> list[dict]:
    rows = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}:{i}: not JSON ({exc})") from exc
        if (
            not isinstance(row, dict)
            or not ("prompt" in row or "instruction" in row)
            or not ("response" in row or "output" in row)
        ):
            raise ValueError(
                f"{path}:{i}: each row needs 'prompt' (or 'instruction', with an optional "
                "'input') and 'response' (or 'output')"
            )
        rows.append(row)
    if not rows:
        raise ValueError(f"{path} holds no calibration rows")
    return rows


def _check_folders(args: argparse.Namespace) -> None:
    """Missing local folders are named here, not by a hub error from transformers."""
    import os

    model = args.model
    if (os.path.isabs(model) or model.startswith(("./", "../", "~"))) and not os.path.isdir(
        os.path.expanduser(model)
    ):
        raise ValueError(f"--model {model}: no such folder")
    for flag, folder in (("--adapter", args.adapter), ("--align-adapter", args.align_adapter)):
        if folder is None:
            continue
        config = Path(folder).expanduser() / "adapter_config.json"
        if not config.is_file():
            raise ValueError(
                f"{flag} {folder}: not a PEFT adapter folder (no adapter_config.json); pass the "
                "folder that save_pretrained wrote for the adapter"
            )


def load_models(args: argparse.Namespace):
    """The base model of ``--model`` through :func:`icml25.llm.load_model` (``--device``,
    ``--dtype``, ``--device-map``), the ``--align-adapter`` merged into it, and the user's
    ``--adapter`` loaded on top (PEFT keeps the adapter weights in float32 on a bf16 base);
    returns ``(model, tokenizer)``, the model in eval mode."""
    from icml25.llm import load_model, load_tokenizer, model_kwargs

    tok = load_tokenizer(args.model)
    model = load_model(args.model, "causal_lm", **model_kwargs(args))
    if args.align_adapter is not None or args.adapter is not None:
        from peft import PeftModel
    if args.align_adapter is not None:
        model = PeftModel.from_pretrained(model, args.align_adapter).merge_and_unload()
    if args.adapter is not None:
        model = PeftModel.from_pretrained(model, args.adapter)
    return model.eval(), tok


def _check_context(model, batches) -> None:
    """A calibration sequence longer than the model's context is refused, never fed: its
    activations past the last position mean nothing (or fail with an index error)."""
    from icml25.llm import context_length

    limit = context_length(model)
    row = 0
    for batch in batches:
        for n in batch["attention_mask"].sum(1).tolist():
            if limit is not None and n > limit:
                raise ValueError(
                    f"calibration row {row} has {n} tokens, more than the model's context of "
                    f"{limit} positions; shorten it or pass --max-length {limit}"
                )
            row += 1


def _cmd_prune(args: argparse.Namespace) -> int:
    import torch

    from icml25.antidote.pipeline import make_realign_batches
    from icml25.antidote.prune import AntidoteConfig, antidote_prune

    try:
        pairs = load_pairs(args.realign)
        if args.target == "lora" and args.adapter is None:
            raise ValueError("--target lora needs --adapter (the user's fine-tuning adapter)")
        if args.target == "qkv" and args.adapter is not None and not args.merge:
            raise ValueError(
                "--target qkv prunes the base model's q/k/v weights, which an adapter folder does "
                "not hold: add --merge to save the merged, pruned model (or drop --adapter)"
            )
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be a positive integer, got {args.batch_size}")
        if args.max_length is not None and args.max_length < 1:
            raise ValueError(f"--max-length must be a positive integer, got {args.max_length}")
        _check_folders(args)
        cfg = AntidoteConfig(
            dense_ratio=args.dense_ratio,
            score=args.score,
            target=args.target,
            granularity=args.granularity,
        )
        cfg.validate()
        from icml25.llm import model_kwargs

        model_kwargs(args)  # --device/--dtype checked before anything loads
    except ValueError as exc:
        args.parser.error(str(exc))
    model, tok = load_models(args)
    batches = make_realign_batches(
        tok, pairs, template=args.template, max_length=args.max_length, batch_size=args.batch_size
    )
    try:
        _check_context(model, batches)
    except ValueError as exc:
        args.parser.error(str(exc))
    res = antidote_prune(model, batches, cfg)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # keyed by the unmerged model's parameter names (the official bad_mask.pt keys); True = removed
    torch.save({k: v.cpu() for k, v in res.mask.items()}, out / "antidote_mask.pt")
    if args.merge and args.adapter is not None:
        model = model.merge_and_unload()
    model.save_pretrained(out)
    if args.merge or args.adapter is None:
        tok.save_pretrained(out)  # a full model: loadable from --out alone
    what = "adapter" if args.adapter is not None and not args.merge else "model"
    print(
        f"pruned {res.n_pruned} of {res.n_target} target weights ({100 * res.fraction:.2f}%); "
        f"{what} and mask in {out}",
        file=sys.stderr,
    )
    return 0
