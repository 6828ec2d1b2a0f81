"""``icml25 proxy_feedback``: the condition diagnostics and the reproduction of paper 10.

    icml25 proxy_feedback check --world hold [--seed 0] [--n 5000] [--json]
    icml25 proxy_feedback check --expert expert.npy --proxy proxy.csv [--delta 0.02] [--json]
    icml25 proxy_feedback repro [--full] [--out DIR]

``check --expert/--proxy`` reads two ``(n, K)`` probability tables scored on the same inputs
(``.npy``, or ``.csv``/``.tsv`` with one row per input and no index column; a header row is
skipped), e.g. label frequencies of the expert and of the proxy labellers on a held-out set.
No torch import at module level (the command line must start fast).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from pathlib import Path


def add_parser(sub) -> None:
    top = sub.add_parser(
        "proxy_feedback",
        help="proxy-feedback conditions and reproduction (paper 10)",
        description=__doc__.split("\n\n")[0],
    )
    inner = top.add_subparsers(dest="proxy_feedback_command", required=True)
    c = inner.add_parser("check", help="which sufficient conditions a proxy meets, with evidence")
    src = c.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--world",
        choices=("hold", "v1_levelsets", "v2_image", "v4_lipschitz"),
        help="a synthetic world of the reproduction",
    )
    src.add_argument("--expert", metavar="FILE", help="(n, K) expert probabilities (.npy/.csv)")
    c.add_argument("--proxy", metavar="FILE", help="(n, K) proxy probabilities, same rows")
    c.add_argument("--seed", type=int, default=None, help="world seed (default 0)")
    c.add_argument("--n", type=int, default=None, help="inputs drawn from the world (5000)")
    c.add_argument("--delta", type=float, default=0.02, help="TV of 'the same output' (0.02)")
    c.add_argument("--json", action="store_true", help="print the report as JSON")
    c.set_defaults(func=_cmd_check, parser=c)
    r = inner.add_parser(
        "repro", help="run the reproduction (same as `icml25 repro proxy_feedback`)"
    )
    r.add_argument("--full", action="store_true", help="full mode (about 25 minutes)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", metavar="DIR", default=None, help="report folder")
    r.set_defaults(func=_cmd_repro, parser=r)


def load_probabilities(path: str | Path):
    """An ``(n, K)`` float64 array from ``.npy`` or ``.csv``/``.tsv`` (header row skipped)."""
    import numpy as np

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"no file at {str(p)!r}")
    try:
        if p.suffix == ".npy":
            a = np.load(p, allow_pickle=False)
        elif p.suffix in (".csv", ".tsv", ".txt"):
            delim = "\t" if p.suffix == ".tsv" else ","
            first = p.read_text(encoding="utf-8").splitlines()[:1]
            try:
                [float(v) for v in first[0].split(delim)] if first else None
                skip = 0
            except ValueError:
                skip = 1
            with warnings.catch_warnings():
                warnings.simplefilter(
                    "ignore"
                )  # numpy's "no data" warning: the shape check says it
                a = np.loadtxt(p, delimiter=delim, skiprows=skip, ndmin=2)
        else:
            raise ValueError(f"{p.name}: use .npy, .csv or .tsv")
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read probabilities from {p}: {exc}") from None
    a = np.asarray(a, dtype=float)
    if a.ndim != 2 or a.shape[0] == 0:
        raise ValueError(f"{p} must hold a non-empty (n, K) table, got shape {a.shape}")
    return a


def _cmd_check(args: argparse.Namespace) -> int:
    import torch

    from icml25.proxy_feedback.conditions import check_conditions

    if args.world:
        if args.proxy:
            args.parser.error("--proxy goes with --expert, not with --world")
        seed = 0 if args.seed is None else args.seed
        n = 5000 if args.n is None else args.n
        if n < 3 or seed < 0:
            args.parser.error(f"--n must be >= 3 and --seed >= 0, got {n} and {seed}")
    else:
        if not args.proxy:
            args.parser.error("--expert needs --proxy (the proxy's probabilities, same rows)")
        if args.n is not None or args.seed is not None:
            args.parser.error("--n and --seed apply to --world only")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if args.world:
                from icml25.proxy_feedback.worlds import SyntheticPreferenceWorld

                w = SyntheticPreferenceWorld(scenario=args.world, seed=seed)
                x = w.sample_x(n, torch.Generator().manual_seed(seed), dtype=torch.float64)
                rep = check_conditions(w.true_policy, w.proxy_policy, x, args.delta)
                label = f"world {args.world} (seed {seed}, {n} inputs)"
            else:
                e = _load("--expert", args.expert)
                p = _load("--proxy", args.proxy)
                try:
                    rep = check_conditions(
                        torch.from_numpy(e), torch.from_numpy(p), None, args.delta
                    )
                except ValueError as exc:
                    msg = str(exc).replace("true_policy", f"--expert {args.expert}")
                    raise ValueError(msg.replace("proxy_policy", f"--proxy {args.proxy}")) from None
                label = f"{args.expert} vs {args.proxy} ({e.shape[0]} inputs, {e.shape[1]} outputs)"
        except (ValueError, TypeError) as exc:
            print(f"icml25 proxy_feedback check: error: {exc}", file=sys.stderr)
            return 2
    for wmsg in caught:
        if issubclass(wmsg.category, UserWarning):
            print(f"warning: {wmsg.message}", file=sys.stderr)
    if args.json:
        print(json.dumps(_finite_or_null(rep.to_dict()), indent=2, allow_nan=False))
    else:
        print(f"Sufficient conditions of the proxy, {label}:")
        print(rep.summary())
    return 0


def _load(flag: str, path: str):
    try:
        return load_probabilities(path)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None


def _finite_or_null(obj):
    """JSON has no NaN or infinity: they become null (the text report shows them)."""
    if isinstance(obj, dict):
        return {k: _finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _cmd_repro(args: argparse.Namespace) -> int:
    from icml25.cli import main

    argv = ["repro", "proxy_feedback", "--seed", str(args.seed)]
    if args.full:
        argv.append("--full")
    if args.out:
        argv += ["--out", args.out]
    return main(argv)
