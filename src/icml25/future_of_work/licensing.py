"""A collective-licensing royalty pool: collect licence fees from AI developers, distribute them
to rights-holders in whole cents.

Interpretation tool; the paper does not specify this mechanism. Hazra, Majumder and
Chakrabarty (arXiv:2504.13959) argue for "collective licensing that ensures fair compensation
mechanisms for using data to train AI models"; this module is our reading of that proposal as
the collective management organisations of music run it (docs/future_of_work.md, "Tool A").

Money is ``decimal.Decimal`` throughout and payouts are whole cents: the net pool is split by
the largest-remainder method, so payouts always sum to the pool exactly.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from icml25._validate import as_int, as_real
from icml25.future_of_work._checks import DISCLAIMER
from icml25.future_of_work.inequality import gini, theil, top_share

__all__ = [
    "RULES",
    "CollectiveLicensingPool",
    "FeeRule",
    "Flat",
    "Hybrid",
    "Licensee",
    "PerUnit",
    "RevenueShare",
    "Work",
    "largest_remainder",
]

RULES = ("volume", "equal", "attribution", "hybrid")
CENT = Decimal("0.01")


def _money(name: str, v: Any) -> Decimal:
    if isinstance(v, bool):
        raise ValueError(f"{name} must be an amount of money, got {v!r}")
    try:
        d = Decimal(str(v)) if not isinstance(v, Decimal) else v
    except Exception:
        raise ValueError(f"{name} must be an amount of money, got {v!r}") from None
    if not d.is_finite() or d < 0:
        raise ValueError(f"{name} must be a finite amount >= 0, got {v!r}")
    return d


def _cents(d: Decimal) -> int:
    return int((d / CENT).to_integral_value(rounding=ROUND_HALF_EVEN))


def _floor_cents(min_payout: Any) -> int:
    """``min_payout`` in whole cents (half-even); a floor that rounds to 0 is an error, one that
    is not whole cents a warning (stacklevel=3: the caller of ``distribute``)."""
    floor_d = _money("min_payout", min_payout)
    floor_c = _cents(floor_d)
    if floor_d > 0 and floor_c == 0:
        raise ValueError(
            f"min_payout={min_payout!r} rounds to 0.00: payouts are whole cents (half-even), "
            "so this floor would be silently dropped; pass 0 for no floor, or at least 0.01"
        )
    if floor_d != Decimal(floor_c) * CENT:
        warnings.warn(
            f"min_payout={min_payout!r} is not a whole number of cents; the floor used is "
            f"{Decimal(floor_c) * CENT}",
            UserWarning,
            stacklevel=3,
        )
    return floor_c


@dataclass(frozen=True)
class Work:
    """A licensed work. ``units``: its size (tokens, items); ``territory``: where its
    rights-holder is registered; ``opted_out``: excluded from licensing and payouts.
    Interpretation tool; the paper does not specify this mechanism."""

    id: str
    owner: str
    units: float
    territory: str = "ANY"
    opted_out: bool = False

    def __post_init__(self) -> None:
        for k in ("id", "owner", "territory"):
            v = getattr(self, k)
            if not isinstance(v, str) or not v:
                raise ValueError(f"Work.{k} must be a non-empty string, got {v!r}")
        object.__setattr__(self, "units", as_real(f"units of work {self.id!r}", self.units, low=0))


@dataclass(frozen=True)
class Licensee:
    """An AI developer licensing the pooled corpus: units of licensed content used, revenue (for
    revenue-share fees), territory. Interpretation tool; the paper does not specify this
    mechanism."""

    id: str
    units_used: float = 0.0
    revenue: float = 0.0
    territory: str = "ANY"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"Licensee.id must be a non-empty string, got {self.id!r}")
        object.__setattr__(
            self, "units_used", as_real(f"units_used of {self.id!r}", self.units_used, low=0)
        )
        object.__setattr__(self, "revenue", as_real(f"revenue of {self.id!r}", self.revenue, low=0))


class FeeRule:
    """A licence-fee rule: ``fee(licensee) -> Decimal``. Interpretation tool; the paper does not specify this mechanism."""

    def fee(self, licensee: Licensee) -> Decimal:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Flat(FeeRule):
    """The same fee for every licensee. Interpretation tool; the paper does not specify this mechanism."""

    amount: Any

    def __post_init__(self) -> None:
        _money("Flat.amount", self.amount)

    def fee(self, licensee: Licensee) -> Decimal:
        return _money("Flat.amount", self.amount)


@dataclass(frozen=True)
class PerUnit(FeeRule):
    """``price`` per unit of licensed content used. Interpretation tool; the paper does not specify this mechanism."""

    price: Any

    def __post_init__(self) -> None:
        _money("PerUnit.price", self.price)

    def fee(self, licensee: Licensee) -> Decimal:
        return _money("PerUnit.price", self.price) * Decimal(str(licensee.units_used))


@dataclass(frozen=True)
class RevenueShare(FeeRule):
    """A share ``rate`` in [0, 1] of the licensee's revenue. Interpretation tool; the paper does not specify this mechanism."""

    rate: float

    def __post_init__(self) -> None:
        as_real("RevenueShare.rate", self.rate, low=0, high=1)

    def fee(self, licensee: Licensee) -> Decimal:
        r = as_real("RevenueShare.rate", self.rate, low=0, high=1)
        return Decimal(str(r)) * Decimal(str(licensee.revenue))


