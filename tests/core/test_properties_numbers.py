"""Properties of the number boundary (rope_adapter.numbers) and of the factors API on random input: every number
type gives exactly its value as a Python number; anything else is an LrsError naming the argument, never a
TypeError, an OverflowError or a silent truncation; a refused set_factors changes nothing."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from peft import get_peft_model
from testkit.properties import (
    FEW,
    FLOAT_DTYPES,
    SETTINGS,
    anything,
    as_stored,
    finite_reals,
    in_dtype,
    int_forms,
    non_finite,
    not_numbers,
    real_forms,
)
from testkit.tiny_models import tiny_model

import rope_adapter
from rope_adapter import InvalidFactorsError, LrsConfig, LrsError, validate_factors
from rope_adapter.factors import FACTOR_MAX, FACTOR_MIN
from rope_adapter.numbers import as_int, as_ints, as_real, as_reals

factor_values = st.floats(min_value=FACTOR_MIN, max_value=FACTOR_MAX, allow_nan=False)


@SETTINGS
@given(finite_reals, st.data())
def test_every_form_of_a_real_is_exactly_that_float(x, data):
    form = data.draw(st.sampled_from(real_forms(x)))
    value = as_real(form, "x")
    assert type(value) is float and value == x


@SETTINGS
@given(st.integers(min_value=-(10**30), max_value=10**30), st.data())
def test_every_form_of_a_whole_number_is_exactly_that_int(n, data):
    form = data.draw(st.sampled_from(int_forms(n)))
    value = as_int(form, "size")
    assert type(value) is int and value == n


@SETTINGS
@given(finite_reals.filter(lambda x: x != int(x)), st.data())
def test_a_fraction_is_never_truncated_to_a_size(x, data):
    form = data.draw(st.sampled_from(real_forms(x)))
    with pytest.raises(LrsError, match=r"^batch_size must be an integer, got .*never rounded"):
        as_int(form, "batch_size")


@SETTINGS
@given(st.one_of(not_numbers, non_finite))
def test_what_is_not_a_finite_number_is_an_lrs_error_naming_the_argument(value):
    with pytest.raises(LrsError, match=r"^s_max must be "):
        as_real(value, "s_max")
    if not _whole(value):  # 10**400 and Decimal('1e400') are whole numbers, too large for a float only
        with pytest.raises(LrsError, match=r"^trials must be "):
            as_int(value, "trials")


def _whole(value) -> bool:
    try:
        return isinstance(value, int | Decimal | Fraction) and not isinstance(value, bool) and value == int(value)
    except (ValueError, OverflowError, ArithmeticError):
        return False


@SETTINGS
@given(anything, st.floats(-10, 10), st.floats(0, 10))
def test_a_bounded_real_is_in_its_bounds_or_refused(value, low, width):
    try:
        result = as_real(value, "atol", low=low, high=low + width)
    except LrsError as exc:
        assert str(exc).startswith("atol must be ")
    else:
        assert type(result) is float and low <= result <= low + width


@SETTINGS
@given(st.lists(factor_values, min_size=1, max_size=6), st.sampled_from(FLOAT_DTYPES))
def test_factor_containers_of_any_float_dtype_give_the_stored_values(values, dtype):
    """float16 and bfloat16 round the factors when the user makes the array; the adapter keeps what was given."""
    stored = as_stored(values, dtype)
    if not all(FACTOR_MIN <= v <= FACTOR_MAX for v in stored):  # rounded over the edge of the range
        with pytest.raises(InvalidFactorsError, match=r"\[0.001, 1000\]"):
            validate_factors(in_dtype(values, dtype), len(values))
        return
    assert validate_factors(in_dtype(values, dtype), len(values)) == stored
    assert validate_factors(tuple(in_dtype(values, dtype)), len(values)) == stored  # a tuple of 0-d scalars


@SETTINGS
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=6), st.sampled_from(["list", "numpy", "torch"]))
def test_integer_factor_containers_are_taken(values, kind):
    import numpy as np

    container = {"list": values, "numpy": np.array(values), "torch": torch.tensor(values)}[kind]
    assert validate_factors(container, len(values)) == [float(v) for v in values]
    assert as_ints(container, "positions") == values


@SETTINGS
@given(finite_reals.filter(lambda x: FACTOR_MIN <= x <= FACTOR_MAX), st.data())
def test_one_factor_in_any_number_type_makes_a_config(x, data):
    form = data.draw(st.sampled_from(real_forms(x)))
    config = LrsConfig(factors=form)
    assert type(config.factors) is float and config.factors == x
    assert LrsConfig(factors=[form, form]).factors == [x, x]


@SETTINGS
@given(st.one_of(anything, st.lists(anything, min_size=1, max_size=3)))
def test_any_factors_make_a_valid_config_or_an_invalid_factors_error(factors):
    if factors is None:  # all ones, once the config meets a model
        return
    try:
        config = LrsConfig(factors=factors)
    except InvalidFactorsError as exc:
        assert str(exc).startswith(("factors must be", "got "))
        return
    values = config.factors if isinstance(config.factors, list) else [config.factors]
    assert all(type(v) is float and math.isfinite(v) and FACTOR_MIN <= v <= FACTOR_MAX for v in values)


@SETTINGS
@given(st.lists(anything, min_size=1, max_size=4))
def test_as_reals_items_are_named_by_their_index(values):
    try:
        result = as_reals(values, "uniform")
    except LrsError as exc:
        assert str(exc).startswith("uniform[")
    else:
        assert all(type(v) is float and math.isfinite(v) for v in result)


@pytest.fixture(scope="module")
def lrs_model():
    return get_peft_model(tiny_model("llama", num_layers=3), LrsConfig(factors=[1.1, 1.2, 1.3]))


@FEW
@given(
    st.one_of(
        anything,
        st.lists(st.one_of(factor_values, anything), min_size=2, max_size=4),
        st.tuples(factor_values, st.sampled_from(FLOAT_DTYPES)).map(lambda t: in_dtype([t[0]] * 3, t[1])),
    )
)
def test_set_factors_sets_what_it_was_given_or_changes_nothing(lrs_model, factors):
    before = rope_adapter.get_factors(lrs_model)
    config_before = list(lrs_model.peft_config["default"].factors)
    try:
        rope_adapter.set_factors(lrs_model, factors)
    except InvalidFactorsError:
        assert rope_adapter.get_factors(lrs_model) == before
        assert lrs_model.peft_config["default"].factors == config_before
        return
    want = validate_factors(factors, 3)
    assert lrs_model.peft_config["default"].factors == want
    assert rope_adapter.get_factors(lrs_model) == torch.tensor(want, dtype=torch.float32).tolist()
