"""``icml25 fow``: the collective-licensing royalty pool of paper 07 on a usage file.

    icml25 fow royalties --usage usage.csv --pool 100000 [--rule volume|equal|attribution|hybrid]
        [--values values.csv] [--alpha 0.5] [--admin-rate 0] [--min-payout 0] [--out payouts.csv]

``usage.csv`` has a header with ``holder`` and ``units`` columns (optional ``work``,
``territory``, ``opted_out``), one row per work (or per holder). ``--values`` (for the
attribution and hybrid rules) has ``holder`` and ``value`` columns, e.g. Shapley values.
Interpretation tool; the paper does not specify this mechanism. No torch import (fast start).
"""

from __future__ import annotations

import argparse
import csv
import sys
import warnings
from decimal import Decimal, InvalidOperation
from pathlib import Path

OPT_OUT_VALUES = {
    "": False,
    "0": False,
    "false": False,
    "no": False,
    "1": True,
    "true": True,
    "yes": True,
}


def add_parser(sub) -> None:
    top = sub.add_parser(
        "fow",
        help="future of work: collective-licensing royalties (paper 07)",
        description=__doc__.split("\n\n")[0],
    )
    inner = top.add_subparsers(dest="fow_command", required=True)
    p = inner.add_parser(
        "royalties", help="split a royalty pool among rights-holders (exact cents)"
    )
    p.add_argument(
        "--usage", required=True, help="CSV with holder, units [, work, territory, opted_out]"
    )
    p.add_argument("--pool", required=True, help="the pool to distribute, e.g. 100000 or 2500.50")
    p.add_argument("--rule", default="volume", choices=("volume", "equal", "attribution", "hybrid"))
    p.add_argument("--values", help="CSV with holder, value (attribution and hybrid rules)")
    p.add_argument("--alpha", type=float, default=0.5, help="hybrid: weight of volume (0.5)")
    p.add_argument("--admin-rate", type=float, default=0.0, help="administration share, [0, 1)")
    p.add_argument("--min-payout", default="0", help="floor per rights-holder (0)")
    p.add_argument("--floor-policy", default="raise", choices=("raise", "scale"))
    p.add_argument("--out", default="payouts.csv", help="payout CSV to write (payouts.csv)")
    p.set_defaults(func=_cmd_royalties, parser=p)


def _rows(path: str, need: tuple[str, ...]) -> list[dict]:
    f = Path(path)
    if not f.is_file():
        raise ValueError(f"no file at {path!r}")
    with f.open(newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise ValueError(f"{path}: no rows (a header line then one row per work)")
    cols = {c.strip().lower() for c in rows[0]}
    missing = [c for c in need if c not in cols]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; has {sorted(cols)}")
    return [{k.strip().lower(): (v or "").strip() for k, v in r.items() if k} for r in rows]


def _cmd_royalties(args: argparse.Namespace) -> int:
    from icml25.future_of_work.licensing import CollectiveLicensingPool, Flat, Licensee, Work

    try:
        try:
            pool_amount = Decimal(args.pool)
        except InvalidOperation:
            raise ValueError(f"--pool must be an amount, got {args.pool!r}") from None
        if not pool_amount.is_finite() or pool_amount < 0:
            raise ValueError(f"--pool must be a finite amount >= 0, got {args.pool!r}")
        out = Path(args.out)
        if out.is_dir():
            raise ValueError(f"--out {args.out!r} is a folder; name a CSV file")
        works = []
        for i, r in enumerate(_rows(args.usage, ("holder", "units")), start=2):
            try:
                units = float(r["units"])
            except ValueError:
                raise ValueError(
                    f"{args.usage}:{i}: units must be a number, got {r['units']!r}"
                ) from None
            flag = (r.get("opted_out") or "").lower()
            if flag not in OPT_OUT_VALUES:
                raise ValueError(
                    f"{args.usage}:{i}: opted_out must be one of "
                    f"{sorted(v for v in OPT_OUT_VALUES if v)} or empty, got {flag!r}"
                )
            works.append(
                Work(
                    r.get("work") or f"{r['holder']}#{i}",
                    r["holder"],
                    units,
                    territory=r.get("territory") or "ANY",
                    opted_out=OPT_OUT_VALUES[flag],
                )
            )
        values = None
        if args.rule in ("attribution", "hybrid"):
            if not args.values:
                args.parser.error(f"--rule {args.rule} needs --values (holder, value)")
            values = {}
            for i, r in enumerate(_rows(args.values, ("holder", "value")), start=2):
                if r["holder"] in values:
                    raise ValueError(f"{args.values}:{i}: {r['holder']!r} has a second value")
                try:
                    values[r["holder"]] = float(r["value"])
                except ValueError:
                    raise ValueError(
                        f"{args.values}:{i}: value must be a number, got {r['value']!r}"
                    ) from None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pool = CollectiveLicensingPool(works, Flat(pool_amount), admin_rate=args.admin_rate)
            pool.collect([Licensee("pool")])
            pay = pool.distribute(
                args.rule,
                values=values,
                alpha=args.alpha,
                min_payout=args.min_payout,
                floor_policy=args.floor_policy,
            )
        rep = pool.report()
    except (ValueError, TypeError) as exc:
        print(f"icml25 fow royalties: error: {exc}", file=sys.stderr)
        return 2
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    width = max(len("holder"), *(len(h) for h in pay))
    print(f"{'holder':<{width}}  {'payout':>14}  {'share':>7}")
    for h, v in sorted(pay.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{h:<{width}}  {v:>14,.2f}  {rep['shares'][h]:>7.2%}")
    print(
        f"{'total':<{width}}  {sum(pay.values()):>14,.2f}  (net pool {rep['net']}, admin {rep['admin']}; "
        f"rule {args.rule}; Gini of payouts {rep['gini']:.3f})"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as fh:
        wr = csv.writer(fh)
        wr.writerow(["holder", "payout", "share"])
        for h, v in sorted(pay.items()):
            wr.writerow([h, f"{v:.2f}", f"{rep['shares'][h]:.6f}"])
    print(f"wrote {out}", file=sys.stderr)
    return 0