@dataclass(frozen=True)
class Hybrid(FeeRule):
    """The sum of several rules, at least ``minimum``. Interpretation tool; the paper does not specify this mechanism."""

    rules: Sequence[FeeRule]
    minimum: Any = 0

    def __post_init__(self) -> None:
        if not self.rules or not all(isinstance(r, FeeRule) for r in self.rules):
            raise ValueError(
                f"Hybrid.rules must be a non-empty list of fee rules, got {self.rules!r}"
            )
        _money("Hybrid.minimum", self.minimum)

    def fee(self, licensee: Licensee) -> Decimal:
        if not self.rules or not all(isinstance(r, FeeRule) for r in self.rules):
            raise ValueError("Hybrid.rules must be a non-empty list of fee rules")
        total = sum((r.fee(licensee) for r in self.rules), Decimal(0))
        return max(total, _money("Hybrid.minimum", self.minimum))


def largest_remainder(total_cents: int, weights: Mapping[str, Any]) -> dict[str, int]:
    """Split ``total_cents`` in proportion to non-negative ``weights`` into whole cents that sum
    to ``total_cents`` exactly (Hamilton's largest-remainder method, exact rational arithmetic;
    ties go to the earlier key). All-zero weights: a ``ValueError`` (no one to pay).
    Interpretation tool; the paper does not specify this mechanism."""
    total_cents = as_int("total_cents", total_cents, 0)
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"weights must be a mapping {{holder: weight}}, got {type(weights).__name__}"
        )
    ws = {}
    for k, w in weights.items():
        try:
            f = (
                w
                if isinstance(w, Fraction)
                else Fraction(w)
                if isinstance(w, (int, Decimal))
                else Fraction(float(w))
            )
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"weight of {k!r} must be a finite number, got {w!r}") from None
        if f < 0:
            raise ValueError(f"weight of {k!r} is negative ({w!r})")
        ws[k] = f
    tot = sum(ws.values(), Fraction(0))
    if tot == 0:
        if total_cents == 0:
            return dict.fromkeys(ws, 0)
        raise ValueError("all weights are 0: there is no one to pay")
    quotas = {k: total_cents * w / tot for k, w in ws.items()}
    out = {k: int(q) for k, q in quotas.items()}  # floor (q >= 0)
    left = total_cents - sum(out.values())
    order = sorted(ws, key=lambda k: -(quotas[k] - out[k]))  # stable: earlier keys win ties
    for k in order[:left]:
        out[k] += 1
    return out


