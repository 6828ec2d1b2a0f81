"""The royalty pool: exact cents, the distribution rules, floors, territories and bad input."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml25.future_of_work import (
    CollectiveLicensingPool,
    Flat,
    Hybrid,
    Licensee,
    PerUnit,
    RevenueShare,
    Work,
)
from icml25.future_of_work.licensing import largest_remainder


def _pool(units, fee="1000.00", **kw):
    works = [Work(f"w{i}", f"h{i}", u) for i, u in enumerate(units)]
    p = CollectiveLicensingPool(works, Flat(fee), **kw)
    p.collect([Licensee("dev")])
    return p


@settings(max_examples=200, deadline=None)
@given(
    units=st.lists(st.floats(0.01, 1e6), min_size=1, max_size=12),
    fee=st.decimals("0.00", "1000000.00", places=2),
    admin=st.floats(0, 0.5),
    rule=st.sampled_from(["volume", "equal", "attribution", "hybrid"]),
    vals=st.lists(st.floats(-1, 1), min_size=12, max_size=12),
)
def test_payouts_sum_exactly_to_the_net_pool(units, fee, admin, rule, vals):
    p = _pool(units, str(fee), admin_rate=admin)
    values = {f"h{i}": vals[i] for i in range(len(units))}
    if not any(v > 0 for v in values.values()):
        values["h0"] = 0.5
    pay = p.distribute(rule, values=values, alpha=0.3)
    net = Decimal(p.report()["net"])
    assert sum(pay.values()) == net
    assert all(
        isinstance(v, Decimal) and v >= 0 and v == v.quantize(Decimal("0.01")) for v in pay.values()
    )


@settings(max_examples=100, deadline=None)
@given(total=st.integers(0, 10**9), ws=st.lists(st.integers(0, 10**6), min_size=1, max_size=20))
def test_largest_remainder_is_exact_and_within_a_cent_of_the_quota(total, ws):
    if sum(ws) == 0:
        ws[0] = 1
    w = {f"k{i}": x for i, x in enumerate(ws)}
    out = largest_remainder(total, w)
    assert sum(out.values()) == total
    for k, x in w.items():
        assert abs(out[k] - total * x / sum(ws)) < 1


def test_rules_symmetry_null_player_and_volume():
    p = _pool([10, 10, 30, 5])
    vol = p.distribute("volume")
    assert (
        vol["h0"] == vol["h1"]
        and vol["h2"] == Decimal("545.45")
        and sum(vol.values()) == Decimal("1000.00")
    )
    eq = p.distribute("equal")
    assert set(eq.values()) == {Decimal("250.00")}
    att = p.distribute("attribution", values={"h0": 0.1, "h1": 0.1, "h2": 0.0, "h3": -0.2})
    assert att["h2"] == att["h3"] == Decimal("0.00") and att["h0"] == att["h1"] == Decimal("500.00")
    hyb = p.distribute("hybrid", values={"h0": 1, "h1": 0, "h2": 0, "h3": 0}, alpha=0.5)
    assert abs(hyb["h0"] - (vol["h0"] + 1000) / 2) <= Decimal(
        "0.01"
    )  # half volume, half attribution


def test_floor_is_funded_by_the_others_or_refused():
    p = _pool([1, 1000, 1000])
    pay = p.distribute("volume", min_payout="100")
    assert pay["h0"] == Decimal("100.00") and sum(pay.values()) == Decimal("1000.00")
    assert pay["h1"] == pay["h2"]
    with pytest.raises(ValueError, match="cannot pay min_payout"):
        p.distribute("volume", min_payout="400")
    scaled = p.distribute("volume", min_payout="400", floor_policy="scale")
    assert sorted(scaled.values()) == [Decimal("333.33"), Decimal("333.33"), Decimal("333.34")]


def test_fee_rules_and_admin():
    lic = Licensee("d", units_used=1000, revenue=50_000)
    assert PerUnit("0.013").fee(lic) == Decimal("13.000")
    assert RevenueShare(0.02).fee(lic) == Decimal("1000.00")
    assert Hybrid([Flat(5), PerUnit("0.001")], minimum=100).fee(lic) == Decimal(100)
    works = [Work("a", "x", 1)]
    p = CollectiveLicensingPool(works, PerUnit("0.10"), admin_rate=0.25)
    assert p.collect([lic, Licensee("e", units_used=3)]) == Decimal("100.30")
    p.distribute()
    rep = p.report()
    assert (
        rep["net"] == "75.22"
        and rep["admin"] == "25.08"
        and rep["disclaimer"].startswith("Interpretation tool")
    )


def test_territories_and_reciprocity():
    works = [Work("a", "us_author", 1, territory="US"), Work("b", "fr_author", 1, territory="FR")]
    p = CollectiveLicensingPool(
        works,
        {"US": Flat(100), "FR": Flat(50)},
        reciprocity={("US", "US"): 0.8, ("US", "FR"): 0.2, ("FR", "FR"): 1.0},
    )
    p.collect([Licensee("d1", territory="US"), Licensee("d2", territory="FR")])
    pay = p.distribute("volume")
    assert pay == {"fr_author": Decimal("70.00"), "us_author": Decimal("80.00")}
    with pytest.raises(ValueError, match="rows must sum to 1"):
        CollectiveLicensingPool(works, Flat(1), reciprocity={("US", "US"): 0.5})
    with pytest.raises(ValueError, match="no fee rule for territory 'DE'"):
        p.collect([Licensee("d3", territory="DE")])


def test_degenerate_pools_and_fallbacks_warn():
    with pytest.warns(UserWarning, match="no licensable works"):
        p = CollectiveLicensingPool([Work("a", "h", 5, opted_out=True)], Flat(10))
    p.collect([Licensee("d")])
    with pytest.warns(UserWarning, match="10.00 is left undistributed"):
        assert p.distribute() == {"h": Decimal("0.00")}
    rep = p.report()
    assert (rep["admin"], rep["net"], rep["undistributed"]) == ("0.00", "10.00", "10.00")
    q = _pool([1, 3])
    with pytest.warns(UserWarning, match="falling back to the volume rule"):
        pay = q.distribute("attribution", values={"h0": -1.0, "h1": 0.0})
    notes = q.report()["notes"]
    assert (
        pay == {"h0": Decimal("250.00"), "h1": Decimal("750.00")} and "volume rule used" in notes[0]
    )


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: Work("a", "h", -1), "units of work 'a'"),
        (
            lambda: CollectiveLicensingPool([Work("a", "h", 1), Work("a", "g", 1)], Flat(1)),
            "duplicate work ids",
        ),
        (
            lambda: CollectiveLicensingPool([Work("a", "h", 1)], Flat(1), admin_rate=1.0),
            "admin_rate",
        ),
        (lambda: _pool([1]).distribute("volume", alpha=2), "alpha"),
        (lambda: _pool([1]).distribute("shapley"), "rule must be one of"),
        (lambda: _pool([1]).distribute("attribution"), "needs values"),
        (
            lambda: _pool([1]).distribute("attribution", values={"nobody": 1.0}),
            "unknown rights-holders",
        ),
        (lambda: Flat(-5).fee(Licensee("d")), "Flat.amount"),
        (lambda: RevenueShare(1.5).fee(Licensee("d")), "RevenueShare.rate"),
        (lambda: largest_remainder(10, {"a": 0, "b": 0}), "no one to pay"),
    ],
)
def test_bad_input_is_named(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_collect_adds_up_and_review_cases():
    p = CollectiveLicensingPool([Work("a1", "a", 1), Work("b1", "b", 3)], Flat(10))
    p.collect([Licensee("L1")])
    assert p.collect([Licensee("L2")]) == Decimal("20.00")  # one licensee at a time adds up
    with pytest.raises(ValueError, match="collected twice"):
        p.collect([Licensee("L1")])
    with pytest.warns(UserWarning, match=r"no attribution value for \['b'\]"):
        pay = p.distribute("attribution", values={"a": 1.0})
    assert pay == {"a": Decimal("20.00"), "b": Decimal("0.00")}
    with pytest.raises(ValueError, match="the value of 'a' is nan"):
        p.distribute("attribution", values={"a": float("nan")})
    pd = pytest.importorskip("pandas")
    pay = p.distribute("attribution", values=pd.Series({"a": 1.0, "b": 1.0}))
    assert pay["a"] == pay["b"] == Decimal("10.00")
    p.reset()
    assert p.collect([Licensee("L1")]) == Decimal("10.00")
    with pytest.raises(ValueError, match="Flat.amount"):
        Flat(-1)
    with pytest.raises(ValueError, match="Hybrid.rules"):
        Hybrid([1, 2])
    import numpy as np

    assert largest_remainder(10, {"c": np.float32(0.1), "d": 0.3}) == {"c": 3, "d": 7}
    with pytest.raises(ValueError, match="weight of 'c' must be a finite number"):
        largest_remainder(10, {"c": float("nan")})
