"""Properties of the settings dataclasses on random numbers (search, eval, analyze, export options): a field given
any number type holds a plain Python number equal to it (and the settings stay strict JSON), anything else is the
setting's own LrsError naming the field, before any work; never a TypeError or a truncation."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from testkit.properties import SETTINGS, anything, int_forms, real_forms

from rope_adapter import LrsError
from rope_adapter.composed import flat_fields, flatten
from rope_adapter.evaluate import EvalSettings
from rope_adapter.evaluate.analyze import AnalyzeSettings
from rope_adapter.export.staging import check_export_options
from rope_adapter.scoring.loading import EvalError
from rope_adapter.search import SearchError, SearchSettings
from rope_adapter.search.settings import settings_dict

SEARCH_WHOLE = ["batch_size", "max_batch_tokens", "pairs", "search_records", "holdout_records", "degree"]
SEARCH_WHOLE += ["population", "seed", "heartbeat", "workers", "trials", "ppl_windows", "data_seed", "max_records"]
SEARCH_REAL = ["s_min", "s_max", "margin", "worst_weight", "race_z", "timeout", "budget", "max_step"]
EVAL_WHOLE = ["num_samples", "batch_size", "chunk_tokens", "num_windows", "max_batch_tokens", "logprob_tokens"]
EVAL_WHOLE += ["max_new_tokens", "stride", "held_out_after", "data_seed", "pairs", "num_positions"]


def _flat(settings, name: str):
    """A setting of the settings, by flat name (a part's too)."""
    return flatten(settings)[name]


def strict_json(value) -> str:
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    text = json.dumps(value, allow_nan=False)
    json.loads(text, parse_constant=refuse)
    return text


def _made_or_refused(make, name: str, value, error: type[Exception]):
    """``make(value)``: the settings, or None when refused with ``error`` naming ``name`` (a flag or a field)."""
    try:
        return make(value)
    except error as exc:
        flag = "--" + name.replace("_", "-")
        assert name in str(exc) or flag in str(exc), str(exc)
        return None


def _search_settings_as_plain(name: str, form, plain_value, kind: type) -> None:
    """SearchSettings made with ``form`` equal those made with the plain Python number (or both are refused), and
    hold the plain type, as strict JSON."""
    settings = _made_or_refused(lambda v: SearchSettings.flat(**{name: v}), name, form, SearchError)
    plain = _made_or_refused(lambda v: SearchSettings.flat(**{name: v}), name, plain_value, SearchError)
    assert (settings is None) == (plain is None)
    if settings is not None:
        assert type(_flat(settings, name)) is kind and settings == plain
        strict_json(settings_dict(settings))


@SETTINGS
@given(st.sampled_from(SEARCH_WHOLE), st.integers(-3, 300), st.data())
def test_search_whole_numbers_in_any_type(name, n, data):
    """Any type of a number gives what the Python int gives: the same settings, or the same refusal."""
    _search_settings_as_plain(name, data.draw(st.sampled_from(int_forms(n))), n, int)


@SETTINGS
@given(st.sampled_from(SEARCH_REAL), st.floats(-5, 50, allow_nan=False), st.data())
def test_search_real_numbers_in_any_type(name, x, data):
    _search_settings_as_plain(name, data.draw(st.sampled_from(real_forms(x))), x, float)


@SETTINGS
@given(st.sampled_from(SEARCH_WHOLE + SEARCH_REAL + ["uniform", "race", "positions", "position_weights"]), anything)
def test_search_settings_take_any_value_or_refuse_it_naming_the_field(name, value):
    settings = _made_or_refused(lambda v: SearchSettings.flat(**{name: v}), name, value, SearchError)
    if settings is not None:
        strict_json(settings_dict(settings))


@SETTINGS
@given(st.lists(st.floats(0.5, 2.0).flatmap(lambda x: st.sampled_from(real_forms(x))), max_size=4))
def test_uniform_baselines_in_any_number_type_are_floats(values):
    settings = SearchSettings.flat(uniform=values)
    assert all(type(u) is float for u in settings.space.uniform)
    assert settings.space.uniform == tuple(float(v) for v in values)
    strict_json(settings_dict(settings))


@SETTINGS
@given(
    st.sampled_from(EVAL_WHOLE),
    st.one_of(st.integers(-2, 50).flatmap(lambda n: st.sampled_from(int_forms(n))), anything),
)
def test_eval_settings_take_any_number_or_refuse_it_naming_the_flag(name, value):
    settings = _made_or_refused(lambda v: EvalSettings.flat(**{name: v}), name, value, EvalError)
    if settings is not None and _flat(settings, name) is not None:
        assert type(_flat(settings, name)) is int
        plain = EvalSettings.flat(**{name: int(_flat(settings, name))})
        assert settings == plain


@SETTINGS
@given(
    st.sampled_from(["factors", "theta", "head_dim", "max_distance", "skip_first"]),
    st.one_of(anything, st.lists(anything, min_size=1, max_size=3)),
)
def test_analyze_settings_take_any_number_or_refuse_it_naming_the_flag(name, value):
    settings = _made_or_refused(lambda v: AnalyzeSettings.flat(**{name: v}), name, value, EvalError)
    if settings is not None:
        got = getattr(settings, name)
        values = got if isinstance(got, list) else [got]
        assert all(v is None or type(v) is int or (type(v) is float and math.isfinite(v)) for v in values)


@SETTINGS
@given(anything, st.one_of(st.none(), anything, st.sampled_from(["5GB", "500MB", "123", " 7 ", "banana", ""])))
def test_export_options_are_numbers_or_an_export_error(atol, shard):
    from rope_adapter.export.bake import ExportError

    try:
        got_atol, got_shard, probe = check_export_options(atol, shard)
    except ExportError as exc:
        assert str(exc).startswith(("--atol ", "--max-shard-size ")), str(exc)
        return
    assert got_atol is None or (type(got_atol) is float and math.isfinite(got_atol) and got_atol >= 0)
    assert got_shard is None or (type(got_shard) in (int, str) and not isinstance(got_shard, bool))
    assert probe == 64


def test_every_numeric_search_field_is_checked_here():
    """A new int or float setting of SearchSettings (its parts' too) joins the lists above (or this test says which
    is missing)."""
    numeric = {
        name
        for name, entry in flat_fields(SearchSettings).items()
        if str(entry.field.type).replace(" | None", "") in ("int", "float")
    }
    missing = numeric - set(SEARCH_WHOLE) - set(SEARCH_REAL)
    assert missing <= {"num_positions", "threads", "k", "ppl_window_chars", "max_ppl_increase", "confirm_top"} | {
        "confirm_records",
        "num_filler",
        "num_documents",
    }, missing


@pytest.mark.parametrize("text", ["2.7", "1e400", "nan"])
def test_cli_counts_are_never_truncated(text, capsys):
    from rope_adapter.cli import main

    with pytest.raises(SystemExit) as info:
        main(["eval", "--num-samples", text])
    assert info.value.code == 2
    assert "argument --num-samples: the value must be an integer" in capsys.readouterr().err


def test_lrs_error_is_the_root_of_every_refusal_above():
    assert issubclass(SearchError, LrsError) and issubclass(EvalError, LrsError)