@dataclass
class CollectiveLicensingPool:
    """A collective management organisation licensing a pooled corpus to AI developers.

    Args:
        works: the licensed works (:class:`Work`); ids unique.
        fee_rule: a :class:`FeeRule`, or ``{territory: FeeRule}`` (one pool per territory).
        admin_rate: share of the collected pool kept for administration, in [0, 1) (default 0;
            the paper names no value).
        reciprocity: ``{(τ, τ'): fraction}``: the share of territory τ's pool owed to
            rights-holders registered in τ'; each τ's row sums to 1. Default: the identity.

    Interpretation tool; the paper does not specify this mechanism.
    """

    works: Sequence[Work]
    fee_rule: FeeRule | Mapping[str, FeeRule]
    admin_rate: float = 0.0
    reciprocity: Mapping[tuple[str, str], float] | None = None
    collected: dict[str, Decimal] = field(default_factory=dict, init=False)
    _licensees: set = field(default_factory=set, init=False, repr=False)
    _last: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        works = list(self.works)
        if not all(isinstance(w, Work) for w in works):
            raise TypeError("works must be Work objects")
        dup = sorted(i for i, c in Counter(w.id for w in works).items() if c > 1)
        if dup:
            raise ValueError(f"duplicate work ids {dup}")
        self.works = works
        self.admin_rate = as_real("admin_rate", self.admin_rate, low=0, high=1, high_open=True)
        rules = self.fee_rule if isinstance(self.fee_rule, Mapping) else None
        if rules is not None and not all(isinstance(r, FeeRule) for r in rules.values()):
            raise TypeError("fee_rule must be a FeeRule or {territory: FeeRule}")
        if rules is None and not isinstance(self.fee_rule, FeeRule):
            raise TypeError(
                f"fee_rule must be a FeeRule (Flat, PerUnit, RevenueShare, Hybrid), got "
                f"{type(self.fee_rule).__name__}"
            )
        if self.reciprocity is not None:
            rows: dict[str, float] = {}
            for (a, _b), frac in self.reciprocity.items():
                f = as_real(f"reciprocity[{a!r}, {_b!r}]", frac, low=0, high=1)
                rows[a] = rows.get(a, 0.0) + f
            bad = {a: s for a, s in rows.items() if abs(s - 1) > 1e-9}
            if bad:
                raise ValueError(f"reciprocity rows must sum to 1, got {bad}")
        if not works or all(w.opted_out or w.units == 0 for w in works):
            warnings.warn(
                "no licensable works (empty, all opted out or zero units): payouts will be zero",
                stacklevel=2,
            )

    # -- A1: collection ------------------------------------------------------------------------
    def collect(self, licensees: Iterable[Licensee]) -> Decimal:
        """Add the fees of these licensees to the pool, by territory (``self.collected``; calls
        add up, so licensees can be collected one at a time; a licensee id collected twice is a
        ``ValueError``; :meth:`reset` starts a new period). Each fee is rounded to the cent
        (half to even). Returns the total collected so far."""
        lic = list(licensees)
        if not all(isinstance(x, Licensee) for x in lic):
            raise TypeError("licensees must be Licensee objects")
        counts = Counter(x.id for x in lic)
        dup = sorted(i for i, c in counts.items() if c > 1 or i in self._licensees)
        if dup:
            raise ValueError(f"licensee ids collected twice: {dup}")
        for x in lic:
            self._rule(x.territory)  # every territory has a rule before anything is added
        for x in lic:
            self._licensees.add(x.id)
            rule = self._rule(x.territory)
            fee = rule.fee(x).quantize(CENT, rounding=ROUND_HALF_EVEN)
            self.collected[x.territory] = self.collected.get(x.territory, Decimal(0)) + fee
        return sum(self.collected.values(), Decimal("0.00"))

    def reset(self) -> None:
        """Empty the pool (a new licensing period)."""
        self.collected, self._licensees, self._last = {}, set(), {}

    def _rule(self, territory: str) -> FeeRule:
        if isinstance(self.fee_rule, Mapping):
            if territory not in self.fee_rule:
                raise ValueError(
                    f"no fee rule for territory {territory!r} (have {sorted(self.fee_rule)})"
                )
            return self.fee_rule[territory]
        return self.fee_rule

    # -- A2: distribution ----------------------------------------------------------------------
    def distribute(
        self,
        rule: str = "volume",
        values: Mapping[str, float] | None = None,
        alpha: float = 0.5,
        min_payout: Any = 0,
        floor_policy: str = "raise",
    ) -> dict[str, Decimal]:
        """Split the collected pool (net of administration) among rights-holders, in cents.

        Rules: ``"volume"`` (shares ∝ units of their licensed, non-opted-out works),
        ``"equal"`` (equal among active holders), ``"attribution"`` (∝ ``max(values[h], 0)``,
        e.g. Shapley values of their data; all values <= 0 falls back to volume with a warning),
        ``"hybrid"`` (``alpha`` · volume + (1 - alpha) · attribution). ``min_payout``: every
        active holder gets at least this, funded proportionally from the others
        (``floor_policy="raise"``: ``ValueError`` if the pool cannot fund it; ``"scale"``: the
        floor becomes the equal split). Returns ``{holder: Decimal}`` summing exactly to the net
        pool. Interpretation tool; the paper does not specify this mechanism."""
        if rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
        alpha = as_real("alpha", alpha, low=0, high=1)
        if floor_policy not in ("raise", "scale"):
            raise ValueError(f"floor_policy must be 'raise' or 'scale', got {floor_policy!r}")
        floor_c = _floor_cents(min_payout)
        values = self._values_for(rule, values)
        gross, net = self._net_pool()
        active = [w for w in self.works if not w.opted_out and w.units > 0]
        holders = sorted({w.owner for w in self.works})
        notes: list[str] = []
        if not active or net == 0:
            return self._pay_nothing(rule, gross, net, holders, active, notes)
        owed = self._owed_by_territory(net, gross)
        if values is not None and rule in ("attribution", "hybrid"):
            rule = self._attribution_fallback(rule, values, {w.owner for w in active}, notes)
        pay = dict.fromkeys(holders, 0)
        for terr, cents in sorted(owed.items()):
            works = self._registered_works(terr, cents, active, notes)
            split = largest_remainder(cents, self._weights(rule, works, values, alpha, notes))
            split = self._floor(split, floor_c, cents, floor_policy, notes, terr)
            for h, c in split.items():
                pay[h] += c
        out = {h: (Decimal(c) * CENT).quantize(CENT) for h, c in pay.items()}
        self._last = {"rule": rule, "net": net, "gross": gross, "payouts": out, "notes": notes}
        return out

    # The steps of distribute. Their warnings use stacklevel=3: distribute's caller, as before.
    def _values_for(self, rule: str, values: Any) -> dict[str, float] | None:
        """The attribution values, checked; the attribution rules cannot run without them."""
        if rule in ("attribution", "hybrid") and values is None:
            raise ValueError(f"rule {rule!r} needs values={{holder: value}} (e.g. Shapley values)")
        if values is not None:
            values = self._check_values(values)
        return values

    def _net_pool(self) -> tuple[Decimal, Decimal]:
        """``(gross, net)``: everything collected, and that less administration, to the cent."""
        gross = sum(self.collected.values(), Decimal(0))
        net = (gross * (1 - Decimal(str(self.admin_rate)))).quantize(CENT, rounding=ROUND_HALF_EVEN)
        return gross, net

    def _pay_nothing(self, rule, gross, net, holders, active, notes) -> dict[str, Decimal]:
        """No licensable work or a zero net pool: every holder gets 0.00, the net pool stays
        undistributed."""
        undistributed = net
        if not active and net > 0:
            warnings.warn(f"no licensable works: {net} is left undistributed", stacklevel=3)
            notes.append(f"no licensable works: {net} undistributed")
        self._last = {
            "rule": rule,
            "net": net,
            "payouts": {h: Decimal("0.00") for h in holders},
            "gross": gross,
            "notes": notes,
            "undistributed": undistributed,
        }
        return {h: Decimal("0.00") for h in holders}

    def _owed_by_territory(self, net: Decimal, gross: Decimal) -> dict[str, int]:
        """Cents owed to each territory of registration: the net pool split over the territories
        it was collected in, each territory's pool then moved by its reciprocity row."""
        owed: dict[str, int] = {}
        net_c = _cents(net)
        by_terr = (
            largest_remainder(net_c, {t: v for t, v in sorted(self.collected.items())})
            if gross > 0
            else {}
        )
        for t, cents in by_terr.items():
            row = {b: f for (a, b), f in (self.reciprocity or {}).items() if a == t} or {t: 1.0}
            for b, c in largest_remainder(
                cents, {b: Fraction(str(f)) for b, f in sorted(row.items())}
            ).items():
                owed[b] = owed.get(b, 0) + c
        return owed

    @staticmethod
    def _attribution_fallback(rule: str, values, active_holders: set, notes: list) -> str:
        """The rule to use: ``rule``, or ``"volume"`` when no active holder has a value > 0
        (a holder without a value counts as 0)."""
        missing = sorted(active_holders - set(values))
        if missing:
            warnings.warn(f"no attribution value for {missing}: they count as 0", stacklevel=3)
            notes.append(f"no attribution value for {missing} (counted as 0)")
        if all(values.get(h, 0.0) <= 0 for h in active_holders):
            warnings.warn(
                "every attribution value is <= 0: falling back to the volume rule", stacklevel=3
            )
            notes.append("attribution values all <= 0: volume rule used")
            rule = "volume"
        return rule

    @staticmethod
    def _registered_works(terr: str, cents: int, active: list[Work], notes: list) -> list[Work]:
        """The active works a territory's pool pays: those registered there (``"ANY"`` matches
        every territory), or every active work when none is."""
        works = [w for w in active if w.territory == terr or terr == "ANY" or w.territory == "ANY"]
        if not works:
            works = active  # nobody registered there: the pool stays with every active holder
            warnings.warn(
                f"territory {terr!r} has no registered works: its {cents / 100:.2f} "
                "goes to every active rights-holder",
                stacklevel=3,
            )
            notes.append(f"territory {terr!r} has no registered works: its share goes to all")
        return works

    def _weights(self, rule, works, values, alpha, notes) -> dict[str, Fraction]:
        holders = sorted({w.owner for w in works})
        vol = {h: Fraction(0) for h in holders}
        for w in works:
            vol[w.owner] += Fraction(str(w.units))
        if rule == "volume":
            return vol
        if rule == "equal":
            return dict.fromkeys(holders, Fraction(1))
        att = {h: Fraction(max(values.get(h, 0.0), 0.0)) for h in holders}
        if sum(att.values()) == 0:
            att = vol  # no positive value among these holders (one territory's): by volume
        if rule == "attribution":
            return att
        tv, ta = sum(vol.values()), sum(att.values())
        a = Fraction(str(alpha))
        return {h: a * vol[h] / tv + (1 - a) * att[h] / ta for h in holders}

    def _check_values(self, values: Any) -> dict[str, float]:
        if hasattr(values, "items"):
            values = dict(values.items())  # a dict, a Valuation or a pandas Series
        else:
            raise TypeError(
                f"values must map rights-holders to values, got {type(values).__name__}"
            )
        unknown = sorted(map(str, set(values) - {w.owner for w in self.works}))
        if unknown:
            raise ValueError(f"values name unknown rights-holders {unknown}")
        out = {}
        for h, v in values.items():
            try:
                f = float(v)
            except (TypeError, ValueError):
                raise ValueError(f"the value of {h!r} must be a number, got {v!r}") from None
            if not math.isfinite(f):
                raise ValueError(f"the value of {h!r} is {f}; attribution values must be finite")
            out[h] = f
        return out

    @staticmethod
    def _floor(
        split: dict[str, int],
        floor_c: int,
        total: int,
        policy: str,
        notes: list,
        territory: str = "ANY",
    ) -> dict[str, int]:
        if floor_c <= 0 or not split:
            return split
        n = len(split)
        if floor_c * n > total:
            if policy == "raise":
                where = "" if territory == "ANY" else f" of territory {territory!r}"
                raise ValueError(
                    f"the pool{where} ({total / 100:.2f}) cannot pay min_payout ({floor_c / 100:.2f}) "
                    f"to its {n} rights-holders (floors apply per territory pool); lower it or pass "
                    "floor_policy='scale'"
                )
            notes.append("floor scaled to the equal split")
            return largest_remainder(total, dict.fromkeys(split, 1))
        out = dict(split)
        for _ in range(n + 1):
            low = [h for h, c in out.items() if c < floor_c]
            if not low:
                break
            fixed = {h: floor_c for h in low}
            rest = [h for h in out if h not in fixed and out[h] > floor_c]
            keep = {h: c for h, c in out.items() if h not in fixed and h not in rest}
            budget = total - floor_c * len(fixed) - sum(keep.values())
            # the others fund the floor in proportion to what they had above it
            above = {h: out[h] - floor_c for h in rest}
            extra = largest_remainder(budget - floor_c * len(rest), above) if rest else {}
            out = {**keep, **fixed, **{h: floor_c + extra.get(h, 0) for h in rest}}
        return dict(sorted(out.items()))

    def report(self) -> dict[str, Any]:
        """The last distribution as a JSON-ready dict: gross and net pool, administration,
        payouts (strings, exact), shares, and the Gini, Theil and top-10 % share of payouts."""
        if not self._last:
            raise ValueError("nothing distributed yet: call collect(...) then distribute(...)")
        pays = self._last["payouts"]
        vals = [float(v) for v in pays.values()]
        tot = sum(vals)
        return {
            "disclaimer": DISCLAIMER,
            "rule": self._last["rule"],
            "gross": str(self._last["gross"]),
            "admin": str((self._last["gross"] - self._last["net"]).quantize(CENT)),
            "net": str(self._last["net"]),
            "undistributed": str(self._last.get("undistributed", Decimal("0.00"))),
            "payouts": {h: str(v) for h, v in pays.items()},
            "shares": {h: (float(v) / tot if tot else 0.0) for h, v in pays.items()},
            "gini": gini(vals) if vals else 0.0,
            "theil": theil(vals) if vals else 0.0,
            "top10_share": top_share(vals, 0.1) if vals else 0.0,
            "notes": list(self._last["notes"]),
        }
