"""The shared argument checks (``icml25._validate``, issue 49): numpy and torch scalars pass as the
numbers they are, bools and NaN never do, and a message never contradicts its own value."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from icml25._validate import as_bool, as_int, as_prob, as_real, shown

FLOATS = [
    0.25,
    np.float32(0.25),
    np.float64(0.25),
    torch.tensor(0.25),
    torch.tensor(0.25).double(),
    torch.tensor(0.25, dtype=torch.bfloat16),
]
INTS = [3, np.int64(3), np.int32(3), np.uint8(3), torch.tensor(3)]


@pytest.mark.parametrize("v", FLOATS)
def test_every_kind_of_real_scalar_is_accepted_as_a_python_float(v):
    out = as_real("beta", v, low=0, low_open=True)
    assert type(out) is float and out == pytest.approx(0.25)


@pytest.mark.parametrize("v", INTS)
def test_every_kind_of_integer_scalar_is_accepted_as_a_python_int(v):
    out = as_int("k", v, 1)
    assert type(out) is int and out == 3


@pytest.mark.parametrize(
    "v", [True, np.bool_(True), torch.tensor(True), 2.0, 2.5, np.float32(2.0), torch.tensor(2.0)]
)
def test_bools_and_floats_are_not_integers(v):
    with pytest.raises(ValueError, match="k must be an integer >= 1, got"):
        as_int("k", v, 1)


@pytest.mark.parametrize("v", ["3", None, [3], torch.tensor([3])])
def test_a_non_number_is_a_type_error_naming_the_value(v):
    with pytest.raises(TypeError, match="k must be an integer"):
        as_int("k", v)
    with pytest.raises(TypeError, match="x must be a finite number"):
        as_real("x", v)


@pytest.mark.parametrize("v", [float("nan"), np.float32("nan"), torch.tensor(float("nan"))])
def test_nan_is_refused_even_without_bounds(v):
    with pytest.raises(ValueError, match="x must be"):
        as_real("x", v)
    with pytest.raises(ValueError):
        as_real("x", v, finite=False)


def test_infinity_only_when_asked_and_open_ends_exclude_themselves():
    assert as_real("x", float("inf"), finite=False) == math.inf
    with pytest.raises(ValueError, match="finite"):
        as_real("x", float("inf"))
    assert as_prob("p", 0.0) == 0.0 and as_prob("p", 1) == 1.0
    with pytest.raises(ValueError, match=r"p must be a finite number in \(0, 1\], got 0"):
        as_prob("p", 0, low_open=True)
    with pytest.raises(ValueError, match=r"in \[0, 1\)"):
        as_prob("p", np.float64(1.0), high_open=True)


def test_as_bool_takes_bools_only():
    assert as_bool("flag", np.bool_(False)) is False and as_bool("flag", True) is True
    for v in (1, 0, "false", None):
        with pytest.raises(TypeError, match="flag must be True or False"):
            as_bool("flag", v)


def test_shown_names_the_type_where_the_repr_hides_it():
    assert shown(0.5) == "0.5"
    assert "torch.float32 tensor" in shown(torch.tensor(0.5))
    assert shown(np.float32(0.5)) in ("np.float32(0.5)", "0.5 (numpy.float32)")


@given(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.floats(-10, 10),
    st.floats(0, 10),
    st.booleans(),
    st.sampled_from([float, np.float32, np.float64, torch.tensor]),
)
def test_a_message_never_contradicts_its_value(x, low, span, low_open, cast):
    """Whatever the value's type, a refusal happens exactly when the value (as a float) breaks
    the bound, and an acceptance returns that value."""
    high = low + span
    v = cast(x)
    value = float(np.float32(x)) if cast is not float else x
    ok = math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if ok:
        assert as_real("x", v, low=low, high=high, low_open=low_open) == pytest.approx(value)
    else:
        with pytest.raises(ValueError) as err:
            as_real("x", v, low=low, high=high, low_open=low_open)
        assert re.match(r"x must be a finite number in [\[(]", str(err.value))


def test_as_real_refuses_an_integer_beyond_float_range_with_a_value_error():
    # issue 49: 10**400 raised a raw OverflowError from float()
    with pytest.raises(ValueError, match=r"x must be a finite number, got 1000.*too large"):
        as_real("x", 10**400)
    assert as_real("x", -(10**400), finite=False) == float("-inf")
    with pytest.raises(ValueError, match="x must be a number"):
        as_real("x", 10**400, high=5, finite=False)
